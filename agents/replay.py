"""Deterministic replay on the worker: the original run's recorded tool calls, as engine data.

agents.runtime uses :func:`replay_backend` instead of the live MCP backend when a run has
``replay_of``: the steps and the servers' stored tool lists are read here and handed to
llamon_agent.replay.RecordedToolBackend as plain data, and no server is contacted.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agents.models import Run, RunStep
from llamon_agent.replay import PRESTEP, REACT, RecordedCall, RecordedToolBackend
from rules import engine

# A step that ended: "ok" answered, "error" failed (its error replays); "running"/"interrupted" never ended.
ENDED = ("ok", "error")


def recorded_calls(run_id: int) -> list[RecordedCall]:
    """The tool calls run ``run_id`` made, in order: its rule steps (pre-step) and tool steps (ReAct)."""
    steps = (
        RunStep.objects.filter(
            run_id=run_id, kind__in=(RunStep.Kind.RULE, RunStep.Kind.TOOL), status__in=ENDED
        )
        .order_by("seq")
        .values_list("kind", "mcp_id", "tool_name", "name", "input", "output", "status", "error")
    )
    calls = []
    for kind, mcp_id, tool_name, name, data, output, status, error in steps:
        data = data if isinstance(data, dict) else {}
        if kind == RunStep.Kind.RULE:
            if not tool_name:  # the rule failed before it named a call: nothing was called
                continue
            origin, params = PRESTEP, data.get("params") or {}
        else:
            origin, params, tool_name = REACT, data.get("args") or {}, tool_name or name
        calls.append(
            RecordedCall(
                origin=origin,
                mcp_id=mcp_id,
                tool_name=tool_name,
                params=params,
                output=output,
                error=(error or "the tool failed") if status == "error" else None,
            )
        )
    return calls


def replay_backend(run: Run, mcp_ids: Iterable[str]) -> RecordedToolBackend:
    """The backend of a replay: run.replay_of's recorded calls, the stored tools of ``mcp_ids``.

    Disabled servers count too: their stored tool lists are only read, never called.
    """
    servers = engine.servers_by_id(set(mcp_ids))
    tools: dict[str, Any] = {mcp_id: list(server.tools) for mcp_id, server in servers.items()}
    return RecordedToolBackend(
        recorded_calls(run.replay_of_id) if run.replay_of_id else [],
        tools=tools,
        source=f"run {run.replay_of_id}",
    )
