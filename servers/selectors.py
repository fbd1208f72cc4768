"""Reads for the MCP server pages."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.apps import apps
from django.db.models import QuerySet
from django.shortcuts import get_object_or_404

from core.models import AuditEvent
from llamon_agent.mcp.spec import McpServerSpec
from llamon_agent.mcp.transports import STDERR_MARKER
from servers.models import McpServer, ToolCallRecord

STDERR_HIDDEN = " (the server's stderr is shown to admins only)"


@dataclass(frozen=True)
class LastRefresh:
    """The latest successful tool refresh: when, by whom, and what it changed."""

    at: datetime
    actor_name: str
    diff: dict[str, Any]


def mcp_error_for(*, text: str, admin: bool) -> str:
    """An MCP error as a person may see it: a stdio child's stderr tail (it may echo what the child
    was given) only for admins; the engine always puts it last, after STDERR_MARKER."""
    if admin or STDERR_MARKER not in text:
        return text
    return text.split(STDERR_MARKER, 1)[0] + STDERR_HIDDEN


def mcp_server_get(*, pk: int) -> McpServer:
    """One server by primary key, or 404."""
    return get_object_or_404(McpServer, pk=pk)


def mcp_server_tool(*, server: McpServer, name: str) -> dict[str, Any] | None:
    """The stored tool ``{name, description, input_schema}`` of that name, or None."""
    return next((t for t in server.tools if t.get("name") == name), None)


def mcp_server_last_refresh(*, server: McpServer) -> LastRefresh | None:
    """What the last successful "refresh tools" changed (from the audit log), or None before any."""
    event = (
        AuditEvent.objects.filter(
            object_type=server._meta.label_lower, object_id=str(server.pk), action="mcp_server.refresh_tools"
        )
        .order_by("-created_at", "-id")
        .first()
    )
    if event is None or not isinstance(event.after, dict):
        return None
    return LastRefresh(at=event.created_at, actor_name=event.actor_name, diff=event.after.get("diff") or {})


def command_line(*, command: str, args: list[str]) -> str:
    """The stdio command exactly as it will run, quoted for a POSIX shell (it runs without one)."""
    return shlex.join([command, *args]) if command else ""


def pretty_json(value: Any) -> str:
    """Indented JSON for display (Korean and other text kept readable; the template escapes it)."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def mcp_tool_views(*, server: McpServer) -> list[dict[str, Any]]:
    """The server's stored tools for display: name, description, required names and the schemas as JSON
    (``output_schema_json`` is "" for a tool that declares no output schema)."""
    views = []
    for tool in server.tools:
        schema = tool.get("input_schema") or {}
        views.append(
            {
                "name": tool.get("name", ""),
                "description": tool.get("description", ""),
                "required": list(schema.get("required") or []) if isinstance(schema, dict) else [],
                "schema_json": pretty_json(schema),
                "output_schema_json": pretty_json(tool["output_schema"]) if tool.get("output_schema") else "",
            }
        )
    return views


def mcp_server_rule_count(*, server: McpServer) -> int:
    """How many rules (in any rule set) name this server's mcp_id (shown before a delete).

    Rules name a server by mcp_id, not by a foreign key, and the servers app does not import the
    rules app (rules build on servers): the model is looked up by name here, the one place it is needed.
    """
    return apps.get_model("rules", "Rule").objects.filter(mcp_id=server.mcp_id).count()


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


def mcp_server_registry_json(*, server: McpServer) -> dict[str, Any]:
    """A server's registry entry: its spec with the arguments as shown (secrets out of sight).

    A served agent starts the server from it: ``${NAME}`` placeholders reach it as written and are
    expanded there, from that process's environment (llamon_agent.mcp.transports.expand_args)."""
    data = mcp_server_spec(server=server).to_registry_json()
    data["args"] = server.args_shown
    return data


def tool_call_history(*, server: McpServer, user: Any) -> QuerySet[ToolCallRecord]:
    """``user``'s own calls made from ``server``'s page, newest first (never anyone else's)."""
    return ToolCallRecord.objects.filter(server=server, user=user).order_by("-created_at", "-id")
