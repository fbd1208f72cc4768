"""The cost of expressions: bounded when compiled, metered at run time as a backstop.

Each hostile shape below passes every compile-time cap yet, before the budget, multiplied
work (minutes to hours, or gigabytes, on a request at the caps). Now each is refused when it is
saved, its static bound over the per-rule limit (docs/expressions.md, "Cost bound"), except the
one whose pattern is made at run time, which has no static bound and is stopped by the meter.
The meter, compiled without the static check (``_meter_only``), still stops every one of them.
The property test checks the bound against the meter: an accepted expression never spends more
than its bound. No timing is asserted (pytest-timeout guards a hang); memory is measured with
tracemalloc.
"""

from __future__ import annotations

import tracemalloc
from contextlib import nullcontext
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import llamon_agent.expr.compiled as compiled_module
from llamon_agent import settings as llamon_settings
from llamon_agent.expr import (
    DEFAULT_EXPR_BUDGET,
    DEFAULT_REQUEST_BUDGET,
    DEFAULT_RULE_LIMIT,
    MAX_QUERY_CHARS,
    MAX_SOURCE_CHARS,
    READ_CHARS_PER_UNIT,
    CostBudgetExceeded,
    CostMeter,
    ExprError,
    build_namespace,
    check_cost,
    check_rule_cost,
    check_rule_set_cost,
    compile_when,
    expression_rule,
)
from llamon_agent.expr.namespace import LONG_QUERY_CHARS
from llamon_agent.prestep import RuleStatus, StaticToolBackend, run_prestep
from llamon_agent.settings import CostBudgets, SettingsError
from llamon_agent.tools import AgentRequest, DeterministicContext, ToolInfo

BUDGET_ERROR = f"cost budget of {DEFAULT_EXPR_BUDGET:,} units exceeded"
# A request at the caps: a 32,000-character query of words, and ~200 KB of request data.
QUERY = ("주문 조회 order 12345 " * 2000)[:MAX_QUERY_CHARS]
NUMBERS = list(range(20_000))
DEEP = {"list": NUMBERS[:3_000], "nested": [{"k": str(i)} for i in range(1_000)]}
PATTERNS = [f"(?:[a-z]{{1,30}}){{30}}{i}" for i in range(150)]  # each a ~1,800-instruction program
BIG_CTX = DeterministicContext(
    query=QUERY,
    context={"chatbotId": "premium-support", "userId": "C-1"},
    a2a_data=[
        {"list": NUMBERS, "words": [f"w{i}" for i in range(3_000)], "patterns": PATTERNS},
        dict(DEEP),
        dict(DEEP),
    ],
    mcp_tools=[ToolInfo("search_docs")],
)
LOOP = "for x in query[:10000]"
# The most one operation charged after it ran can add: a 100,000-character text (12,501
# units) or a 10,000-item result (20,001).
POST_CHARGE_SLACK = 20_001


def _chain(term: str, joiner: str, room: int, most: int = 190) -> str:
    """``term joiner term ...`` as long as the expression caps allow (length, 1,000 nodes)."""
    count = min(most, (MAX_SOURCE_CHARS - room) // (len(term) + len(joiner)))
    return joiner.join([term] * count)


ATTACKS = {
    "sorted x196 in a generator": f"any(({_chain('sorted(query)', ' and ', 60, 196)}) and 0 {LOOP})",
    "query+query+query per item": f"[query+query+query {LOOP}]",
    "query+query+query list literal": "[" + _chain("query+query+query", ", ", 4, 90) + "]",
    "sorted list literal, no loop": "[" + _chain("sorted(query)", ", ", 4) + "]",
    "loop variable in query, per item": f"[x in query {LOOP}]",
    "literal in query, per item": f'all("없는말" in query or 1 {LOOP})',
    "join of split per item": f'[" ".join(query.split()) {LOOP}]',
    "deep == per item": f"[a2a_data[1] == a2a_data[2] {LOOP}]",
    "membership in a big list": f"[len(x) in a2a_data[0]['list'] {LOOP}]",
    "catastrophic-size regex program": f'[re_search("(?:[a-z]{{1,30}}){{30}}x", query) {LOOP}]',
    "a new regex per item": "[re_search(p, '') for p in a2a_data[0]['patterns']]",
    "str() of data per item": f"[str(a2a_data[0]['list'][:5000]) {LOOP}]",
    "f-string per item": f'[f"{{query}}{{query}}{{query}}" {LOOP}]',
    "replace per item": f'[query.replace("주", "주문") {LOOP}]',
    "split per item": f"[query.split() {LOOP}]",
    "slice per item": f"[query[1:] {LOOP}]",
    "upper per item": f"[query.upper() {LOOP}]",
    "contains_any of many words": f"[contains_any(query, a2a_data[0]['words']) {LOOP}]",
    "max of the query per item": f"[max(query) {LOOP}]",
    "set union per item": f"[tool_names.union(query) {LOOP}]",
    "sum of a big list per item": f"[sum(a2a_data[0]['list']) {LOOP}]",
    "dict comprehension building texts": f"{{x + str(len(query)): query + x {LOOP}}}",
    "sorted items of data per item": f"[sorted(a2a_data[1]['list']) {LOOP}]",
    "startswith a tuple per item": f"[query.startswith((query[:900], query[1:901])) {LOOP}]",
    "count per item": f'[query.count("주") {LOOP}]',
    "chained comparison of data per item": f"[a2a_data[1] == a2a_data[2] == a2a_data[1] {LOOP}]",
}


def _meter_only(source: str) -> Any:
    """``source`` compiled without its static check (as a stored rule is): the meter alone bounds it."""
    return compile_when(source)


def _spent(meter: CostMeter) -> int:
    """What the last evaluation (ExpressionRule.evaluate_ns) spent of its budget."""
    return meter.expr_budget - meter.left


# Patterns made at run time, and a tool listing (not capped): no static bound, metered.
NO_STATIC_BOUND = {"a new regex per item", "set union per item"}
# Refused when saved (their bound is over the per-rule limit), yet on BIG_CTX they spend less than
# the meter's budget, which is twice that limit: run as stored rules, they finish (40, 15 and 100
# ms, 17, 0.1 and 38 MB: benchmarks/bench_cost_bound.py).
WITHIN_THE_METER = {
    "query+query+query list literal",
    "catastrophic-size regex program",
    "startswith a tuple per item",
}


def test_there_are_at_least_15_distinct_attacks() -> None:
    assert len(ATTACKS) >= 15
    assert all(len(source) <= MAX_SOURCE_CHARS for source in ATTACKS.values())


@pytest.mark.parametrize("name", list(ATTACKS))
def test_attack_is_refused_when_saved_naming_what_costs(name: str) -> None:
    if name in NO_STATIC_BOUND:
        compiled = compile_when(ATTACKS[name])
        assert compiled.bound is None
        with pytest.raises(CostBudgetExceeded, match=BUDGET_ERROR):
            compiled.evaluate(build_namespace(BIG_CTX))
        return
    with pytest.raises(ExprError) as info:
        check_cost(compile_when(ATTACKS[name]))  # where a rule is authored
    error = info.value
    assert error.msg_id == "expr.cost_bound" and error.line == 1 and error.column
    assert f"over the limit of {DEFAULT_RULE_LIMIT:,} units a rule: " in str(error)
    assert error.params["part"].strip("'\"").removesuffix("...") in ATTACKS[name]  # the costly part


def test_a_stored_rule_over_the_limit_still_compiles_and_runs_under_its_meter() -> None:
    # Upgrade safety: a published version may hold a rule a newer estimator (or a lower limit)
    # puts over the per-rule limit. Compiling it never refuses; the authoring check does.
    when = "len(sorted(query + query)) > len(sorted(query + query))"
    rule = _rule(when)  # compiles, though over the default per-rule limit
    assert rule.bound > DEFAULT_RULE_LIMIT
    with pytest.raises(ExprError) as info:
        check_rule_cost(rule)
    assert info.value.field == "when" and info.value.msg_id == "expr.cost_bound"
    assert rule.evaluate_ns(build_namespace(DeterministicContext(query="주문"))) is None
    meter = CostMeter(expr_budget=5_000)  # on a long query its meter stops it: the backstop
    with pytest.raises(CostBudgetExceeded):
        rule.evaluate_ns(build_namespace(BIG_CTX, meter=meter))


@pytest.mark.parametrize("source", list(ATTACKS.values()), ids=list(ATTACKS))
def test_attack_raises_the_budget_error_without_its_static_check(source: str) -> None:
    if source in {ATTACKS[name] for name in WITHIN_THE_METER}:
        meter = CostMeter(DEFAULT_EXPR_BUDGET)
        _meter_only(source).evaluate(build_namespace(BIG_CTX, meter=meter))
        assert 0 < _spent(meter) <= DEFAULT_EXPR_BUDGET
        return
    with pytest.raises(CostBudgetExceeded, match=BUDGET_ERROR) as info:
        _meter_only(source).evaluate(build_namespace(BIG_CTX))
    assert isinstance(info.value, ExprError)  # the pre-step's error path, unchanged


@pytest.mark.parametrize("source", list(ATTACKS.values()), ids=list(ATTACKS))
def test_attack_stays_within_64_mb(source: str) -> None:
    compiled = _meter_only(source)
    namespace = build_namespace(BIG_CTX)
    tracemalloc.start()
    try:
        with (
            nullcontext()
            if source in {ATTACKS[n] for n in WITHIN_THE_METER}
            else pytest.raises(CostBudgetExceeded)
        ):
            compiled.evaluate(namespace)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024 * 1024, f"peak {peak / 2**20:.1f} MB"


def test_the_error_says_where_and_which_budget() -> None:
    with pytest.raises(CostBudgetExceeded) as info:
        _meter_only(f"[query.upper() {LOOP}]").evaluate(build_namespace(BIG_CTX))
    assert str(info.value).startswith("line 1, column ")
    assert BUDGET_ERROR in str(info.value)


ORDINARY = [
    '"주문" in ctx.query and "조회" in ctx.query',
    'ctx.context.get("chatbotId") == "premium-support"',
    '"search_docs" in tool_names and "검색" in ctx.query',
    'contains_any(query, ["환불", "배송", "조회"])',
    're_find(r"\\d{5}", query) == "12345"',
    'any(t["name"].startswith("search") for t in ctx.mcp_tools)',
    "len(query) > 3 and query.split()[0] == '주문'",
    'query.lower().count("order") > 10',
    'f"{query[:20]}!" != ""',
]


def _rule(when: str, params: str = "{}"):
    return expression_rule(name="r", mcp_id="svc", tool_name="t", when=when, params=params)


@pytest.mark.parametrize("source", ORDINARY)
def test_ordinary_rules_fit_easily_even_on_a_request_at_the_caps(source: str) -> None:
    namespace = build_namespace(BIG_CTX)
    rule = _rule(source)
    rule.evaluate_ns(namespace)
    assert _spent(namespace["__llamon_meter"]) <= rule.bound < DEFAULT_EXPR_BUDGET // 2


def test_static_cost_is_charged_to_the_request_even_without_helpers() -> None:
    meter = CostMeter(expr_budget=1_000)
    namespace = build_namespace(DeterministicContext(query="주문"), meter=meter)
    rule = _rule('"주문" in query and "조회" not in query')
    rule.evaluate_ns(namespace)
    # two reads of a short query (one unit each), then the params {} (static 1; a tiny copy is free)
    assert _spent(meter) == rule.compiled_when.static_cost + 2 + rule.compiled_params.static_cost


def test_a_long_query_makes_plain_keyword_reads_cost_more() -> None:
    # "w" in query is left as plain Python (the hot path) but charged by the query's length.
    short, long = CostMeter(10**6), CostMeter(10**6)
    query = QUERY[: LONG_QUERY_CHARS - 1]
    rule = _rule('"없는말" in query')
    rule.evaluate_ns(build_namespace(DeterministicContext(query="a"), meter=short))
    rule.evaluate_ns(build_namespace(DeterministicContext(query=query), meter=long))
    assert _spent(long) - _spent(short) == len(query) // READ_CHARS_PER_UNIT
    assert _spent(long) <= rule.bound


def test_a_very_long_query_is_read_through_its_table_of_literals() -> None:
    # From LONG_QUERY_CHARS on, a literal test reads a table of the request (a literal not in it
    # is searched for once and remembered): each test is a lookup, within the rule's bound.
    meter = CostMeter(10**6)
    namespace = build_namespace(DeterministicContext(query=QUERY), meter=meter)
    rule = _rule('"없는말" in query')
    for _ in range(3):
        rule.evaluate_ns(namespace)
        assert _spent(meter) == rule.compiled_when.static_cost + 1 + 1  # + params {}
    assert rule.bound >= 1 + len(QUERY) // READ_CHARS_PER_UNIT  # the first search, at worst


def test_params_copy_is_charged() -> None:
    meter = CostMeter(10**6)
    rule = _rule("True", '{"data": a2a_data}')
    rule.evaluate_ns(build_namespace(BIG_CTX, meter=meter))
    assert rule.bound >= _spent(meter) > 10_000  # ~150 KB copied, at 8 characters a unit


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.text(max_size=40),
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(),
            st.text(max_size=300),
            st.floats(),
            st.lists(st.integers()),
        ),
        max_size=12,
    ),
    st.sampled_from([1, 60, 700]),
)
def test_flat_params_are_copied_and_charged_as_any_params(params: dict[str, Any], repeat: int) -> None:
    """A dict of texts and plain scalars takes a shortcut (_flat_size): the same copy, the same
    charge and the same cap as the general copy (_json_value), around the cap too."""
    params = {f"{key}{n}": value for n in range(repeat) for key, value in params.items()} if params else {}

    def outcome(general: bool) -> Any:
        meter = CostMeter(10**9)
        meter.left = 10**9
        with patch.object(compiled_module, "_flat_size", lambda value: None) if general else nullcontext():
            try:
                copy = compiled_module._params(params, meter)
            except ExprError as exc:
                return ("error", str(exc), meter.left)
        assert copy == params and copy is not params
        return ("ok", meter.left)

    assert outcome(general=False) == outcome(general=True)


def test_int_results_stay_within_64_bits() -> None:
    with pytest.raises(ExprError, match="the integer result is too large"):
        compile_when('int("99999999999999999999999") > 0').evaluate(build_namespace(BIG_CTX))


def test_sort_keys_are_limited_to_cheap_builtins() -> None:
    namespace = build_namespace(BIG_CTX)
    assert _meter_only("sorted(query.split()[:5], key=len)[0] != ''").evaluate(namespace)
    with pytest.raises(ExprError, match="key= can be one of len, str"):
        _meter_only("sorted(query.split()[:5], key=sorted)").evaluate(namespace)


def test_a_small_budget_from_the_settings_is_used_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMON_EXPR_COST_BUDGET", "5000")
    monkeypatch.setenv("LLAMON_REQUEST_COST_BUDGET", "20000")
    llamon_settings.cost_budgets.cache_clear()
    try:
        meter = build_namespace(BIG_CTX)["__llamon_meter"]
        assert meter.expr_budget == 5_000
        with pytest.raises(ExprError, match="over the limit of 2,500 units a rule: 'sorted"):
            check_cost(compile_when("sorted(query[:2000]) == []"))
        with pytest.raises(CostBudgetExceeded, match="cost budget of 5,000 units exceeded"):
            _meter_only("sorted(query[:2000]) == []").evaluate(build_namespace(BIG_CTX))
        with pytest.raises(ExprError, match="over the limit of 20,000 units a request"):
            check_rule_set_cost([_rule('"주문" in query')] * 10)  # 2,006 units each at worst
    finally:
        monkeypatch.delenv("LLAMON_EXPR_COST_BUDGET")
        monkeypatch.delenv("LLAMON_REQUEST_COST_BUDGET")
        llamon_settings.cost_budgets.cache_clear()


def test_defaults_match_the_settings_and_bad_values_are_refused() -> None:
    budgets = CostBudgets(_env_file=None)
    assert (budgets.expr_cost_budget, budgets.request_cost_budget) == (
        DEFAULT_EXPR_BUDGET,
        DEFAULT_REQUEST_BUDGET,
    )
    with pytest.raises(SettingsError, match="LLAMON_EXPR_COST_BUDGET"):
        CostBudgets(_env_file=None, expr_cost_budget="lots")
    with pytest.raises(SettingsError, match="LLAMON_REQUEST_COST_BUDGET"):
        CostBudgets(_env_file=None, request_cost_budget=0)
    with pytest.raises(ValueError, match="expr_budget must be a positive"):
        CostMeter(expr_budget=0)


# --- no request-wide budget: a rule set's bounds are checked when it is published ------------------
COSTLY_WHEN = "len(sorted(query[:8000])) < 0"  # ~130,000 units at worst, never fires


def _costly_rules(count: int) -> list:
    return [
        expression_rule(name=f"costly_{i}", mcp_id="svc", tool_name="t", when=COSTLY_WHEN, params="{}")
        for i in range(count)
    ] + [expression_rule(name="cheap", mcp_id="svc", tool_name="t", when="True", params="{}")]


REQUEST = AgentRequest(query=QUERY)
BACKEND = StaticToolBackend({"svc": ["t"]}, call=lambda *_: "ok")


def test_many_costly_rules_no_longer_fail_a_request_together() -> None:
    # 40 rules of ~105,000 units each used to spend a 2,500,000-unit request pool: the rules after
    # the 24th failed, and the cheap last one with them. Each is within its bound: none fails.
    outcome = run_prestep(_costly_rules(40), REQUEST, backend=BACKEND)
    assert outcome.ok and outcome.calls == 1
    assert [rec.status for rec in outcome.records][-1] is RuleStatus.FIRED


def test_a_rule_set_over_the_request_limit_is_refused_naming_its_costliest_rules() -> None:
    rules = _costly_rules(40)
    total = check_rule_set_cost(rules)  # within the default limit
    assert total == sum(rule.bound for rule in rules)
    with pytest.raises(ExprError) as info:
        check_rule_set_cost(rules, limit=total - 1)
    assert info.value.msg_id == "rules.cost_total"
    assert f"may cost up to {total:,} units on one request" in str(info.value)
    assert "costly_0 (" in str(info.value) and "cheap" not in str(info.value)


# --- property: anything the checker accepts is bounded --------------------------------------------
_ATOMS = ["query", "context", "a2a_data", "tool_names", "ctx.mcp_tools", "1", '"주"', "a2a_data[0]"]
_WRAP = [
    "sorted({})",
    "max({})",
    "str({})",
    "len({})",
    "{} + {}",
    "{}[1:]",
    "{}.upper()",
    "{}.split()",
    '"-".join({})',
    "[{}, {}]",
    "{} == {}",
    "{} in {}",
    "any({} for x in query)",
    "[{} for x in a2a_data[0]['list']]",
    "{{x: {} for x in query.split()}}",
    "contains_any({}, {})",
    're_search("[a-z]+", {})',
    'f"{{{}}}{{{}}}"',
    "sum({})",
    "{}.count({})",
]


@st.composite
def _hostile(draw: st.DrawFn, depth: int = 0) -> str:
    if depth >= 3 or draw(st.integers(0, 2)) == 0:
        return draw(st.sampled_from(_ATOMS))
    shape = draw(st.sampled_from(_WRAP))
    parts = [draw(_hostile(depth + 1)) for _ in range(shape.count("{}"))]
    return shape.format(*parts)


@st.composite
def _requests(draw: st.DrawFn) -> DeterministicContext:
    size = draw(st.sampled_from([0, 10, 1_000, MAX_QUERY_CHARS]))
    text = draw(st.sampled_from(["주문 조회 ", "a", "ab cd ", "9"]))
    items = draw(st.sampled_from([0, 10, 20_000]))
    return DeterministicContext(
        query=(text * size)[:size],
        context={"k": "v" * draw(st.sampled_from([0, 50_000]))},
        a2a_data=[{"list": list(range(items))}],
        mcp_tools=[ToolInfo("search_docs")],
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(source=_hostile(), ctx=_requests(), repeat=st.integers(1, 12))
def test_any_accepted_expression_finishes_or_raises_expr_error(
    source: str, ctx: DeterministicContext, repeat: int
) -> None:
    source = "[" + ", ".join([source] * repeat) + "]"  # repetition multiplies the work
    try:
        compiled = check_cost(compile_when(source))
    except ExprError:
        return  # refused when saved
    meter = CostMeter(expr_budget=DEFAULT_EXPR_BUDGET)
    try:
        compiled.evaluate(build_namespace(ctx, meter=meter))
    except CostBudgetExceeded:
        assert compiled.bound is None, "a rule within its static bound ran out of budget"
    except ExprError:
        pass
    if compiled.bound is not None:  # the static bound holds: the meter never spends more
        assert DEFAULT_EXPR_BUDGET - meter.left <= compiled.bound
    # Work is charged before it runs (a charge that does not fit is refused, and the meter keeps
    # what it had), or right after one capped operation: at most ~20,000 units past the budget.
    assert DEFAULT_EXPR_BUDGET - meter.left <= DEFAULT_EXPR_BUDGET + POST_CHARGE_SLACK


SPLITS = {
    # A split of a big text makes one object per piece: 200,001 pieces were charged after they
    # were made, 1,600,000 units past a 200,000-unit budget (found by the property test below).
    "split on a separator": ('context["k"].split(" ")', " " * 200_000),
    "rsplit on a separator": ('context["k"].rsplit(" ", 300000)', " " * 200_000),
    "whitespace split": ("context['k'].split()", "a " * 100_000),
    "splitlines": ("context['k'].splitlines()", "\n" * 100_000),
    "splitlines, CRLF": ("context['k'].splitlines(True)", "\r\n" * 50_000),
}


@pytest.mark.parametrize("source,text", list(SPLITS.values()), ids=list(SPLITS))
def test_a_split_too_big_for_the_budget_is_refused_before_its_pieces_are_made(source: str, text: str) -> None:
    compiled = _meter_only(f"len({source}) > 0")
    meter = CostMeter(expr_budget=200_000)
    ctx = DeterministicContext(query="q", context={"k": text})
    tracemalloc.start()
    try:
        with pytest.raises(CostBudgetExceeded, match="cost budget of 200,000 units exceeded"):
            compiled.evaluate(build_namespace(ctx, meter=meter))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert meter.left >= 0  # nothing charged that was not done
    assert peak < 4_000_000  # 100,000+ pieces would take ~6 MB


@pytest.mark.parametrize(
    "source,text,pieces",
    [
        # The most pieces each split could make would not fit the budget, but the text has few.
        ("context['k'].split()", "a" * 200_000, 1),
        ('context["k"].split(" ")', "abcd " * 20_000, 20_001),
        ("context['k'].rsplit(None, 90000)", "abcd " * 20_000, 20_000),
        ("context['k'].splitlines()", "x" * 150_000 + "\n" + "y", 2),
        # These fit as they are.
        ("context['k'].split()", QUERY, len(QUERY.split())),
        ("context['k'].rsplit(None, 3)", QUERY, 4),
        ('context["k"].partition(" ")', QUERY, 3),
    ],
)
def test_a_split_that_fits_the_budget_runs_and_is_charged_only_for_the_pieces_it_made(
    source: str, text: str, pieces: int
) -> None:
    compiled = _meter_only(f"len({source}) == {pieces}")
    meter = CostMeter(expr_budget=250_000)
    assert compiled.evaluate(
        build_namespace(DeterministicContext(query="q", context={"k": text}), meter=meter)
    )
    # the text read (by the method, and by splitlines counting its 10 kinds of line break), its
    # characters and pieces built, and the small costs of the rest of the expression
    assert 250_000 - meter.left < 1 + len(text) // 8 + 8 * pieces + 11 * (1 + len(text) // 16) + 100


def test_a_meter_shared_by_two_requests_keeps_nothing_of_the_first_query() -> None:
    # What is made once per request (the lowered query, literal tables, re_search answers)
    # belongs to its query: a meter reused for another query starts them again.
    meter = CostMeter(10**6)
    for when in ('re_search("주문", query)', '"order" in query.lower()'):
        rule = _rule(when)
        first = build_namespace(DeterministicContext(query="주문 ORDER " + "x" * 3_000), meter=meter)
        assert rule.evaluate_ns(first) is not None
        second = build_namespace(DeterministicContext(query="환불 refund " + "x" * 3_000), meter=meter)
        assert rule.evaluate_ns(second) is None
