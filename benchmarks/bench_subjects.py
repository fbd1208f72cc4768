"""The subject filter (``subject=patientId=P-2002``) at a million runs on PostgreSQL.

Seeds RUNS finished runs with generate_series (three per timestamp: keyset ties), each with a
context ``{"patientId": "P-<g % 100,000>", "ward": <g % 50>}``, so a patient has ~10 runs and a
ward ~20,000; and their RunSubject rows as run_end writes them (two a run), then ANALYZE. Prints
p50/p95 of GET /api/runs (a page of 50 and the capped count, what the run list shows) and of the
page query alone, for a rare value, a common one, a page half way down a common one, and a
subject with a status; then the EXPLAIN (ANALYZE) of the page queries. ``--gin`` also times the
alternative, a GIN index on the context as jsonb (``@>``), for the same values.

Run: .ci/with-postgres .venv/bin/python benchmarks/bench_subjects.py [--runs 1000000] [--n 30] [--gin]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LLAMON_VAR_DIR", tempfile.mkdtemp(prefix="llamon-bench-subjects-"))
os.environ["LLAMON_ENV"] = "dev"
os.environ["DJANGO_SETTINGS_MODULE"] = "llamon_web.settings"
os.environ.pop("REDIS_URL", None)

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402

SEED_RUNS = """
INSERT INTO agents_run (agent_id, agent_name, source, status, query, context, user_id, session_id, chatbot_id,
  rule_set_name, rule_set_ref, rule_set_hash, rollout_candidate, answer, error, error_kind, llm_calls, tool_calls,
  prestep_calls, cancel_requested, delivery_attempts, worker, created_at, started_at, finished_at)
SELECT %(agent)s, 'bench', 'worker', (ARRAY['succeeded','succeeded','succeeded','failed'])[1 + g %% 4],
  '진료 기록 조회 ' || g, json_build_object('patientId', 'P-' || (g %% 100000), 'ward', g %% 50),
  'C-' || (g %% 50000), 's-' || (g / 10), 'bot-1', 'seed', 'v1', '', false, '답변', '', '', 1, 0, 1, false, 0,
  'w1', now() - make_interval(secs => (%(runs)s - g) / 3 * 9), now() - make_interval(secs => (%(runs)s - g) / 3 * 9),
  now() - make_interval(secs => (%(runs)s - g) / 3 * 9 - 1)
FROM generate_series(1, %(runs)s) AS g
"""
# What run_end writes for those contexts (agents.subjects.run_subjects): one row a scalar.
SEED_SUBJECTS = """
INSERT INTO agents_runsubject (run_id, key, value, created_at)
SELECT id, 'patientId', context->>'patientId', created_at FROM agents_run
UNION ALL
SELECT id, 'ward', context->>'ward', created_at FROM agents_run
"""


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


def seed(n_runs: int):
    from accounts.services import admin_ensure
    from agents.models import Agent, Run, RunSubject

    call_command("migrate", verbosity=0)
    user, _ = admin_ensure(password="bench-password-123")
    agent = Agent.objects.create(name=f"bench-{time.time_ns()}", system_prompt="p")
    t0 = time.perf_counter()
    with connection.cursor() as cur:
        cur.execute(SEED_RUNS % {"agent": agent.pk, "runs": n_runs})
        cur.execute(SEED_SUBJECTS)
        cur.execute("ANALYZE")
    print(
        f"seeded {Run.objects.count():,} runs, {RunSubject.objects.count():,} subject rows "
        f"in {time.perf_counter() - t0:.0f} s"
    )
    return user


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _ok(response):
    assert response.status_code == 200, (response.status_code, response.content[:300])
    return response


def bench(user, n: int, gin: bool) -> None:
    from accounts.token_services import token_create
    from agents import selectors

    api = Client(SERVER_NAME="127.0.0.1")
    headers = {"Authorization": f"Bearer {token_create(actor=user, name='bench').secret}"}
    half = selectors.run_page(filters={"subject": "ward=7"}, limit=10_000)
    middle = selectors.cursor_encode(half.runs[-1])
    cases = {
        "rare (patient, ~10 runs)": ("subject=patientId%3DP-4242", {"subject": "patientId=P-4242"}, None),
        "common (ward, ~20,000)": ("subject=ward%3D7", {"subject": "ward=7"}, None),
        "common, 10,000 runs down": (f"subject=ward%3D7&cursor={middle}", {"subject": "ward=7"}, middle),
        "common + status=failed": (
            "subject=ward%3D7&status=failed",
            {"subject": "ward=7", "status": "failed"},
            None,
        ),
        "no such value": ("subject=patientId%3DP-none", {"subject": "patientId=P-none"}, None),
    }
    print(
        f"\nGET /api/runs with a subject, {n} requests each (ms; the API: a page of 50 and the capped count)"
    )
    print(
        f"{'subject':28} {'API p50':>9} {'API p95':>9} {'API CPU':>9} {'page q p50':>11} {'page q p95':>11}"
    )
    cpu0 = resource.getrusage(resource.RUSAGE_SELF).ru_utime
    for name, (query, filters, cursor) in cases.items():
        before = _cpu()
        a = timed(lambda query=query: _ok(api.get(f"/api/runs?{query}", headers=headers)), n)
        cpu_ms = (_cpu() - before) * 1000 / (n + 1)  # this process's CPU a request (not the server's)
        q = timed(
            lambda filters=filters, cursor=cursor: selectors.run_page(
                filters=filters, cursor=cursor, limit=50
            ),
            n,
        )
        print(f"{name:28} {a[0]:9.1f} {a[1]:9.1f} {cpu_ms:9.1f} {q[0]:11.1f} {q[1]:11.1f}")
    cpu = resource.getrusage(resource.RUSAGE_SELF).ru_utime - cpu0
    print(f"(this process's CPU for those {len(cases) * (n + 1) * 2} requests and queries: {cpu:.1f} s)")
    print("\nEXPLAIN (ANALYZE) of the page queries")
    for name, (_query, filters, _cursor) in cases.items():
        if _cursor is None:
            plan = selectors.run_list(filters=filters)[:51].explain(analyze=True, costs=False)
            print(f"\n-- {name}\n{plan}")
    sql, params = (
        selectors.run_list(filters={"subject": "ward=7"})
        .order_by()
        .values("id")[:1001]
        .query.sql_with_params()
    )
    with connection.cursor() as cur:
        cur.execute(f"EXPLAIN (ANALYZE, COSTS OFF) SELECT COUNT(*) FROM ({sql}) AS sub", params)
        print("\n-- capped count, common (ward)\n" + "\n".join(r[0] for r in cur.fetchall()))
    if gin:
        bench_gin(n)


def bench_gin(n: int) -> None:
    """The alternative: no table, a GIN index on the context as jsonb, and ``@>`` in the query."""
    t0 = time.perf_counter()
    with connection.cursor() as cur:
        cur.execute(
            "CREATE INDEX bench_run_context_gin ON agents_run USING gin ((context::jsonb) jsonb_path_ops)"
        )
        cur.execute("ANALYZE agents_run")
    print(f"\nGIN index on context::jsonb built in {time.perf_counter() - t0:.0f} s")
    sql = "SELECT id FROM agents_run WHERE context::jsonb @> %s::jsonb ORDER BY created_at DESC, id DESC LIMIT 51"

    def page(value: str) -> None:
        with connection.cursor() as cur:
            cur.execute(sql, [value])
            cur.fetchall()

    for name, value in [("rare (patient)", '{"patientId": "P-4242"}'), ("common (ward)", '{"ward": 7}')]:
        p = timed(lambda value=value: page(value), n)
        print(f"{'GIN ' + name:28} {'':9} {'':9} {p[0]:11.1f} {p[1]:11.1f}")
    with connection.cursor() as cur:
        cur.execute("EXPLAIN (ANALYZE, COSTS OFF) " + sql, ['{"ward": 7}'])
        print("\n-- GIN, common (ward)\n" + "\n".join(r[0] for r in cur.fetchall()))
        cur.execute("SELECT pg_size_pretty(pg_relation_size('bench_run_context_gin'))")
        gin_size = cur.fetchone()[0]
        cur.execute("SELECT pg_size_pretty(pg_total_relation_size('agents_runsubject'))")
        table_size = cur.fetchone()[0]
        cur.execute("DROP INDEX bench_run_context_gin")
    print(f"\nsizes: GIN index {gin_size}; RunSubject table with its indexes {table_size}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--n", type=int, default=30)
    parser.add_argument("--gin", action="store_true", help="also time a GIN index on context::jsonb")
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        sys.exit("Run on PostgreSQL: .ci/with-postgres .venv/bin/python benchmarks/bench_subjects.py")
    bench(seed(args.runs), args.n, args.gin)


if __name__ == "__main__":
    main()
