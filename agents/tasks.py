"""Celery tasks: each takes ids or plain values and calls one service."""

from __future__ import annotations

import os
import socket

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings


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
            run_id=run_id, status="timed_out", error_kind="timeout",
            error=f"The run took longer than {settings.LLAMON_RUN_SOFT_LIMIT_S} s and was stopped.",
        )  # fmt: skip


@shared_task(ignore_result=True)
def runs_reap_task() -> None:
    """Fail runs whose worker died (beat, every LLAMON_REAPER_PERIOD_S)."""
    from agents.services import runs_reap

    runs_reap()


@shared_task(ignore_result=True)
def runs_expire_task() -> None:
    """Delete runs past the retention period (beat, hourly)."""
    from agents.services import runs_delete_expired

    runs_delete_expired()
