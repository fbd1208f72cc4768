"""``MCPHandle``: how a Flow node calls MCP tools (``mcp = MCPHandle()`` at module level).

A handle is cheap to create and does no I/O until it is bound. Binding loads specs (from
the registry, or given), registers them in the process pool and loads their tools; calls
go through the pool's pooled sessions. A handle keeps its specs, so after a fork it
re-registers them in the child's pool on the next call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from llamon_agent.mcp.errors import MCPNotBoundError, UnknownServerError, UnknownToolError
from llamon_agent.mcp.results import Normalized
from llamon_agent.mcp.spec import McpServerSpec
from llamon_agent.trace import current_trace, jsonable, start_span

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

    from llamon_agent.mcp.pool import McpPool


class MCPHandle:
    """Calls to one bound MCP server (``mcp_id``) out of the servers it loaded (``mcp_ids``)."""

    def __init__(self, *, pool: McpPool | None = None) -> None:
        self._pool = pool  # None: the process-wide pool, looked up at each use (fork-safe)
        self._specs: dict[str, McpServerSpec] = {}
        self._tool_names: dict[str, frozenset[str]] = {}
        self._mcp_id: str | None = None

    def __repr__(self) -> str:
        if self._mcp_id is None:
            return "<MCPHandle (not bound)>"
        return f"<MCPHandle mcp_id={self._mcp_id!r} mcp_ids={sorted(self._specs)!r}>"

    @property
    def bound(self) -> bool:
        return self._mcp_id is not None

    @property
    def mcp_id(self) -> str | None:
        return self._mcp_id

    @property
    def mcp_ids(self) -> list[str]:
        return list(self._specs)

    # ---------------------------------------------------------------- binding

    async def bind_registry(
        self, settings: Any = None, mcp_ids: Iterable[str] | None = None, mcp_id: str | None = None
    ) -> None:
        """Load ``mcp_ids`` from the registry the settings name, register them, load their tools."""
        from llamon_agent.mcp.registry import registry_from_settings

        ids = _ids(mcp_ids, mcp_id)
        specs = await registry_from_settings(settings if settings is not None else _default_settings()).get(
            ids
        )
        await self.bind_specs(specs, mcp_id=mcp_id)

    async def bind_specs(
        self, specs: Iterable[McpServerSpec] | Mapping[str, McpServerSpec], mcp_id: str | None = None
    ) -> None:
        """Bind to specs already at hand; ``mcp_id`` (default: the only one) is what ``call()`` uses."""
        spec_list = list(specs.values()) if isinstance(specs, Mapping) else list(specs)
        by_id = {spec.mcp_id: spec for spec in spec_list}
        if not by_id:
            raise ValueError("bind needs at least one MCP server")
        chosen = _choose(by_id, mcp_id)
        pool = self._current_pool()
        tool_names: dict[str, frozenset[str]] = {}
        for spec in by_id.values():
            pool.register(spec)
            tools = await pool.list_tools(spec.mcp_id)
            tool_names[spec.mcp_id] = frozenset(tool.name for tool in tools)
        # Swap only once everything loaded: a failed re-bind leaves the old binding usable.
        self._specs, self._tool_names, self._mcp_id = by_id, tool_names, chosen

    # ---------------------------------------------------------------- calls

    async def call(
        self,
        tool_name: str,
        params: dict[str, Any] | None = None,
        *,
        mcp_id: str | None = None,
        timeout: float | None = None,
    ) -> Normalized:
        """Call ``tool_name`` on the bound server: a dict (structured content or JSON text) or a string."""
        target = self._target(mcp_id)
        pool = self._current_pool()
        pool.register(self._specs[target])
        await self._check_tool(pool, target, tool_name)
        traced = current_trace()
        if traced is None:
            return await pool.call_tool(target, tool_name, params or {}, timeout=timeout)
        # Inside a traced flow: the call is a tool step, stored before it starts.
        sink, parent = traced
        step = start_span(
            sink, "tool", tool_name, input=jsonable(params or {}), parent=parent, meta={"mcp_id": target}
        )
        try:
            result = await pool.call_tool(target, tool_name, params or {}, timeout=timeout)
        except BaseException as exc:
            step.fail(str(exc) or type(exc).__name__)
            raise
        else:
            step.output = jsonable(result)
            return result
        finally:
            step.finish()

    def call_sync(
        self,
        tool_name: str,
        params: dict[str, Any] | None = None,
        *,
        mcp_id: str | None = None,
        timeout: float | None = None,
    ) -> Normalized:
        """Blocking :meth:`call` for plain threads."""
        target = self._target(mcp_id)
        pool = self._current_pool()
        pool.register(self._specs[target])
        if tool_name not in self._tool_names[target]:
            self._refresh_tools_sync(pool, target, tool_name)
        return pool.call_tool_sync(target, tool_name, params or {}, timeout=timeout)

    async def tools(self, mcp_id: str | None = None) -> list[Any]:
        """The MCP ``Tool`` list of the bound server (or of ``mcp_id``)."""
        target = self._target(mcp_id)
        pool = self._current_pool()
        pool.register(self._specs[target])
        return await pool.list_tools(target)

    async def langchain_tools(self, mcp_id: str | None = None) -> list[BaseTool]:
        """LangChain tools of the bound server (or of ``mcp_id``), on the pooled session."""
        target = self._target(mcp_id)
        pool = self._current_pool()
        pool.register(self._specs[target])
        return await pool.langchain_tools(target)

    # ---------------------------------------------------------------- helpers

    def _current_pool(self) -> McpPool:
        if self._pool is not None:
            return self._pool
        from llamon_agent.mcp.pool import get_pool

        return get_pool()

    def _target(self, mcp_id: str | None) -> str:
        if self._mcp_id is None:
            raise MCPNotBoundError(
                "this MCPHandle is not bound: await mcp.bind_registry(settings, mcp_ids=[...], mcp_id=...) "
                "once (e.g. in build_graph) before calling tools"
            )
        target = self._mcp_id if mcp_id is None else mcp_id
        if target not in self._specs:
            raise UnknownServerError(target, self._specs, where="this MCPHandle's bound servers")
        return target

    async def _check_tool(self, pool: McpPool, mcp_id: str, tool_name: str) -> None:
        if tool_name in self._tool_names[mcp_id]:
            return
        # The server may have gained the tool since binding: ask once more before refusing.
        tools = await pool.list_tools(mcp_id, refresh=True)
        self._tool_names[mcp_id] = frozenset(tool.name for tool in tools)
        if tool_name not in self._tool_names[mcp_id]:
            raise UnknownToolError(mcp_id, tool_name, self._tool_names[mcp_id])

    def _refresh_tools_sync(self, pool: McpPool, mcp_id: str, tool_name: str) -> None:
        tools = pool.list_tools_sync(mcp_id, refresh=True)
        self._tool_names[mcp_id] = frozenset(tool.name for tool in tools)
        if tool_name not in self._tool_names[mcp_id]:
            raise UnknownToolError(mcp_id, tool_name, self._tool_names[mcp_id])


def _ids(mcp_ids: Iterable[str] | None, mcp_id: str | None) -> list[str]:
    if isinstance(mcp_ids, str):
        raise TypeError("mcp_ids is a list of ids, e.g. mcp_ids=['order-service']")
    ids = list(dict.fromkeys(mcp_ids or []))
    if mcp_id is not None and mcp_id not in ids:
        if ids:
            raise ValueError(f"mcp_id={mcp_id!r} is not among mcp_ids={ids!r}")
        ids = [mcp_id]
    if not ids:
        raise ValueError("bind_registry needs mcp_ids=[...] (or mcp_id=...)")
    return ids


def _choose(by_id: Mapping[str, McpServerSpec], mcp_id: str | None) -> str:
    if mcp_id is not None:
        if mcp_id not in by_id:
            raise ValueError(f"mcp_id={mcp_id!r} is not among the bound servers {sorted(by_id)!r}")
        return mcp_id
    if len(by_id) != 1:
        raise ValueError(
            f"several servers are bound ({sorted(by_id)!r}): say which one call() uses with mcp_id=..."
        )
    return next(iter(by_id))


def _default_settings() -> Any:
    from llamon_agent.settings import Settings  # type: ignore[import-not-found,unused-ignore]

    return Settings()
