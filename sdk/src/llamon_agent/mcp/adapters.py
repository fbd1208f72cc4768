"""The pre-step's tool backend over a pool (the pool itself makes the LangChain tools)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llamon_agent.mcp.errors import (
    UnknownServerError,
)
from llamon_agent.mcp.results import Normalized

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

    from llamon_agent.mcp.pool import McpPool


# --------------------------------------------------------------------------- pre-step backend


class PoolToolBackend:
    """The pre-step's tool backend over a pool: tools and calls for the bound ``mcp_ids`` only."""

    def __init__(self, pool: McpPool, mcp_ids: list[str] | tuple[str, ...] | set[str]) -> None:
        self.pool = pool
        self.mcp_ids = frozenset(mcp_ids)

    def _bound(self, mcp_id: str) -> bool:
        return mcp_id in self.mcp_ids and mcp_id in self.pool.registered()

    def tools_for(self, mcp_id: str) -> list[BaseTool] | None:
        """The server's tools as LangChain tools, or None when ``mcp_id`` is not bound."""
        if not self._bound(mcp_id):
            return None
        return self.pool.langchain_tools_sync(mcp_id)

    def call_tool(self, mcp_id: str, tool_name: str, params: dict[str, Any] | None) -> Normalized:
        """Call a tool synchronously; the normalized result, or an McpError subclass."""
        self._check(mcp_id)
        return self.pool.call_tool_sync(mcp_id, tool_name, params)

    def call_tool_checked(
        self, mcp_id: str, tool_name: str, params: dict[str, Any] | None
    ) -> tuple[Normalized, list[str]]:
        """:meth:`call_tool` plus why the result breaks the tool's output schema (the pre-step's warning)."""
        self._check(mcp_id)
        return self.pool.call_tool_checked_sync(mcp_id, tool_name, params)

    async def atools_for(self, mcp_id: str) -> list[BaseTool] | None:
        """Async :meth:`tools_for`."""
        if not self._bound(mcp_id):
            return None
        return await self.pool.langchain_tools(mcp_id)

    async def acall_tool(self, mcp_id: str, tool_name: str, params: dict[str, Any] | None) -> Normalized:
        """Async :meth:`call_tool`."""
        self._check(mcp_id)
        return await self.pool.call_tool(mcp_id, tool_name, params)

    def _check(self, mcp_id: str) -> None:
        if mcp_id not in self.mcp_ids:
            raise UnknownServerError(mcp_id, self.mcp_ids, where="this backend's bound servers")
