"""The pre-step's loop calls an expression rule's `when` function itself (prestep._evaluate_all):
it must give each evaluation the budget ExpressionRule.evaluate_ns gives it, rule by rule, plain
and metered `when`s, firing or not, and fail the same rules when that budget is small."""

from __future__ import annotations

from typing import Any

import pytest

import llamon_agent.expr as expr
from llamon_agent.expr import CostMeter, build_namespace, expression_rule
from llamon_agent.prestep import RuleStatus, StaticToolBackend, compile_rules, run_prestep
from llamon_agent.tools import AgentRequest

WHENS = [
    'data_get("amount", 0) > 100',  # plain
    'data_get("a", 0) + data_get("b", 0) > 3',  # metered (+)
    '"주문" in query and data_get("region") in ["서울", "부산"]',  # plain, reads the query
    "len([w for w in query.split() if w]) > 2",  # metered (a loop)
    'query.lower().startswith("urgent")',  # plain
    'data_get("amount", 0) * 12 > data_get("income", 1) * 3',  # plain
]
PARAMS = ['{"q": query[:20]}', '{"n": data_get("amount", 0)}']


def _rules() -> list[Any]:
    return [
        expression_rule(
            name=f"r{i}",
            mcp_id="crm",
            tool_name="lookup",
            when=WHENS[i % len(WHENS)],
            params=PARAMS[i % len(PARAMS)],
        )
        for i in range(60)
    ]


REQUEST = AgentRequest(
    query="urgent 주문 배송 문의 please help " * 3,
    context={"tier": "gold"},
    a2a_data=[{"amount": 150, "a": 2, "b": 5, "region": "서울", "income": 10}],
)


def _reference(rules: list[Any], expr_budget: int) -> tuple[list[str], str | None]:
    """evaluate_ns rule by rule on one namespace: (fired, first failing rule)."""
    meter = CostMeter(expr_budget=expr_budget)
    namespace = build_namespace(REQUEST.to_context(["lookup"]), meter=meter)
    fired, failed = [], None
    for rule in rules:
        try:
            if rule.evaluate_ns(namespace) is not None:
                fired.append(rule.name)
        except expr.ExprError:
            failed = failed or rule.name
    return fired, failed


@pytest.mark.parametrize("expr_budget", [10_000, 150])
def test_the_loop_charges_as_evaluate_ns(expr_budget: int) -> None:
    rules = _rules()
    # The loop's own path for each of them, or this compares evaluate_ns with itself.
    assert all(when is not None for when in compile_rules(rules).whens)
    outcome = run_prestep(
        rules,
        REQUEST,
        backend=StaticToolBackend({"crm": ["lookup"]}),
        dry_run=True,
        expr_budget=expr_budget,
    )
    fired, failed = _reference(rules, expr_budget)
    assert [rec.rule for rec in outcome.fired] == fired and fired
    errors = [rec.rule for rec in outcome.records if rec.status is RuleStatus.ERROR]
    assert (errors[0] if errors else None) == failed
    assert (failed is not None) == (expr_budget < 10_000)  # the small budget fails the loop rule
