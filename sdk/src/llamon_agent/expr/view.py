"""The read-only request view an expression sees as ``ctx``: JSON-like copies, built once per request and server."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llamon_agent.expr.errors import ExprError
from llamon_agent.expr.limits import MAX_DATA_BYTES, MAX_DATA_DEPTH, MAX_FILES_BYTES
from llamon_agent.expr.messages import Message as M
from llamon_agent.tools import tool_view


class _Budget:
    __slots__ = ("left", "files")

    def __init__(self, size: int, files: bool = False) -> None:
        self.left = size
        self.files = files  # the FileParts' own cap (MAX_FILES_BYTES)

    def spend(self, amount: int) -> None:
        self.left -= amount
        if self.left < 0:
            if self.files:
                raise ExprError(M("run.files_too_large", limit=f"{MAX_FILES_BYTES:,}"))
            raise ExprError(M("run.data_too_large", limit=f"{MAX_DATA_BYTES:,}"))


def _plain(value: Any, budget: _Budget, depth: int = 0) -> Any:
    """A JSON-like copy: dict/list/str/int/float/bool/None only, nothing live, sizes capped."""
    kind = type(value)
    if kind is str:
        budget.spend(len(value) + 2)
        return value
    if value is None or kind is bool or kind is int or kind is float:
        budget.spend(4)
        return value
    if depth >= MAX_DATA_DEPTH:
        raise ExprError(M("run.data_too_deep", limit=MAX_DATA_DEPTH))
    if isinstance(value, Mapping):
        budget.spend(2)
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = key if type(key) is str else str(key)  # like JSON: keys are texts
            kind = type(item)
            if kind is str:  # a plain value inline: what _plain(item) spends, with the key's
                budget.spend(len(name) + len(item) + 5)
                out[name] = item
            elif item is None or kind is bool or kind is int or kind is float:
                budget.spend(len(name) + 7)
                out[name] = item
            else:
                budget.spend(len(name) + 3)
                out[name] = _plain(item, budget, depth + 1)
        return out
    if isinstance(value, (list, tuple, set, frozenset)):
        budget.spend(2)
        return [_plain(item, budget, depth + 1) for item in value]
    if isinstance(value, str):
        return _plain(str.__str__(value), budget, depth)
    if isinstance(value, int):
        return _plain(int(value), budget, depth)
    if isinstance(value, float):
        return _plain(float(value), budget, depth)
    return _plain(str(value), budget, depth)  # datetimes, UUIDs, ...: as text, never the object


def _tool_dict(tool: Any) -> dict[str, Any]:
    if isinstance(tool, Mapping):
        schema = tool.get("input_schema", tool.get("inputSchema")) or {}
        return {
            "name": str(tool.get("name", "")),
            "description": str(tool.get("description", "") or ""),
            "input_schema": schema,
        }
    return tool_view(tool)


def _tool_name(tool: Any) -> str:
    if isinstance(tool, Mapping):
        return str(tool.get("name", ""))
    return str(getattr(tool, "name", ""))


class _CtxView:
    """The read-only ``ctx`` an expression sees: JSON-like copies of one request for one server."""

    __slots__ = (
        "query",
        "context",
        "a2a_data",
        "a2a_files",
        "tool_names",
        "_tools",
        "_mcp_tools",
        "_mcp_error",
    )

    def __init__(
        self,
        query: str,
        context: dict[str, Any],
        a2a_data: list[Any] | None,
        a2a_files: list[Any] | None,
        tools: Sequence[Any],
        tool_names: frozenset[str] | None = None,
    ) -> None:
        self.query = query
        self.context = context
        self.a2a_data = a2a_data
        self.a2a_files = a2a_files
        self.tool_names = frozenset(_tool_name(t) for t in tools) if tool_names is None else tool_names
        self._tools = tools
        self._mcp_tools: list[dict[str, Any]] | None = None
        self._mcp_error: ExprError | None = None

    @property
    def mcp_tools(self) -> list[dict[str, Any]]:
        # Built on first use: schemas can be large and most rules only need tool_names.
        if self._mcp_tools is None:
            if self._mcp_error is not None:  # once per request: a comprehension must not redo the walk
                raise ExprError(self._mcp_error.reason)
            budget = _Budget(MAX_DATA_BYTES)
            try:
                self._mcp_tools = [_plain(_tool_dict(t), budget) for t in self._tools]
            except ExprError as exc:
                self._mcp_error = exc
                raise
        return self._mcp_tools

    def __repr__(self) -> str:
        return f"ctx(query={self.query!r})"
