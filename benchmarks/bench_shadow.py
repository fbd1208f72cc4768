"""What shadow mode adds to a run, and what choosing a rollout's version costs, on a 200-rule set.

Side by side in one run: the live pre-step's dry evaluation of v1 (the baseline), the shadow's
whole work per run (dry evaluation of v2, comparison, the tally update and, when it diverged, an
example kept), and the rollout's bucket of one session. Run:
.venv/bin/python benchmarks/bench_shadow.py [--rules 200] [--n 300]
"""

from __future__ import annotations

import argparse
import statistics
import time

# The tester's benchmark sets up Django (a throwaway SQLite file, dev settings, no Redis) when
# imported; this one uses its rule keywords, queries and percentile too.
from bench_tester import KEYWORDS, QUERIES, percentile
from django.core.management import call_command
from django.utils import timezone


def setup(n_rules: int):
    from accounts.services import admin_ensure
    from agents.models import Agent
    from rules import services
    from servers.models import McpServer

    call_command("migrate", verbosity=0)
    user, _ = admin_ensure(password="bench-password-123")
    McpServer.objects.update_or_create(
        mcp_id="order-service",
        defaults={
            "transport": "http",
            "url": "http://127.0.0.1:9/mcp",
            "tools_refreshed_at": timezone.now(),
            "tools": [{"name": "get_order", "description": "", "input_schema": {"type": "object"}}],
        },
    )
    rule_set = services.rule_set_create(actor=user, name=f"bench-{time.time_ns()}")
    for i in range(n_rules):
        a, b = KEYWORDS[i % len(KEYWORDS)], KEYWORDS[(i * 7 + 3) % len(KEYWORDS)]
        services.rule_create(
            actor=user,
            rule_set=rule_set,
            name=f"r{i}",
            mcp_id="order-service",
            tool_name="get_order",
            when=f'"{a}" in query and "{b}" in query',
            params='{"query": query}',
        )
    v1 = services.rule_set_publish(actor=user, rule_set=rule_set)
    services.rule_create(
        actor=user,
        rule_set=rule_set,
        name="extra",
        mcp_id="order-service",
        tool_name="get_order",
        when='"주문" in query',
        params='{"query": "extra"}',
    )
    rule_set.refresh_from_db()
    v2 = services.rule_set_publish(actor=user, rule_set=rule_set)
    agent = Agent.objects.create(
        name=f"bench-{time.time_ns()}",
        system_prompt="p",
        rule_set=rule_set,
        rule_set_mode="pinned",
        pinned_version=v1,
        shadow_version=v2,
    )
    return agent, v1, v2


def timed(fn, n: int) -> list[float]:
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rules", type=int, default=200)
    parser.add_argument("--n", type=int, default=300)
    args = parser.parse_args()

    from agents import rollout_runtime as rollout
    from llamon_agent.tools import AgentRequest
    from rules import engine

    agent, v1, _v2 = setup(args.rules)
    requests = [AgentRequest(query=q) for q in QUERIES]
    live = {i: engine.evaluate(list(v1.content), r, dry_run=True).outcome for i, r in enumerate(requests)}

    def baseline(i: int) -> None:
        engine.evaluate(list(v1.content), requests[i % len(requests)], dry_run=True)

    def shadow(i: int) -> None:
        k = i % len(requests)
        rollout.shadow_after_run(agent=agent, run_id=None, request=requests[k], prestep=live[k])

    def bucket(i: int) -> None:
        rollout.serves_candidate(agent, session_id=f"session-{i}", chatbot_id="")

    agent.rollout_version, agent.rollout_percent = _v2, 30
    for fn in (baseline, shadow):  # warm the compile cache, as a worker's earlier runs would
        fn(0)
    rows = [
        ("live pre-step, dry evaluation of v1", timed(baseline, args.n)),
        ("shadow per run (evaluate v2, compare, record)", timed(shadow, args.n)),
        ("rollout bucket of one session", timed(bucket, args.n * 10)),
    ]
    print(f"{args.rules} rules, {args.n} runs, {len(QUERIES)} queries in turn (ms)")
    for name, values in rows:
        print(f"  {name:48} p50 {statistics.median(values):8.3f}  p95 {percentile(values, 0.95):8.3f}")


if __name__ == "__main__":
    main()
