"""The deterministic pre-step as a node of any LangGraph ``StateGraph``.

For LangGraph apps that were not made with ``llamon new``: the routing rules
(``@deterministic_tool`` functions) run as the first node, on llamon's pooled MCP sessions,
with the seed's semantics (:mod:`llamon_agent.prestep`)::

    from llamon_agent.flow.prestep_node import prestep_node

    graph = StateGraph(MessagesState)
    graph.add_node("prestep", prestep_node(DETERMINISTIC_TOOLS, connections))  # the MultiServerMCPClient dict
    graph.add_node("agent", agent)
    graph.add_edge(START, "prestep")
    graph.add_edge("prestep", "agent")

``registry`` is a connection dict of langchain-mcp-adapters
(:class:`~llamon_agent.mcp.langchain_compat.ConnectionsRegistry`) or any llamon registry
(file, llamon-web). The servers are bound on the first run, once; a server the registry does
not know is logged and every request then fails with ``MCP '<id>'의 tool이 로드되지 않음``,
as in ``llamon run``.

What the node reads: ``query`` from the state, else the text of the last human message in
``messages``; ``context``, ``a2a_data``, ``a2a_files`` when present. What it writes:
``prestep`` = ``{"ok", "calls", "results", "block"}`` (kept only if the state declares it)
and, when a rule called a tool and the state has ``messages``, a ``SystemMessage`` holding
the ``확정 호출 결과`` block for the model. A failed pre-step raises :class:`PrestepFailedError`,
whose message is the seed's error text: the graph stops and the model is never called.

The trace is found, not passed: ``config["configurable"]["llamon_trace"]`` (a
:class:`~llamon_agent.trace.TraceSink`), else the trace of the running code
(:func:`llamon_agent.trace.traced`, which :func:`llamon_agent.flow.arun_flow` and
``llamon run`` set). Without either, nothing is traced.
"""

# No ``from __future__ import annotations``: LangGraph passes ``config`` to a node only when the
# parameter's annotation is the RunnableConfig type itself, not its name as a string.
import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from langchain_core.runnables import RunnableConfig

from llamon_agent.mcp.registry import bind_servers
from llamon_agent.prestep import CompiledRules, arun_prestep, compile_rules
from llamon_agent.tools import AgentRequest
from llamon_agent.trace import current_trace

if TYPE_CHECKING:
    from llamon_agent.mcp.pool import McpPool
    from llamon_agent.mcp.registry import Registry
    from llamon_agent.trace import TraceSink

__all__ = ["TRACE_CONFIG_KEY", "PrestepFailedError", "PrestepNode", "prestep_node"]


TRACE_CONFIG_KEY = "llamon_trace"  # config={"configurable": {"llamon_trace": sink}}


class PrestepFailedError(RuntimeError):
    """The pre-step failed; ``str()`` is the seed's error message, byte for byte."""


class PrestepNode:
    """An async LangGraph node running the pre-step (see the module docs)."""

    def __init__(
        self, rules: Sequence[Any] | CompiledRules, registry: Any, *, pool: "McpPool | None" = None
    ) -> None:
        self.compiled = compile_rules(rules)
        self.registry = _as_registry(registry)
        self._pool = pool
        self._bound: list[str] | None = None
        self._lock = asyncio.Lock()

    @property
    def pool(self) -> "McpPool":
        from llamon_agent.mcp.pool import get_pool

        return self._pool if self._pool is not None else get_pool()

    async def bind(self) -> list[str]:
        """Register the rules' servers from the registry and open their sessions (once); the bound ids."""
        async with self._lock:
            if self._bound is None:
                self._bound = await bind_servers(self.registry, list(self.compiled.mcp_ids), self.pool)
            return self._bound

    async def __call__(
        self, state: Mapping[str, Any], config: RunnableConfig | None = None
    ) -> dict[str, Any]:
        from llamon_agent.mcp.adapters import PoolToolBackend

        bound = await self.bind()
        sink, parent = _trace_of(config)
        outcome = await arun_prestep(
            self.compiled,
            request_from_state(state),
            backend=PoolToolBackend(self.pool, bound),
            sink=sink,
            trace_parent=parent,
        )
        if not outcome.ok:
            raise PrestepFailedError(outcome.error or "pre-step failed")
        block = outcome.system_block()
        update: dict[str, Any] = {
            "prestep": {"ok": True, "calls": outcome.calls, "results": outcome.results, "block": block}
        }
        if block and "messages" in state:
            from langchain_core.messages import SystemMessage

            update["messages"] = [SystemMessage(content=block)]
        return update


def prestep_node(
    rules: Sequence[Any] | CompiledRules, registry: Any, *, pool: "McpPool | None" = None
) -> "PrestepNode":
    """A pre-step node for ``StateGraph.add_node``; ``registry``: a MultiServerMCPClient dict or a registry."""
    return PrestepNode(rules, registry, pool=pool)


def request_from_state(state: Mapping[str, Any]) -> AgentRequest:
    """The request in a graph state: ``query`` (else the last human message), ``context``, A2A parts."""
    query = state.get("query")
    if not isinstance(query, str):
        query = _last_human_text(state.get("messages") or [])
    context = state.get("context")
    return AgentRequest(
        query=query,
        context=dict(context) if isinstance(context, Mapping) else {},
        a2a_data=state.get("a2a_data"),
        a2a_files=state.get("a2a_files"),
    )


def _last_human_text(messages: Sequence[Any]) -> str:
    for message in reversed(messages):
        if getattr(message, "type", None) == "human":
            return str(message.text) if hasattr(message, "text") else str(message.content)
        if isinstance(message, tuple) and len(message) == 2 and message[0] in ("user", "human"):
            return str(message[1])
        if isinstance(message, Mapping) and message.get("role") in ("user", "human"):
            return str(message.get("content", ""))
    return ""


def _trace_of(config: RunnableConfig | None) -> "tuple[TraceSink | None, str | None]":
    configurable = (config or {}).get("configurable") or {}
    sink = configurable.get(TRACE_CONFIG_KEY)
    if sink is not None:
        return sink, None
    current = current_trace()
    return current if current is not None else (None, None)


def _as_registry(registry: Any) -> "Registry":
    if hasattr(registry, "get") and not isinstance(registry, Mapping):
        return cast("Registry", registry)
    if isinstance(registry, Mapping):
        from llamon_agent.mcp.langchain_compat import ConnectionsRegistry

        return ConnectionsRegistry(registry)
    raise TypeError(
        "prestep_node needs a MultiServerMCPClient connection dict or a registry (FileRegistry, HttpRegistry, "
        f"ConnectionsRegistry), not {type(registry).__name__}"
    )
