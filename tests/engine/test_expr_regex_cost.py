"""Regex compiles are priced before RE2 builds anything, failures are remembered, and what a
request (or a page over many requests) compiles is bounded: counted in compiles, not timed."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from llamon_agent.expr import (
    MAX_REGEX_SIZE,
    REGEX_COMPILE_UNITS,
    ExprError,
    check_cost,
    check_rule_set_cost,
    compile_when,
    expression_rule,
    helpers,
    regex_compile_allowance,
    regex_size,
)
from llamon_agent.prestep import RuleStatus, StaticToolBackend, compile_rules, run_prestep
from llamon_agent.tools import AgentRequest, DeterministicContext

_tags = itertools.count()


@pytest.fixture
def built() -> Iterator[list[str]]:
    """The patterns RE2 builds in full (the cheap syntax check of a saved rule is not one)."""
    patterns: list[str] = []
    real = helpers.re2.compile

    def counting(pattern, options=None):  # type: ignore[no-untyped-def]
        if options is not helpers._CHECK_OPTIONS:
            patterns.append(pattern)
        return real(pattern, options)

    helpers.re2.compile = counting
    try:
        yield patterns
    finally:
        helpers.re2.compile = real


BUDGET = 1_000_000  # the meter these tests were measured with (the default is 4,000,000)


def _tag() -> str:
    return f"t{next(_tags)}x"  # patterns differ per test: the caches are per process


def _rules(whens: list[str]) -> list:
    return [
        expression_rule(name=f"r{i}", mcp_id="svc", tool_name="t", when=when, params="{}")
        for i, when in enumerate(whens)
    ]


BACKEND = StaticToolBackend({"svc": ["t"]})


@pytest.mark.parametrize(
    ("pattern", "low", "high"),
    [
        (r"\pL{1000}", 1_000_000, 1_400_000),  # RE2: "pattern too large" after ~50-70 ms
        (r"\pL{100}", 119_604, 140_000),  # RE2 builds 119,604 instructions
        (r".{1000}", 8_004, 9_000),
        (r"카드\s*(분실|도난)", 20, 60),
        (r"(?i)\b(refund|chargeback)\b", 20, 120),
    ],
)
def test_the_size_estimate_is_read_from_the_text_and_bounds_the_program(
    pattern: str, low: int, high: int
) -> None:
    assert low <= regex_size(pattern) <= high


def test_a_huge_pattern_built_at_run_time_is_refused_unbuilt_and_remembered(built: list[str]) -> None:
    tag = _tag()
    when = compile_when(f're_search("{tag}\\\\pL{{10" + "00}}", query)')  # saved: nothing to check
    ctx = DeterministicContext(query="가나다")
    for _ in range(3):
        with pytest.raises(ExprError):
            when(ctx)
    assert built == []


def test_an_invalid_pattern_is_built_once_then_remembered(built: list[str]) -> None:
    tag = _tag()
    when = compile_when(f're_search("{tag}(" + "a", query)')
    for _ in range(3):
        with pytest.raises(ExprError, match="invalid regular expression"):
            when(DeterministicContext(query="x"))
    assert len(built) == 1


def test_saving_rules_with_large_literal_patterns_builds_none(built: list[str]) -> None:
    tag = _tag()
    rules = _rules([f're_search(r"{tag}{i}\\d{{40}}", query)' for i in range(200)])
    compile_rules(rules)
    assert built == []  # checked without building; the index's RE2 set leaves them out
    # \pL{100} (~120,000 instructions) over a 32,000-character query costs ~240,000,000 units:
    # refused when saved, by its estimate, without building it
    with pytest.raises(ExprError, match="over the limit of"):
        check_cost(compile_when(f're_search(r"{tag}\\pL{{100}}", query)'))
    with pytest.raises(ExprError, match="pattern too large"):
        compile_when(f're_search(r"{tag}\\pL{{1000}}", query)')
    assert built == []


def test_failing_or_slow_regex_rules_cost_one_request_budget_of_compiling(built: list[str]) -> None:
    # 600 rules (the property is per rule: 2,000 took 17 s of the suite for the same answer).
    tag = _tag()
    failing = [f're_search("{tag}f{i}\\\\pL{{10" + "00}}", query)' for i in range(300)]
    slow = [f're_search("{tag}s{i}\\\\pL{{2" + "0}}", query)' for i in range(300)]
    rules = _rules([w for pair in zip(failing, slow, strict=True) for w in pair])
    # A meter of 1,000,000 units: each slow rule (~1,700,000 units on this query) runs out of it
    # before it searches, which keeps the test quick.
    outcome = run_prestep(
        rules, AgentRequest(query="가" * 1_000), backend=BACKEND, dry_run=True, expr_budget=BUDGET
    )
    # Every rule ends in an error (the failing ones, and the slow ones on their own meter); what
    # RE2 built in full fits what each evaluation may compile, priced before building. Patterns
    # made at run time have no static bound: each counts as a whole per-rule limit in the set's
    # total, so this set is refused when published (over the request limit).
    assert all(rec.status is RuleStatus.ERROR for rec in outcome.records)
    with pytest.raises(ExprError, match="over the limit of 1,000,000,000 units a request"):
        check_rule_set_cost(rules)
    bound = len(rules) * (BUDGET // REGEX_COMPILE_UNITS) + MAX_REGEX_SIZE
    assert sum(regex_size(p) for p in built) <= bound
    assert len(built) <= bound // regex_size(r"s999\pL{20}")
    assert built and not any("\\pL{1000}" in p for p in built)


def test_an_allowance_bounds_what_many_requests_compile_together(built: list[str]) -> None:
    tag = _tag()
    # 500 rules and 6 cases: the allowance runs out within the first case, as with 2,000 and 20.
    rules = compile_rules(_rules([f're_search("{tag}{i}\\\\pL{{2" + "0}}", query)' for i in range(500)]))
    allowance = 100_000
    with regex_compile_allowance(allowance):
        for case in range(6):  # the rule-health page dry-runs up to 500 cases
            run_prestep(
                rules, AgentRequest(query=f"case {case}"), backend=BACKEND, dry_run=True, expr_budget=BUDGET
            )
    assert sum(regex_size(p) for p in built) <= allowance
    run_prestep(rules, AgentRequest(query="after"), backend=BACKEND, dry_run=True, expr_budget=BUDGET)
    assert sum(regex_size(p) for p in built) > allowance  # outside the block, the request's own budget


def test_small_patterns_still_match_as_before() -> None:
    when = compile_when(
        're_search(r"카드\\s*(분실|도난)", query) and re_find("(?i)(refund|chargeback)", query) == "Refund"'
    )
    assert when(DeterministicContext(query="카드 분실 Refund please"))
    assert not when(DeterministicContext(query="카드 발급"))
