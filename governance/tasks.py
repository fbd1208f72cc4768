"""Celery tasks of the governance app: each takes ids and calls one service."""

from __future__ import annotations

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings


@shared_task(
    acks_late=True,
    ignore_result=True,
    soft_time_limit=settings.LLAMON_RUN_SOFT_LIMIT_S,
    time_limit=settings.LLAMON_RUN_HARD_LIMIT_S,
)
def impact_execute_task(analysis_id: int) -> None:
    """Replay one impact analysis; a redelivered message finds it claimed and does nothing."""
    from governance.services import impact_execute, impact_fail

    try:
        impact_execute(analysis_id=analysis_id)
    except SoftTimeLimitExceeded:
        impact_fail(
            analysis_id=analysis_id,
            error=f"The analysis took longer than {settings.LLAMON_RUN_SOFT_LIMIT_S} s and was stopped: "
            "narrow it (fewer days, one agent, a chatbotId or a userId).",
        )
