"""Celery tasks of the servers app: thin wrappers around servers.services."""

from __future__ import annotations

import logging

from celery import shared_task

from servers import services

log = logging.getLogger(__name__)


@shared_task(ignore_result=True)
def tools_check_task() -> dict[str, str]:
    """The periodic tool check (tool drift): every enabled server's tools listed again."""
    outcome = services.mcp_servers_check_tools()
    for mcp_id, line in outcome.items():
        if line != "unchanged":
            log.info("tools of %s: %s", mcp_id, line)
    return outcome
