"""Pinned tool outputs: Execute reuses a recorded output instead of calling the tool, and says which."""

from __future__ import annotations

import html as html_lib
import json

import pytest
from django.urls import reverse
from django.utils import timezone

from rules import services
from rules.errors import RuleError
from rules.models import RuleSet
from rules.pins import MAX_PINNED_BYTES, pin_for, pins_clean
from servers.models import McpServer
from tests.support.tester import execute_confirmed

pytestmark = pytest.mark.django_db
HX = {"HTTP_HX_REQUEST": "true"}
TOOLS = [{"name": "get_order", "description": "", "input_schema": {"type": "object"}}]
PIN = {
    "mcp_id": "order-service",
    "tool_name": "get_order",
    "params": {"query": "주문 A-1"},
    "output": {"id": "A-1"},
}


@pytest.fixture
def rule_set(make_user) -> RuleSet:
    # Port 9 on loopback: nothing listens, so a call that is not pinned fails for real.
    McpServer.objects.create(
        mcp_id="order-service",
        transport="http",
        url="http://127.0.0.1:9/mcp",
        tools=TOOLS,
        tools_refreshed_at=timezone.now(),
    )
    author = make_user("editor")
    rs = services.rule_set_create(actor=author, name="orders")
    services.rule_create(
        actor=author,
        rule_set=rs,
        name="route_order",
        mcp_id="order-service",
        tool_name="get_order",
        when='"주문" in query',
        params='{"query": query}',
    )
    return rs


def _execute(client, rule_set, query: str, pinned: str):
    data = {"t-query": query, "t-pinned": pinned}
    response = execute_confirmed(client, reverse("rules:test", args=[rule_set.pk]), data, **HX)
    return response, html_lib.unescape(response.content.decode())


def test_a_pin_for_exact_params_wins_over_a_tool_wide_one() -> None:
    wide = {"mcp_id": "s", "tool_name": "t", "output": "any"}
    exact = {"mcp_id": "s", "tool_name": "t", "params": {"a": 1}, "output": "exact"}
    assert pin_for([wide, exact], "s", "t", {"a": 1}) is exact
    assert pin_for([wide, exact], "s", "t", {"a": 2}) is wide
    assert pin_for([exact], "s", "t", {"a": 2}) is None
    assert pin_for([exact], "s", "other", {"a": 1}) is None


def test_execute_answers_a_pinned_call_without_calling_the_tool(editor_client, rule_set) -> None:
    response, text = _execute(editor_client, rule_set, "주문 A-1", json.dumps([PIN]))
    assert response.status_code == 200 and 'data-ok="true"' in text  # the server is down: not called
    assert 'data-source="pinned"' in text and "(1 pinned, 0 live)" in text
    assert '"id": "A-1"' in text


def test_a_call_no_pin_matches_is_live(editor_client, rule_set) -> None:
    other = {**PIN, "params": {"query": "something else"}}
    response, text = _execute(editor_client, rule_set, "주문 A-1", json.dumps([other]))
    assert 'data-ok="false"' in text  # really called: port 9 refuses
    assert 'data-source="pinned"' not in text


BAD_PINS = [
    ("[{", "Pinned tool outputs is not valid JSON"),
    ('"text"', "must be a JSON list of objects, not a text"),
    ('[{"mcp_id": "order-service", "tool_name": "get_order"}]', "needs an output"),
    ('[{"mcp_id": "nope", "tool_name": "get_order", "output": 1}]', "there is no MCP server 'nope'"),
    ('[{"mcp_id": "order-service", "tool_name": "drop_db", "output": 1}]', "has no tool 'drop_db'"),
    (
        '[{"mcp_id": "order-service", "tool_name": "get_order", "params": [], "output": 1}]',
        "params must be a JSON object",
    ),
    (
        '[{"mcp_id": "order-service", "tool_name": "get_order", "output": 1, "when": 1}]',
        "unknown field(s) when",
    ),
    (json.dumps([{**PIN, "output": "x" * MAX_PINNED_BYTES}]), "the limit is 200,000"),
]


@pytest.mark.parametrize(("pinned", "message"), BAD_PINS)
def test_bad_pins_get_a_sentence_and_the_typed_text_is_kept(editor_client, rule_set, pinned, message) -> None:
    response, text = _execute(editor_client, rule_set, "주문 A-1", pinned)
    assert response.status_code == 422 and message in text, text[:2000]
    editor = editor_client.get(reverse("rules:editor", args=[rule_set.pk])).content.decode()
    if len(pinned) < 1000:
        assert html_lib.escape(pinned) in editor  # nothing typed is lost


def test_pins_clean_refuses_too_many() -> None:
    with pytest.raises(RuleError, match="the limit is 100"):
        pins_clean([PIN] * 101, {})


def test_a_case_keeps_its_pins_and_opening_it_loads_them(editor_client, rule_set) -> None:
    response, text = _execute(editor_client, rule_set, "주문 A-1", json.dumps([PIN]))
    editor_client.post(
        reverse("rules:case_create", args=[rule_set.pk]),
        {
            "name": "pinned",
            "input": json.dumps({"query": "주문 A-1", "context": {}}),
            "expected": json.dumps({"must_fire": [{"tool_name": "get_order"}]}),
            "pinned": json.dumps([PIN]),
        },
    )
    case = rule_set.cases.get(name="pinned")
    assert case.pinned == [PIN]
    page = editor_client.get(reverse("rules:editor", args=[rule_set.pk]), {"case": case.pk}).content.decode()
    assert html_lib.unescape(page).count('"output": {"id": "A-1"}') == 1


def test_a_case_with_a_bad_pin_is_not_saved(editor_client, rule_set) -> None:
    response = editor_client.post(
        reverse("rules:case_create", args=[rule_set.pk]),
        {
            "name": "bad",
            "input": json.dumps({"query": "q"}),
            "expected": json.dumps({}),
            "pinned": json.dumps([{**PIN, "tool_name": "drop_db"}]),
        },
        follow=True,
    )
    assert "has no tool" in response.content.decode() and not rule_set.cases.filter(name="bad").exists()


def test_the_save_case_form_carries_the_pins(editor_client, rule_set) -> None:
    _, text = _execute(editor_client, rule_set, "주문 A-1", json.dumps([PIN]))
    assert 'name="pinned" value="[{"mcp_id": "order-service"' in text


def test_pins_survive_an_export_and_import(editor, rule_set) -> None:
    from rules import cases, exporting

    cases.case_create(
        actor=editor,
        rule_set=rule_set,
        name="pinned",
        input={"query": "주문 A-1"},
        expected={"must_fire": []},
        pinned=[PIN],
    )
    doc = exporting.rule_set_export_json(rule_set)
    copy = exporting.rule_set_import_json(actor=editor, data=json.dumps(doc), name="orders-copy")
    assert copy.cases.get(name="pinned").pinned == [PIN]
    doc["cases"][0]["pinned"] = [{**PIN, "tool_name": "drop_db"}]
    with pytest.raises(RuleError, match="has no tool 'drop_db'"):
        exporting.rule_set_import_json(actor=editor, data=json.dumps(doc), name="orders-bad")


@pytest.mark.parametrize(("pinned", "message"), [p for p in BAD_PINS if p[0].startswith('[{"')])
def test_bad_pins_sent_to_the_api_get_the_same_sentence(editor_client, rule_set, pinned, message) -> None:
    """The API (and so the MCP endpoint) reads pins through the tester's own form: same refusal."""
    body = {"query": "주문 A-1", "execute": True, "pinned": json.loads(pinned)}
    response = editor_client.post(
        f"/api/rule-sets/{rule_set.pk}/evaluate", json.dumps(body), content_type="application/json"
    )
    assert response.status_code == 422 and message in response.content.decode(), response.content[:2000]
