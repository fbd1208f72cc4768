"""The engine says what a rule reads (llamon_agent.expr.reads): the workbench's replay and static
checks ask it instead of parsing rule text themselves."""

from __future__ import annotations

import pytest

from llamon_agent.expr import DYNAMIC, expression_rule, reads
from llamon_agent.prestep import compile_rules


@pytest.mark.parametrize(
    "source,keys",
    [
        ('context.get("chatbotId") == "x"', {"chatbotId"}),
        ('ctx.context["userId"] and "tier" in context', {"userId", "tier"}),
        ('ctx.context.get("a", 1) > 2 and "주문" in ctx.query', {"a"}),
        ("len(query) > 3", set()),
        ("context", None),  # the whole context
        ("context.get(query)", None),  # a key computed at run time
        ("len(context.keys()) > 1", None),
        ("str(ctx)", None),
        ("ctx.context", None),
        ("((", None),  # does not parse
    ],
)
def test_context_keys(source: str, keys: set[str] | None) -> None:
    found = reads(source).context_keys
    assert (None if found is None else set(found)) == keys


def test_data_keys_literals_tools_and_params() -> None:
    when = reads(
        'data_get("amount", 0) > 120000 and "fraud_check" in tool_names and re_search(r"\\d+", query)'
    )
    assert when.data_keys == {"amount"}
    assert when.tools == {"fraud_check"}
    assert {"amount", 120000, "fraud_check", "\\d+"} <= when.literals
    assert reads("data_get(query) == 1").data_keys is None
    assert reads("len(a2a_data or []) > 1").data_keys is None
    params = reads('{"q": query[:50], "kind": "order", "n": 3}').params
    assert params == ({"q": DYNAMIC, "kind": "order", "n": 3}, True)
    assert reads("dict_of(query)").params is None
    assert reads('{query: 1, "a": [1, 2]}').params == ({"a": [1, 2]}, False)


def test_the_normal_form_ignores_spacing_and_comments() -> None:
    assert reads('"a" in query  # comment').normal == reads('"a"   in\nquery').normal
    assert reads('"a" in query').normal != reads('"b" in query').normal


def test_a_compiled_rule_set_exposes_what_each_rule_reads() -> None:
    rules = [
        expression_rule(
            name="r",
            mcp_id="m",
            tool_name="t",
            when='context.get("k") == 1',
            params='{"id": data_get("userId")}',
        )
    ]
    [(when, params)] = compile_rules(rules).request_reads()
    assert when.context_keys == {"k"} and params.data_keys == {"userId"}


def test_unconverted_datapart_values_ordered_against_numbers_are_named() -> None:
    # llamon_agent.rule_checks warns of each; converted values, equality and text reads are not named
    when = 'data_get("spo2") < 90 or any(d["hr"] >= 120 for d in a2a_data) or float(data_get("t", 0)) > 38'
    assert reads(when).data_numbers == ("data_get('spo2')", "d['hr']")
    assert reads('data_get("tier") == "gold" and len(query) > 3').data_numbers == ()
