"""Handing a run to a worker: services enqueue by task name, so they never import the tasks that call them.

The run's time limits travel in the message, from this process's settings (as ``.delay`` would send
the task's own): web and workers share one configuration.
"""

from __future__ import annotations

from celery import current_app
from django.conf import settings

RUN_EXECUTE_TASK = "agents.tasks.run_execute_task"


def run_enqueue(run_id: int) -> None:
    """Publish the task that executes run ``run_id`` (raises kombu's OperationalError if the broker is down)."""
    current_app.send_task(
        RUN_EXECUTE_TASK,
        args=(run_id,),
        soft_time_limit=settings.LLAMON_RUN_SOFT_LIMIT_S,
        time_limit=settings.LLAMON_RUN_HARD_LIMIT_S,
    )
