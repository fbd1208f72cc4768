"""Reads for MCP servers."""

from __future__ import annotations

from django.db.models import QuerySet

from llamon_agent.mcp.spec import McpServerSpec
from rules.models import McpServer


def mcp_server_list() -> QuerySet[McpServer]:
    """Every registered server, by mcp_id."""
    return McpServer.objects.order_by("mcp_id")


def mcp_server_spec(*, server: McpServer) -> McpServerSpec:
    """The engine's view of a server (what the registry endpoint serves)."""
    return McpServerSpec(
        mcp_id=server.mcp_id,
        transport=server.transport,
        command=server.command or None,
        args=list(server.args),
        env=list(server.env_names),
        url=server.url or None,
        headers=list(server.header_names),
        timeout_s=server.timeout_s,
    )
