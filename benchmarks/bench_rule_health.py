"""Coverage and health per rule: the report over recorded runs, ours (aggregate SQL) vs the naive way.

Prints the figures quoted in docs/governance.md ("Coverage and health", "Speed"). Uses a temporary
SQLite database seeded directly (bulk inserts): RUNS runs of one rule set (60 rules: the seed's
three and 57 keyword rules) spread over 30 days, each with 1 to 3 rule steps (5 % errors) with
random durations, as the step sink stores them, and 20 test cases.

- ours: ``governance.rule_health.rule_set_health``: one GROUP BY (rule, day, status), one windowed
  sample of at most 1,000 durations per rule, one count, the cases;
- naive: every rule step of the window with its run's created_at read into Python, counted per
  rule and day there, percentiles over all durations (and the same case coverage).

Both give the same fires, errors and days (checked). Run:
    .venv/bin/python benchmarks/bench_rule_health.py [--runs 100000] [--days 30]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["LLAMON_VAR_DIR"] = tempfile.mkdtemp(prefix="llamon-bench-health-")
os.environ["DJANGO_SETTINGS_MODULE"] = "llamon_web.settings_test"
for name in ("DATABASE_URL", "REDIS_URL", "LLAMON_TEST_DB"):
    os.environ.pop(name, None)

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.utils import timezone  # noqa: E402

KEYWORDS = [f"kw{i:02d}" for i in range(57)]


def seed(n_runs: int, days: int):
    from agents.models import Run, RunStep
    from llamon_web.demo import SEED_RULES
    from rules import services as rule_services
    from rules.cases import case_create
    from servers.models import McpServer
    from tests.support.rule_sets import TOOLS

    for mcp_id, tools in TOOLS.items():
        McpServer.objects.create(mcp_id=mcp_id, transport="http", url="http://127.0.0.1:9/mcp", tools=tools)
    rule_set = rule_services.rule_set_create(actor=None, name="bench")
    rules = [dict(r) for r in SEED_RULES] + [
        {
            "name": f"route_{kw}",
            "mcp_id": "knowledge-base",
            "tool_name": "search_docs",
            "when": f'"{kw}" in query',
            "params": '{"q": query}',
        }
        for kw in KEYWORDS
    ]
    for rule in rules:
        rule_services.rule_create(actor=None, rule_set=rule_set, **rule)
    for i in range(20):
        case_create(
            actor=None,
            rule_set=rule_set,
            name=f"case {i:02d}",
            input={"query": f"{KEYWORDS[i]} 검색"},
            expected={"must_fire": [{"tool_name": "search_docs"}]},
        )
    names = [r["name"] for r in rules[:-10]]  # the last ten never fire
    rng = random.Random(7)
    now = timezone.now()
    start = now - timedelta(days=days) + timedelta(hours=1)
    step = (now - start) / n_runs
    created_at = Run._meta.get_field("created_at")
    created_at.auto_now_add = False
    batch = 5_000
    for first in range(0, n_runs, batch):
        count = min(batch, n_runs - first)
        runs = [
            Run(
                status="succeeded",
                query=f"q{k}",
                rule_set_name="bench",
                rule_set_ref="v1",
                created_at=start + step * k,
            )
            for k in range(first, first + count)
        ]
        created = Run.objects.bulk_create(runs, batch_size=batch)
        steps = []
        for run in created:
            for seq, name in enumerate(rng.sample(names, rng.choice([1, 1, 2, 3])), start=2):
                steps.append(
                    RunStep(
                        run_id=run.pk,
                        seq=seq,
                        kind="rule",
                        name=name,
                        status="error" if rng.random() < 0.05 else "ok",
                        mcp_id="knowledge-base",
                        tool_name="search_docs",
                        started_at=run.created_at,
                        parent_seq=1,
                        duration_ms=rng.lognormvariate(1.5, 0.6),
                        input={"params": {"q": run.query}},
                    )
                )
        RunStep.objects.bulk_create(steps, batch_size=batch)
    created_at.auto_now_add = True
    return rule_set


def naive(rule_set, days: int) -> dict:
    """Every rule step of the window read into Python and counted there."""
    from agents.models import RunStep
    from governance import rule_health as health

    report = health.rule_set_health(rule_set=rule_set, days=days)  # for the window and the cases only
    fires: dict[str, list[int]] = {}
    errors: dict[str, int] = {}
    durations: dict[str, list[float]] = {}
    index = {d: i for i, d in enumerate(report.day_labels)}
    steps = RunStep.objects.filter(
        kind="rule",
        run__rule_set_name=rule_set.name,
        run__created_at__gte=report.since,
        run__created_at__lte=report.until,
    ).select_related("run")
    for s in steps.iterator(chunk_size=5_000):
        if s.status == "error":
            errors[s.name] = errors.get(s.name, 0) + 1
        else:
            fires.setdefault(s.name, [0] * days)[index[timezone.localdate(s.run.created_at)]] += 1
        if s.duration_ms is not None:
            durations.setdefault(s.name, []).append(s.duration_ms)
    p = {n: statistics.quantiles(v, n=100, method="inclusive") for n, v in durations.items() if len(v) > 1}
    return {"fires": fires, "errors": errors, "p50": {n: q[49] for n, q in p.items()}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--days", type=int, default=30)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    t0 = time.perf_counter()
    rule_set = seed(args.runs, args.days)
    print(f"seeded {args.runs:,} runs over {args.days} days in {time.perf_counter() - t0:.1f} s")

    from governance import rule_health as health

    for label, fn in (
        ("ours", lambda: health.rule_set_health(rule_set=rule_set, days=args.days)),
        ("naive", lambda: naive(rule_set, args.days)),
    ):
        w0, c0 = time.perf_counter(), time.process_time()
        result = fn()
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        print(f"{label:6s} {wall:7.2f} s wall  {cpu:7.2f} s CPU")
        if label == "ours":
            ours = result
        else:
            same = all(
                r.per_day == result["fires"].get(r.name, [0] * args.days)
                and r.errors == result["errors"].get(r.name, 0)
                for r in ours.rules
            )
            print(
                f"same fires per day and errors: {same}; ours: {ours.runs:,} runs, "
                f"{sum(r.fires for r in ours.rules):,} fires, coverage {ours.coverage['percent']} %"
            )
            if not same:
                raise SystemExit(1)


if __name__ == "__main__":
    main()
