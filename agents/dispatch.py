"""Handing a run to a worker: services enqueue by task name, so they never import the tasks that call them.

The message carries no time limits, so the worker applies the ones of its own task (its settings).
"""

from __future__ import annotations

from celery import current_app

RUN_EXECUTE_TASK = "agents.tasks.run_execute_task"


def run_enqueue(run_id: int) -> None:
    """Publish the task that executes run ``run_id`` (raises kombu's OperationalError if the broker is down)."""
    current_app.send_task(RUN_EXECUTE_TASK, args=(run_id,))
