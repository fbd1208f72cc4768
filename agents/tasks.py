"""Celery tasks: each takes ids or plain values and calls one service."""

from __future__ import annotations

import os
import socket
import time
from datetime import UTC, datetime

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from celery.signals import before_task_publish
from django.conf import settings

SENT_AT_HEADER = "llamon_sent_at"


@shared_task(acks_late=True, ignore_result=True)
def worker_ping() -> None:
    """Record this worker process as alive (beat sends it; /healthz reads it)."""
    from agents.services import worker_heartbeat_record
    from agents.signals import PROCESS_STARTED_AT

    worker_heartbeat_record(
        hostname=f"{socket.gethostname()}:{os.getpid()}", pid=os.getpid(), started_at=PROCESS_STARTED_AT
    )


@shared_task(
    acks_late=True,
    ignore_result=True,
    soft_time_limit=settings.LLAMON_RUN_SOFT_LIMIT_S,
    time_limit=settings.LLAMON_RUN_HARD_LIMIT_S,
)
def run_execute_task(run_id: int) -> None:
    """Execute one run; a redelivered message finds it claimed and does nothing."""
    from agents.services import run_execute, run_finish

    try:
        run_execute(run_id=run_id)
    except SoftTimeLimitExceeded:
        run_finish(
            run_id=run_id,
            status="timed_out",
            error_kind="timeout",
            error=f"The run took longer than {settings.LLAMON_RUN_SOFT_LIMIT_S} s and was stopped.",
        )


@shared_task(bind=True, ignore_result=True)
def runs_reap_task(self) -> None:
    """Fail runs whose worker died, re-send lost run messages (beat, every LLAMON_REAPER_PERIOD_S)."""
    from agents.services import runs_reap, runs_redeliver
    from agents.signals import PROCESS_STARTED_AT

    runs_reap(reaper=f"{socket.gethostname()}:{os.getpid()}", reaper_started_at=PROCESS_STARTED_AT)
    sent_at = (self.request.headers or {}).get(SENT_AT_HEADER)
    sent_before = datetime.fromtimestamp(sent_at, tz=UTC) if isinstance(sent_at, int | float) else None
    runs_redeliver(sent_before=sent_before)


@before_task_publish.connect(sender="agents.tasks.runs_reap_task")
def _stamp_sent_at(headers: dict | None = None, **_: object) -> None:
    """Stamp the reaper's message with when it was sent: runs_redeliver's "sent before" line."""
    if headers is not None:
        headers.setdefault(SENT_AT_HEADER, time.time())


@shared_task(ignore_result=True)
def runs_expire_task() -> None:
    """Delete runs past the retention period (beat, hourly)."""
    from agents.services import runs_delete_expired

    runs_delete_expired()
