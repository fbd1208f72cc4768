"""What the API does, resource by resource: the same services as the pages, the same answers."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from agents.models import PrivacySettings, Run, RunStep
from core.models import AuditEvent
from llamon_agent.expr import MAX_DATA_BYTES
from llamon_agent.mcp.registry import HttpRegistry
from llamon_agent.trace import TraceEvent
from llamon_web.demo import SEED_RULES
from rules import engine
from rules import forms as rule_forms
from rules.errors import RuleError
from rules.models import Rule, RuleSet
from rules.services import rule_fields_check

pytestmark = pytest.mark.django_db


def _rule(**overrides: Any) -> dict[str, Any]:
    return {**SEED_RULES[0], **overrides}


# --- Validation errors are ErrorOut --------------------------------------------------------------


def test_a_body_of_the_wrong_shape_is_an_errorout_422_naming_the_field(editor_api) -> None:
    response = editor_api.post("/api/rule-sets", {"description": 3})
    assert response.status_code == 422
    body = response.json()
    assert set(body) == {"detail", "field", "errors"}
    assert body["field"] == "payload.name" or body["field"].endswith("name")
    assert body["errors"][0]["message"]


def test_a_body_that_is_not_json_is_an_errorout_400(editor_api) -> None:
    response = editor_api.client.post(
        "/api/rule-sets", data="{not json", content_type="application/json", headers=editor_api.headers
    )
    assert response.status_code == 400 and response.json()["detail"]


def test_an_unknown_api_url_is_a_json_404(viewer_api) -> None:
    response = viewer_api.get("/api/nothing/here")
    assert response.status_code == 404 and "no API operation" in response.json()["detail"]


# --- Rule sets, rules, optimistic revision -------------------------------------------------------


def test_rule_set_and_rule_crud_through_the_api(editor_api, api_servers) -> None:
    created = editor_api.post("/api/rule-sets", {"name": "api-set", "description": "made by a program"})
    assert created.status_code == 201
    set_id = created.json()["id"]
    rule = editor_api.post(f"/api/rule-sets/{set_id}/rules", _rule())
    assert rule.status_code == 201, rule.content
    rule_id, revision = rule.json()["id"], rule.json()["revision"]
    listed = editor_api.get(f"/api/rule-sets/{set_id}/rules").json()
    assert [r["name"] for r in listed] == ["route_order_lookup"]
    changed = editor_api.patch(
        f"/api/rule-sets/{set_id}/rules/{rule_id}", {"revision": revision, "stop": True}
    )
    assert changed.status_code == 200 and changed.json()["stop"] is True
    detail = editor_api.get(f"/api/rule-sets/{set_id}").json()
    assert detail["rule_count"] == 1
    renamed = editor_api.patch(
        f"/api/rule-sets/{set_id}", {"revision": detail["revision"], "name": "api-set-2"}
    )
    assert renamed.json()["name"] == "api-set-2"
    assert editor_api.delete(f"/api/rule-sets/{set_id}/rules/{rule_id}").status_code == 204
    assert editor_api.delete(f"/api/rule-sets/{set_id}").status_code == 204
    assert not RuleSet.objects.filter(pk=set_id).exists()
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {
        "rule_set.create",
        "rule.create",
        "rule.update",
        "rule_set.update",
        "rule.delete",
        "rule_set.delete",
    } <= actions


def test_a_stale_rule_revision_is_a_409_and_nothing_is_overwritten(editor_api, sample) -> None:
    rule = sample["rule"]
    url = f"/api/rule-sets/{sample['rule_set'].pk}/rules/{rule.pk}"
    first = editor_api.patch(url, {"revision": rule.revision, "description": "first"})
    assert first.status_code == 200
    second = editor_api.patch(url, {"revision": rule.revision, "description": "second"})
    assert second.status_code == 409
    assert "Nothing was overwritten" in second.json()["detail"]
    rule.refresh_from_db()
    assert rule.description == "first"


def test_a_tool_the_server_does_not_offer_is_refused_with_a_did_you_mean(editor_api, sample) -> None:
    """The rule service checks the tool (not only the page's form): create, update and push refuse it."""
    rule_set = sample["rule_set"]
    created = editor_api.post(f"/api/rule-sets/{rule_set.pk}/rules", _rule(name="typo", tool_name="get_ordr"))
    assert created.status_code == 422 and created.json()["field"] == "tool_name"
    assert "order-service has no tool 'get_ordr'; did you mean 'get_order'?" in created.json()["detail"]
    korean = editor_api.post(
        f"/api/rule-sets/{rule_set.pk}/rules",
        _rule(name="typo", tool_name="get_ordr"),
        headers={"Accept-Language": "ko"},
    )
    assert "order-service에는 도구 'get_ordr'이(가) 없습니다" in korean.json()["detail"]
    rule = sample["rule"]
    url = f"/api/rule-sets/{rule_set.pk}/rules/{rule.pk}"
    updated = editor_api.patch(url, {"revision": rule.revision, "tool_name": "get_ordr"})
    assert updated.status_code == 422 and "did you mean 'get_order'" in updated.json()["detail"]
    document = editor_api.get(f"/api/rule-sets/{rule_set.pk}/export").json()
    document["rules"][0]["tool_name"] = "get_ordr"
    rule_set.refresh_from_db()
    pushed = editor_api.call(
        "put", f"/api/rule-sets/{rule_set.pk}/content", json={"data": document, "revision": rule_set.revision}
    )
    assert pushed.status_code == 422 and "did you mean 'get_order'" in pushed.json()["detail"]
    assert rule_set.rules.filter(tool_name="get_ordr").count() == 0


def test_a_server_that_is_not_registered_is_refused_on_save_but_not_on_import(editor_api, sample) -> None:
    """Create and update refuse an unregistered server with a did-you-mean, in the user's language; an
    import may name one (a set moved from another workbench; the static checks report it)."""
    rule_set, rule = sample["rule_set"], sample["rule"]
    created = editor_api.post(
        f"/api/rule-sets/{rule_set.pk}/rules", _rule(name="typo", mcp_id="order-servce")
    )
    assert created.status_code == 422 and created.json()["field"] == "mcp_id"
    assert "did you mean 'order-service'?" in created.json()["detail"]
    korean = editor_api.post(
        f"/api/rule-sets/{rule_set.pk}/rules",
        _rule(name="typo", mcp_id="order-servce"),
        headers={"Accept-Language": "ko"},
    )
    assert "'order-service'을(를) 뜻하셨나요?" in korean.json()["detail"]
    url = f"/api/rule-sets/{rule_set.pk}/rules/{rule.pk}"
    updated = editor_api.patch(url, {"revision": rule.revision, "mcp_id": "elsewhere"})
    assert updated.status_code == 422 and updated.json()["field"] == "mcp_id"
    assert rule_set.rules.filter(mcp_id__in=["order-servce", "elsewhere"]).count() == 0
    document = editor_api.get(f"/api/rule-sets/{rule_set.pk}/export").json()
    document["rules"][0]["mcp_id"] = "elsewhere"
    rule_set.refresh_from_db()
    pushed = editor_api.call(
        "put", f"/api/rule-sets/{rule_set.pk}/content", json={"data": document, "revision": rule_set.revision}
    )
    assert pushed.status_code == 200, pushed.json()
    assert rule_set.rules.filter(mcp_id="elsewhere").count() == 1


def test_an_expression_error_names_the_field_with_line_and_column(editor_api, sample) -> None:
    response = editor_api.post(
        f"/api/rule-sets/{sample['rule_set'].pk}/rules", _rule(name="typo", when='"주문" in ctx.qeury +')
    )
    assert response.status_code == 422
    assert response.json()["field"] == "when" and "line" in response.json()["detail"]


def test_reorder_publish_versions_diff_restore(editor_api, sample) -> None:
    rule_set = sample["rule_set"]
    base = f"/api/rule-sets/{rule_set.pk}"
    ids = [r["id"] for r in editor_api.get(f"{base}/rules").json()]
    reordered = editor_api.post(
        f"{base}/reorder", {"order": list(reversed(ids)), "revision": rule_set.revision}
    )
    assert [r["id"] for r in reordered.json()] == list(reversed(ids))
    published = editor_api.post(f"{base}/publish", {"message": "via API"})
    assert published.status_code == 201 and published.json()["number"] == 2
    assert [v["number"] for v in editor_api.get(f"{base}/versions").json()] == [2, 1]
    assert len(editor_api.get(f"{base}/versions/2").json()["content"]) == 3
    diff = editor_api.get(f"{base}/diff?a=1&b=2").json()
    assert diff["a"] == "v1" and {row["change"] for row in diff["rows"]} >= {"added"}
    assert editor_api.get(f"{base}/diff?a=9").status_code == 404
    restored = editor_api.post(f"{base}/versions/1/restore", {})
    assert restored.status_code == 200 and restored.json()["rule_count"] == 2
    assert editor_api.post(f"{base}/publish", {"message": "back to v1"}).json()["number"] == 3
    again = editor_api.post(f"{base}/publish", {"message": "no change"})
    assert again.status_code == 422 and "Nothing changed" in again.json()["detail"]


def test_export_and_import_round_trip(editor_api, sample) -> None:
    base = f"/api/rule-sets/{sample['rule_set'].pk}"
    document = editor_api.get(f"{base}/export").json()
    assert document["format"] == "llamon-ruleset/1" and len(document["rules"]) == 3
    imported = editor_api.post("/api/rule-sets/import", {"data": document, "name": "copy"})
    assert imported.status_code == 201
    copy = editor_api.get(f"/api/rule-sets/{imported.json()['id']}/export").json()
    assert {**copy, "name": "sample"} == document
    tools_py = editor_api.get(f"{base}/export/tools-py").json()
    assert "@deterministic_tool" in tools_py["source"] and "DETERMINISTIC_TOOLS" in tools_py["source"]
    bad = editor_api.post("/api/rule-sets/import", {"data": {"format": "nope"}})
    assert bad.status_code == 422


def test_import_tools_py_previews_then_writes_on_confirm(editor_api, db) -> None:
    from pathlib import Path

    seed = (Path(__file__).resolve().parents[2] / "examples/seed_project/app/tools.py").read_text(
        encoding="utf-8"
    )
    source = seed.replace(
        "return None\n\n\nDETERMINISTIC", "return None\n\n\ndef helper():\n    return 1\n\n\nDETERMINISTIC"
    )
    source = source.replace("    route_by_available_tool,\n]", "    route_by_available_tool,\n    helper,\n]")
    preview = editor_api.post("/api/rule-sets/import/tools-py", {"source": source, "name": "from-code"})
    assert preview.status_code == 200
    body = preview.json()
    assert body["rule_set"] is None and not RuleSet.objects.filter(name="from-code").exists()
    assert [r["name"] for r in body["preview"]["rules"]] == [r["name"] for r in SEED_RULES]
    (left_out,) = body["preview"]["untranslatable"]
    assert left_out["function"] == "helper" and left_out["code"] == "not-decorated"
    assert left_out["message"].startswith(f"app/tools.py:{left_out['line']}: helper: ")
    stale = editor_api.post(
        "/api/rule-sets/import/tools-py",
        {"source": source + "\n", "name": "from-code", "confirm": True, "sha256": body["preview"]["sha256"]},
    )
    assert stale.status_code == 422 and not RuleSet.objects.filter(name="from-code").exists()
    done = editor_api.post(
        "/api/rule-sets/import/tools-py",
        {"source": source, "name": "from-code", "confirm": True, "sha256": body["preview"]["sha256"]},
    )
    assert done.status_code == 201 and done.json()["rule_set"]["rule_count"] == 3
    broken = editor_api.post("/api/rule-sets/import/tools-py", {"source": "def f(:\n"})
    assert broken.status_code == 422 and "not valid Python" in broken.json()["detail"]


# --- Evaluate: the live tester's answer ------------------------------------------------------------


def _tester_answer(rule_set: RuleSet, fields: dict[str, str]) -> dict[str, Any]:
    form = rule_forms.TesterForm(fields)
    assert form.is_valid(), form.errors
    snapshot = engine.rule_set_snapshot(rule_set)
    return engine.evaluate(snapshot, form.to_request()).answer(fired_shown=engine.FIRED_SHOWN)


A2A_MESSAGE = {
    "role": "user",
    "messageId": "m-1",
    "contextId": "s-9",
    "metadata": {"userId": "C-1001", "chatbotId": "premium-support"},
    "parts": [
        {"kind": "text", "text": "주문 조회 부탁해요"},
        {"kind": "data", "data": {"ticketType": "faq"}},
    ],
}


@pytest.mark.parametrize(
    "payload",
    [
        {"query": "주문 조회 A-1001"},
        {"query": "hello", "context": {"chatbotId": "premium-support", "userId": "C-7"}},
        {
            "query": "검색 refund",
            "data": [{"ticketType": "faq"}],
            "files": [{"name": "a.pdf", "mimeType": "application/pdf", "uri": "https://x/a.pdf"}],
        },
        {"data": A2A_MESSAGE},
    ],
)
def test_evaluate_gives_the_live_testers_answer(payload: dict[str, Any], viewer_api, sample) -> None:
    rule_set = sample["rule_set"]
    response = viewer_api.post(f"/api/rule-sets/{rule_set.pk}/evaluate", payload)
    assert response.status_code == 200, response.content
    got = response.json()
    as_text = {k: (v if k == "query" else json.dumps(v, ensure_ascii=False)) for k, v in payload.items()}
    expected = _tester_answer(rule_set, as_text)
    strip = lambda d: {k: v for k, v in d.items() if k != "duration_ms"}  # noqa: E731
    assert strip(got) | {"records": None} == strip(expected) | {
        "records": None,
        "request": got["request"],
        "expected": got["expected"],
        "block_chars": len(expected["block"]),
    }
    assert [strip(r) for r in got["records"]] == [strip(r) for r in expected["records"]]


def test_evaluate_stays_small_however_many_rules_fire(viewer_api, sample) -> None:
    """A summary lists the first 30 fired rules and counts the others; what would list every call
    again (the LLM block, the proposed case) comes with detail "all", which lists them all."""
    rule_set = sample["rule_set"]
    Rule.objects.bulk_create(
        Rule(
            rule_set=rule_set,
            name=f"fires_{i}",
            mcp_id="order-service",
            tool_name="get_order",
            when='"주문" in query',
            params=f'{{"query": query, "n": {i}}}',
            position=100 + i,
        )
        for i in range(engine.FIRED_SHOWN + 5)
    )
    url = f"/api/rule-sets/{rule_set.pk}/evaluate"
    summary = viewer_api.post(url, {"query": "주문 조회 A-1001"}).json()
    fired = summary["counts"]["fired"]
    assert fired > engine.FIRED_SHOWN
    listed = [r["rule"] for r in summary["records"] if r["status"] == "fired"]
    assert len(listed) == engine.FIRED_SHOWN and summary["omitted"]["fired"] == fired - engine.FIRED_SHOWN
    assert summary["block"] == "" and summary["block_chars"] > 0 and summary["expected"] is None
    full = viewer_api.post(url, {"query": "주문 조회 A-1001", "detail": "all"}).json()
    assert [r["rule"] for r in full["records"] if r["status"] == "fired"][: engine.FIRED_SHOWN] == listed
    assert full["counts"] == summary["counts"] and full["omitted"].get("fired", 0) == 0
    assert len(full["block"]) == summary["block_chars"] and len(full["expected"]["must_fire"]) == fired


def test_evaluate_reports_tester_parse_errors_on_the_field(viewer_api, sample) -> None:
    response = viewer_api.post(
        f"/api/rule-sets/{sample['rule_set'].pk}/evaluate", {"data": {"parts": "not a list"}}
    )
    assert response.status_code == 422 and response.json()["field"] == "payload.data"


# Values of the right JSON type that the sample check (rules.samples) or the rule check
# (rules.services.rule_fields_check) refuses: the schema calls them, as the pages' forms do.
HOSTILE_SAMPLES = [
    ("data", {"parts": "not a list"}),
    ("data", {"jsonrpc": "2.0", "params": "not an object"}),
    ("files", [{"name": "a.pdf", "path": "/etc/passwd"}]),
    ("context", {"blob": "x" * (MAX_DATA_BYTES + 1)}),
    ("pinned", [{"mcp_id": "order-service", "tool_name": "no_such_tool", "output": 1}]),
    ("draft_rule", {**_rule(), "when": "query =="}),
    ("draft_rule", {**_rule(), "mcp_id": "Not An Id!"}),
]


@pytest.mark.parametrize(("field", "value"), HOSTILE_SAMPLES)
def test_evaluate_and_the_tester_form_refuse_a_sample_with_one_message(
    editor_api, sample, field: str, value: Any
) -> None:
    """One check behind the API's schema and the page's form: the same sentence, on the field."""
    body = {"execute": True, field: value} if field == "pinned" else {field: value}
    response = editor_api.post(f"/api/rule-sets/{sample['rule_set'].pk}/evaluate", body)
    assert response.status_code == 422, response.json()
    answer = response.json()
    message = answer["errors"][0]["message"]
    if field == "draft_rule":
        with pytest.raises(RuleError) as refused:
            rule_fields_check(**{k: value[k] for k in ("name", "mcp_id", "tool_name", "when", "params")})
        assert answer["field"] == f"payload.draft_rule.{refused.value.field}", answer
        assert message == refused.value.message
        return
    form = rule_forms.TesterForm(data={field: json.dumps(value)})
    assert not form.is_valid()
    shown = form.errors.get(field) or form.errors.get("__all__")
    assert message in shown, (answer, form.errors)
    assert answer["field"] == (f"payload.{field}" if field in form.errors else "payload"), answer


def test_evaluate_tries_an_unsaved_rule_edit(viewer_api, sample) -> None:
    edit = _rule(name="route_order_lookup", when='"배송" in query', params='{"query": "ship"}')
    response = viewer_api.post(
        f"/api/rule-sets/{sample['rule_set'].pk}/evaluate",
        {"query": "배송 언제", "draft_rule": edit, "original_name": "route_order_lookup"},
    )
    fired = [r for r in response.json()["records"] if r["status"] == "fired"]
    assert [(r["rule"], r["params"]) for r in fired] == [("route_order_lookup", {"query": "ship"})]


def test_executing_real_tools_needs_the_editor_role(viewer_api, sample) -> None:
    response = viewer_api.post(
        f"/api/rule-sets/{sample['rule_set'].pk}/evaluate", {"query": "x", "execute": True}
    )
    assert response.status_code == 403 and "editor" in response.json()["detail"]


# --- Cases ---------------------------------------------------------------------------------------


def test_case_crud_and_suite_run(editor_api, sample) -> None:
    base = f"/api/rule-sets/{sample['rule_set'].pk}/cases"
    created = editor_api.post(
        base,
        {
            "name": "refund",
            "input": {"query": "refund please"},
            "expected": {"must_not_fire": [{"tool_name": "get_order"}]},
        },
    )
    assert created.status_code == 201, created.content
    case_id = created.json()["id"]
    assert editor_api.patch(f"{base}/{case_id}", {"name": "refund (en)"}).json()["name"] == "refund (en)"
    suite = editor_api.post(f"{base}/run").json()
    assert suite["total"] == 2 and suite["ok"] is True
    bad = editor_api.post(
        base, {"name": "bad", "input": {"query": "x"}, "expected": {"must_fire": [{"match": "fuzzy"}]}}
    )
    assert bad.status_code == 422 and bad.json()["field"] == "expected"
    assert editor_api.delete(f"{base}/{case_id}").status_code == 204
    assert len(editor_api.get(base).json()) == 1


# --- Agents --------------------------------------------------------------------------------------


def test_agent_crud_is_validated_like_the_page(editor_api, sample) -> None:
    rule_set = sample["rule_set"]
    created = editor_api.post(
        "/api/agents",
        {
            "name": "api-agent",
            "rule_set": rule_set.pk,
            "rule_set_mode": "pinned",
            "pinned_version": 1,
            "react_servers": ["order-service"],
            "output_masks": ["card_number"],
            "input_blocked_patterns": ["(?i)password"],
        },
    )
    assert created.status_code == 201, created.content
    agent = created.json()
    assert agent["pinned_version"] == 1 and agent["react_servers"] == ["order-service"]
    assert "확정 호출 결과" in agent["system_prompt"] or agent["system_prompt"]
    url = f"/api/agents/{agent['id']}"
    changed = editor_api.patch(url, {"revision": agent["revision"], "max_iterations": 3})
    assert changed.status_code == 200 and changed.json()["max_iterations"] == 3
    assert changed.json()["pinned_version"] == 1  # kept
    stale = editor_api.patch(url, {"revision": agent["revision"], "max_iterations": 4})
    assert stale.status_code == 409
    bad = editor_api.patch(
        url, {"revision": changed.json()["revision"], "input_blocked_patterns": ["(unclosed"]}
    )
    assert bad.status_code == 422 and bad.json()["field"] == "input_blocked_patterns"
    unknown = editor_api.post("/api/agents", {"name": "x", "react_servers": ["nope"]})
    assert unknown.status_code == 422 and unknown.json()["field"] == "react_servers"
    assert editor_api.delete(url).status_code == 204


# --- Runs ----------------------------------------------------------------------------------------


def test_a_run_is_accepted_with_its_id_and_can_be_listed_and_cancelled(editor_api, sample) -> None:
    accepted = editor_api.post(
        "/api/runs", {"agent": sample["agent"].pk, "query": "주문 조회", "context": {"userId": "C-42"}}
    )
    assert accepted.status_code == 202
    run_id = accepted.json()["id"]
    assert accepted.json()["url"] == f"/api/runs/{run_id}"
    run = editor_api.get(f"/api/runs/{run_id}").json()
    assert run["status"] == "queued" and run["user_id"] == "C-42" and run["source"] == "worker"
    listed = editor_api.get("/api/runs?user_id=C-42").json()
    assert [r["id"] for r in listed["items"]] == [run_id] and listed["count"] == 1
    assert editor_api.get("/api/runs?status=succeeded&user_id=C-42").json()["count"] == 0
    assert editor_api.post(f"/api/runs/{run_id}/cancel").json()["status"] == "cancelled"


def test_a_run_over_the_size_limit_is_refused_before_anything_is_queued(editor_api, sample) -> None:
    before = Run.objects.count()
    response = editor_api.post(
        "/api/runs", {"agent": sample["agent"].pk, "query": "q", "context": {"blob": "x" * 300_000}}
    )
    assert response.status_code == 422
    assert Run.objects.count() == before


# --- Trace ingest ----------------------------------------------------------------------------------


def _events(kind: str, name: str, **end: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    start = TraceEvent(
        id=f"{kind}-{name}",
        kind=kind,
        name=name,
        phase="start",
        start=time.time(),
        input={"q": "card 4111 1111 1111 1111"},
    )  # type: ignore[arg-type]
    finish = TraceEvent(
        id=start.id, kind=kind, name=name, phase="end", start=start.start, duration_ms=3.5, status="ok", **end
    )  # type: ignore[arg-type]
    return start.to_json(), finish.to_json()


def test_ingest_creates_a_served_run_and_completes_steps_across_batches(editor_api, ingest_caller) -> None:
    bot = ingest_caller("support-bot")
    PrivacySettings.objects.update_or_create(
        pk=1, defaults={"redaction_patterns": [r"\d{4} \d{4} \d{4} \d{4}"]}
    )
    llm_start, llm_end = _events("llm", "turn 1", output={"content": "hi"})
    rule_start, rule_end = _events("rule", "route_order_lookup", output={"ok": True})
    first = bot.post(
        "/api/runs/ingest",
        {
            "source": "served",
            "agent_name": "support-bot",
            "request": {"query": "주문 조회", "context": {"userId": "C-1"}},
            "events": [rule_start, llm_start],
        },
    )
    assert first.status_code == 201, first.content
    run_id = first.json()["run_id"]
    steps = editor_api.get(f"/api/runs/{run_id}/steps").json()
    assert [s["status"] for s in steps["steps"]] == ["running", "running"] and steps["last_seq"] == 0
    assert "4111" not in json.dumps(steps)  # the privacy redaction applies to ingested steps
    second = bot.post(
        "/api/runs/ingest",
        {
            "run_id": run_id,
            "events": [rule_end, llm_end],
            "finish": {"status": "succeeded", "answer": "Your card 4111 1111 1111 1111 ..."},
        },
    )
    assert second.status_code == 200 and second.json() == {
        "run_id": run_id,
        "created": False,
        "status": "succeeded",
        "steps": 2,
    }
    run = Run.objects.get(pk=run_id)
    assert run.source == "served" and run.agent is None and run.user_id == "C-1"
    assert "4111" not in run.answer and run.llm_calls == 1 and run.prestep_calls == 1
    assert list(RunStep.objects.filter(run=run).values_list("status", flat=True)) == ["ok", "ok"]
    after = editor_api.get(f"/api/runs/{run_id}/steps?after=1").json()
    assert [s["seq"] for s in after["steps"]] == [2] and after["finished"] is True
    late = bot.post("/api/runs/ingest", {"run_id": run_id, "events": [llm_start]})
    assert late.status_code == 409


def test_ingest_never_writes_into_a_worker_run(ingest_caller, sample) -> None:
    response = ingest_caller("support-bot").post(
        "/api/runs/ingest", {"run_id": sample["run"].pk, "events": []}
    )
    assert response.status_code == 409 and "worker" in response.json()["detail"]


def test_ingested_runs_show_in_the_run_list(editor_api, ingest_caller) -> None:
    ingest_caller("graph").post(
        "/api/runs/ingest", {"source": "flow", "agent_name": "graph", "request": {"query": "flow run"}}
    )
    listed = editor_api.get("/api/runs?q=flow+run").json()
    assert [r["source"] for r in listed["items"]] == ["flow"]


# --- Audit ---------------------------------------------------------------------------------------


def test_audit_list_filters(viewer_api, sample) -> None:
    page = viewer_api.get("/api/audit?action=rule_set.publish").json()
    assert page["count"] == 1 and page["items"][0]["after"]["version"] == 1
    assert viewer_api.get("/api/audit?limit=2").json()["count"] > 2


# --- Registry: what llamon_agent's HttpRegistry reads -----------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_http_registry_client_reads_the_registry_endpoint(live_server, caller, api_servers) -> None:
    from servers.models import McpServer

    McpServer.objects.filter(mcp_id="customer-crm").update(enabled=False)
    token = caller("token:viewer").token
    registry = HttpRegistry(live_server.url, token)
    specs = asyncio.run(registry.all())
    assert set(specs) == {"order-service", "knowledge-base"}  # enabled servers only
    one = asyncio.run(registry.get(["order-service"]))["order-service"]
    assert one.transport == "http" and one.url == "http://127.0.0.1:9/mcp"
    from llamon_agent.mcp.errors import RegistryError, UnknownServerError

    with pytest.raises(UnknownServerError):
        asyncio.run(registry.get(["customer-crm"]))
    with pytest.raises(RegistryError, match="refused the token"):
        asyncio.run(HttpRegistry(live_server.url, "llamon_00000000_" + "A" * 43).all())
