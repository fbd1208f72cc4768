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


@shared_task(
    acks_late=True,
    ignore_result=True,
    soft_time_limit=settings.LLAMON_RUN_SOFT_LIMIT_S,
    time_limit=settings.LLAMON_RUN_HARD_LIMIT_S,
)
def suggestion_part_task(job_id: int, stage: str, number: int) -> None:
    """One part of one stage of a mining job; a redelivered message finds the part written and goes on."""
    from governance.suggestions import suggestion_fail, suggestion_part

    try:
        suggestion_part(job_id=job_id, stage=stage, number=number)
    except SoftTimeLimitExceeded:
        suggestion_fail(
            job_id=job_id,
            error=f"A part took longer than {settings.LLAMON_RUN_SOFT_LIMIT_S} s and was stopped: "
            "mine a shorter period.",
        )
