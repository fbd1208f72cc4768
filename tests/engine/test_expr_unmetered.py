"""Expressions whose cost is bounded when they are saved run as plain Python, unmetered (guard):
the same answers as the metered rewrite of the same expression, on any request."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llamon_agent.expr import CostMeter, build_namespace, compile_when, expression_rule
from llamon_agent.expr.checker import _parse
from llamon_agent.expr.compiled import _NO_HINTS, CompiledExpr, _Own
from llamon_agent.expr.errors import ExprError
from llamon_agent.expr.guard import _compile
from llamon_agent.tools import DeterministicContext


def _both(source: str) -> tuple[CompiledExpr, CompiledExpr]:
    """``source`` compiled as the engine does, and with every data-dependent operation metered."""
    out = []
    for meter_all in (False, True):
        tree, src = _parse(source)
        code, nodes, scans, metered = _compile(tree, "<when>", meter_all=meter_all)
        out.append(
            CompiledExpr(source, code, None, _Own("when", nodes, scans, metered, src), _NO_HINTS, None)
        )
    return out[0], out[1]


def _outcome(expr: CompiledExpr, ctx: DeterministicContext) -> tuple[str, Any]:
    namespace = build_namespace(ctx, meter=CostMeter(expr_budget=1_000_000))
    try:
        return "value", expr.evaluate(namespace)
    except ExprError as exc:
        return "error", type(exc)


_KEYS = ["amount", "region", "a", "b", "tier"]
_VALUES = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(alphabet="ab서울URGENT ", max_size=8)
    | st.lists(st.integers(0, 3), max_size=3)
    | st.dictionaries(st.sampled_from(_KEYS), st.integers(0, 3), max_size=2)
)
_PART = st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=4)

# Operands and tests of the shapes the guard now leaves plain, and some it meters, combined.
_OPERANDS = [
    'data_get("amount", 0)',
    'data_get("region")',
    'data_get("a", 1)',
    'data_get("b", "")',
    "data_get(1)",
    "data_get(None, 2)",
    'data_get("amount", 0) * 12',
    'data_get("a", 0) % 7',
    'data_get("b", 1) / 2',
    '-data_get("a", 0)',
    "len(query)",
    'len(data_get("region", ""))',
    "query",
    "query.lower()",
    "120000",
    '"서울"',
    "None",
    'context.get("tier")',
]
_TESTS = [
    "{} > {}",
    "{} <= {}",
    "{} == {}",
    "{} != {}",
    '{} in ["서울", "부산", 3, None]',
    "{} not in (1, 2.5, True)",
    '({}).startswith("urgent")',
    '({}).endswith(("a", "b"))',
    "{} < {} <= {}",
    "{} + {} > 100",
    "bool({})",
]


@st.composite
def _conditions(draw: st.DrawFn) -> str:
    tests = []
    for _ in range(draw(st.integers(1, 3))):
        shape = draw(st.sampled_from(_TESTS))
        operands = [draw(st.sampled_from(_OPERANDS)) for _ in range(shape.count("{}"))]
        tests.append("(" + shape.format(*operands) + ")")
    joined = tests[0]
    for test in tests[1:]:
        joined += draw(st.sampled_from([" and ", " or "])) + test
    return "not " + joined if draw(st.booleans()) else joined


@st.composite
def _requests(draw: st.DrawFn) -> DeterministicContext:
    parts: Any = draw(st.none() | st.lists(_PART | st.just([1, 2]), max_size=3))  # a list: skipped
    return DeterministicContext(
        query=draw(st.sampled_from(["", "Urgent: transfer", "urgent 서울", "a" * 300])),
        context={"tier": draw(_VALUES)},
        a2a_data=parts,
    )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(source=_conditions(), ctx=_requests())
def test_plain_and_metered_compiles_agree(source: str, ctx: DeterministicContext) -> None:
    plain, metered = _both(source)
    assert _outcome(plain, ctx) == _outcome(metered, ctx), source


def test_the_routing_atoms_run_unmetered() -> None:
    for source in (
        'data_get("amount", 0) > 120000 and data_get("amount", 0) <= 140000',
        'data_get("region") in ["서울", "부산"]',
        'query.lower().startswith("urgent") and len(query) < 120',
        'data_get("premium", 0) * 12 > data_get("income", 1) * 3',
        '"fraud_check" in tool_names and data_get("risk", 0) >= 90',
    ):
        plain, metered = _both(source)
        assert not compile_when(source).metered, source
        assert not plain.metered and metered.metered, source
    # work that depends on the data's size stays metered
    for source in ('data_get("a", 0) + data_get("b", 0) > 5', 'data_get("b", "").lower() == "x"'):
        assert compile_when(source).metered, source


def test_an_unmetered_when_is_charged_its_static_bound_once() -> None:
    rule = expression_rule(
        name="r", mcp_id="m", tool_name="t", when='data_get("region") in ["서울"]', params="{}"
    )
    meter = CostMeter(expr_budget=1_000)
    ctx = DeterministicContext(query="q", a2a_data=[{"region": "부산"}, {"region": "서울"}])
    namespace = build_namespace(ctx, meter=meter)
    assert rule.evaluate_ns(namespace) is None  # the first DataPart holding the key wins
    spent = meter.expr_budget - meter.left
    assert spent == rule.compiled_when.static_cost + rule.compiled_params.static_cost <= rule.bound
