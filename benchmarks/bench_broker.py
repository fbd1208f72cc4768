"""The embedded broker, side by side: messages lost under load, and enqueue -> first stored step.

Contenders: kombu's stock ``filesystem://`` transport, ours (``atomicfs://``, llamon_web/broker.py:
temp file, fsync, rename) and kombu's SQLAlchemy transport on a SQLite file (``sqla+sqlite://``,
measured only when SQLAlchemy is installed: it is not a dependency of the product).

1. Stress: N messages from one publisher, a beat-like publisher (one message every 50 ms) at the
   same time, two consumer processes; the beat messages' send -> receive time under that load. Lost = published and never received intact (a consumer
   that reads a half-written file fails to decode it and the file is already gone).
2. Latency: a real Celery worker (concurrency 2) on each transport; milliseconds from a run's
   commit to its first stored step (the same measure as bench_runs.py), 20 runs after 3 warm-up.

Prints the figures quoted in docs/performance.md ("Embedded broker"). Everything stays on this
machine (temporary folders and SQLite files).
Run: .venv/bin/python benchmarks/bench_broker.py [--messages 10000] [--no-latency]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["LLAMON_VAR_DIR"] = tempfile.mkdtemp(prefix="llamon-bench-broker-")
os.environ["DJANGO_SETTINGS_MODULE"] = "llamon_web.settings_test"
for name in ("DATABASE_URL", "REDIS_URL", "LLAMON_TEST_DB", "CELERY_BROKER_URL"):
    os.environ.pop(name, None)

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.utils import timezone  # noqa: E402
from kombu import Connection  # noqa: E402

from llamon_web import broker  # noqa: E402

broker.register()
QUEUE = "bench"
BEAT_START = 10_000_000  # the beat-like publisher's numbers start here


def sqlalchemy_installed() -> bool:
    try:
        import sqlalchemy  # noqa: F401
    except ImportError:
        return False
    return True


def folders(base: Path) -> dict:
    for sub in ("queue", "processed", "control"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    return {
        "data_folder_in": str(base / "queue"),
        "data_folder_out": str(base / "queue"),
        "processed_folder": str(base / "processed"),
        "control_folder": str(base / "control"),
        "store_processed": False,
        "polling_interval": 0.1,
    }


def contenders(base: Path) -> list[tuple[str, str, dict]]:
    rows = [
        ("kombu filesystem (stock)", "filesystem://", folders(base / "stock")),
        ("atomicfs (ours: temp, fsync, rename)", "atomicfs://", folders(base / "atomic")),
    ]
    if sqlalchemy_installed():
        # Its transport options all go to create_engine(), so its polling interval stays at
        # kombu's default (1 s): "polling_interval" there is a TypeError.
        rows.append(
            ("kombu SQLAlchemy on SQLite (1 s polling)", f"sqla+sqlite:///{base / 'broker.sqlite3'}", {})
        )
    return rows


def _publish(url: str, options: dict, start: int, count: int, every_s: float, stop) -> None:
    try:
        _publish_all(url, options, start, count, every_s, stop)
    except Exception as exc:
        print(f"  publisher stopped: {exc!r}"[:200], flush=True)
        raise


def _publish_all(url: str, options: dict, start: int, count: int, every_s: float, stop) -> None:
    with Connection(url, transport_options=options) as conn:
        queue = conn.SimpleQueue(QUEUE)
        i = start
        while (count and i < start + count) or (not count and not stop.is_set()):
            queue.put({"i": i, "t": time.time()}, serializer="json")
            i += 1
            if every_s:
                time.sleep(every_s)
        queue.close()
        if not count:  # the beat-like publisher reports how many it sent
            stop.sent.value = i - start


def _consume(url: str, options: dict, done, out) -> None:
    received, latencies, errors = [], [], 0
    try:
        errors = _consume_into(url, options, done, received, latencies)
    except Exception as exc:  # the transport itself failed (e.g. "database is locked"): report it
        print(f"  consumer stopped: {exc!r}"[:200], flush=True)
    out.put((received, latencies, errors))


def _consume_into(url: str, options: dict, done, received: list, latencies: list) -> int:
    errors = 0
    with Connection(url, transport_options=options) as conn:
        queue = conn.SimpleQueue(QUEUE)
        idle_since = None
        while True:
            try:
                message = queue.get(block=True, timeout=0.2)
            except queue.Empty:
                if done.is_set():
                    idle_since = idle_since or time.monotonic()
                    if time.monotonic() - idle_since > 2.0:
                        break
                continue
            except Exception:  # a half-written message (JSONDecodeError, the file is gone), or a DB error
                errors += 1
                continue
            idle_since = None
            received.append(message.payload["i"])
            if message.payload["i"] >= BEAT_START:
                latencies.append((time.time() - message.payload["t"]) * 1000)
            message.ack()
        queue.close()
    return errors


class _Stop:
    def __init__(self, ctx) -> None:
        self.event = ctx.Event()
        self.sent = ctx.Value("i", 0)

    def is_set(self) -> bool:
        return self.event.is_set()


def stress(url: str, options: dict, messages: int) -> dict:
    if url.startswith("sqla"):
        # Declared once up front: kombu's SQLAlchemy transport races on creating its tables and
        # queue row when several processes start at once (IntegrityError / "table already exists").
        with Connection(url, transport_options=options) as conn:
            conn.SimpleQueue(QUEUE).close()
    ctx = mp.get_context("fork")
    done, beat_stop, out = ctx.Event(), _Stop(ctx), ctx.Queue()
    consumers = [ctx.Process(target=_consume, args=(url, options, done, out)) for _ in range(2)]
    for proc in consumers:
        proc.start()
    beat = ctx.Process(target=_publish, args=(url, options, BEAT_START, 0, 0.05, beat_stop))
    main = ctx.Process(target=_publish, args=(url, options, 0, messages, 0.0, beat_stop))
    t0 = time.monotonic()
    beat.start()
    main.start()
    main.join()
    beat_stop.event.set()
    beat.join()
    publish_s = time.monotonic() - t0
    done.set()
    received, latencies, errors = [], [], 0
    for _ in consumers:
        got, waited, errs = out.get(timeout=600)
        received += got
        latencies += waited
        errors += errs
    for proc in consumers:
        proc.join()
    sent = messages + beat_stop.sent.value
    unique = set(received)
    return {
        "sent": sent,
        "lost": sent - len(unique),
        "decode errors": errors,
        "duplicates": len(received) - len(unique),
        "publish msg/s": messages / publish_s,
        "beat p50 ms": statistics.median(latencies) if latencies else float("nan"),
    }


def first_step_latency(url: str, options: dict, n: int = 20) -> list[float]:
    """A real worker on this transport; ms from run_create's commit to the first stored step."""
    from agents.models import Agent, Run
    from agents.services import run_create
    from llamon_agent.tools import AgentRequest
    from tests.agents.conftest import publishing_to
    from tests.conftest import celery_worker

    agent, _ = Agent.objects.get_or_create(
        name="bench-scripted",
        defaults={"system_prompt": "p", "model_provider": "scripted", "model_script": [{"content": "done"}]},
    )
    os.environ["CELERY_BROKER_URL"] = url  # the worker (and this process's app) read it first
    latencies: list[float] = []
    try:
        with celery_worker(None, concurrency=2), publishing_to(url, options):
            for i in range(n + 3):
                t0 = timezone.now()
                run = run_create(actor=None, agent=agent, request=AgentRequest(query="hello"))
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    first = run.steps.order_by("seq").first()
                    if first is not None:
                        if i >= 3:  # the first three warm the pool processes up
                            latencies.append((first.started_at - t0).total_seconds() * 1000)
                        break
                    time.sleep(0.002)
                while Run.objects.get(pk=run.pk).status not in Run.FINISHED and time.monotonic() < deadline:
                    time.sleep(0.01)
    finally:
        os.environ.pop("CELERY_BROKER_URL", None)
    return latencies


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--sqla-messages", type=int, default=None, help="fewer for SQLAlchemy (it is slow)")
    parser.add_argument("--no-latency", action="store_true")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="llamon-bench-broker-q-"))
    rows = contenders(base)
    if not sqlalchemy_installed():
        print("(kombu SQLAlchemy transport not measured: `pip install sqlalchemy` to include it)")

    print(f"Stress: {args.messages:,} messages + a beat-like publisher (every 50 ms), 2 consumers")
    print(
        f"{'transport':40} {'sent':>7} {'lost':>6} {'decode err':>10} {'dupl':>5} {'publish/s':>10} {'beat msg p50 ms':>16}"
    )
    for label, url, options in rows:
        count = args.sqla_messages if url.startswith("sqla") and args.sqla_messages else args.messages
        r = stress(url, options, count)
        print(
            f"{label:40} {r['sent']:7d} {r['lost']:6d} {r['decode errors']:10d} {r['duplicates']:5d} "
            f"{r['publish msg/s']:10.0f} {r['beat p50 ms']:16.1f}",
            flush=True,
        )
    if args.no_latency:
        return
    call_command("migrate", verbosity=0)
    print()
    print("Enqueue -> first stored step (real Celery worker, concurrency 2, scripted model), 20 runs")
    print(f"{'transport':40} {'p50 ms':>8} {'p95 ms':>8}")
    for label, url, _ in rows:
        if url.startswith("sqla"):
            print(f"{label:40} (not run: Celery's transport options would reach create_engine())")
            continue
        # The worker reads settings' transport options (its own folders); so does this process.
        values = first_step_latency(url, settings.CELERY_BROKER_TRANSPORT_OPTIONS)
        print(f"{label:40} {statistics.median(values):8.1f} {pct(values, 0.95):8.1f}", flush=True)


if __name__ == "__main__":
    main()
