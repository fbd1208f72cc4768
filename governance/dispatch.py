"""Handing an analysis to a worker by task name: services never import the tasks that call them.

The time limits travel in the message: the run limits (LLAMON_RUN_SOFT_LIMIT_S / _HARD_LIMIT_S),
one configuration shared by web and workers.
"""

from __future__ import annotations

from celery import current_app
from django.conf import settings

IMPACT_EXECUTE_TASK = "governance.tasks.impact_execute_task"


def impact_enqueue(analysis_id: int) -> None:
    """Publish the task that replays analysis ``analysis_id`` (kombu's OperationalError if the broker is down)."""
    current_app.send_task(
        IMPACT_EXECUTE_TASK,
        args=(analysis_id,),
        soft_time_limit=settings.LLAMON_RUN_SOFT_LIMIT_S,
        time_limit=settings.LLAMON_RUN_HARD_LIMIT_S,
    )


SUGGESTION_PART_TASK = "governance.tasks.suggestion_part_task"


def suggestion_enqueue(job_id: int, stage: str, number: int) -> None:
    """Publish the task of one part of one stage of a mining job."""
    current_app.send_task(
        SUGGESTION_PART_TASK,
        args=(job_id, stage, number),
        soft_time_limit=settings.LLAMON_RUN_SOFT_LIMIT_S,
        time_limit=settings.LLAMON_RUN_HARD_LIMIT_S,
    )
