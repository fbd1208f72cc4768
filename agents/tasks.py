"""Celery tasks: each takes ids or plain values and calls one service."""

from __future__ import annotations

import os
import socket

from celery import shared_task


@shared_task(acks_late=True, ignore_result=True)
def worker_ping() -> None:
    """Record this worker process as alive (beat sends it; /healthz reads it)."""
    from agents.services import worker_heartbeat_record
    from agents.signals import PROCESS_STARTED_AT

    worker_heartbeat_record(hostname=f"{socket.gethostname()}:{os.getpid()}", pid=os.getpid(), started_at=PROCESS_STARTED_AT)
