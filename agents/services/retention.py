"""Retention: delete finished runs older than the privacy settings' period, in batches, and the
tester's recent inputs last used before it."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from agents.evidence import runs_deletion
from agents.models import Run
from agents.redaction import privacy_get
from rules.tester import tester_recent_delete_before

logger = logging.getLogger(__name__)


RETENTION_BATCH = 500


def runs_delete_expired(*, now: datetime | None = None, batch: int = RETENTION_BATCH) -> int:
    """Delete finished runs older than the retention period; returns how many runs.

    In batches of ``batch`` runs (with their steps), each its own short transaction: one
    DELETE of a million rows would hold its locks (SQLite: the whole database) for minutes,
    while workers are writing steps. A run that finishes meanwhile is simply left for next time.
    """
    days = privacy_get().retention_days
    cutoff = (now or timezone.now()) - timedelta(days=days)
    forgotten = tester_recent_delete_before(cutoff)
    if forgotten:
        logger.info(
            "retention: forgot %d recent tester inputs last used before %s", forgotten, cutoff.isoformat()
        )
    expired = Run.objects.filter(status__in=Run.FINISHED, finished_at__lt=cutoff).order_by(
        "finished_at", "id"
    )
    total = 0
    while ids := list(expired.values_list("id", flat=True)[:batch]):
        with transaction.atomic():
            runs_deletion(ids, reason=f"retention: finished before {cutoff.isoformat()}")
            deleted = Run.objects.filter(id__in=ids).delete()[1].get(Run._meta.label, 0)
        total += deleted
        logger.info("retention: deleted %d runs finished before %s", deleted, cutoff.isoformat())
    return total
