"""A legitimate request never fails on cost: 10,000 routing rules as authors write them
(benchmarks/routing_sets.py) and 250 rules of ``len(query.split()) > N`` (which used to spend the
request-wide pool on a long query), queries up to the 32,000-character cap, DataParts near their
cap. Each rule's static bound is within the per-rule limit and the set's within the request
limit, so nothing can fail on cost. Counted in errors and units, never timed."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest

from llamon_agent.expr import (
    DEFAULT_EXPR_BUDGET,
    DEFAULT_REQUEST_BUDGET,
    check_rule_set_cost,
    contains_any,
    expression_rule,
    re_search,
)
from llamon_agent.expr.limits import MAX_QUERY_CHARS
from llamon_agent.prestep import RuleStatus, StaticToolBackend, compile_rules, run_prestep
from llamon_agent.tools import AgentRequest


def _routing_sets() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "routing_sets.py"
    spec = importlib.util.spec_from_file_location("routing_sets", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("routing_sets", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def routing() -> tuple[ModuleType, object, object]:
    sets = _routing_sets()
    drawn = sets.draw_rules(10_000, 0.3, seed=26)
    rng = random.Random(42)
    for i in range(250):  # word counts spread over what the queries below hold
        mcp_id = rng.choice(sorted(drawn.tools))
        drawn.rules.append(
            sets.Drawn(
                name=f"words_{i}",
                mcp_id=mcp_id,
                tool_name=drawn.tools[mcp_id][0],
                when=f"len(query.split()) > {rng.randrange(0, 6_000)}",
                params='{"q": query[:50]}',
            )
        )
    rules = compile_rules(
        [
            expression_rule(name=r.name, mcp_id=r.mcp_id, tool_name=r.tool_name, when=r.when, params=r.params)
            for r in drawn.rules
        ]
    )
    return sets, drawn, rules


@pytest.mark.slow  # compiling the 10,000 rules: once, for every query length (one test process)
def test_long_queries_and_big_dataparts_do_not_fail_on_the_budget(routing) -> None:  # type: ignore[no-untyped-def]
    sets, drawn, rules = routing
    backend = StaticToolBackend(drawn.tools)
    fired_words = set()
    for chars in (1_000, 10_000, MAX_QUERY_CHARS):
        rng = random.Random(chars)
        for _ in range(2):
            request = sets.draw_request(rng, drawn, query_chars=chars)
            request["a2a_data"] = [*request["a2a_data"], {"blob": "가" * 60_000, "items": list(range(2_000))}]
            outcome = run_prestep(rules, AgentRequest(**request), backend=backend, dry_run=True)
            errors = [rec for rec in outcome.records if rec.status is RuleStatus.ERROR]
            assert errors == [], (chars, errors[:3])
            assert [(rec.rule, rec.params) for rec in outcome.fired] == _plain_python(drawn, request), chars
            fired_words.update(rec.rule for rec in outcome.fired if rec.rule.startswith("words_"))
    assert len(fired_words) > 20  # the word-count rules ran, and some fired

    # Why nothing can fail: every rule is bounded within the per-rule limit, the set within the
    # request limit (a publish checks it), and the meter never charges a rule past its bound.
    assert all(rule.bound is not None and rule.bound <= DEFAULT_EXPR_BUDGET for rule in rules.rules)
    assert check_rule_set_cost(rules.rules) <= DEFAULT_REQUEST_BUDGET


def _plain_python(drawn, request) -> list:  # type: ignore[no-untyped-def]
    """The same rules as plain Python, every one evaluated: what the pre-step must fire."""
    parts = request["a2a_data"]

    def data_get(key, default=None):  # type: ignore[no-untyped-def]
        for part in parts:
            if key in part:
                return part[key]
        return default

    scope = {"contains_any": contains_any, "re_search": re_search, "len": len, "data_get": data_get}
    scope.update(query=request["query"], context=request["context"], a2a_files=request["a2a_files"])
    fired = []
    for rule in drawn.rules:
        scope["tool_names"] = frozenset(drawn.tools[rule.mcp_id])
        if eval(rule.when, scope):  # noqa: S307  # the generator's own text
            fired.append((rule.name, eval(rule.params, scope)))  # noqa: S307
    return fired
