"""Agent runs on real workers: latency from enqueue to the first stored step, throughput, page renders.

Prints the figures quoted in docs/performance.md ("Runs"). Starts its own redis-server and
Celery workers on 127.0.0.1 and uses a temporary SQLite database.
Run: .venv/bin/python benchmarks/bench_runs.py [--runs 40]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["LLAMON_VAR_DIR"] = tempfile.mkdtemp(prefix="llamon-bench-runs-")
os.environ["DJANGO_SETTINGS_MODULE"] = "llamon_web.settings_test"
for name in ("DATABASE_URL", "REDIS_URL", "LLAMON_TEST_DB"):
    os.environ.pop(name, None)

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402

from tests.agents.conftest import publishing_to  # noqa: E402
from tests.conftest import celery_worker, free_port, wait_for_port  # noqa: E402


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def scripted_agent():
    from agents.models import Agent

    agent, _ = Agent.objects.get_or_create(
        name="bench-scripted",
        defaults={"system_prompt": "p", "model_provider": "scripted", "model_script": [{"content": "done"}]},
    )
    return agent


def enqueue_to_first_step(n: int) -> list[float]:
    """Milliseconds from run_create's commit to the first step row (the worker's input guardrail)."""
    from agents.models import Run
    from agents.services import run_create
    from llamon_agent.tools import AgentRequest

    agent = scripted_agent()
    latencies = []
    for _ in range(n):
        t0 = timezone.now()
        run = run_create(actor=None, agent=agent, request=AgentRequest(query="hello"))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            first = run.steps.order_by("seq").first()
            if first is not None:
                latencies.append((first.started_at - t0).total_seconds() * 1000)
                break
            time.sleep(0.002)
        while Run.objects.get(pk=run.pk).status not in Run.FINISHED and time.monotonic() < deadline:
            time.sleep(0.01)
    return latencies


def throughput(n: int) -> float:
    """Runs per second with the worker running now (all n enqueued at once)."""
    from agents.models import Run
    from agents.services import run_create
    from llamon_agent.tools import AgentRequest

    agent = scripted_agent()
    t0 = time.monotonic()
    ids = [run_create(actor=None, agent=agent, request=AgentRequest(query=f"q{i}")).pk for i in range(n)]
    while Run.objects.filter(pk__in=ids, status__in=Run.FINISHED).count() < n:
        if time.monotonic() - t0 > 300:
            raise SystemExit("runs did not finish within 300 s")
        time.sleep(0.05)
    assert Run.objects.filter(pk__in=ids, status="succeeded").count() == n
    return n / (time.monotonic() - t0)


def page_renders(repeat: int = 20) -> dict[str, list[float]]:
    """A finished run with 1,000 steps: the whole page, and one poll bringing 10 new steps."""
    from accounts.services import admin_ensure
    from agents.models import Run, RunStep

    user, _ = admin_ensure(password="bench-password-123")
    run = Run.objects.create(
        agent=scripted_agent(), agent_name="bench", query="q", status="succeeded", finished_at=timezone.now()
    )
    now = timezone.now()
    RunStep.objects.bulk_create(
        RunStep(
            run=run,
            seq=i,
            kind="llm" if i % 3 else "tool",
            name=f"step {i}",
            status="ok",
            started_at=now,
            duration_ms=1.0,
            input={"messages": [{"role": "user", "content": "x" * 200}]},
            output={"text": "y" * 200},
        )
        for i in range(1, 1001)
    )
    live = Run.objects.create(agent=scripted_agent(), agent_name="bench", query="q", status="running")
    RunStep.objects.bulk_create(
        RunStep(run=live, seq=i, kind="llm", name=f"s{i}", status="ok", started_at=now) for i in range(1, 101)
    )
    client = Client(SERVER_NAME="127.0.0.1")
    client.force_login(user)
    timings: dict[str, list[float]] = {"run page, 1,000 steps": [], "poll bringing 10 new steps": []}
    for _ in range(repeat):
        t0 = time.perf_counter()
        assert client.get(f"/agents/runs/{run.pk}/").status_code == 200
        t1 = time.perf_counter()
        assert client.get(f"/agents/runs/{live.pk}/steps?after=90", HTTP_HX_REQUEST="true").status_code == 200
        t2 = time.perf_counter()
        timings["run page, 1,000 steps"].append((t1 - t0) * 1000)
        timings["poll bringing 10 new steps"].append((t2 - t1) * 1000)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument(
        "--scaling-only", action="store_true", help="only runs/s at 1, 2 and 4 worker processes"
    )
    args = parser.parse_args()
    call_command("migrate", verbosity=0)

    import subprocess

    port = free_port()
    redis = subprocess.Popen(
        ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    wait_for_port(port)
    redis_url = f"redis://127.0.0.1:{port}/0"
    rows = []
    scaling = []
    try:
        with publishing_to(redis_url, {"visibility_timeout": 3600}):
            for processes in (1, 2, 4):
                with celery_worker(redis_url, concurrency=processes):
                    enqueue_to_first_step(processes)  # warm-up: every pool process once
                    scaling.append((processes, throughput(args.runs)))
        if args.scaling_only:
            rows = None
        for label, broker in (
            [] if args.scaling_only else (("Redis", redis_url), ("embedded (atomicfs, 0.1 s polling)", None))
        ):
            with celery_worker(broker, concurrency=2):
                if broker:
                    with publishing_to(broker, {"visibility_timeout": 3600}):
                        enqueue_to_first_step(3)  # warm-up: pool processes, imports
                        latencies = enqueue_to_first_step(20)
                        rate = throughput(args.runs)
                else:
                    enqueue_to_first_step(3)
                    latencies = enqueue_to_first_step(20)
                    rate = throughput(args.runs)
            rows.append((label, statistics.median(latencies), pct(latencies, 0.95), rate))
    finally:
        redis.terminate()
    print(f"Throughput on Redis by worker processes (one worker, prefork -c N), {args.runs} runs")
    print(f"{'processes':>9} {'runs/s':>8} {'vs 1':>6}")
    for processes, rate in scaling:
        print(f"{processes:9d} {rate:8.1f} {rate / scaling[0][1]:5.2f}x")
    print()
    if rows is None:
        return
    print("Enqueue -> first stored step, and throughput (scripted model, 2 worker processes)")
    print(f"{'broker':40} {'p50 ms':>8} {'p95 ms':>8} {'runs/s':>8}")
    for label, p50, p95, rate in rows:
        print(f"{label:40} {p50:8.1f} {p95:8.1f} {rate:8.1f}")
    print()
    print("Run page renders (ms)")
    print(f"{'what':32} {'p50':>8} {'p95':>8}")
    for name, values in page_renders().items():
        print(f"{name:32} {statistics.median(values):8.1f} {pct(values, 0.95):8.1f}")


if __name__ == "__main__":
    main()
