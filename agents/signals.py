"""Celery worker lifecycle: per-process resources are made after the fork and closed on shutdown."""

from __future__ import annotations

import logging

from celery.signals import task_prerun, worker_process_init, worker_process_shutdown
from django.utils import timezone

logger = logging.getLogger(__name__)
PROCESS_STARTED_AT = timezone.now()


@worker_process_init.connect
def _on_worker_process_init(**_: object) -> None:
    global PROCESS_STARTED_AT
    PROCESS_STARTED_AT = timezone.now()
    from django.db import connections

    # Connections inherited from the parent must never be shared with it.
    for conn in connections.all(initialized_only=True):
        conn.close()
    # The MCP pool (its loop thread and sessions) is made here, after the fork, never before.
    from servers.pool import web_pool

    web_pool()
    # Sessions to the agents' servers open now, in the background, not in the first run.
    from agents.runtime import warm_pool_in_background

    warm_pool_in_background()


@task_prerun.connect
def _on_task_prerun(**_: object) -> None:
    """Keep this process's database connections from one task to the next (llamon_web/celery.py),
    but close one that cannot serve the next task: after a database error, left in a
    transaction, or not answering (``is_usable``: a round trip on PostgreSQL). The task then
    connects again on its first query."""
    from django.db import connections

    for conn in connections.all(initialized_only=True):
        if conn.connection is None:
            continue
        try:
            usable = (
                not conn.errors_occurred
                and not conn.in_atomic_block
                and conn.get_autocommit() == conn.settings_dict["AUTOCOMMIT"]
                and conn.is_usable()
            )
        except Exception:
            usable = False
        if not usable:
            try:
                conn.close()
            except Exception:  # closing a broken connection may fail too: it is gone either way
                logger.warning("closing an unusable database connection failed", exc_info=True)


@worker_process_shutdown.connect
def _on_worker_process_shutdown(**_: object) -> None:
    try:
        from servers.pool import web_pool_close

        web_pool_close()  # stops stdio MCP children too
    except Exception:  # pragma: no cover - shutdown must never raise
        logger.exception("closing the MCP pool failed")
