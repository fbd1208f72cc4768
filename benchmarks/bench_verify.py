"""verify_records over a long chain: CPU, wall time and peak memory of walking N links.

Seeds a temporary SQLite database (or the one DATABASE_URL names, e.g. under .ci/with-postgres)
with N audit events and their links, computed exactly as ``core.audit.audit_write`` computes them
(the event's canonical record, its SHA-256, the link's hash over the one before), written in bulk;
then runs ``chain_verify`` (what ``manage.py verify_records`` runs) and prints the figures quoted in
docs/performance.md ("verify_records"). With ``--runs-dir DIR`` it verifies instead the database
benchmarks/bench_export.py seeded in DIR (runs with their steps: the run links' cost).

Run: .venv/bin/python benchmarks/bench_verify.py [--links 1000000]
     LLAMON_VAR_DIR=<dir> .venv/bin/python benchmarks/bench_verify.py --existing
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
if "LLAMON_VAR_DIR" not in os.environ:
    os.environ["LLAMON_VAR_DIR"] = tempfile.mkdtemp(prefix="llamon-bench-verify-")
os.environ["DJANGO_SETTINGS_MODULE"] = "llamon_web.settings_test"
os.environ["DEBUG"] = "0"  # as in production: no query log
for name in ("REDIS_URL", "LLAMON_TEST_DB"):
    os.environ.pop(name, None)

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402

BATCH = 20_000
ACTIONS = ["rule.update", "rule.create", "agent.update", "runs.export", "token.create"]


def seed(n: int) -> None:
    from core.chain import GENESIS, link_hash
    from core.content_hash import sha256

    call_command("migrate", verbosity=0)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    prev = GENESIS
    for first in range(1, n + 1, BATCH):
        events, links = [], []
        for pk in range(first, min(n, first + BATCH - 1) + 1):
            at = start + timedelta(seconds=pk)
            after = {"name": f"route_{pk % 500}", "when": "ctx.channel == 'app'", "enabled": True}
            content = {
                "id": pk,
                "actor": "kim",
                "action": ACTIONS[pk % len(ACTIONS)],
                "object_type": "rules.rule",
                "object_id": str(pk % 500),
                "object_repr": f"route_{pk % 500}",
                "before": None,
                "after": after,
                "created_at": at.isoformat(),
            }
            events.append(
                (
                    pk,
                    "kim",
                    content["action"],
                    "rules.rule",
                    content["object_id"],
                    content["object_repr"],
                    None,
                    _json(after),
                    at,
                )
            )
            content_hash = sha256(content)
            record_hash = link_hash(pk, "audit", str(pk), content_hash, prev)
            links.append((pk, "audit", str(pk), content_hash, prev, record_hash, at))
            prev = record_hash
        _insert(events, links)
    with connection.cursor() as cur:
        cur.execute("INSERT INTO core_chainhead (id, seq, record_hash) VALUES (1, %s, %s)", [n, prev])


EVENT_SQL = (
    "INSERT INTO rules_auditevent (id, actor_name, action, object_type, object_id, object_repr, before, after,"
    " created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
LINK_SQL = (
    "INSERT INTO core_chainrecord (seq, kind, ref, content_hash, prev_hash, record_hash, created_at)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s)"
)


def _naive(rows: list[tuple]) -> list[tuple]:
    return [(*row[:-1], row[-1].replace(tzinfo=None).isoformat(" ")) for row in rows]


def _insert(events: list[tuple], links: list[tuple]) -> None:
    with transaction.atomic():
        if connection.vendor == "sqlite":  # the driver itself: Django's per-row conversion cost most
            connection.ensure_connection()
            raw = connection.connection
            raw.executemany(EVENT_SQL.replace("%s", "?"), _naive(events))
            raw.executemany(LINK_SQL.replace("%s", "?"), _naive(links))
        else:
            with connection.cursor() as cur:
                cur.executemany(EVENT_SQL, events)
                cur.executemany(LINK_SQL, links)


def _json(value) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)


def verify() -> None:
    from core.chain import chain_verify
    from core.models import ChainRecord

    links = ChainRecord.objects.count()
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    verdict = chain_verify()
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    print(
        f"verify_records: {'ok' if verdict.ok else 'BROKEN: ' + verdict.detail}, {verdict.links:,} of {links:,} links;"
        f" {cpu:.1f} s CPU, {wall:.1f} s wall; peak RSS {after.ru_maxrss / 1024:.0f} MB"
        f" (before: {before.ru_maxrss / 1024:.0f} MB)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--links", type=int, default=1_000_000)
    parser.add_argument(
        "--existing", action="store_true", help="verify the database in LLAMON_VAR_DIR as it is"
    )
    args = parser.parse_args()
    if not args.existing:
        started = time.perf_counter()
        seed(args.links)
        print(
            f"seeded {args.links:,} audit events and links in {time.perf_counter() - started:.0f} s "
            f"({os.environ['LLAMON_VAR_DIR']}, {connection.vendor})"
        )
    verify()


if __name__ == "__main__":
    main()
