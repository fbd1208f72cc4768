"""Evidence export: which rule called which tool for a customer, as CSV and JSON Lines with proofs."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.token_services import token_create
from agents import services
from agents.models import Run, RunStep
from core.models import AuditEvent
from tests.conftest import ROOT
from tests.support.evidence import finished_run

pytestmark = pytest.mark.django_db

VERIFIER = ROOT / "tools" / "verify_evidence.py"
# A piece of the card number, not digits inside a longer number (a timestamp's microseconds: 11:49:03.411182).
CARD_PIECE = re.compile(r"(?<!\d)4111(?!\d)")


@pytest.fixture
def runs(agent) -> dict[str, Run]:
    services.privacy_update(
        actor=None, redaction_patterns=[], mask_presets=["card_number"], retention_days=30
    )
    return {
        "recent": finished_run(agent, "C-1001", "A-1001", calls=2),
        "old": finished_run(agent, "C-1001", "A-1000", days_ago=10),
        "other": finished_run(agent, "C-2002", "A-2002"),
        "none": finished_run(agent, "C-1001", "A-1003", calls=0),
    }


def _lines(response) -> list[str]:
    return b"".join(response.streaming_content).decode().split("\n")[:-1]


def _verify(path) -> subprocess.CompletedProcess:
    # -S: no site-packages, so the verifier runs on the standard library alone, as documented.
    return subprocess.run([sys.executable, "-S", str(VERIFIER), str(path)], capture_output=True, text=True)


def test_a_viewer_exports_one_customers_last_seven_days_as_csv(viewer_client, runs) -> None:
    url = reverse("agents:run_export") + "?user_id=C-1001&period=7d&format=csv"
    response = viewer_client.get(url)
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"].startswith('attachment; filename="llamon-evidence-')
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode("utf-8-sig"))))
    assert rows.pop()["run"] == "#llamon-evidence-manifest"  # the last row: the signed manifest
    # Two calls of the recent run, one row for the run that called nothing; not the old run, not C-2002.
    assert [(int(r["run"]), r["rule"], r["tool"]) for r in rows] == [
        (runs["none"].pk, "", ""),
        (runs["recent"].pk, "order_lookup_1", "get_order"),
        (runs["recent"].pk, "order_lookup_2", "get_order"),
    ]
    first = rows[1]
    assert (first["user_id"], first["source"], first["mcp_id"], first["version"], first["rule_set_hash"]) == (
        "C-1001",
        "worker",
        "order-service",
        "v3",
        "a" * 64,
    )
    assert json.loads(first["params"]) == {"order_id": "A-1001"}
    assert json.loads(first["result"])["status"] == "배송 중"
    assert first["chain_seq"] and len(first["record_hash"]) == 64
    text = json.dumps(rows, ensure_ascii=False)
    assert (
        not CARD_PIECE.search(text) and "[카드번호]" in first["query"]
    )  # the input is masked as every page shows it
    event = AuditEvent.objects.get(action="runs.export")
    assert event.actor_name.startswith("viewer") and event.after == {
        "filters": {"user_id": "C-1001", "period": "7d"},
        "format": "csv",
    }


def test_the_json_lines_export_verifies_offline_and_an_edited_row_does_not(
    viewer_client, runs, tmp_path
) -> None:
    lines = _lines(viewer_client.get(reverse("agents:run_export") + "?user_id=C-1001&format=jsonl"))
    kinds = [json.loads(line)["type"] for line in lines]
    assert (
        kinds[0] == "export" and kinds[-1] == "end" and kinds.count("run") == 3 and kinds.count("call") == 3
    )
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(lines) + "\n", encoding="utf-8")
    checked = _verify(good)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "3 runs, 3 calls" in checked.stdout

    for edit, expected in [
        (lambda row: row.update(output={**row["output"], "status": "환불"}), "its output was changed"),
        (lambda row: row.update(params={"order_id": "A-9999"}), "params or result differ"),
        (lambda row: row.update(tool="cancel_order"), "rule or tool was changed"),
    ]:
        edited = [json.loads(line) for line in lines]
        call = next(row for row in edited if row["type"] == "call")
        edit(call)
        bad = tmp_path / "bad.jsonl"
        bad.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in edited), encoding="utf-8")
        checked = _verify(bad)
        assert checked.returncode == 1 and expected in checked.stdout, checked.stdout

    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines[:-2]) + "\n", encoding="utf-8")
    assert "cut short" in _verify(cut).stdout


def test_a_run_changed_in_the_database_fails_the_exported_files_check(viewer_client, runs, tmp_path) -> None:
    RunStep.objects.filter(run=runs["recent"], seq=1).update(output={"status": "refunded"})
    lines = _lines(viewer_client.get(reverse("agents:run_export") + "?user_id=C-1001&format=jsonl"))
    path = tmp_path / "export.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    checked = _verify(path)
    assert checked.returncode == 1 and "does not match its link's hash" in checked.stdout


def test_bad_export_requests_are_refused_with_the_reason_and_nothing_is_audited(viewer_client, runs) -> None:
    response = viewer_client.get(reverse("agents:run_export") + "?format=pdf")
    assert response.status_code == 400 and "csv or jsonl" in response.content.decode()
    response = viewer_client.get(reverse("agents:run_export") + "?since=yesterday&format=csv")
    assert response.status_code == 400
    response = viewer_client.get(reverse("agents:run_export") + "?period=1y&format=csv")
    assert response.status_code == 400
    assert not AuditEvent.objects.filter(action="runs.export").exists()


def test_the_api_exports_with_the_same_filters_and_the_run_document(make_user, runs) -> None:
    client = Client()
    headers = {"Authorization": f"Bearer {token_create(actor=make_user('viewer'), name='t').secret}"}
    response = client.get("/api/runs/export?user_id=C-1001&period=7d&format=jsonl", headers=headers)
    assert response.status_code == 200
    rows = [json.loads(line) for line in _lines(response)]
    assert [r["run"] for r in rows if r["type"] == "call"] == [runs["recent"].pk] * 2
    assert client.get("/api/runs/export?format=xml", headers=headers).status_code == 422
    document = client.get(f"/api/runs/{runs['recent'].pk}/export", headers=headers).json()
    assert document["format"] == "llamon-run/1" and [s["seq"] for s in document["steps"]] == [1, 2]
    assert not CARD_PIECE.search(json.dumps(document, ensure_ascii=False))
    assert document["link"]["kind"] == "run" and document["decision"]["run"] == runs["recent"].pk
    listed = client.get("/api/runs?user_id=C-1001&period=7d", headers=headers).json()["items"]
    recent = next(item for item in listed if item["id"] == runs["recent"].pk)
    assert [c["rule"] for c in recent["calls"]] == ["order_lookup_1", "order_lookup_2"]
    assert AuditEvent.objects.filter(action__in=["runs.export", "run.export"]).count() == 2


def test_the_run_page_offers_its_json_and_the_list_names_rule_and_tool(viewer_client, runs) -> None:
    page = viewer_client.get(reverse("agents:run_list") + "?user_id=C-1001&period=7d").content.decode()
    assert "order_lookup_1 → order-service.get_order" in page
    assert "export-csv" in page and "period=7d" in page
    assert f'id="run-row-{runs["recent"].pk}"' in page and f'id="run-row-{runs["old"].pk}"' not in page
    response = viewer_client.get(reverse("agents:run_json", args=[runs["recent"].pk]))
    assert response.status_code == 200 and response["Content-Disposition"].endswith(
        f'llamon-run-{runs["recent"].pk}.json"'
    )
    assert not CARD_PIECE.search(response.content.decode())
    detail = viewer_client.get(reverse("agents:run_detail", args=[runs["recent"].pk])).content.decode()
    assert "run-json" in detail and "Evidence chain link #" in detail


def test_the_evidence_report_lists_the_calls_with_their_links(viewer_client, runs) -> None:
    response = viewer_client.get(reverse("agents:run_evidence") + "?user_id=C-1001&period=7d")
    assert response.status_code == 200
    page = response.content.decode()
    assert page.count("order-service.get_order") == 2 and "Evidence chain head" in page
    assert not CARD_PIECE.search(page)


def test_the_export_masks_the_ids_as_the_pages_do(viewer_client, agent) -> None:
    services.privacy_update(actor=None, redaction_patterns=[], mask_presets=["email"], retention_days=30)
    run = finished_run(agent, "kim@example.com", "A-1004")
    response = viewer_client.get(reverse("agents:run_export") + "?format=csv")
    text = b"".join(response.streaming_content).decode("utf-8-sig")
    assert response.status_code == 200 and str(run.pk) in text
    assert "kim@example.com" not in text and "[이메일]" in text
    lines = [
        json.loads(line) for line in _lines(viewer_client.get(reverse("agents:run_export") + "?format=jsonl"))
    ]
    rows = [line for line in lines if line["type"] in ("run", "call")]
    assert rows and all(row["user_id"] == "[이메일]" for row in rows)
    # Nowhere in the file either: the decision record carries the ids as a digest, and still verifies.
    text = "\n".join(_lines(viewer_client.get(reverse("agents:run_export") + "?format=jsonl")))
    assert "kim@example.com" not in text and "kim" not in text.replace("[이메일]", "")


def test_an_invalid_filter_on_the_report_is_refused_naming_the_field(viewer_client, runs) -> None:
    response = viewer_client.get(reverse("agents:run_evidence") + "?since=yesterday&user_id=C-1001")
    page = response.content.decode()
    assert response.status_code == 400 and "filter-errors" in page and "Since" in page
    assert "evidence-table" not in page and "order-service.get_order" not in page  # not every run


def test_the_report_and_the_exports_state_the_period_as_absolute_dates(viewer_client, runs) -> None:
    page = viewer_client.get(reverse("agents:run_evidence") + "?period=7d").content.decode()
    since = (timezone.now() - timedelta(days=7)).strftime("%Y-%m-%d")
    period = re.search(r'id="report-period">([^<]*)<', page)
    assert (
        period
        and period.group(1).startswith(since)
        and timezone.now().strftime("%Y-%m-%d") in period.group(1)
    )
    first = json.loads(_lines(viewer_client.get(reverse("agents:run_export") + "?period=7d&format=jsonl"))[0])
    assert "period" not in first["filters"] and first["filters"]["since"].startswith(since)
    assert first["filters"]["until"].startswith(timezone.now().strftime("%Y-%m-%d"))


@pytest.mark.parametrize(
    "text",
    [
        "=1+1",
        "+1",
        "-1",
        "@SUM(A1)",
        "\t=1",
        "\r=1",
        "\n=1",
        "＝1+1",
        "＋1",
        "－1",
        "＠SUM(A1)",
        "﹦1",
        "﹢1",
        "﹣1",
        "﹫x",
        "\u22121",
        " =1",
        "\u3000＝1",
    ],
)
def test_every_formula_leading_character_is_neutralised_in_csv(viewer_client, agent, text) -> None:
    finished_run(agent, text, "A-1")
    body = b"".join(viewer_client.get(reverse("agents:run_export") + "?format=csv").streaming_content)
    rows = list(csv.DictReader(io.StringIO(body.decode("utf-8-sig"))))
    assert rows[0]["user_id"] == "'" + text


def test_ordinary_cells_are_left_alone(viewer_client, agent) -> None:
    finished_run(agent, "고객 C-1001", "A-1")
    body = b"".join(viewer_client.get(reverse("agents:run_export") + "?format=csv").streaming_content)
    assert list(csv.DictReader(io.StringIO(body.decode("utf-8-sig"))))[0]["user_id"] == "고객 C-1001"
