"""One run from enqueue to `succeeded`: on a real Celery worker vs the same run in this process.

The demo agent (`seed-demo`: the seed's rule set, the offline model, the demo's stdio MCP
servers) answers "주문 조회 부탁해 A-1001", which fires one rule (get_order on order-service).
Each run goes through the service the API calls (`agents.services.run_create`):

- **worker**: the run is published to a real Celery worker (prefork, one process) on a private
  `redis-server`, or on the embedded broker (atomicfs) with `--embedded`;
- **in-process**: the same `run_create`, with the enqueue replaced by `run_execute` in this
  process (claim, execute, finish: the same code the worker's task runs).

The two alternate (interleaved), after warm-up runs of each. "enqueue -> succeeded" ends when
the end is seen committed (the worker's run: polled every millisecond; in-process: when run_create
returns); the phases come from the rows the run leaves (`queued_at`, `started_at`, each step's
start and duration, `finished_at`): enqueue -> claimed, claimed -> first step, the time inside no
step ("between steps"; steps nest), inside steps, last step's end -> `finished_at` (the run's
final UPDATE), and `finished_at` -> seen (the end's transaction: the evidence seal, the commit).

``--api``: each run is started as a user starts it, ``POST /api/runs`` with a personal API token,
over HTTP to this process's own web server (Django's threaded WSGI server on 127.0.0.1); the
in-process contender's request returns once its run has finished. "POST -> succeeded" is then
measured from just before the request.

``--breakdown``: instead, where the in-process run's "claimed -> first step" goes: each call on
the way (the run's queries, the spec, the sessions, the graph's start) timed with
``time.perf_counter``, medians over the runs, from the end of the claim's UPDATE.

Run: .venv/bin/python benchmarks/bench_worker_path.py [--runs 30] [--api] [--embedded | --breakdown]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["LLAMON_VAR_DIR"] = tempfile.mkdtemp(prefix="llamon-bench-worker-path-")
os.environ["DJANGO_SETTINGS_MODULE"] = "llamon_web.settings_test"
for name in ("DATABASE_URL", "REDIS_URL", "LLAMON_TEST_DB", "LLAMON_TEST_REDIS_URL"):
    os.environ.pop(name, None)

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from tests.conftest import celery_worker, redis_server  # noqa: E402
from tests.support.celery_publish import publishing_to  # noqa: E402

QUERY = "주문 조회 부탁해 A-1001"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def ms(delta: timedelta) -> float:
    return delta.total_seconds() * 1000


def phases(run_id: int, seen_at: datetime) -> dict[str, float]:
    """The run's phases from its stored rows (ms); ``seen_at``: when its end was seen committed."""
    from agents.models import Run

    run = Run.objects.get(pk=run_id)
    assert run.status == "succeeded", (run.status, run.error)
    steps = list(run.steps.order_by("seq").values("started_at", "duration_ms"))
    # Steps nest (a rule inside the pre-step): "between steps" is the time inside no step.
    between, in_steps, end = 0.0, 0.0, steps[0]["started_at"]
    for step in steps:
        step_end = step["started_at"] + timedelta(milliseconds=step["duration_ms"] or 0)
        if step["started_at"] > end:
            between += ms(step["started_at"] - end)
        if step_end > end:
            in_steps += ms(step_end - max(end, step["started_at"]))
            end = step_end
    return {
        "enqueue -> succeeded": ms(seen_at - run.queued_at),
        "enqueue -> claimed": ms(run.started_at - run.queued_at),
        "claimed -> first step": ms(steps[0]["started_at"] - run.started_at),
        "between steps": between,
        "in steps": in_steps,
        "last step -> finished_at": ms(run.finished_at - end),
        "finished_at -> succeeded seen": ms(seen_at - run.finished_at),
        "steps": len(steps),
    }


def worker_run(agent) -> tuple[int, datetime]:
    """Enqueue a run and poll until it is finished: its id and when that was seen."""
    from agents.models import Run
    from agents.services import run_create
    from llamon_agent.tools import AgentRequest

    run = run_create(actor=None, agent=agent, request=AgentRequest(query=QUERY))
    deadline = time.monotonic() + 60
    # One plain SELECT a millisecond (~50 us of this process's CPU each), not the ORM's ~0.5 ms:
    # on a busy 2-core machine a heavy poller slows the worker it waits for.
    finished = tuple(Run.FINISHED)
    with connection.cursor() as cursor:
        while True:
            cursor.execute("SELECT status FROM agents_run WHERE id = %s", [run.pk])
            if cursor.fetchone()[0] in finished:
                return run.pk, timezone.now()
            if time.monotonic() > deadline:
                raise SystemExit(f"run {run.pk} did not finish within 60 s")
            time.sleep(0.001)


def in_process_run(agent) -> tuple[int, datetime]:
    """The same service call, with the enqueue replaced by executing the run here: its id, and
    when the call returned."""
    from agents import dispatch
    from agents.services import run_create, run_execute
    from llamon_agent.tools import AgentRequest

    enqueue = dispatch.run_enqueue
    dispatch.run_enqueue = lambda run_id: run_execute(run_id=run_id)
    try:
        run_id = run_create(actor=None, agent=agent, request=AgentRequest(query=QUERY)).pk
        return run_id, timezone.now()
    finally:
        dispatch.run_enqueue = enqueue


class Api:
    """This process's web server on 127.0.0.1 and an editor's API token: runs started as a user does."""

    def __init__(self) -> None:
        import threading

        from django.contrib.auth import get_user_model
        from django.core.servers.basehttp import (
            ThreadedWSGIServer,
            WSGIRequestHandler,
            get_internal_wsgi_application,
        )

        from accounts.roles import role_set
        from accounts.token_services import token_create

        class Quiet(WSGIRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

        user = get_user_model().objects.create_user(username="bench-editor", password="pw")
        role_set(user=user, role="editor")
        self.secret = token_create(actor=user, name="bench").secret
        self.server = ThreadedWSGIServer(("127.0.0.1", 0), Quiet, allow_reuse_address=True)
        self.server.set_app(get_internal_wsgi_application())
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api/runs"

    def start(self, agent) -> int:
        import json
        import urllib.request

        body = json.dumps({"agent": agent.pk, "query": QUERY}).encode()
        request = urllib.request.Request(
            self.url,
            data=body,
            headers={"Authorization": f"Bearer {self.secret}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            assert response.status == 202, response.status
            return json.loads(response.read())["id"]


API: Api | None = None


def api_worker_run(agent) -> tuple[int, datetime, datetime]:
    from agents.models import Run

    posted = timezone.now()
    run_id = API.start(agent)
    finished = tuple(Run.FINISHED)
    deadline = time.monotonic() + 60
    with connection.cursor() as cursor:
        while True:
            cursor.execute("SELECT status FROM agents_run WHERE id = %s", [run_id])
            if cursor.fetchone()[0] in finished:
                return run_id, timezone.now(), posted
            if time.monotonic() > deadline:
                raise SystemExit(f"run {run_id} did not finish within 60 s")
            time.sleep(0.001)


def api_in_process_run(agent) -> tuple[int, datetime, datetime]:
    from agents import dispatch
    from agents.services import run_execute

    enqueue = dispatch.run_enqueue
    dispatch.run_enqueue = lambda run_id: run_execute(run_id=run_id)
    try:
        posted = timezone.now()
        run_id = API.start(agent)
        return run_id, timezone.now(), posted
    finally:
        dispatch.run_enqueue = enqueue


def run_phases(run, agent) -> dict[str, float]:
    found = run(agent)
    measured = phases(found[0], found[1])
    if len(found) == 3:  # through the API: from just before the POST
        measured = {"POST -> succeeded": ms(found[1] - found[2]), **measured}
    return measured


def measure(label: str, agent, runs: int, warm_up: int) -> dict[str, dict[str, list[float]]]:
    contenders = (
        (("worker", api_worker_run), ("in-process", api_in_process_run))
        if API is not None
        else (("worker", worker_run), ("in-process", in_process_run))
    )
    for _ in range(warm_up):
        for _name, run in contenders:
            run_phases(run, agent)
    found: dict[str, dict[str, list[float]]] = {"worker": {}, "in-process": {}}
    for _ in range(runs):
        for contender, run in contenders:
            for phase, value in run_phases(run, agent).items():
                found[contender].setdefault(phase, []).append(value)
    print(f"\n{label}: {runs} runs each, interleaved, after {warm_up} warm-up runs each (ms)")
    print(f"{'phase':30} {'worker p50':>11} {'p90':>8} {'in-process p50':>15} {'p90':>8}")
    for phase in found["worker"]:
        w, i = found["worker"][phase], found["in-process"][phase]
        print(
            f"{phase:30} {statistics.median(w):11.1f} {pct(w, 0.9):8.1f}"
            f" {statistics.median(i):15.1f} {pct(i, 0.9):8.1f}"
        )
    first = next(iter(found["worker"]))  # POST -> succeeded (--api), else enqueue -> succeeded
    worker, in_process = (
        statistics.median(found["worker"][first]),
        statistics.median(found["in-process"][first]),
    )
    print(
        f"{first}: worker p50 - in-process p50: {worker - in_process:.1f} ms (ratio {worker / in_process:.2f})"
    )
    return found


# (module, attribute) of each call timed by --breakdown, in the order a run makes them.
BREAKDOWN = [
    ("agents.services.runs", "run_claim"),
    ("agents.runtime", "execute_claimed_run"),
    ("agents.runtime", "run_versions"),
    ("agents.runtime", "run_rules"),
    ("agents.runtime", "agent_spec"),
    ("agents.runtime", "run_redactor"),
    ("agents.runtime", "DbStepSink"),
    ("rules.engine", "servers_by_id"),
    ("rules.engine", "live_backend"),
    ("agents.runtime", "connect_cold_servers"),
    ("llamon_agent.react", "run_agent"),
    ("llamon_agent.react", "_build"),
    ("llamon_agent.react", "_Run.check_cancel"),
    ("llamon_agent.react", "_Run.input_stage"),
    ("llamon_agent.trace", "Span.begin"),
]


def breakdown(agent, runs: int) -> None:
    """Time each call of BREAKDOWN (those this code has) in in-process runs; print medians."""
    import functools
    import importlib

    marks: list[tuple[str, float, float]] = []

    def timed(fn, label):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                marks.append((label, t0, time.perf_counter()))

        return call

    for module, name in BREAKDOWN:
        owner = importlib.import_module(module)
        *path, attr = name.split(".")
        for part in path:
            owner = getattr(owner, part)
        if hasattr(owner, attr):
            setattr(owner, attr, timed(getattr(owner, attr), name))
    found: dict[str, list[tuple[float, float]]] = {}
    first_step = []
    for n in range(runs + 3):
        marks.clear()
        run_id, seen_at = in_process_run(agent)
        if n < 3:
            continue  # warm-up
        first_step.append(phases(run_id, seen_at)["claimed -> first step"])
        claimed = next(end for label, _, end in marks if label == "run_claim")
        seen = set()
        for label, start, end in sorted(marks, key=lambda m: m[1]):
            if label not in seen:  # the first call of each: the one before the first step
                seen.add(label)
                found.setdefault(label, []).append(((start - claimed) * 1000, (end - start) * 1000))
    print(f"\nclaimed -> first step, in-process: p50 {statistics.median(first_step):.1f} ms over {runs} runs")
    print(f"{'call (its first)':28} {'starts at':>10} {'takes':>8}  (ms after the claim's UPDATE, p50)")
    for label in sorted(found, key=lambda label: statistics.median(s for s, _ in found[label])):
        starts, takes = zip(*found[label], strict=True)
        print(f"{label:28} {statistics.median(starts):10.2f} {statistics.median(takes):8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warm-up", type=int, default=3)
    parser.add_argument("--embedded", action="store_true", help="also the embedded broker (atomicfs)")
    parser.add_argument("--api", action="store_true", help="start each run with POST /api/runs over HTTP")
    parser.add_argument(
        "--breakdown", action="store_true", help="only: where in-process claimed -> first step goes"
    )
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    from agents.models import Agent
    from llamon_web.demo import DEMO_AGENT, demo_load

    demo_load(runs=False)
    agent = Agent.objects.get(name=DEMO_AGENT)
    if args.breakdown:
        breakdown(agent, args.runs)
        return
    if args.api:
        global API
        API = Api()

    with redis_server() as (_, port):
        redis_url = f"redis://127.0.0.1:{port}/0"
        with celery_worker(redis_url, concurrency=1), publishing_to(redis_url, {"visibility_timeout": 3600}):
            measure("Redis", agent, args.runs, args.warm_up)
    if args.embedded:
        with celery_worker(None, concurrency=1):
            measure("Embedded broker (atomicfs, 0.02 s polling)", agent, args.runs, args.warm_up)


if __name__ == "__main__":
    main()
