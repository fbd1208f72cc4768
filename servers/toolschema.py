"""A tool list's content hash (checking values against a tool's schemas: llamon_agent.mcp.schemas)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from core.content_hash import sha256


def tools_hash(tools: Sequence[Mapping[str, Any]]) -> str:
    """A hash of one server's tool list (a tool's output schema counts only when it has one, so the
    hashes of lists stored before output schemas were kept stay as they were)."""
    return sha256(
        sorted(
            (t["name"], t.get("description", ""), t.get("input_schema", {}))
            + ((t["output_schema"],) if t.get("output_schema") else ())
            for t in tools
        )
    )


def tool_record(tool: Any) -> dict[str, Any]:
    """The stored form of a listed MCP tool: name, description, input schema and, when the tool
    declares one, its output schema (the shape of its structured result)."""
    record = {
        "name": tool.name,
        "description": tool.description or "",
        "input_schema": dict(tool.inputSchema or {}),
    }
    if getattr(tool, "outputSchema", None):
        record["output_schema"] = dict(tool.outputSchema)
    return record
