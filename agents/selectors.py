"""Reads for agents, runs and workers."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import QuerySet
from django.utils import timezone

from agents.models import WorkerHeartbeat


def worker_live_list(*, within_s: int) -> QuerySet[WorkerHeartbeat]:
    """Workers seen in the last ``within_s`` seconds."""
    return WorkerHeartbeat.objects.filter(seen_at__gte=timezone.now() - timedelta(seconds=within_s))
