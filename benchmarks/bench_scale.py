"""Stored data at scale: the run list and /api/runs at a million runs, a 5,000-step run's page,
retention in batches (all on PostgreSQL), and how long a 2,000-rule import holds SQLite's write lock.

Seeds rows directly with generate_series (minutes, not hours): RUNS runs over ~35 days, three
runs per timestamp (keyset ties), 5 agents, every status, 50,000 customers, a rule step on every
10th run, a tool step on every 100th, a rare rule on 100 runs, and one run of 5,000 steps. Then
prints p50/p95 of the run list page and /api/runs for every filter, EXPLAIN (ANALYZE) summaries of
the hot queries, and the long run's page old (every step) vs new (200 steps).

Run: .ci/with-postgres .venv/bin/python benchmarks/bench_scale.py [--runs 1000000] [--n 30] [--tool-filter-only]
     .venv/bin/python benchmarks/bench_scale.py --import-only   (SQLite: the import lock)
     .venv/bin/python benchmarks/bench_scale.py --long-run-only (either database: the 5,000-step run)
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LLAMON_VAR_DIR", tempfile.mkdtemp(prefix="llamon-bench-scale-"))
os.environ["LLAMON_ENV"] = "dev"
os.environ["DJANGO_SETTINGS_MODULE"] = "llamon_web.settings"
os.environ.pop("REDIS_URL", None)
if "--import-only" in sys.argv:
    os.environ.pop("DATABASE_URL", None)
os.environ.setdefault("LLAMON_MODEL_PRICES", '{"gpt-4o-mini": {"input": 0.15, "output": 0.6}}')

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test import Client  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def timed(fn, n: int) -> tuple[float, float]:
    fn()  # warm-up
    values = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        values.append((time.perf_counter() - t0) * 1000)
    return statistics.median(values), percentile(values, 0.95)


SEED_RUNS = """
INSERT INTO agents_run (agent_id, agent_name, source, status, query, context, user_id, session_id, chatbot_id,
  rule_set_name, rule_set_ref, rule_set_hash, rollout_candidate, answer, error, error_kind, llm_calls, tool_calls,
  prestep_calls, cancel_requested, delivery_attempts, worker, created_at, started_at, finished_at)
SELECT (ARRAY[%(agents)s])[1 + g %% 5], 'bench', 'worker',
  (ARRAY['succeeded','succeeded','succeeded','failed','timed_out','cancelled','queued','running'])[1 + g %% 8],
  '주문 조회 부탁해 A-' || g, '{}'::json, 'C-' || (g %% 50000), 's-' || (g / 10), 'bot-' || (g %% 20),
  'seed', 'v1', '', false, '답변', '', '', 1, 1, 1, false, 0, 'w1',
  now() - make_interval(secs => (%(runs)s - g) / 3 * 9), now() - make_interval(secs => (%(runs)s - g) / 3 * 9),
  now() - make_interval(secs => (%(runs)s - g) / 3 * 9 - 1)
FROM generate_series(1, %(runs)s) AS g
"""
SEED_STEPS = """
INSERT INTO agents_runstep (run_id, seq, event_id, kind, name, status, mcp_id, tool_name, started_at, error)
SELECT id, 1, '', 'rule', CASE WHEN id % 10000 = 0 THEN 'rare_rule' ELSE 'route_order_lookup' END, 'ok',
  'order-service', 'get_order', created_at, '' FROM agents_run WHERE id % 10 = 0
UNION ALL
SELECT id, 2, '', 'tool', 'search_docs', 'ok', 'knowledge-base', 'search_docs', created_at, ''
  FROM agents_run WHERE id % 100 = 0
"""
LONG_TOOLS = ("search_docs", "get_order", "refund", "lookup_customer")


def seed_long_run(agent):
    """A 5,000-step run shaped like a long ReAct loop: a pre-step with a rule, then LLM calls (one
    model, token counts, a 400-character message each) alternating with four tools' calls."""
    from datetime import timedelta

    from django.utils import timezone

    from agents.models import Run, RunStep

    start = timezone.now() - timedelta(minutes=10)
    run = Run.objects.create(
        agent=agent,
        agent_name="bench",
        query="long",
        status="succeeded",
        started_at=start,
        finished_at=start + timedelta(seconds=60),
    )

    def step(g: int) -> RunStep:
        at = start + timedelta(milliseconds=g * 11)
        if g <= 2:
            kind, name = ("prestep", "deterministic pre-step") if g == 1 else ("rule", "route_order")
            return RunStep(
                run=run,
                seq=g,
                kind=kind,
                name=name,
                status="ok",
                started_at=at,
                duration_ms=8.0,
                parent_seq=1 if g == 2 else None,
                mcp_id="order-service" if g == 2 else "",
                tool_name="get_order" if g == 2 else "",
                output={
                    "tools_listing": [
                        {"mcp_id": "order-service", "offset_ms": 0.1, "duration_ms": 3.0, "tools": 4}
                    ]
                },
            )
        llm = g % 2 == 1
        return RunStep(
            run=run,
            seq=g,
            kind="llm" if llm else "tool",
            status="ok",
            started_at=at,
            duration_ms=10.5,
            name="gpt-4o-mini" if llm else LONG_TOOLS[g // 2 % 4],
            mcp_id="" if llm else "order-service",
            tokens={"input_tokens": 812, "output_tokens": 64, "total_tokens": 876} if llm else None,
            input={
                "messages": [{"role": "user", "content": "질문 내용 " * 40}],
                "tools": [{"name": t} for t in LONG_TOOLS],
            }
            if llm
            else {"args": {"q": "x"}},
            output={"content": "답변 " * 80},
        )

    RunStep.objects.bulk_create((step(g) for g in range(1, 5001)), batch_size=500)
    return run


def seed(n_runs: int):
    from accounts.services import admin_ensure
    from agents.models import Agent, Run

    call_command("migrate", verbosity=0)
    user, _ = admin_ensure(password="bench-password-123")
    agents = [Agent.objects.create(name=f"bench-{i}-{time.time_ns()}", system_prompt="p") for i in range(5)]
    t0 = time.perf_counter()
    with connection.cursor() as cur:
        cur.execute(SEED_RUNS % {"agents": ",".join(str(a.pk) for a in agents), "runs": n_runs})
        cur.execute(SEED_STEPS)
        # The runs' RunTool rows (what the trace sink writes with each tool-calling step), from
        # their steps: the same statement as migration agents/0008's backfill.
        cur.execute(importlib.import_module("agents.migrations.0008_run_tools").BACKFILL)
    long_run = seed_long_run(agents[0])
    with connection.cursor() as cur:
        cur.execute("ANALYZE")
    print(f"seeded {Run.objects.count():,} runs in {time.perf_counter() - t0:.0f} s")
    return user, agents, long_run


def bench_lists(user, agents, n: int) -> None:
    from accounts.token_services import token_create
    from agents import selectors
    from agents.models import Run

    page, api = Client(SERVER_NAME="127.0.0.1"), Client(SERVER_NAME="127.0.0.1")
    page.force_login(user)
    headers = {"Authorization": f"Bearer {token_create(actor=user, name='bench').secret}"}
    half = Run.objects.count() // 2
    middle = Run.objects.order_by("-created_at", "-id")[half : half + 1].get()
    cases = {
        "no filter": "",
        "agent": f"agent={agents[2].pk}",
        "status": "status=failed",
        "rule fired (common)": "rule=route_order_lookup",
        "rule fired (100 runs)": "rule=rare_rule",
        "tool called": "tool=search_docs",
        "userId": "user_id=C-4242",
        "chatbotId": "chatbot_id=bot-7",
        "sessionId": "session_id=s-4242",
        "query text (common)": "q=%EC%A3%BC%EB%AC%B8",
        "since/until (a day)": "since="
        + (middle.created_at.strftime("%Y-%m-%dT%H:%M"))
        + "&until="
        + (middle.created_at.replace(hour=23, minute=59).strftime("%Y-%m-%dT%H:%M")),
        "agent+status+userId": f"agent={agents[1].pk}&status=succeeded&user_id=C-4241",
        "cursor half way down": f"cursor={selectors.cursor_encode(middle)}",
        "query text (1 run)": "q=A-777777",
    }
    print(f"\nRun list page and GET /api/runs, {Run.objects.count():,} runs, {n} requests each (ms)")
    print(f"{'filter':26} {'page p50':>9} {'page p95':>9} {'API p50':>9} {'API p95':>9}")
    for name, query in cases.items():
        p = timed(lambda query=query: _ok(page.get(f"/agents/runs/?{query}")), n)
        a = timed(lambda query=query: _ok(api.get(f"/api/runs?{query}", headers=headers)), n)
        print(f"{name:26} {p[0]:9.1f} {p[1]:9.1f} {a[0]:9.1f} {a[1]:9.1f}")
    # The API now refuses an offset past 10,000; what such a request cost, as a query.
    offset = timed(lambda: list(selectors.run_list(filters={})[500_000:500_051]), max(3, n // 10))
    print(f"{'(old) OFFSET 500000 query':26} {'':9} {'':9} {offset[0]:9.1f} {offset[1]:9.1f}")
    t0 = time.perf_counter()
    Run.objects.count()
    print(f"{'(old) COUNT(*) of all':26} {(time.perf_counter() - t0) * 1000:9.1f}")


def bench_old_tool_filter(n: int) -> None:
    """The "tool called" filter as it was (a semi-join on the steps, with their old index) vs RunTool."""
    from agents import selectors
    from agents.models import Run, RunStep

    def old() -> None:
        steps = RunStep.objects.filter(kind__in=["rule", "tool"], tool_name="search_docs").values("run_id")
        runs = Run.objects.filter(id__in=steps).order_by("-created_at", "-id")
        list(runs[:51])
        runs.order_by().values("id")[:1001].count()

    def new() -> None:
        list(selectors.run_list(filters={"tool": "search_docs"})[:51])
        selectors.run_count(filters={"tool": "search_docs"})

    with connection.cursor() as cur:
        cur.execute("CREATE INDEX bench_step_tool_run ON agents_runstep (tool_name, kind, run_id)")
        cur.execute("ANALYZE agents_runstep")
    try:
        before, after = timed(old, n), timed(new, n)
    finally:
        with connection.cursor() as cur:
            cur.execute("DROP INDEX bench_step_tool_run")
    print("\nThe tool filter's queries alone (first page + capped count), ms")
    print(f"{'(old) semi-join on steps':26} p50 {before[0]:8.1f} p95 {before[1]:8.1f}")
    print(f"{'RunTool, index order':26} p50 {after[0]:8.1f} p95 {after[1]:8.1f}")


def _ok(response):
    assert response.status_code == 200, (response.status_code, response.content[:300])
    return response


def explain(agents) -> None:
    from agents import selectors

    queries = {
        "newest 51 runs": selectors.run_list(filters={})[:51],
        "status=failed": selectors.run_list(filters={"status": "failed"})[:51],
        "userId": selectors.run_list(filters={"user_id": "C-4242"})[:51],
        "rule fired (100 runs)": selectors.run_list(filters={"rule": "rare_rule"})[:51],
        "rule fired (common)": selectors.run_list(filters={"rule": "route_order_lookup"})[:51],
        "tool called (1%)": selectors.run_list(filters={"tool": "search_docs"})[:51],
        "capped count": selectors.run_list(filters={}).order_by().values("id")[:1001],
        "capped count, tool called (1%)": selectors.run_list(filters={"tool": "search_docs"})
        .order_by()
        .values("id")[:1001],
    }
    print("\nEXPLAIN (ANALYZE) of the hot queries")
    for name, qs in queries.items():
        if name.startswith("capped count"):
            sql, params = qs.query.sql_with_params()
            with connection.cursor() as cur:
                cur.execute(f"EXPLAIN (ANALYZE, COSTS OFF) SELECT COUNT(*) FROM ({sql}) AS sub", params)
                plan = "\n".join(r[0] for r in cur.fetchall())
        else:
            plan = qs.explain(analyze=True, costs=False)
        print(f"\n-- {name}\n{plan}")


def bench_long_run(user, long_run, n: int) -> None:
    from agents import selectors
    from agents import trace_view as traces

    client = Client(SERVER_NAME="127.0.0.1")
    client.force_login(user)
    url = f"/agents/runs/{long_run.pk}/"
    new = timed(lambda: _ok(client.get(url)), n)
    size_new = len(client.get(url).content)
    poll = timed(lambda: client.get(f"/agents/runs/{long_run.pk}/steps?after=4900"), n)
    selectors.STEP_PAGE = 10**6  # the old page: every step
    old = timed(lambda: _ok(client.get(url)), max(3, n // 10))
    size_old = len(client.get(url).content)
    selectors.STEP_PAGE = 200
    print("\nThe page of a 5,000-step run (ms)")
    print(f"{'every step (old)':26} p50 {old[0]:8.1f} p95 {old[1]:8.1f} {size_old / 1e6:6.2f} MB")
    print(f"{'first 200 steps (new)':26} p50 {new[0]:8.1f} p95 {new[1]:8.1f} {size_new / 1e6:6.2f} MB")
    print(f"{'final poll (after=4900)':26} p50 {poll[0]:8.1f} p95 {poll[1]:8.1f}")
    ours = timed(lambda: traces.run_trace(run=long_run), n)
    naive = timed(lambda: _every_step_usage(long_run), n)
    usage, every = traces.run_trace(run=long_run).usage, _every_step_usage(long_run)
    assert (usage.calls, usage.total_tokens, usage.cost) == (every.calls, every.total_tokens, every.cost)
    print("\nThe run's trace (waterfall, usage, tools), ms")
    print(
        f"{'every step read (old)':26} p50 {naive[0]:8.1f} p95 {naive[1]:8.1f}  (the rows alone, summed in Python)"
    )
    print(f"{'1,000 bars, counts in SQL':26} p50 {ours[0]:8.1f} p95 {ours[1]:8.1f}  (the whole trace)")


def _every_step_usage(run):
    """The previous release's reads: every step's compact columns into Python, priced call by call."""
    from agents import trace_view as traces
    from agents.pricing import model_prices

    prices = model_prices()
    rows = run.steps.order_by("seq").values(*traces._SPAN_FIELDS)
    return traces.run_usage(
        traces.llm_usage(r["name"], r["tokens"], prices) for r in rows if r["kind"] == "llm"
    )


def bench_retention() -> None:
    from agents import services
    from agents.models import Run

    services.privacy_update(actor=None, redaction_patterns=[], mask_presets=[], retention_days=33)
    from datetime import timedelta

    from django.utils import timezone

    cutoff = timezone.now() - timedelta(days=33)
    expired = Run.objects.filter(status__in=Run.FINISHED, finished_at__lt=cutoff)
    count = expired.count()
    t0 = time.perf_counter()
    with contextlib.suppress(RuntimeError), transaction.atomic():
        expired.delete()  # the old way: one transaction for everything, rolled back here
        one_shot = time.perf_counter() - t0
        raise RuntimeError("roll back")
    batches: list[float] = []
    real_atomic = transaction.atomic

    @contextlib.contextmanager
    def timed_atomic(*args, **kwargs):
        t = time.perf_counter()
        with real_atomic(*args, **kwargs):
            yield
        batches.append(time.perf_counter() - t)

    t0 = time.perf_counter()
    services.transaction.atomic = timed_atomic
    try:
        deleted = services.runs_delete_expired()
    finally:
        services.transaction.atomic = real_atomic
    total = time.perf_counter() - t0
    print(f"\nRetention: {count:,} expired runs")
    print(f"{'one DELETE (old)':26} one transaction of {one_shot:.1f} s")
    print(
        f"{'batches of 500 (new)':26} {deleted:,} runs in {len(batches)} transactions, {total:.1f} s in all, "
        f"longest {max(batches) * 1000:.0f} ms, p50 {statistics.median(batches) * 1000:.0f} ms"
    )


def bench_import_lock(n_rules: int) -> None:
    """How long the import's write transaction lasts (SQLite: nobody else can write meanwhile)."""
    from accounts.services import admin_ensure
    from rules import exporting, services

    call_command("migrate", verbosity=0)
    user, _ = admin_ensure(password="bench-password-123")
    doc_rules = [
        {
            "name": f"rule_{i}",
            "mcp_id": "order-service",
            "tool_name": "get_order",
            "description": "",
            "when": f'"주문" in query and "A-{i}" in query',
            "params": '{"query": query}',
            "stop": False,
            "enabled": True,
        }
        for i in range(n_rules)
    ]
    t0 = time.perf_counter()
    with transaction.atomic():  # what the import did: rule_create one by one inside the transaction
        rule_set = services.rule_set_create(actor=user, name=f"old-{time.time_ns()}")
        for rule in doc_rules:
            services.rule_create(actor=user, rule_set=rule_set, **rule)
        services.audit_record(actor=user, action="rule_set.import", obj=rule_set)
    old = time.perf_counter() - t0

    held: list[float] = []
    real_atomic = exporting.transaction.atomic

    @contextlib.contextmanager
    def timed_atomic(*args, **kwargs):
        t = time.perf_counter()
        with real_atomic(*args, **kwargs):
            yield
        held.append(time.perf_counter() - t)

    t0 = time.perf_counter()
    exporting.transaction.atomic = timed_atomic
    try:
        exporting.rule_set_import_json(
            actor=user, data={"format": exporting.FORMAT, "name": f"new-{time.time_ns()}", "rules": doc_rules}
        )
    finally:
        exporting.transaction.atomic = real_atomic
    new_total = time.perf_counter() - t0
    print(f"\nImport of {n_rules:,} rules on SQLite: how long the write lock is held")
    print(f"{'rule by rule (old)':26} {old * 1000:8.0f} ms held (the whole import)")
    print(
        f"{'checked first, bulk (new)':26} {max(held) * 1000:8.0f} ms held, {new_total * 1000:.0f} ms in all"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--n", type=int, default=30)
    parser.add_argument("--rules", type=int, default=2000)
    parser.add_argument("--import-only", action="store_true")
    parser.add_argument(
        "--long-run-only", action="store_true", help="only the 5,000-step run (SQLite or PostgreSQL)"
    )
    parser.add_argument(
        "--tool-filter-only", action="store_true", help="seed, then only the tool filter, old vs new"
    )
    args = parser.parse_args()
    if args.import_only:
        bench_import_lock(args.rules)
        return
    if args.long_run_only:  # either database
        from accounts.services import admin_ensure
        from agents.models import Agent

        call_command("migrate", verbosity=0)
        user, _ = admin_ensure(password="bench-password-123")
        long_run = seed_long_run(Agent.objects.create(name=f"bench-{time.time_ns()}", system_prompt="p"))
        with connection.cursor() as cur:
            cur.execute("ANALYZE")
        bench_long_run(user, long_run, args.n)
        return
    if connection.vendor != "postgresql":
        raise SystemExit("run it on PostgreSQL: .ci/with-postgres .venv/bin/python benchmarks/bench_scale.py")
    user, agents, long_run = seed(args.runs)
    if args.tool_filter_only:
        bench_old_tool_filter(args.n)
        return
    bench_lists(user, agents, args.n)
    bench_old_tool_filter(args.n)
    explain(agents)
    bench_long_run(user, long_run, args.n)
    bench_retention()


if __name__ == "__main__":
    main()
