"""Long queries never fail on cost: 10,000 routing rules as authors write them
(benchmarks/routing_sets.py, 30 % without a query literal) plus 200 rules of
``len(query.split()) > N``, against queries of 10,000 and 32,000 characters (the cap) with
DataParts. Counts the requests in which any rule failed on cost (the request-wide pool made that
100 of 100 at 10,000 characters) and any other error, and the time a request takes.

    .venv/bin/python benchmarks/bench_long_queries.py [--requests 10]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import routing_sets  # noqa: E402

from llamon_agent.expr import expression_rule  # noqa: E402
from llamon_agent.prestep import RuleStatus, StaticToolBackend, compile_rules, run_prestep  # noqa: E402
from llamon_agent.tools import AgentRequest  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=10, help="requests per query length")
    args = parser.parse_args()
    drawn = routing_sets.draw_rules(10_000, 0.3, seed=42)
    rng = random.Random(7)
    for i in range(200):
        mcp_id = rng.choice(sorted(drawn.tools))
        when = f"len(query.split()) > {rng.randrange(0, 6_000)}"
        drawn.rules.append(
            routing_sets.Drawn(f"words_{i}", mcp_id, drawn.tools[mcp_id][0], when, '{"q": query[:50]}')
        )
    started = time.perf_counter()
    rules = compile_rules(
        [
            expression_rule(name=r.name, mcp_id=r.mcp_id, tool_name=r.tool_name, when=r.when, params=r.params)
            for r in drawn.rules
        ]
    )
    print(f"{len(drawn.rules):,} rules compiled in {time.perf_counter() - started:.1f} s")
    backend = StaticToolBackend(drawn.tools)
    for chars in (10_000, 32_000):
        on_cost = other = 0
        times = []
        for _ in range(args.requests):
            request = routing_sets.draw_request(rng, drawn, query_chars=chars)
            request["a2a_data"] = [*request["a2a_data"], {"blob": "가" * 60_000, "items": list(range(2_000))}]
            started = time.perf_counter()
            outcome = run_prestep(rules, AgentRequest(**request), backend=backend, dry_run=True)
            times.append(time.perf_counter() - started)
            errors = [rec for rec in outcome.records if rec.status is RuleStatus.ERROR]
            on_cost += any("cost budget" in (rec.error or "") for rec in errors)
            other += bool(errors) and not any("cost budget" in (rec.error or "") for rec in errors)
        print(
            f"{chars:>6,}-character query, {args.requests} requests: failed on cost in {on_cost}, "
            f"other errors in {other}; median {statistics.median(times) * 1000:.1f} ms a request"
        )


if __name__ == "__main__":
    main()
