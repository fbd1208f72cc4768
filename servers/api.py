"""The MCP servers' API: servers, tool calls and the registry that llamon_agent.mcp.HttpRegistry reads.

Handlers authorize (``auth=roles(...)``), validate (a schema), make one service or selector call
and return. Domain errors become ErrorOut responses in llamon_web.api.
"""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpRequest
from ninja import Path, Router, Status

from accounts.api_auth import roles
from core.api import CHANGE_REQUESTED, DbId, error_responses, get_or_404
from servers import selectors, services
from servers.models import McpServer
from servers.schemas import (
    McpServerIn,
    McpServerOut,
    McpServerPatchIn,
    RegistrySpecOut,
    ToolCallIn,
    ToolCallOut,
    ToolsDiffOut,
)

router = Router()
VIEWER, EDITOR, ADMIN = roles("viewer"), roles("editor"), roles("admin")


# --- MCP servers ---------------------------------------------------------------------------------

SERVERS = ["mcp-servers"]


@router.get(
    "/mcp-servers", response={200: list[McpServerOut], **error_responses()}, auth=VIEWER, tags=SERVERS
)
def list_mcp_servers(request: HttpRequest) -> Any:
    """Every registered MCP server with its tools and health."""
    return selectors.mcp_server_list()


@router.post("/mcp-servers", response={201: McpServerOut, **error_responses()}, auth=ADMIN, tags=SERVERS)
def create_mcp_server(request: HttpRequest, payload: McpServerIn) -> Any:
    """Register a server (admin): the URL guard and the stdio allow-list apply, as on the page."""
    return Status(201, services.mcp_server_create(actor=request.auth, **payload.dict()))


@router.get(
    "/mcp-servers/{server_id}",
    response={200: McpServerOut, **error_responses(404)},
    auth=VIEWER,
    tags=SERVERS,
)
def get_mcp_server(request: HttpRequest, server_id: DbId) -> Any:
    """One server with its tools."""
    return get_or_404(McpServer, "MCP server", pk=server_id)


@router.patch(
    "/mcp-servers/{server_id}",
    response={200: McpServerOut, **CHANGE_REQUESTED, **error_responses(404)},
    auth=ADMIN,
    tags=SERVERS,
)
def update_mcp_server(request: HttpRequest, server_id: DbId, payload: McpServerPatchIn) -> Any:
    """Change a server's settings (admin); absent fields keep their value."""
    server = get_or_404(McpServer, "MCP server", pk=server_id)
    return services.mcp_server_update(actor=request.auth, server=server, **payload.dict(exclude_unset=True))


@router.delete(
    "/mcp-servers/{server_id}",
    response={204: None, **CHANGE_REQUESTED, **error_responses(404)},
    auth=ADMIN,
    tags=SERVERS,
)
def delete_mcp_server(request: HttpRequest, server_id: DbId) -> Any:
    """Remove a server (admin); rules naming it stay, flagged as unknown."""
    services.mcp_server_delete(actor=request.auth, server=get_or_404(McpServer, "MCP server", pk=server_id))
    return Status(204, None)


@router.post(
    "/mcp-servers/{server_id}/refresh",
    response={200: ToolsDiffOut, **error_responses(404)},
    auth=ADMIN,
    tags=SERVERS,
)
def refresh_mcp_server_tools(request: HttpRequest, server_id: DbId) -> Any:
    """Ask the server for its tools (admin); answers what changed since the last refresh."""
    server = get_or_404(McpServer, "MCP server", pk=server_id)
    diff = services.mcp_server_refresh_tools(actor=request.auth, server=server)
    return {**diff.to_json(), "tools": server.tools}


@router.post(
    "/mcp-servers/{server_id}/call",
    response={200: ToolCallOut, **error_responses(404)},
    auth=EDITOR,
    tags=SERVERS,
)
def call_mcp_tool(request: HttpRequest, server_id: DbId, payload: ToolCallIn) -> Any:
    """Call one tool (editor) with arguments checked against its input schema; the raw result and latency."""
    server = get_or_404(McpServer, "MCP server", pk=server_id)
    call = services.mcp_server_call_tool(
        actor=request.auth, server=server, tool_name=payload.tool, arguments=payload.arguments
    )
    return {"result": call.result, "raw": call.raw, "latency_ms": call.latency_ms}


# --- Registry (what llamon_agent.mcp.HttpRegistry reads) ------------------------------------------

REGISTRY = ["registry"]


@router.get(
    "/registry", response={200: dict[str, RegistrySpecOut], **error_responses()}, auth=VIEWER, tags=REGISTRY
)
def registry(request: HttpRequest) -> Any:
    """Every enabled server as ``{mcp_id: spec}``, in McpServerSpec's JSON shape."""
    return {
        s.mcp_id: selectors.mcp_server_registry_json(server=s)
        for s in selectors.mcp_server_list().filter(enabled=True)
    }


@router.get(
    "/registry/{mcp_id}", response={200: RegistrySpecOut, **error_responses(404)}, auth=VIEWER, tags=REGISTRY
)
def registry_entry(request: HttpRequest, mcp_id: str = Path(..., max_length=64)) -> Any:
    """One enabled server's spec; 404 for an unknown or disabled mcp_id."""
    server = selectors.mcp_server_list().filter(mcp_id=mcp_id, enabled=True).first()
    if server is None:
        raise Http404(f"The registry has no enabled MCP server {mcp_id!r}.")
    return selectors.mcp_server_registry_json(server=server)
