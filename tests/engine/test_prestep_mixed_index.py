"""The request index (keywords, regexes, context/DataPart equality, rarest `and` literal) is an
optimisation only: on random mixed rule sets and random requests, indexed evaluation gives
exactly what evaluating every rule in order gives (fired set, order, params, errors)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llamon_agent.expr import MAX_QUERY_CHARS, expression_rule
from llamon_agent.expr.namespace import LONG_QUERY_CHARS
from llamon_agent.prestep import StaticToolBackend, compile_rules, run_prestep
from llamon_agent.tools import AgentRequest

SERVERS = {"a": ["t", "u"], "b": ["t"], "c": ["t"]}

WORDS = ["주문", "조회", "환불", "VIP", "vip", "Ab", "ab", "배송"]
WHENS = [
    '"{w}" in query',
    '"{w}" in query.lower()',
    '"{w}" in query and "{v}" in query',
    '"{w}" in query or "{v}" in query.lower()',
    'contains_any(query, ["{w}", "{v}"])',
    'contains_all(query, ["{w}", "{v}"])',
    're_search(r"{w}\\d+", query)',
    're_search(r"(?i){w}", query)',
    'len(query) > 3 and re_search(r"^{w}", query)',
    'len(query) < 5 and "{w}" in query',
    're_find(r"({w})(\\d)", query, 2) == "1"',
    'ctx.context.get("tier") == "{w}"',
    'context.get("tier", "none") == "none" and "{w}" in query',
    'data_get("orderId") == "{w}"',
    'data_get("n", 0) == 1',
    'ctx.context.get("tier", "none") == "none"',
    'data_get("orderId", 7) == 7',
    'ctx.context.get("n") == 1 or "{v}" in query',
    'ctx.context["tier"] == "{w}" and "{v}" in query',  # raises when tier is missing
    're_find(r"({w})", query, 3) == "x"',  # no group 3: raises when the pattern matches
    'query[0] == "{w}"',  # raises on an empty query
    "len(query) > 4",
    'data_get("n", 0) > 1',
    'data_get("n", 0) >= 1 and data_get("n", 0) < 2',
    '1 < data_get("n", 0) <= 2.5',
    'context.get("n", 0) <= 1.5 and "{w}" in query',
    '"{w}" in query and data_get("n", 0) >= 2',
    'data_get("n") > 0 or "{v}" in query',  # raises when n is missing (None > 0)
    "len(query) >= 4 and len(query) < 7",
    'data_get("orderId") in ["{w}", "{v}", 7]',
    'context.get("tier") in ["{w}", 1] and data_get("n", 0) < 2',
    'query.startswith("{w}")',
    'query.lower().startswith(("{w}", "{v}"))',
    'query.lower().startswith("{w}") and data_get("n", 0) > 1',
    # arithmetic terms: computed once per request by the index
    'data_get("n", 0) + context.get("n", 0) > 1',
    'data_get("n", 0) * 2 - 1 <= 2 and "{w}" in query',
    'data_get("n", 0) * 3 > context.get("n", 1) * 2',
    'len(query) / data_get("n", 1) >= 2',  # raises on 0
    '-data_get("n", 0) < -1',
    'data_get("n", 0) - 1 >= 0.5 or "{v}" in query',
    '1 < data_get("n", 0) * 2 <= 4',
    # required after a regex: skipped only when the regex cannot raise (budget, UTF-8)
    're_search(r"{w}\\d+", query) and data_get("orderId") == "{v}"',
    're_find(r"(?i){w}", query) and data_get("n", 0) > 1 and "{v}" in query',
    're_find(r"({w})", query, 1) and data_get("orderId") == "{v}"',  # a group: not past it
]


@st.composite
def mixed_rule_sets(draw: st.DrawFn) -> list[Any]:
    rules = []
    template = WHENS[0]
    for i in range(draw(st.integers(0, 10))):
        if not i or draw(st.booleans()):  # else the previous one again: shared terms and literals
            template = draw(st.sampled_from(WHENS))
        when = template.format(w=draw(st.sampled_from(WORDS)), v=draw(st.sampled_from(WORDS)))
        rules.append(
            expression_rule(
                name=f"r{i}",
                mcp_id=draw(st.sampled_from(["a", "b", "c"])),
                tool_name=draw(st.sampled_from(["t", "t", "u"])),
                when=when,
                params=draw(st.sampled_from(['{"q": query[:10]}', '{"tier": context.get("tier")}', "{}"])),
                stop=draw(st.integers(0, 5)) == 0,
            )
        )
    return rules


queries = st.one_of(
    st.lists(st.sampled_from([*WORDS, "1", "2", " ", "x"]), max_size=6).map("".join),
    st.text(alphabet="abAB주문환불vipVIP0123 \ud800", max_size=10),
)
contexts = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {},
        optional={
            "tier": st.sampled_from([*WORDS, "none", 1, True, None, ["주문"], {"a": 1}]),
            "n": st.sampled_from([1, 1.0, True, 0, "1", 1.5, float("nan"), None, 10**400]),
        },
    ),
)
data_parts = st.one_of(
    st.none(),
    st.lists(
        st.fixed_dictionaries(
            {},
            optional={
                "orderId": st.sampled_from([*WORDS, 7]),
                "n": st.sampled_from(
                    [1, True, 2, 2.5, 0.5, "2", None, float("nan"), [1], 0, -3, 2**62, 1e308]
                ),
            },
        ),
        max_size=3,
    ),
)


def comparable(outcome: Any) -> tuple[Any, ...]:
    records = [(r.rule, r.status, r.tool_name, r.params, r.error) for r in outcome.records]
    results = [{k: v for k, v in r.items() if k != "duration_ms"} for r in outcome.results]
    return (outcome.ok, outcome.error, outcome.calls, records, results)


def call(mcp_id: str, tool_name: str, params: dict[str, Any]) -> Any:
    return {"from": mcp_id, "tool": tool_name}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rules=mixed_rule_sets(),
    query=queries,
    context=contexts,
    parts=data_parts,
    huge=st.integers(0, 9),
    budget=st.sampled_from([None, None, 40, 150, 1_000]),
)
def test_indexed_evaluation_equals_evaluating_every_rule(
    rules: list[Any], query: str, context: Any, parts: Any, huge: int, budget: int | None
) -> None:
    if huge == 0:
        query = query + "." * (MAX_QUERY_CHARS + 1)  # over the caps: the namespace cannot be built
    elif huge == 1:
        query = query + " ." * LONG_QUERY_CHARS + query  # long: literal tests read a table
    request = AgentRequest(query=query, context=context or {}, a2a_data=parts)
    compiled = compile_rules(rules)
    # A regex is charged its compile by the request that builds it (then it is cached): one run
    # first, so that the two compared runs see the same cache and a small budget the same charges.
    run_prestep(rules, request, backend=StaticToolBackend(SERVERS), dry_run=True, use_index=False)
    for dry_run in (True, False):
        backend = StaticToolBackend(SERVERS, call=call)
        indexed = run_prestep(compiled, request, backend=backend, dry_run=dry_run, expr_budget=budget)
        naive = run_prestep(
            rules, request, backend=backend, dry_run=dry_run, use_index=False, expr_budget=budget
        )
        assert comparable(indexed) == comparable(naive)


def rule(name: str, when: str, mcp_id: str = "a") -> Any:
    return expression_rule(name=name, mcp_id=mcp_id, tool_name="t", when=when, params="{}")


def test_regex_and_equality_rules_are_not_evaluated_on_requests_that_cannot_fire_them() -> None:
    rules = [
        rule("by_regex", 're_search(r"A-\\d{4}", query)'),
        rule("by_tier", 'ctx.context.get("tier") == "gold"'),
        rule("by_data", 'data_get("orderId") == "A-1"'),
        rule("long_then_regex", 'len(query) > 3 and re_search(r"^환불", query)'),
    ]
    compiled = compile_rules(rules)

    def data(context: Any, parts: Any = None) -> Any:
        return lambda: (context, parts)

    assert compiled.candidates("안녕하세요", data({})) == []
    assert compiled.candidates("주문 A-1234", data({})) == [0]
    assert compiled.candidates("x", data({"tier": "gold"})) == [1]
    assert compiled.candidates("x", data({}, [{"orderId": "A-1"}])) == [2]
    assert compiled.candidates("환불 해주세요", data({})) == [3]


def test_numbers_memberships_and_prefixes_are_indexed_by_their_values() -> None:
    rules = [
        rule("range", 'data_get("amount", 0) > 100 and data_get("amount", 0) <= 200'),
        rule("above", 'data_get("amount", 0) >= 1000'),
        rule("below", 'context.get("age", 99) < 20'),
        rule("member", 'data_get("region") in ["seoul", "busan"]'),
        rule("prefix", 'query.lower().startswith(("urgent", "긴급"))'),
        rule("short", "len(query) < 3"),
        rule("mixed", '"대출" in query and data_get("amount", 0) > 5000'),
    ]
    compiled = compile_rules(rules)

    def data(amount: Any = None, region: Any = None, age: Any = None) -> Any:
        part = {k: v for k, v in (("amount", amount), ("region", region)) if v is not None}
        return lambda: ({"age": age} if age is not None else {}, [part])

    assert compiled.candidates("hello there", data()) == []
    assert compiled.candidates("hello there", data(amount=150)) == [0]
    assert compiled.candidates("hello there", data(amount=200)) == [0]
    assert compiled.candidates("hello there", data(amount=100)) == []
    assert compiled.candidates("hello there", data(amount=1000.0, age=19)) == [1, 2]
    assert compiled.candidates("hello there", data(region="busan")) == [3]
    assert compiled.candidates("URGENT: hello", data()) == [4]
    assert compiled.candidates("hi", data()) == [5]
    assert compiled.candidates("대출 문의", data(amount=6000)) == [1, 6]
    # a value the comparison cannot take: the rules are evaluated (and raise), never skipped
    assert compiled.candidates("hello there", data(amount="150")) == [0, 1]


ARITHMETIC = [
    'data_get("a", 0) + data_get("b", 0) > 200',
    'data_get("a", 0) - data_get("b", 0) >= 10',
    'data_get("a", 0) * 2 < 50',
    'data_get("a", 0) / data_get("b", 1) <= 0.5',
    '-data_get("a", 0) > -20',
    'data_get("premium", 0) * 12 > data_get("income", 1) * 3',
    '100 < data_get("a", 0) + len(query) <= 150',
    'context.get("n", 0) * 2 >= data_get("a", 0)',
]


TERMS = [
    'data_get("a", 0) + data_get("b", 0) > {k}',
    'data_get("a", 0) - data_get("b", 0) <= {k}',
    'data_get("a", 0) * {k} >= data_get("b", 1)',
    'data_get("a", 0) / data_get("b", 1) < {k}',
    '-data_get("a", 0) > -{k}',
    '{k} < data_get("a", 0) + len(query) <= {k} + 50',
    'data_get("a", 0) * 2 > context.get("n", 0) and "x" in query',
    'data_get("a", 0) // {k} > data_get("b", 0) % 7 + 1',  # // and % are not terms
]
numbers = st.one_of(
    st.integers(-5, 300),
    st.sampled_from(
        [0, 0.5, -0.0, 2**62, -(2**63), 10**20, 1e308, float("nan"), float("inf"), True, "7", None]
    ),
)


@settings(max_examples=200, deadline=None)
@given(
    picks=st.lists(st.tuples(st.sampled_from(TERMS), st.integers(0, 200)), max_size=8),
    a=numbers,
    b=numbers,
    n=numbers,
    query=st.sampled_from(["", "x", "xx" * 30]),
)
def test_arithmetic_terms_narrow_exactly(
    picks: list[tuple[str, int]], a: Any, b: Any, n: Any, query: str
) -> None:
    rules = [rule(f"r{i}", when.format(k=k)) for i, (when, k) in enumerate(picks + picks[:3])]
    part = {k: v for k, v in (("a", a), ("b", b)) if v is not None}
    request = AgentRequest(query=query, context={"n": n}, a2a_data=[part])
    indexed = run_prestep(compile_rules(rules), request, backend=StaticToolBackend(SERVERS), dry_run=True)
    naive = run_prestep(rules, request, backend=StaticToolBackend(SERVERS), dry_run=True, use_index=False)
    assert comparable(indexed) == comparable(naive)


@pytest.mark.parametrize(
    "part",
    [
        {"a": 150, "b": 60},
        {"a": 10, "b": 0},  # a / 0 raises: that rule is evaluated
        {"a": 21, "b": 1, "premium": 300_000, "income": 1_000_000},
        {"a": 25, "b": 15},
        {"a": 2**62, "b": 2**62},  # a + b is past 64 bits: the helpers raise
        {"a": "x"},  # not a number: the rules raise
        {"a": True, "b": 2.5},
        {"a": float("nan")},
        {"a": 1e308, "b": 1e-308},
        {},
    ],
)
def test_arithmetic_terms_are_computed_once_and_narrow_exactly(part: dict[str, Any]) -> None:
    rules = [rule(f"r{i}", when) for i, when in enumerate(ARITHMETIC * 2)]  # each term shared by two rules
    compiled = compile_rules(rules)
    assert compiled._index is not None and compiled._index.always == ()
    alone = compile_rules(rules[:1] + [rule("other", 'data_get("a", 0) * 3 > 1')])
    assert alone._index is not None and alone._index.always == (0, 1)  # a term one rule reads: evaluated
    request = AgentRequest(query="q" * 40, context={"n": 12}, a2a_data=[part])
    indexed = run_prestep(compiled, request, backend=StaticToolBackend(SERVERS), dry_run=True)
    naive = run_prestep(rules, request, backend=StaticToolBackend(SERVERS), dry_run=True, use_index=False)
    assert comparable(indexed) == comparable(naive)
    candidates = set(compiled.candidates(request.query, lambda: (request.context, request.a2a_data)))
    # a rule that fires or fails is a candidate; one that is false without raising never is
    # (beyond what a non-number makes every rule of its term)
    for record in naive.records:
        index = int(record.rule[1:])
        if record.status.value != "skipped":
            assert index in candidates
        elif all(type(v) in (int, float) and v == v for v in part.values()) and part.get("b", 1) != 0:
            assert index not in candidates, record.rule


def test_an_and_is_indexed_on_its_rarest_literal_across_the_rule_set() -> None:
    common = [rule(f"order{i}", f'"주문" in query and "상품{i}" in query') for i in range(20)]
    compiled = compile_rules(common)
    # "주문" is in all 20 rules, "상품7" in one: a query with "주문" alone has no candidate.
    assert compiled.candidates("주문 조회", lambda: ({}, None)) == []
    assert compiled.candidates("주문 상품7", lambda: ({}, None)) == [7]


def test_a_regex_rule_that_could_exceed_the_cost_budget_stays_a_candidate() -> None:
    """Skipping it would hide the CostBudgetExceeded that evaluating it raises."""
    rules = [rule("costly", 're_search(r"(a|b|c|d|e)+z{5}", query)')]
    query = "q" * 20_000
    naive = run_prestep(
        rules,
        AgentRequest(query=query),
        backend=StaticToolBackend(SERVERS),
        expr_budget=2_000,
        use_index=False,
    )
    indexed = run_prestep(
        rules, AgentRequest(query=query), backend=StaticToolBackend(SERVERS), expr_budget=2_000
    )
    assert naive.error is not None and "cost budget" in naive.error
    assert indexed.error == naive.error
    assert compile_rules(rules).candidates("short", lambda: ({}, None), 2_000) == []


def test_the_request_data_is_copied_once_for_all_servers() -> None:
    from llamon_agent.expr import namespace

    calls = []
    real = namespace.plain_request

    def counting(ctx: Any) -> Any:
        calls.append(1)
        return real(ctx)

    rules = [rule(f"r{m}", 'context.get("x") == 1', mcp_id=m) for m in ("a", "b", "c")]
    request = AgentRequest(query="q", context={"x": 1})
    namespace.plain_request = counting
    try:
        outcome = run_prestep(rules, request, backend=StaticToolBackend(SERVERS), dry_run=True)
    finally:
        namespace.plain_request = real
    assert [r.rule for r in outcome.fired] == ["ra", "rb", "rc"]
    assert len(calls) == 1


def test_rules_with_the_same_expression_text_share_one_compiled_expression() -> None:
    """50,000 rules with the same params compile it once (time and memory per rule)."""
    first, second = rule("one", '"a" in query'), rule("two", '"a" in query')
    assert first.compiled_params is second.compiled_params
    assert first.compiled_when is second.compiled_when


def test_a_requirement_after_a_regex_skips_the_rule_only_when_the_regex_cannot_raise() -> None:
    """`re_search(p, query) and data_get("orderId") == v`: indexed on the rarer equality, the rule
    is still evaluated (and fails, as unindexed) where its regex raises: a query that cannot be
    UTF-8, or one long enough for the regex to be over the budget."""
    rules = [
        rule(f"order_{v}", f're_search(r"A-\\d+", query) and data_get("orderId") == "{v}"') for v in "xyz"
    ]
    rules.append(rule("grouped", 're_find(r"(A)-\\d+", query, 1) and data_get("orderId") == "x"'))
    compiled = compile_rules(rules)

    def data(order: str) -> Any:
        return lambda: ({}, [{"orderId": order}])

    assert compiled.candidates("A-1", data("y")) == [1, 3]  # the group may not exist: its regex
    assert compiled.candidates("hello", data("y")) == [1]
    assert compiled.candidates("hello", data("none")) == []
    alone = compile_rules(rules[:3])  # none indexed on a regex: no RE2 set to try the query with
    assert alone.candidates("A-1 \ud800", data("none")) == [0, 1, 2]
    assert alone.candidates("A-1 안녕", data("none")) == []
    # a pattern made at run time beside it: no cost bound for the rule, so it is always evaluated
    made = 're_search(r"A-\\d+", query) and data_get("orderId") == "x" and re_search(context.get("p", "B"), query)'
    unpriced = compile_rules([*rules[:3], rule("unpriced", made)])
    assert unpriced.candidates("hello", data("none")) == [3]
    for query, budget in (("A-1 \ud800", None), ("A-1 " * 3_000, 100)):
        assert compiled.candidates(query, data("none"), budget) == [0, 1, 2, 3]
        request = AgentRequest(query=query, a2a_data=[{"orderId": "none"}])
        backend = StaticToolBackend(SERVERS, call=call)
        indexed = run_prestep(compiled, request, backend=backend, dry_run=True, expr_budget=budget)
        naive = run_prestep(
            rules, request, backend=backend, dry_run=True, expr_budget=budget, use_index=False
        )
        assert comparable(indexed) == comparable(naive)
        assert [r.status.value for r in indexed.records] == ["error"] * 4
