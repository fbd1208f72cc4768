"""Celery worker lifecycle: per-process resources are made after the fork and closed on shutdown."""

from __future__ import annotations

import logging

from celery.signals import worker_process_init, worker_process_shutdown
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


@worker_process_shutdown.connect
def _on_worker_process_shutdown(**_: object) -> None:
    try:
        from servers.pool import web_pool_close

        web_pool_close()  # stops stdio MCP children too
    except Exception:  # pragma: no cover - shutdown must never raise
        logger.exception("closing the MCP pool failed")
