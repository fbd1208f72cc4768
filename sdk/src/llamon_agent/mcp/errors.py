"""Errors of the MCP client side; each message names the server (and tool) it is about."""

from __future__ import annotations

from collections.abc import Iterable


def _where(mcp_id: str | None, tool_name: str | None) -> str:
    if mcp_id and tool_name:
        return f"MCP server '{mcp_id}', tool '{tool_name}'"
    if mcp_id:
        return f"MCP server '{mcp_id}'"
    if tool_name:
        return f"MCP tool '{tool_name}'"
    return "MCP"


class McpError(Exception):
    """Base of every error raised by ``llamon_agent.mcp``; ``str()`` is meant for people."""

    def __init__(self, message: str, *, mcp_id: str | None = None, tool_name: str | None = None) -> None:
        super().__init__(message)
        self.mcp_id = mcp_id
        self.tool_name = tool_name

    @classmethod
    def about(cls, reason: str, *, mcp_id: str | None = None, tool_name: str | None = None) -> McpError:
        """``<where>: <reason>``, e.g. ``MCP server 'crm', tool 'get_order': timed out after 2s``."""
        return cls(f"{_where(mcp_id, tool_name)}: {reason}", mcp_id=mcp_id, tool_name=tool_name)


class McpTimeoutError(McpError, TimeoutError):
    """A request got no answer within its timeout (the request was cancelled)."""


class McpConnectionError(McpError, ConnectionError):
    """The server could not be started or reached, or the session died during a call."""


class McpToolError(McpError):
    """The tool ran and answered with ``isError`` (or the server refused the request)."""


class McpProtocolError(McpError):
    """The server's reply was malformed: bad JSON-RPC, bad result shape or bad content."""


class MCPNotBoundError(McpError):
    """``MCPHandle.call()`` before ``bind_registry()`` / ``bind_specs()``."""


class UnknownToolError(McpError, LookupError):
    """The bound server has no tool of that name."""

    def __init__(self, mcp_id: str, tool_name: str, available: Iterable[str]) -> None:
        names = sorted(available)
        listing = ", ".join(names) if names else "(none)"
        super().__init__(
            f"MCP server '{mcp_id}' has no tool '{tool_name}'; available tools: {listing}",
            mcp_id=mcp_id,
            tool_name=tool_name,
        )
        self.available = names


class UnknownServerError(McpError, LookupError):
    """No server with that ``mcp_id`` is registered (pool) or known (registry)."""

    def __init__(self, mcp_id: str, known: Iterable[str] | None = None, *, where: str = "") -> None:
        detail = f" in {where}" if where else ""
        message = f"unknown MCP server '{mcp_id}'{detail}"
        if known is not None:
            names = sorted(known)
            message += f"; known servers: {', '.join(names) if names else '(none)'}"
        super().__init__(message, mcp_id=mcp_id)


class RegistryError(McpError):
    """The registry could not be read: a bad file, a bad answer, a refused token, no registry configured."""


class PoolUsageError(McpError, RuntimeError):
    """The pool was used in a way that cannot work (closed, inherited across fork, sync call on its own loop)."""
