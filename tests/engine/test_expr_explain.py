"""explain_when: the value of each and/or/not operand, with the real evaluation's semantics.

The reference in every test is the real evaluation (compile_when, run as ExpressionRule runs
it): the explanation's final value, its error and what it spends must be the same.
"""

from __future__ import annotations

import pytest

import llamon_agent.expr.compiled as compiled_module
from llamon_agent.expr import CostBudgetExceeded, CostMeter, ExprError, build_namespace, compile_when
from llamon_agent.expr.budget import _METER
from llamon_agent.expr.explain import explain_when
from llamon_agent.tools import DeterministicContext


def _ns(query: str = "", context: dict | None = None, meter: CostMeter | None = None) -> dict:
    return build_namespace(DeterministicContext(query=query, context=context or {}), meter=meter)


def _real(source: str, namespace: dict) -> tuple[bool | None, str | None]:
    """The pre-step's evaluation of a ``when`` (ExpressionRule.evaluate_ns charges its static cost first)."""
    compiled = compile_when(source)
    meter = namespace[_METER]
    meter.left = meter.expr_budget - compiled.static_cost - compiled.query_reads * meter.rcost
    try:
        return compiled.run(namespace), None
    except ExprError as exc:
        return None, str(exc)


def _rows(source: str, namespace: dict) -> list[tuple[int, str, str]]:
    return [(d, p.text, p.shown_value) for d, p in explain_when(source, namespace).lines()]


def test_each_operand_of_and_has_its_value() -> None:
    assert _rows('"환불" in query and "검색" in query', _ns("환불 해주세요")) == [
        (0, '"환불" in query and "검색" in query', "False"),
        (1, '"환불" in query', "True"),
        (1, '"검색" in query', "False"),
    ]


def test_nesting_of_and_or_not() -> None:
    source = '("주문" in query or "order" in query) and not (context.get("vip") and "취소" in query)'
    rows = _rows(source, _ns("order please", {"vip": True}))
    assert rows == [
        (0, source, "True"),
        (1, '"주문" in query or "order" in query', "True"),
        (2, '"주문" in query', "False"),
        (2, '"order" in query', "True"),
        (1, 'not (context.get("vip") and "취소" in query)', "True"),
        (2, 'context.get("vip") and "취소" in query', "False"),
        (3, 'context.get("vip")', "True"),
        (3, '"취소" in query', "False"),
    ]


def test_a_multi_line_operand_is_shown_on_one_line() -> None:
    rows = _rows('"a" in query\nand\n  "b"\n  in query', _ns("a b"))
    assert rows[1:] == [(1, '"a" in query', "True"), (1, '"b" in query', "True")]


def test_short_circuit_does_not_run_what_python_would_not_run() -> None:
    # context["missing"] raises KeyError when run; the real evaluation never runs it here.
    for source, query in (
        ('"a" in query or context["missing"] == 1', "a"),
        ('"a" in query and context["missing"] == 1', "b"),
        ('not ("a" in query or context["missing"])', "a"),
    ):
        explained = explain_when(source, _ns(query))
        assert explained.error is None
        assert explained.value == _real(source, _ns(query))[0]
        assert explained.lines()[-1][1].shown_value == "not evaluated"


def test_an_error_is_the_real_error_on_the_operand_that_raised() -> None:
    source = '"a" in query and context["missing"] == 1 and "c" in query'
    explained = explain_when(source, _ns("a"))
    real_value, real_error = _real(source, _ns("a"))
    assert real_value is None and real_error is not None
    assert explained.value is None
    assert explained.error == real_error  # same text, same line and column
    assert "key 'missing' is missing" in explained.error
    assert [p.shown_value for _, p in explained.lines()] == ["error", "True", "error", "not evaluated"]


EXPRESSIONS = [
    '"a" in query',
    '"a" in query and "b" in query',
    '"a" in query or "b" in query',
    'not "a" in query',
    '("a" in query or "b" in query) and not "c" in query',
    '"a" in query and ("b" in query or context.get("n", 0) > 2) or not "c" in query',
    'len(query) > 3 and query.startswith("a") or context.get("n") == 1',
    'not (not "a" in query and not ("b" in query or "c" in query))',
    'context.get("n", 0) // (context.get("d", 0)) > 1 or "a" in query',
]
INPUTS = [("", {}), ("a", {}), ("a b", {"n": 3}), ("b c", {"n": 1, "d": 1}), ("abcd", {"n": 5, "d": 2})]


@pytest.mark.parametrize("source", EXPRESSIONS)
def test_same_value_or_error_as_the_real_evaluation(source: str) -> None:
    for query, context in INPUTS:
        explained = explain_when(source, _ns(query, context))
        assert (explained.value, explained.error) == _real(source, _ns(query, context)), (query, context)


def test_budget_is_shared_by_the_operands_as_in_the_real_evaluation() -> None:
    # The operands spend one budget together: at every budget around what the whole expression
    # needs, the explanation fails exactly when the real evaluation fails, with the same error.
    source = 'query.upper() == "" or query.lower() == "" or "x" in query'
    query = "주문 조회 " * 400
    meter = CostMeter(10**6)
    _real(source, _ns(query, meter=meter))
    needed = meter.expr_budget - meter.left
    outcomes = set()
    for budget in range(max(1, needed - 60), needed + 5):
        real = _real(source, _ns(query, meter=CostMeter(budget)))
        explained = explain_when(source, _ns(query, meter=CostMeter(budget)))
        assert (explained.value, explained.error) == real, budget
        outcomes.add(real[1] is None)
    assert outcomes == {True, False}  # the sweep crossed the limit


def test_budget_error_is_the_cost_budget_message() -> None:
    source = '"a" in query and [query.upper() for x in query[:10000]]'
    query = "a" * 10_000
    explained = explain_when(source, _ns(query))
    with pytest.raises(CostBudgetExceeded) as info:
        compiled_module._cached_when(source).evaluate(_ns(query))  # refused when saved: the meter alone
    assert explained.value is None
    assert explained.error == str(info.value)
    assert "cost budget of" in explained.error
    assert [p.shown_value for _, p in explained.lines()] == ["error", "True", "error"]


@pytest.mark.parametrize(
    "source", ["__import__('os')", "query.__class__", "(lambda: 1)()", "", "a" * 5000, "open('x')"]
)
def test_unchecked_text_is_refused_like_compile_when(source: str) -> None:
    with pytest.raises(ExprError) as explained:
        explain_when(source, _ns("a"))
    with pytest.raises(ExprError) as real:
        compile_when(source)
    assert str(explained.value) == str(real.value)
