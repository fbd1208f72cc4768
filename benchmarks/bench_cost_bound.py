"""The static cost bound against what rules really cost, at the request caps.

1. Every ordinary rule of the repository (the bank's and the seed's tools.py read back as rules,
   benchmarks/routing_sets.py, benchmarks/bench_prestep_mixed.py): its bound in units, the
   largest ones printed, against the per-rule limit (LLAMON_EXPR_COST_BUDGET).
2. The costliest of them evaluated on requests at the caps built to make them work hardest
   (a 32,000-character query of one-letter words; 100 DataParts or FileParts holding 256 KiB
   of small nested items): wall time of one evaluation, and what the meter charged.
3. The attack expressions of tests/engine/test_expr_budget.py without their static check, under
   the run-time meter: time until the meter stops them (or they finish), units charged, peak
   memory.

    .venv/bin/python benchmarks/bench_cost_bound.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from llamon_agent.expr import (  # noqa: E402
    CostBudgetExceeded,
    CostMeter,
    ExprError,
    build_namespace,
    compile_when,
    expression_rule,
)
from llamon_agent.expr.budget import rule_limit  # noqa: E402
from llamon_agent.expr.limits import MAX_DATA_BYTES, MAX_FILES_BYTES, MAX_PARTS, MAX_QUERY_CHARS  # noqa: E402
from llamon_agent.settings import cost_budgets  # noqa: E402
from llamon_agent.tools import DeterministicContext  # noqa: E402
from llamon_agent.tools_import import translate_tools_module  # noqa: E402


def ordinary_rules() -> list[tuple[str, str, str, str]]:
    """(origin, name, when, params) of every ordinary rule the repository holds or generates."""
    import bench_prestep_mixed
    import routing_sets

    out = []
    for path in ("tests/support/bank_tools.py", "examples/seed_project/app/tools.py"):
        module = translate_tools_module((ROOT / path).read_text(encoding="utf-8"), filename=path)
        out += [(path, r.name, r.when, r.params) for r in module.rules]
    for share in (0.0, 0.3, 1.0):
        drawn = routing_sets.draw_rules(3_000, share, seed=1, unindexable=0.2)
        out += [("routing_sets", d.name, d.when, d.params) for d in drawn.rules]
    whens = bench_prestep_mixed.make_whens(2_000, 0.5, random.Random(1))
    out += [("bench_prestep_mixed", f"m{i}", w, "{}") for i, w in enumerate(whens)]
    out += [("long queries", "words", "len(query.split()) > 100", '{"q": query[:50]}')]
    return out


def _nested(total: int, parts: int, key: str) -> list[dict[str, object]]:
    """``parts`` parts sharing about ``total`` bytes of JSON as small nested items under ``key``."""
    each = total // parts
    return [{key: [[i % 10] for i in range(each // 9)], "tier": "gold", "usd": 1} for _ in range(parts)]


def hostile_requests() -> dict[str, DeterministicContext]:
    words = ("a " * MAX_QUERY_CHARS)[:MAX_QUERY_CHARS]
    room = MAX_DATA_BYTES - 4_096
    return {
        "query": DeterministicContext(query=words, context={"sessionId": "resume-1"}),
        "data": DeterministicContext(
            query="신분증 " * 10, a2a_data=_nested(room, MAX_PARTS, "transfer_amount")
        ),
        "files": DeterministicContext(
            query="신분증 " * 10, a2a_files=_nested(MAX_FILES_BYTES - 512, MAX_PARTS, "mimeType")
        ),
    }


def timed(rule: object, ctx: DeterministicContext, repeat: int) -> tuple[float, int, str]:
    """Best wall time of one evaluation (ms), the units charged, and how it ended."""
    best, spent, end = float("inf"), 0, "ok"
    for _ in range(repeat):
        meter = CostMeter(10**12)  # unlimited here: what it really costs and charges
        namespace = build_namespace(ctx, meter=meter)
        started = time.perf_counter()
        try:
            rule.evaluate_ns(namespace)  # type: ignore[attr-defined]
        except ExprError as exc:
            end = type(exc).__name__
        best = min(best, time.perf_counter() - started)
        spent = 10**12 - meter.left
    return best * 1000, spent, end


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--top", type=int, default=8)
    args = parser.parse_args()
    budget = cost_budgets().expr_cost_budget
    limit = rule_limit(budget)
    rules = []
    for origin, name, when, params in ordinary_rules():
        rule = expression_rule(name=name, mcp_id="m", tool_name="t", when=when, params=params)
        rules.append((rule.bound or 0, origin, rule))
    rules.sort(key=lambda item: -item[0])
    print(f"per-rule static limit {limit:,} units (meter {budget:,}); {len(rules):,} ordinary rules")
    print(f"largest bound {rules[0][0]:,} units ({rules[0][0] / limit:.0%} of the limit)")
    requests = hostile_requests()
    worst = 0.0
    print(f"\n{'rule':34} {'bound':>11} {'ms (worst request)':>19} {'charged':>11}")
    seen = set()
    for bound, origin, rule in rules:
        if rule.name in seen or len(seen) >= args.top:
            continue
        seen.add(rule.name)
        runs = [timed(rule, ctx, args.repeat) for ctx in requests.values()]
        ms, spent, _ = max(runs)
        worst = max(worst, ms)
        print(f"{origin.split('/')[-1][:14] + ':' + rule.name:34} {bound:>11,} {ms:>19.1f} {spent:>11,}")
    print(f"worst ordinary rule at the caps: {worst:.1f} ms")

    from tests.engine.test_expr_budget import ATTACKS, BIG_CTX

    print(f"\nattacks under a {budget:,}-unit meter (no static check): ms until stopped, units, peak MB")
    for name, source in ATTACKS.items():
        compiled = compile_when(source)
        for traced in (False, True):  # timed without tracemalloc (it slows allocation ~10x)
            meter = CostMeter(budget)
            namespace = build_namespace(BIG_CTX, meter=meter)
            if traced:
                tracemalloc.start()
            started = time.perf_counter()
            try:
                compiled.evaluate(namespace)
                end = "finished"
            except CostBudgetExceeded:
                end = "stopped"
            except ExprError as exc:
                end = f"error: {exc.msg_id}"
            if not traced:
                ms, units = (time.perf_counter() - started) * 1000, budget - meter.left
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        ns = ms * 1e6 / max(units, 1)
        print(f"  {name:38} {ms:8.1f} ms {units:>11,} units {ns:7.0f} ns/unit {peak:6.1f} MB  {end}")


if __name__ == "__main__":
    main()
