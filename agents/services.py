"""Writes for agents, runs and workers."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from agents.models import WorkerHeartbeat


def worker_heartbeat_record(*, hostname: str, pid: int, started_at: datetime | None = None) -> WorkerHeartbeat:
    """Record that a worker process is alive now (one row per hostname)."""
    now = timezone.now()
    heartbeat, _ = WorkerHeartbeat.objects.update_or_create(
        hostname=hostname,
        defaults={"pid": pid, "seen_at": now, "started_at": started_at or now},
    )
    return heartbeat
