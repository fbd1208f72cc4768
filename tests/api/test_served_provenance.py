"""A served agent's runs carry the rule-set version it serves (issue 40, point 4): read from the
header of the app/tools.py the workbench exported, sent with the run's first batch, stored on the
run, shown on its page, exported and committed to by its decision record. A version the workbench
holds must be the same content; hostile versions are refused with the field named."""

from __future__ import annotations

import csv
import io

import pytest

from agents.evidence import decision_records
from agents.models import Agent, Run
from llamon_agent.project import load_project, served_version
from rules.exporting import rule_set_export_tools_py

pytestmark = pytest.mark.django_db

FINISH = {"status": "succeeded", "answer": "ok"}


def _served(version) -> dict[str, str]:
    return {
        "rule_set": version.rule_set.name,
        "ref": f"v{version.number}",
        "content_hash": version.content_hash,
    }


def test_a_served_agent_carries_the_version_its_tools_py_was_exported_from(
    sample, ingest_caller, caller, tmp_path
) -> None:
    version = sample["version"]
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "tools.py").write_text(rule_set_export_tools_py(version), encoding="utf-8")
    served = served_version(load_project(tmp_path))
    assert served == _served(version)

    created = ingest_caller("support-bot").post(
        "/api/runs/ingest", {"request": {"query": "주문 조회"}, "version": served, "finish": FINISH}
    )
    assert created.status_code == 201, created.content
    run = Run.objects.get(pk=created.json()["run_id"])
    assert (run.rule_set_name, run.rule_set_ref, run.rule_set_hash) == ("sample", "v1", version.content_hash)
    assert run.rule_set_version_id == version.pk
    # Shown on the run page, exported, and committed to by the run's decision record.
    viewer = caller("session:viewer")
    page = viewer.get(f"/agents/runs/{run.pk}/").content.decode()
    assert "sample v1" in page and version.content_hash[:12] in page
    rows = list(
        csv.DictReader(
            io.StringIO(b"".join(viewer.get("/agents/runs/export?format=csv").streaming_content).decode())
        )
    )
    row = next(r for r in rows if r.get("\ufeffrun", r.get("run")) == str(run.pk))
    assert (row["rule_set"], row["version"], row["rule_set_hash"]) == ("sample", "v1", version.content_hash)
    record = decision_records([run.pk])[str(run.pk)]
    assert record["rule_set"] == {"name": "sample", "ref": "v1", "hash": version.content_hash}


def test_a_tools_py_written_by_hand_serves_no_version(tmp_path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "tools.py").write_text(
        '"""My rules."""\n\nDETERMINISTIC_TOOLS = []\n', encoding="utf-8"
    )
    assert served_version(load_project(tmp_path)) is None


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"content_hash": "0" * 64}, "version.content_hash"),  # not the content of v1 here
        ({"ref": "v9"}, "version.ref"),  # the rule set has no such version
        ({"content_hash": "ABC"}, "version.content_hash"),
        ({"ref": "latest"}, "version.ref"),
        ({"rule_set": ""}, "version.rule_set"),
        ({"rule_set": "x" * 101}, "version.rule_set"),
    ],
)
def test_a_version_the_workbench_contradicts_is_refused_naming_the_field(
    sample, ingest_caller, change, field
) -> None:
    before = Run.objects.count()
    body = {"request": {"query": "q"}, "version": {**_served(sample["version"]), **change}}
    refused = ingest_caller("support-bot").post("/api/runs/ingest", body)
    assert refused.status_code in (400, 409, 422), refused.content
    assert field in refused.content.decode()
    assert Run.objects.count() == before


def test_the_version_comes_with_the_first_batch_only(sample, ingest_caller) -> None:
    bot = ingest_caller("support-bot")
    run_id = bot.post("/api/runs/ingest", {"request": {"query": "q"}}).json()["run_id"]
    later = bot.post("/api/runs/ingest", {"run_id": run_id, "version": _served(sample["version"])})
    assert later.status_code in (400, 422) and "version" in later.content.decode()
    assert Run.objects.get(pk=run_id).rule_set_hash == ""


def test_rules_from_elsewhere_are_carried_as_the_agent_says(ingest_caller) -> None:
    version = {"rule_set": "partner-rules", "ref": "draft@4", "content_hash": "ab" * 32}
    created = ingest_caller("partner-bot").post(
        "/api/runs/ingest", {"request": {"query": "q"}, "version": version}
    )
    run = Run.objects.get(pk=created.json()["run_id"])
    assert (run.rule_set_name, run.rule_set_ref, run.rule_set_hash, run.rule_set_version_id) == (
        "partner-rules",
        "draft@4",
        "ab" * 32,
        None,
    )


def test_a_credential_outlived_by_a_new_workbench_agent_of_its_name_ingests_nothing(ingest_caller) -> None:
    # Issued for a served agent's name; an admin later makes a (protected) workbench agent of that
    # name: its runs run on workers, and the old credential cannot make any up.
    bot = ingest_caller("support-bot")
    Agent.objects.create(name="support-bot", system_prompt="p", protected=True)
    refused = bot.post("/api/runs/ingest", {"request": {"query": "transfer"}, "finish": FINISH})
    assert refused.status_code == 409 and "cannot be ingested" in refused.json()["detail"]
    assert not Run.objects.filter(agent_name="support-bot").exists()
