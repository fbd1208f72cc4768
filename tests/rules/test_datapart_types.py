"""Types in data (issue 43): a vital sign sent as text. The static checks warn where a rule compares
a DataPart value with a number; the failure, when it happens, reads in the user's language."""

from __future__ import annotations

import pytest
from django.utils import translation

from llamon_agent.expr.reads import reads
from llamon_agent.rule_checks import Problem
from llamon_agent.tools import AgentRequest
from rules import engine
from rules.checks import rule_set_problems
from rules.expr_messages import expr_reason
from rules.templatetags.rules_i18n import expr_error
from tests.support.rule_sets import build_rule_set

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("when", "warned"),
    [
        ('data_get("spo2") < 90', True),
        ('data_get("spo2", 100) <= 90', True),
        ('90 > data_get("spo2")', True),
        ('any(d.get("spo2", 100) < 90 for d in a2a_data or [])', True),
        ('any(d["spo2"] < 90 for d in ctx.a2a_data or [])', True),
        ('a2a_data[0]["spo2"] < 90 if a2a_data else False', True),
        ('to_number(data_get("spo2"), 100) < 90', False),  # converted
        ('any(to_number(d.get("spo2"), 100) < 90 for d in a2a_data or [])', False),
        ('float(data_get("spo2", 100)) < 90', False),
        ('int(data_get("spo2", 100)) < 90', False),
        ('data_get("ticketType") == "faq"', False),  # no number
        ("len(query) > 10", False),  # not request data
        ('context.get("age", 0) > 18', False),  # context is the caller's, not a DataPart
    ],
)
def test_a_datapart_value_compared_with_a_number_is_warned(when, warned) -> None:
    found = reads(when).data_numbers
    assert bool(found) is warned, (when, found)
    if warned:
        message = Problem("warning", "datapart_number", "check.datapart_number", {"value": found[0]}).message
        assert f"to_number({found[0]}, default)" in message and "may arrive as text" in message


def test_the_warning_is_a_check_of_the_rule_set(editor, demo_servers) -> None:
    rule_set = build_rule_set(
        editor,
        "vitals",
        [
            {
                "name": "page_on_low_spo2",
                "mcp_id": "knowledge-base",
                "tool_name": "search_docs",
                "when": 'data_get("spo2", 100) < 90',
                "params": '{"q": "low spo2"}',
            }
        ],
    )
    servers = engine.servers_by_id(["knowledge-base"])
    problems = rule_set_problems(engine.rule_set_snapshot(rule_set), servers)
    assert [(p.level, p.code) for p in problems["page_on_low_spo2"]] == [("warning", "datapart_number")]

    # And what it warns about: text in the DataPart fails the pre-step, said in the user's language.
    outcome = engine.evaluate(
        engine.rule_set_snapshot(rule_set), AgentRequest(query="vitals", a2a_data=[{"spo2": "86"}])
    )
    record = next(r for r in outcome.outcome.records if r.rule == "page_on_low_spo2")
    assert record.status == "error"
    english = expr_error(record)
    assert "cannot compare a text with a number using <" in english and "not supported" not in english
    with translation.override("ko"):
        korean = expr_error(record)
    assert "텍스트" in korean and "to_number" in korean and "not supported" not in korean
    assert expr_reason(record.error_expr) in english


def test_to_number_keeps_the_pre_step_from_failing_on_text(editor, demo_servers) -> None:
    """The conversion the warning suggests: the rule fires on "86" and on 86, and a value that is
    no number takes the default instead of failing the pre-step; the warning is gone."""
    rule = {
        "name": "page_on_low_spo2",
        "mcp_id": "knowledge-base",
        "tool_name": "search_docs",
        "when": 'to_number(data_get("spo2"), 100) < 90',
        "params": '{"q": "low spo2", "limit": to_number(data_get("limit"), 3)}',
    }
    rule_set = build_rule_set(editor, "vitals", [rule])
    snapshot = engine.rule_set_snapshot(rule_set)
    assert rule_set_problems(snapshot, engine.servers_by_id(["knowledge-base"])) == {}
    for value, fired in (
        ("86", True),
        (86, True),
        (" ８６ ", True),
        ("97", False),
        ("n/a", False),
        (None, False),
    ):
        outcome = engine.evaluate(
            snapshot, AgentRequest(query="vitals", a2a_data=[{"spo2": value, "limit": "5"}])
        )
        (record,) = outcome.outcome.records
        assert outcome.outcome.ok and record.status == ("fired" if fired else "skipped"), (value, record)
        if fired:
            assert record.params == {"q": "low spo2", "limit": 5}
