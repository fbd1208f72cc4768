"""Evidence export at scale: time and peak memory of exporting N runs as CSV and as JSON Lines.

Prints the figures quoted in docs/performance.md ("Evidence export"). Seeds a temporary SQLite
database with N finished runs of a bank's routing (each with one or two rule calls, Korean text,
its evidence link), then exports them all, each format in a fresh process so that its peak RSS
is the export's own, through the same code the page and the API stream.
Run: .venv/bin/python benchmarks/bench_export.py [--runs 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
if "LLAMON_VAR_DIR" not in os.environ:
    os.environ["LLAMON_VAR_DIR"] = tempfile.mkdtemp(prefix="llamon-bench-export-")
os.environ["DJANGO_SETTINGS_MODULE"] = "llamon_web.settings_test"
# As in production: with DEBUG on, Django keeps the last 9,000 queries' SQL (each export batch's
# id lists), 270 MB of the peak at 100,000 runs instead of 95 MB.
os.environ["DEBUG"] = "0"
for name in ("DATABASE_URL", "REDIS_URL", "LLAMON_TEST_DB"):
    os.environ.pop(name, None)

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

RULES = [
    ("order_lookup", "order-service", "get_order"),
    ("card_block", "card-service", "block_card"),
    ("loan_status", "loan-service", "get_loan"),
    ("profile", "customer-crm", "get_customer_profile"),
]


def seed(n: int) -> None:
    """N finished runs with their steps and evidence links, written in bulk (the links are computed
    exactly as run_end computes them, without its one-transaction-per-run cost)."""
    from agents.evidence import decision_records
    from agents.models import Agent, Run, RunStep, RunSubject
    from agents.subjects import run_subjects
    from core.chain import GENESIS, link_hash
    from core.content_hash import sha256
    from core.models import ChainHead, ChainRecord

    call_command("migrate", verbosity=0)
    agent = Agent.objects.create(name="bank-router", system_prompt="p")
    now = timezone.now()
    prev, seq = GENESIS, 0
    for start in range(0, n, 2000):
        runs = [
            Run(
                agent=agent,
                agent_name=agent.name,
                status=Run.Status.SUCCEEDED,
                query=f"카드 분실 신고와 주문 A-{i} 조회 부탁드립니다",
                context={"userId": f"C-{i % 5000:04d}", "channel": "app"},
                user_id=f"C-{i % 5000:04d}",
                session_id=f"s-{i}",
                chatbot_id="retail-banking",
                rule_set_name="bank-routing",
                rule_set_ref="v7",
                rule_set_hash="c" * 64,
                answer=f"A-{i} 주문은 배송 중이며 카드는 정지되었습니다.",
                finished_at=now,
            )
            for i in range(start, min(n, start + 2000))
        ]
        Run.objects.bulk_create(runs)
        steps = []
        for run in runs:
            for k in range(1 + run.pk % 2):
                rule, mcp_id, tool = RULES[(run.pk + k) % len(RULES)]
                steps.append(
                    RunStep(
                        run=run,
                        seq=k + 1,
                        kind=RunStep.Kind.RULE,
                        name=rule,
                        status="ok",
                        mcp_id=mcp_id,
                        tool_name=tool,
                        started_at=now,
                        input={"params": {"order_id": f"A-{run.pk}", "customer_id": run.user_id}},
                        output={
                            "order_id": f"A-{run.pk}",
                            "status": "배송 중",
                            "items": [{"sku": "K-1", "qty": 1}],
                        },
                    )
                )
        RunStep.objects.bulk_create(steps)
        RunSubject.objects.bulk_create(  # what run_end writes: the pairs the subject filter reads
            RunSubject(run=run, key=key, value=value, created_at=run.created_at)
            for run in runs
            for key, value in run_subjects(run.context, run.a2a_data)
        )
        links = []
        records = decision_records([r.pk for r in runs])
        for run in sorted(runs, key=lambda r: r.pk):
            seq += 1
            content_hash = sha256(records[str(run.pk)])
            record_hash = link_hash(seq, "run", str(run.pk), content_hash, prev)
            links.append(
                ChainRecord(
                    seq=seq,
                    kind="run",
                    ref=str(run.pk),
                    content_hash=content_hash,
                    prev_hash=prev,
                    record_hash=record_hash,
                )
            )
            prev = record_hash
        ChainRecord.objects.bulk_create(links)
    ChainHead.objects.update_or_create(pk=1, defaults={"seq": seq, "record_hash": prev})


SEEDED = 5_000  # runs seeded through the ORM; the rest are copies made in SQL (replicate)


def replicate(n: int) -> None:
    """Copies of the SEEDED runs until there are ``n``, in SQL (minutes instead of the ORM's half
    hour at 100,000): each copy with its steps, subject rows and a link, its query and session
    made its own (masking works on each) and its times moved back a minute per round. The copies'
    links carry their original's hashes: the export reads and writes them, it does not check them
    (``tools/verify_evidence.py`` would refuse a copy; the ORM-seeded runs verify)."""
    from agents.models import Run, RunStep, RunSubject
    from core.models import ChainHead, ChainRecord

    def columns(model, skip=("id",)):
        return [f.column for f in model._meta.concrete_fields if f.column not in skip]

    run_cols = columns(Run)
    shifted = {
        "query": "query || ' #' || %(k)s",
        "session_id": "session_id || '-' || %(k)s",
        "created_at": "strftime('%%Y-%%m-%%d %%H:%%M:%%f', created_at, '-%(k)s minutes')",
        "finished_at": "strftime('%%Y-%%m-%%d %%H:%%M:%%f', finished_at, '-%(k)s minutes')",
    }
    step_cols = columns(RunStep)
    subject_cols = columns(RunSubject)
    link_cols = columns(ChainRecord)
    top = ChainRecord.objects.order_by("-seq").values_list("seq", flat=True).first() or 0
    with connection.cursor() as cur:
        for k in range(1, (n - 1) // SEEDED + 1):
            count = min(SEEDED, n - k * SEEDED)
            off = k * SEEDED
            run_select = ", ".join(shifted.get(c, c) % {"k": k} for c in run_cols)
            cur.execute(
                f"INSERT INTO agents_run (id, {', '.join(run_cols)}) SELECT id + {off}, {run_select} "
                f"FROM agents_run WHERE id <= {count}"
            )
            for table, cols, key in (
                ("agents_runstep", step_cols, "run_id"),
                ("agents_runsubject", subject_cols, "run_id"),
            ):
                picked = ", ".join(
                    f"{c} + {off}" if c == key else shifted[c] % {"k": k} if c == "created_at" else c
                    for c in cols
                )
                cur.execute(
                    f"INSERT INTO {table} ({', '.join(cols)}) SELECT {picked} FROM {table} WHERE run_id <= {count}"
                )
            picked = ", ".join(
                f"seq + {top * k}"
                if c == "seq"
                else f"CAST(CAST(ref AS INTEGER) + {off} AS TEXT)"
                if c == "ref"
                else c
                for c in link_cols
            )
            cur.execute(
                f"INSERT INTO core_chainrecord ({', '.join(link_cols)}) SELECT {picked} FROM core_chainrecord "
                f"WHERE kind = 'run' AND CAST(ref AS INTEGER) <= {count}"
            )
    ChainHead.objects.filter(pk=1).update(
        seq=ChainRecord.objects.order_by("-seq").values_list("seq", flat=True)[0]
    )


def export_once(fmt: str) -> None:
    """In a fresh process: stream the whole export to /dev/null; print seconds, bytes, peak RSS."""
    from agents.evidence_rows import evidence_stream  # imported before the baseline below

    before = resource.getrusage(resource.RUSAGE_SELF)
    baseline_mb = before.ru_maxrss / 1024
    cpu_before = before.ru_utime + before.ru_stime
    start = time.perf_counter()
    size = 0
    with open(os.devnull, "w", encoding="utf-8") as sink:
        for piece in evidence_stream({}, fmt):
            size += len(piece.encode())
            sink.write(piece)
    seconds = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime - cpu_before
    peak_mb = usage.ru_maxrss / 1024
    print(
        json.dumps(
            {
                "format": fmt,
                "seconds": round(seconds, 2),
                "cpu_seconds": round(cpu, 2),
                "mb": round(size / 1e6, 1),
                "peak_rss_mb": round(peak_mb),
                "baseline_rss_mb": round(baseline_mb),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--export", choices=["csv", "jsonl"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.export:
        export_once(args.export)
        return
    started = time.perf_counter()
    seed(min(args.runs, SEEDED))
    if args.runs > SEEDED:
        replicate(args.runs)
    print(
        f"seeded {args.runs:,} runs in {time.perf_counter() - started:.0f} s ({os.environ['LLAMON_VAR_DIR']})"
    )
    print(f"{'format':<6} {'runs':>8} {'seconds':>8} {'CPU s':>8} {'MB':>7} {'peak RSS MB':>12}")
    for fmt in ("csv", "jsonl"):
        out = (
            subprocess.run(
                [sys.executable, __file__, "--export", fmt],
                capture_output=True,
                text=True,
                env=os.environ,
                check=True,
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        row = json.loads(out)
        print(
            f"{fmt:<6} {args.runs:>8,} {row['seconds']:>8} {row['cpu_seconds']:>8} {row['mb']:>7}"
            f" {row['peak_rss_mb']:>12} (before the export: {row['baseline_rss_mb']})"
        )


if __name__ == "__main__":
    main()
