"""Deterministic replay: tool calls answered from a past run's recorded outputs, never from a server.

A replay runs an agent again (perhaps with another model, prompt or rule set version) on the
input of a past run, with every MCP tool call answered from what that run recorded, so that
only the LLM and the rules can differ: "what would the new model have done with the same facts?"

:class:`RecordedToolBackend` is a pre-step :class:`~llamon_agent.prestep.ToolBackend` and
also makes the ReAct loop's LangChain tools. A call is matched by its server (pre-step calls
only: a ReAct tool step records no server), tool name and params as canonical JSON; calls with
the same key are answered in the order they were recorded, and once they are used up the last
one answers again (the same call to the same tool had that output). A call that was recorded
as failing fails again with its recorded error. A call with no recorded output is never sent
anywhere: it fails with ``no recorded output for <tool>(<params>) in run N``, which the trace
records like any failed tool call.

Pre-step calls are answered from the original run's rule steps (normalized results); ReAct
calls from its tool steps (the text the model saw). Plain data only: the caller (the Django
runtime) reads the steps and the servers' stored tool lists and passes them in.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llamon_agent.tools import ToolInfo

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

PRESTEP = "prestep"
REACT = "react"


class NoRecordedOutputError(RuntimeError):
    """A replayed call the original run never made: nothing to answer it with."""


class RecordedToolError(RuntimeError):
    """A replayed call that failed in the original run fails again, with the recorded error."""


@dataclass(frozen=True)
class RecordedCall:
    """One tool call of the original run: where it came from, what it sent, what came back.

    ``origin`` is ``"prestep"`` (a rule's call; ``output`` is the normalized result) or
    ``"react"`` (a ReAct tool call; ``output`` is the text the model saw). ``error`` set: the
    call failed with that message.
    """

    origin: str
    mcp_id: str
    tool_name: str
    params: Any
    output: Any = None
    error: str | None = None


def canonical(params: Any) -> str:
    """Params as canonical JSON: keys sorted, no spaces, non-ASCII kept (the matching key)."""
    return json.dumps(params or {}, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


class RecordedToolBackend:
    """Answers tool calls from a past run's recorded calls; never talks to a server.

    ``tools`` is each server's tool list (``{name, description, input_schema}`` dicts or
    :class:`~llamon_agent.tools.ToolInfo`), e.g. the lists the servers app stored; a server
    whose tools are unknown still offers the tools the original run called on it.
    """

    def __init__(
        self,
        calls: Iterable[RecordedCall],
        *,
        tools: Mapping[str, Sequence[Any]] | None = None,
        source: str = "the original run",
    ) -> None:
        self.source = source
        self._lock = threading.Lock()  # the ReAct loop may run parallel tool calls
        self._queues: dict[tuple[str, str, str, str], list[RecordedCall]] = {}
        self._used: dict[tuple[str, str, str, str], int] = {}
        self._tools: dict[str, list[ToolInfo]] = {}
        for mcp_id, server_tools in (tools or {}).items():
            self._tools[mcp_id] = [_tool_info(t) for t in server_tools]
        for call in calls:
            self._queues.setdefault(
                self._key(call.origin, call.mcp_id, call.tool_name, call.params), []
            ).append(call)
            if call.origin == PRESTEP and call.mcp_id:
                known = self._tools.setdefault(call.mcp_id, [])
                if all(t.name != call.tool_name for t in known):
                    known.append(ToolInfo(name=call.tool_name))
        self.calls: list[tuple[str, str, Any, bool]] = []  # (origin, tool, params, answered)

    @staticmethod
    def _key(origin: str, mcp_id: str, tool_name: str, params: Any) -> tuple[str, str, str, str]:
        return (origin, mcp_id if origin == PRESTEP else "", tool_name, canonical(params))

    # -- the pre-step's ToolBackend

    def tools_for(self, mcp_id: str) -> Sequence[Any] | None:
        return self._tools.get(mcp_id)

    def call_tool(self, mcp_id: str, tool_name: str, params: dict[str, Any] | None) -> Any:
        return self.answer(PRESTEP, mcp_id, tool_name, params)

    # -- both

    def answer(self, origin: str, mcp_id: str, tool_name: str, params: Any) -> Any:
        """The recorded output of this call (next in order), or the recorded/no-record error."""
        key = self._key(origin, mcp_id, tool_name, params)
        with self._lock:
            queue = self._queues.get(key)
            if not queue:
                self.calls.append((origin, tool_name, params, False))
                raise NoRecordedOutputError(
                    f"no recorded output for {tool_name}({canonical(params)}) in {self.source}"
                )
            used = self._used.get(key, 0)
            self._used[key] = used + 1
            call = queue[min(used, len(queue) - 1)]
            self.calls.append((origin, tool_name, params, True))
        if call.error is not None:
            raise RecordedToolError(call.error)
        return call.output

    # -- the ReAct loop's tools

    def langchain_tools(self, mcp_ids: Iterable[str]) -> list[BaseTool]:
        """LangChain tools of these servers (their known schemas) answered from the recording."""
        from langchain_core.tools import StructuredTool

        made: list[BaseTool] = []
        for mcp_id in mcp_ids:
            for tool in self._tools.get(mcp_id) or []:
                made.append(
                    StructuredTool(
                        name=tool.name,
                        description=tool.description or tool.name,
                        args_schema=tool.input_schema or {"type": "object", "properties": {}},
                        func=self._react_func(mcp_id, tool.name),
                    )
                )
        return made

    def _react_func(self, mcp_id: str, tool_name: str) -> Any:
        def call(**kwargs: Any) -> str:
            output = self.answer(REACT, mcp_id, tool_name, kwargs)
            return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False, default=str)

        return call


def _tool_info(tool: Any) -> ToolInfo:
    if isinstance(tool, ToolInfo):
        return tool
    if isinstance(tool, Mapping):
        return ToolInfo(
            name=str(tool.get("name", "")),
            description=str(tool.get("description") or ""),
            input_schema=dict(tool.get("input_schema") or {}),
        )
    return ToolInfo(name=str(tool))
