"""Every ordinary rule the repository holds or generates is well within the per-rule static limit
at the request caps, and a long query within the caps cannot make one fail on cost.

The corpus: the bank's and the seed's tools.py read back as rules, benchmarks/routing_sets.py and
benchmarks/bench_prestep_mixed.py. What they really take at the caps, and what the attacks of
test_expr_budget.py take under the meter, is measured by benchmarks/bench_cost_bound.py
(docs/performance.md, "Cost bound")."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from llamon_agent.expr import DEFAULT_EXPR_BUDGET, DEFAULT_RULE_LIMIT, expression_rule
from llamon_agent.expr.limits import MAX_DATA_BYTES, MAX_PARTS, MAX_QUERY_CHARS
from llamon_agent.prestep import RuleStatus, StaticToolBackend, run_prestep
from llamon_agent.tools import AgentRequest
from llamon_agent.tools_import import translate_tools_module

ROOT = Path(__file__).resolve().parents[2]


def _module(name: str) -> ModuleType:
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.append(str(ROOT / "benchmarks"))  # bench_prestep_mixed imports its peers
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


def _corpus() -> list[tuple[str, str, str]]:
    rules = []
    for path in ("tests/support/bank_tools.py", "examples/seed_project/app/tools.py"):
        module = translate_tools_module((ROOT / path).read_text(encoding="utf-8"), filename=path)
        assert module.rules
        rules += [(f"{path}:{r.name}", r.when, r.params) for r in module.rules]
    drawn = _module("routing_sets").draw_rules(1_500, 0.3, seed=3, unindexable=0.2)
    rules += [(d.name, d.when, d.params) for d in drawn.rules]
    whens = _module("bench_prestep_mixed").make_whens(500, 0.5, random.Random(3))
    rules += [(f"mixed_{i}", w, "{}") for i, w in enumerate(whens)]
    return rules


def test_every_ordinary_rule_is_well_within_the_per_rule_limit() -> None:
    bounds = {}
    for name, when, params in _corpus():
        rule = expression_rule(name="r", mcp_id="m", tool_name="t", when=when, params=params)
        if rule.bound is not None:  # None: reads the tool listing (not capped), metered only
            bounds[name] = rule.bound
    assert len(bounds) > 2_000
    worst = max(bounds, key=bounds.__getitem__)
    # the costliest (the bank's tier_by_datapart, ~1,350,000 units) keeps a third of the limit free
    assert bounds[worst] <= DEFAULT_RULE_LIMIT * 0.7, (worst, bounds[worst])
    assert DEFAULT_RULE_LIMIT * 2 == DEFAULT_EXPR_BUDGET  # the meter keeps a 2x margin past it


def test_a_long_query_within_the_caps_cannot_fail_a_rule_on_cost() -> None:
    # 200 rules of `len(query.split()) > N` (the shape that used to spend the request-wide pool)
    # and the bank's costliest rules, on a 32,000-character query of one-letter words and
    # DataParts near their cap: nothing fails, and each rule's meter stays within its bound.
    bank = translate_tools_module((ROOT / "tests/support/bank_tools.py").read_text(encoding="utf-8"))
    heavy = [
        r for r in bank.rules if r.function in ("tier_by_datapart", "english_help", "large_transfer_review")
    ]
    assert len(heavy) == 3
    rules: list[Any] = [
        expression_rule(
            name=f"words_{n}", mcp_id="m", tool_name="t", when=f"len(query.split()) > {n * 80}", params="{}"
        )
        for n in range(200)
    ]
    rules += [
        expression_rule(name=r.name, mcp_id="m", tool_name="t", when=r.when, params=r.params) for r in heavy
    ]
    parts = [{"tier": "gold", "transfer_amount": 1, "items": list(range(500))} for _ in range(MAX_PARTS)]
    request = AgentRequest(query=("a " * MAX_QUERY_CHARS)[:MAX_QUERY_CHARS], a2a_data=parts)
    assert len(repr(parts)) < MAX_DATA_BYTES
    outcome = run_prestep(rules, request, backend=StaticToolBackend({"m": ["t"]}), dry_run=True)
    assert [rec for rec in outcome.records if rec.status is RuleStatus.ERROR] == []
    assert len(outcome.fired) == 200 + 1  # every word-count rule (16,000 words), and tier_by_datapart
