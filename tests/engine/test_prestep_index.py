"""The keyword index is an optimisation only: the same outcome with and without it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llamon_agent import expr
from llamon_agent.prestep import PrestepOutcome, RuleStatus, StaticToolBackend, compile_rules, run_prestep
from llamon_agent.tools import AgentRequest, DeterministicContext, RuleInfo, deterministic_tool

SERVERS = {"a": ["t", "u"], "b": ["t"]}


@dataclass
class KeywordRule:
    """A stand-in for an expression rule whose ``when`` requires one of its keywords.

    It can only fire when one ``(literal, lowered)`` pair occurs in the query (raw, or in
    ``query.lower()``), exactly what its ``RuleInfo.keywords`` promises the index; ``also``
    is an extra literal that must be present too (an ``and`` the index does not know).
    """

    name: str
    mcp_id: str
    keywords: frozenset[tuple[str, bool]]
    stop: bool = False
    also: str | None = None
    outcome: str = "call"  # "call" | "raise" | "unknown_tool" | "bad_return"

    def __post_init__(self) -> None:
        self.__llamon_rule__ = RuleInfo(
            name=self.name, mcp_id=self.mcp_id, stop=self.stop, keywords=self.keywords or None
        )

    def __call__(self, ctx: DeterministicContext) -> dict[str, Any] | None:
        query, lowered = ctx.query, ctx.query.lower()
        if not any(literal in (lowered if low else query) for literal, low in self.keywords):
            return None
        if self.also is not None and self.also not in query:
            return None
        if self.outcome == "raise":
            raise ValueError(f"{self.name} failed")
        if self.outcome == "bad_return":
            return {"tool": "t"}  # type: ignore[return-value]
        tool = "missing" if self.outcome == "unknown_tool" else "t"
        return {"tool_name": tool, "params": {"rule": self.name, "q": query}}


def plain_rule(name: str, mcp_id: str, *, stop: bool, modulus: int):
    """An ordinary @deterministic_tool (no keyword hint): always evaluated."""

    def rule(ctx: DeterministicContext) -> dict[str, Any] | None:
        if len(ctx.query) % modulus:
            return None
        return {"tool_name": "t", "params": {"rule": name}}

    rule.__name__ = name
    return deterministic_tool(mcp_id=mcp_id, stop=stop)(rule)


def kw(*pairs: tuple[str, bool]) -> frozenset[tuple[str, bool]]:
    return frozenset(pairs)


# --------------------------------------------------------------------------- candidates() by hand


def test_candidates_keep_registration_order_and_rules_without_keywords() -> None:
    rules = [
        KeywordRule("order", "a", kw(("주문", False))),
        plain_rule("always", "a", stop=False, modulus=1),
        KeywordRule("search", "b", kw(("검색", False), ("search", True))),
        KeywordRule("refund", "a", kw(("환불", False))),
    ]
    compiled = compile_rules(rules)

    assert compiled.candidates("날씨 어때") == [1]
    assert compiled.candidates("주문 검색") == [0, 1, 2]
    assert compiled.candidates("환불 그리고 주문") == [0, 1, 3]
    assert compiled.candidates("SEARCH docs") == [1, 2]  # lowered literal found in query.lower()
    assert compiled.candidates("") == [1]


def test_raw_literals_are_matched_case_sensitively_and_lowered_ones_on_the_lowered_query() -> None:
    rules = [KeywordRule("raw", "a", kw(("VIP", False))), KeywordRule("low", "a", kw(("vip", True)))]
    compiled = compile_rules(rules)

    assert compiled.candidates("VIP 고객") == [0, 1]
    assert compiled.candidates("vip 고객") == [1]
    assert compiled.candidates("Vip 고객") == [1]


def test_overlapping_literals_all_count() -> None:
    rules = [
        KeywordRule("long", "a", kw(("주문조회", False))),
        KeywordRule("short", "a", kw(("주문", False))),
        KeywordRule("tail", "a", kw(("조회", False))),
    ]
    compiled = compile_rules(rules)

    assert compiled.candidates("주문조회") == [0, 1, 2]
    assert compiled.candidates("조회") == [2]


def test_an_empty_literal_or_empty_hint_means_always_evaluate() -> None:
    rules = [KeywordRule("empty_literal", "a", kw(("", False))), KeywordRule("empty_hint", "a", frozenset())]
    compiled = compile_rules(rules)

    assert compiled.candidates("anything") == [0, 1]


def test_without_the_index_every_rule_is_a_candidate() -> None:
    rules = [KeywordRule("order", "a", kw(("주문", False))), KeywordRule("refund", "a", kw(("환불", False)))]

    assert compile_rules(rules, use_index=False).candidates("날씨") == [0, 1]


def test_the_index_really_prunes_evaluation() -> None:
    evaluated: list[str] = []

    class Counting(KeywordRule):
        def __call__(self, ctx: DeterministicContext) -> dict[str, Any] | None:
            evaluated.append(self.name)
            return super().__call__(ctx)

    rules = [Counting(f"r{i}", "a", kw((f"키워드{i:03d}", False))) for i in range(200)]
    compiled = compile_rules(rules)

    outcome = run_prestep(
        compiled, AgentRequest(query="키워드042 주세요"), backend=StaticToolBackend(SERVERS), dry_run=True
    )

    assert evaluated == ["r42"]
    assert [r.rule for r in outcome.fired] == ["r42"]
    assert sum(r.status is RuleStatus.SKIPPED for r in outcome.records) == 199


# --------------------------------------------------------------------------- property: same outcome

TOKENS = [
    "주문",
    "조회",
    "주문조회",
    "검색",
    "환불",
    "VIP",
    "vip",
    "Vip",
    "ab",
    "AB",
    "b",
    "가",
    "İ",
    "ß",
    "SS",
    " ",
]

literal = st.one_of(st.sampled_from(TOKENS), st.text(alphabet="abAB가나 ", min_size=1, max_size=3))
keywords = st.frozensets(st.tuples(literal, st.booleans()), min_size=0, max_size=3)


@st.composite
def rule_sets(draw: st.DrawFn) -> list[Any]:
    count = draw(st.integers(min_value=0, max_value=12))
    rules: list[Any] = []
    for i in range(count):
        mcp_id = draw(st.sampled_from(["a", "b"]))
        stop = draw(st.booleans())
        if draw(st.integers(0, 4)) == 0:
            rules.append(plain_rule(f"plain{i}", mcp_id, stop=stop, modulus=draw(st.integers(1, 4))))
            continue
        rules.append(
            KeywordRule(
                name=f"kw{i}",
                mcp_id=mcp_id,
                keywords=draw(keywords),
                stop=stop,
                also=draw(st.one_of(st.none(), st.sampled_from(TOKENS))),
                outcome=draw(
                    st.sampled_from(["call", "call", "call", "raise", "unknown_tool", "bad_return"])
                ),
            )
        )
    return rules


queries = st.one_of(
    st.lists(st.sampled_from(TOKENS), max_size=6).map("".join),
    st.text(alphabet="abAB가나주문조회검색İß ", max_size=12),
)


def comparable(outcome: PrestepOutcome) -> tuple[Any, ...]:
    """Everything in an outcome except timings."""
    records = [
        (r.rule, r.mcp_id, r.status, r.tool_name, r.params, r.result, r.error, r.tool_exists)
        for r in outcome.records
    ]
    results = [{k: v for k, v in r.items() if k != "duration_ms"} for r in outcome.results]
    return (outcome.ok, outcome.error, outcome.calls, records, results)


def call(mcp_id: str, tool_name: str, params: dict[str, Any]) -> Any:
    if params.get("q", "").endswith("ß"):  # some calls fail, to cover that path too
        raise ConnectionError("dropped")
    return {"from": mcp_id, "tool": tool_name, "rule": params.get("rule")}


def both_ways(rules: Sequence[Any], query: str, *, dry_run: bool) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    request = AgentRequest(query=query)
    indexed = run_prestep(rules, request, backend=StaticToolBackend(SERVERS, call=call), dry_run=dry_run)
    full = run_prestep(
        rules, request, backend=StaticToolBackend(SERVERS, call=call), dry_run=dry_run, use_index=False
    )
    return comparable(indexed), comparable(full)


PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(rules=rule_sets(), query=queries)
def test_dry_run_is_identical_with_and_without_the_index(rules: list[Any], query: str) -> None:
    indexed, full = both_ways(rules, query, dry_run=True)
    assert indexed == full


@PROPERTY
@given(rules=rule_sets(), query=queries)
def test_live_run_is_identical_with_and_without_the_index(rules: list[Any], query: str) -> None:
    indexed, full = both_ways(rules, query, dry_run=False)
    assert indexed == full


def test_the_candidates_are_a_superset_of_the_rules_that_fire() -> None:
    """The stand-in is valid only if it never fires without one of its keywords."""
    rule = KeywordRule("r", "a", kw(("주문", False), ("vip", True)))
    ctx = DeterministicContext(query="VIP 상담")
    assert rule(ctx) is not None
    assert rule(DeterministicContext(query="상담")) is None
    assert compile_rules([rule]).candidates("상담") == []


# --------------------------------------------------------------------------- real expression rules


EXPR_WHENS = [
    '"주문" in query and "조회" in query',
    '"vip" in query.lower()',
    '"VIP" in query.lower()',
    '"검색" in ctx.query or "search" in query.lower()',
    'contains_any(query, ["환불", "ab"])',
    'contains_all(query.lower(), ["ab", "가"])',
    'ctx.context.get("chatbotId") == "premium-support"',
    '"환불" in query and ctx.context.get("chatbotId") == "premium-support"',
    '"환불" in query',
    "True",
]


@st.composite
def expression_rule_sets(draw: st.DrawFn) -> list[Any]:
    """Expression rules mixed with plain functions (which never build a namespace)."""
    rules: list[Any] = []
    for i in range(draw(st.integers(0, 8))):
        if draw(st.integers(0, 4)) == 0:
            rules.append(plain_rule(f"plain{i}", draw(st.sampled_from(["a", "b"])), stop=False, modulus=2))
            continue
        rules.append(
            expr.expression_rule(
                name=f"e{i}",
                mcp_id=draw(st.sampled_from(["a", "b"])),
                tool_name=draw(st.sampled_from(["t", "u", "missing"])),
                when=draw(st.sampled_from(EXPR_WHENS)),
                params='{"q": query[:20]}',
                stop=draw(st.booleans()),
            )
        )
    return rules


@PROPERTY
@given(data=st.data(), query=queries, premium=st.booleans(), oversized=st.integers(0, 5))
def test_expression_rules_are_identical_with_and_without_the_index(
    data: st.DataObject, query: str, premium: bool, oversized: int
) -> None:
    rules = data.draw(expression_rule_sets())
    if oversized == 0:
        # Over the expression caps: building the namespace raises ExprError, indexed or not.
        query = query + "." * (expr.MAX_QUERY_CHARS + 1)
    request = AgentRequest(query=query, context={"chatbotId": "premium-support"} if premium else {})
    for dry_run in (True, False):
        indexed = run_prestep(rules, request, backend=StaticToolBackend(SERVERS, call=call), dry_run=dry_run)
        full = run_prestep(
            rules, request, backend=StaticToolBackend(SERVERS, call=call), dry_run=dry_run, use_index=False
        )
        assert comparable(indexed) == comparable(full)


def test_an_oversized_request_fails_at_the_first_expression_rule_even_when_no_rule_is_a_candidate() -> None:
    rules = [
        plain_rule("plain", "a", stop=False, modulus=7),
        expr.expression_rule(name="order", mcp_id="b", tool_name="t", when='"주문" in query', params="{}"),
    ]
    request = AgentRequest(query="날씨" * expr.MAX_QUERY_CHARS)

    for use_index in (True, False):
        outcome = run_prestep(rules, request, backend=StaticToolBackend(SERVERS), use_index=use_index)
        assert outcome.error == (
            f"확정 호출된 MCP 단계에서 오류가 발생했습니다: order: "
            f"the query is longer than {expr.MAX_QUERY_CHARS:,} characters"
        )


def test_an_and_whose_first_operand_raises_is_not_hidden_by_the_index() -> None:
    rule = expr.expression_rule(
        name="strict_lookup",
        mcp_id="a",
        tool_name="t",
        when='ctx.context["chatbotId"] == "x" and "주문" in query',
        params="{}",
    )
    request = AgentRequest(query="날씨")  # no "주문", no chatbotId: unindexed, the [] raises

    indexed = run_prestep([rule], request, backend=StaticToolBackend(SERVERS), dry_run=True)
    full = run_prestep([rule], request, backend=StaticToolBackend(SERVERS), dry_run=True, use_index=False)

    assert comparable(indexed) == comparable(full)


def test_literals_shared_by_raw_and_lowered_rules_keep_each_side_apart() -> None:
    # The index keeps each literal's rules in one flat array: raw ones, then lowered ones.
    rules = [
        KeywordRule("raw_a", "a", kw(("a", False))),
        KeywordRule("low_b", "a", kw(("b", True))),
        KeywordRule("raw_b", "a", kw(("b", False))),
        KeywordRule("low_a", "a", kw(("a", True))),
        KeywordRule("raw_a2", "a", kw(("a", False))),
        KeywordRule("raw_c", "a", kw(("c", False))),
    ]
    compiled = compile_rules(rules)

    assert compiled.candidates("a b") == [0, 1, 2, 3, 4]
    assert compiled.candidates("A B") == [1, 3]
    assert compiled.candidates("a B") == [0, 1, 3, 4]
    assert compiled.candidates("C") == []
    assert compiled.candidates("c") == [5]


def test_a_rule_whose_evaluate_ns_is_its_own_attribute_is_evaluated_through_it() -> None:
    # The rule set calls a class's evaluate_ns as a function of (rule, namespace); a callable
    # set on the instance is not a method and must still be the one called.
    class Rule:
        __llamon_rule__ = RuleInfo(name="own", mcp_id="a")

        def __init__(self) -> None:
            self.evaluate_ns = lambda namespace: {"tool_name": "t", "params": {"q": namespace["query"]}}

        def __call__(self, ctx: DeterministicContext) -> dict[str, Any] | None:
            raise AssertionError("the namespace path must be taken")

    outcome = run_prestep(
        [Rule()], AgentRequest(query="hi"), backend=StaticToolBackend(SERVERS), dry_run=True
    )

    assert outcome.ok, outcome.error
    assert [(rec.rule, rec.params) for rec in outcome.fired] == [("own", {"q": "hi"})]
