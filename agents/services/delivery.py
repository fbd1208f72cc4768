"""Runs that lost their worker or their message: reap the stale ones, redeliver the undelivered."""

from __future__ import annotations

import logging
import os
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Max, Q
from django.utils import timezone

from agents import dispatch
from agents.errors import (
    NOT_DELIVERED,
    SERVED_LOST,
    WORKER_LOST,
)
from agents.evidence import run_end
from agents.models import Run, WorkerHeartbeat

logger = logging.getLogger(__name__)


def runs_reap(
    *,
    stale_after_s: int | None = None,
    served_stale_after_s: int | None = None,
    reaper: str = "",
    reaper_started_at: datetime | None = None,
) -> int:
    """Fail running runs that stopped showing signs of life; returns how many.

    Worker runs beat every LLAMON_RUN_HEARTBEAT_S, so a stale heartbeat means the worker died.
    Served and flow runs beat with every batch of trace events they send (one LLM turn can
    take minutes without any), so they get the longer LLAMON_SERVED_STALE_AFTER_S.

    ``reaper`` names the worker process running this pass (the periodic task). It is alive, and it
    records so; when no worker could record a sign of life for two reaper periods before it, the
    database was not answering (or no worker ran): no heartbeat could be written either, so this
    pass blames nobody and the runs get a full stale period to beat again.
    """
    if reaper and _after_a_silence(reaper, reaper_started_at):
        return 0
    stale_after_s = stale_after_s or settings.LLAMON_RUN_STALE_AFTER_S
    served_stale_after_s = served_stale_after_s or settings.LLAMON_SERVED_STALE_AFTER_S
    worker_runs = Run.objects.filter(source=Run.Source.WORKER)
    served_runs = Run.objects.exclude(source=Run.Source.WORKER)
    overdue = _reap_hard_limited(worker_runs, stale_after_s)
    return (
        overdue
        + _reap(worker_runs, stale_after_s, WORKER_LOST, "worker_lost")
        + _reap(served_runs, served_stale_after_s, SERVED_LOST, "served_lost")
    )


def worker_heartbeat_record(
    *, hostname: str, pid: int, started_at: datetime | None = None
) -> WorkerHeartbeat:
    """Record that a worker process is alive now (one row per hostname)."""
    now = timezone.now()
    heartbeat, _created = WorkerHeartbeat.objects.update_or_create(
        hostname=hostname,
        defaults={"pid": pid, "seen_at": now, "started_at": started_at or now},
    )
    return heartbeat


def _after_a_silence(reaper: str, started_at: datetime | None) -> bool:
    now = timezone.now()
    last = WorkerHeartbeat.objects.aggregate(last=Max("seen_at"))["last"]
    worker_heartbeat_record(hostname=reaper, pid=os.getpid(), started_at=started_at)
    silent = last is not None and last < now - timedelta(seconds=2 * settings.LLAMON_REAPER_PERIOD_S)
    if silent:
        logger.warning(
            "no worker could record a sign of life since %s (the database was not answering?): "
            "no run is failed for a missed heartbeat on this pass",
            last.isoformat(),
        )
    return silent


def _reap_hard_limited(runs: Any, stale_after_s: int) -> int:
    """Worker runs the hard time limit killed (silent, started longer ago than it): timed_out, not failed."""
    now = timezone.now()
    limit_s = settings.LLAMON_RUN_HARD_LIMIT_S
    overdue = runs.filter(
        status=Run.Status.RUNNING,
        heartbeat_at__lt=now - timedelta(seconds=stale_after_s),
        started_at__lte=now - timedelta(seconds=limit_s),
    )
    error = f"The run took longer than the hard limit of {limit_s} s and its worker process was stopped."
    ids = list(overdue.values_list("pk", flat=True))
    for run_id in ids:
        if run_end(
            run_id,
            where={
                "status": Run.Status.RUNNING,
                "heartbeat_at__lt": now - timedelta(seconds=stale_after_s),
                "started_at__lte": now - timedelta(seconds=limit_s),
            },
            status=Run.Status.TIMED_OUT,
            error=error,
            error_kind="timeout",
            finished_at=now,
        ):
            logger.warning("run %s timed out: %s", run_id, error)
    return len(ids)


def runs_redeliver(*, sent_before: datetime | None = None) -> dict[str, int]:
    """Re-send the task of queued worker runs whose message was lost; fail those re-sent too often.

    ``sent_before`` is when the message of the task calling this was sent (the reaper's, see
    agents.tasks). The queue is first in, first out, and that message has been taken by a
    worker, so every message sent before it has been taken too: a worker run still queued whose
    message was sent more than LLAMON_RUN_CLAIM_GRACE_S earlier lost it (a Redis restart, a
    crash between commit and publish). A run waiting behind a backlog is never touched, since its
    message is still ahead in the queue. Without ``sent_before`` (a direct call) it is now.

    A lost run is sent again, at most LLAMON_RUN_DELIVERY_ATTEMPTS times; after that it fails
    with NOT_DELIVERED. A duplicate message is harmless: the claim is conditional.
    Returns ``{"resent": n, "failed": m}``.
    """
    cutoff = (sent_before or timezone.now()) - timedelta(seconds=settings.LLAMON_RUN_CLAIM_GRACE_S)
    lost = Run.objects.filter(source=Run.Source.WORKER, status=Run.Status.QUEUED).filter(
        Q(queued_at__lt=cutoff) | Q(queued_at__isnull=True, created_at__lt=cutoff)
    )
    counts = {"resent": 0, "failed": 0}
    for run_id, attempts in lost.values_list("pk", "delivery_attempts"):
        mine = Run.objects.filter(pk=run_id, status=Run.Status.QUEUED, delivery_attempts=attempts)
        if attempts >= settings.LLAMON_RUN_DELIVERY_ATTEMPTS:
            error = NOT_DELIVERED.format(attempts=attempts + 1)
            failed = run_end(
                run_id,
                where={"status": Run.Status.QUEUED, "delivery_attempts": attempts},
                status=Run.Status.FAILED,
                error=error,
                error_kind="not_delivered",
            )
            if failed:
                counts["failed"] += 1
                logger.warning("run %s failed: %s", run_id, error)
        elif mine.update(delivery_attempts=attempts + 1, queued_at=timezone.now()):
            dispatch.run_enqueue(run_id)
            counts["resent"] += 1
            logger.warning("run %s: its task message was lost; sent again (attempt %s)", run_id, attempts + 2)
    return counts


def _reap(runs: Any, stale_after_s: int, message: str, kind: str) -> int:
    cutoff = timezone.now() - timedelta(seconds=stale_after_s)
    stale = list(runs.filter(status=Run.Status.RUNNING, heartbeat_at__lt=cutoff).values_list("pk", flat=True))
    error = message.format(seconds=stale_after_s)
    for run_id in stale:
        updated = run_end(
            run_id,
            where={"status": Run.Status.RUNNING, "heartbeat_at__lt": cutoff},
            status=Run.Status.FAILED,
            error=error,
            error_kind=kind,
        )
        if updated:
            logger.warning("run %s failed: %s", run_id, error)
    return len(stale)
