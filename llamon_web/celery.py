"""The Celery app: tasks ack late, no result backend (the database holds runs)."""

from __future__ import annotations

import os
import signal

from celery import Celery
from celery.signals import task_prerun, worker_process_init, worker_process_shutdown

from llamon_web import broker

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "llamon_web.settings")
broker.register()  # atomicfs://, the embedded default (settings)

app = Celery("llamon_web")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.update(
    task_acks_late=True,
    # A worker killed mid-task gives its message back; the run's conditional claim makes
    # the redelivery a no-op for work that already started.
    task_reject_on_worker_lost=True,
    task_ignore_result=True,
    result_backend=None,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    task_serializer="json",
    accept_content=["json"],
)
# Celery's Django fixup closes the database connections before and after every task unless this
# is set (then every 2 x N signals): a run would open a new connection first (~1.6 ms on SQLite, a
# TCP and auth round trip on PostgreSQL). The worker keeps its connection; before each task,
# agents.signals closes one that is broken, in a transaction or, on PostgreSQL, not answering.
app.conf.CELERY_DB_REUSE_MAX = 1000
app.autodiscover_tasks()


@worker_process_shutdown.connect
def _export_queued_spans(**_: object) -> None:
    """A worker child that stops sends its queued run spans first (OpenTelemetry export, when on)."""
    from llamon_agent.otel import shutdown_tracer_provider

    shutdown_tracer_provider()


_pool_child = False  # set in a prefork pool's child process


def _leave_sigterm_to_the_main_process(signum: int, frame: object) -> None:
    """A pool child's SIGTERM handler: nothing. The main process's warm shutdown ends the child once
    its run is done."""


@worker_process_init.connect
def _mark_pool_child(**_: object) -> None:
    global _pool_child
    _pool_child = True


@task_prerun.connect
def _pool_children_finish_their_runs(**_: object) -> None:
    """A SIGTERM to the worker's whole process group (systemd's default KillMode, container inits,
    `kill -TERM -PGID`) reaches the pool's children too, and billiard's handler ends a child at
    once, mid-run. A child leaves it to the main process instead, whose warm shutdown lets the runs
    finish and then ends the children. Set before each task because billiard installs its handler
    after worker_process_init; a handler, not SIG_IGN, so that the MCP servers a child starts do
    not inherit it. The hard time limit still ends a child (billiard follows SIGTERM with SIGKILL)."""
    if _pool_child and signal.getsignal(signal.SIGTERM) is not _leave_sigterm_to_the_main_process:
        signal.signal(signal.SIGTERM, _leave_sigterm_to_the_main_process)
