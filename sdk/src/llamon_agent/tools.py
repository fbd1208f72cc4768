"""Routing rules for the deterministic pre-step: the seed's public API.

A routing rule is any callable ``rule(ctx) -> dict | None`` that carries a :class:`RuleInfo`
in its ``__llamon_rule__`` attribute. ``@deterministic_tool`` attaches one to a plain
function (which stays directly callable); :func:`llamon_agent.expr.expression_rule` builds
rules from expressions stored as data. The pre-step treats both the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

RULE_ATTR = "__llamon_rule__"


@dataclass
class DeterministicContext:
    """What a routing function sees: the request and the tools of its own ``mcp_id``."""

    query: str
    context: dict[str, Any] = field(default_factory=dict)
    a2a_data: list[dict[str, Any]] | None = None
    a2a_files: list[dict[str, Any]] | None = None
    mcp_tools: list[Any] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RuleInfo:
    """How the pre-step knows a routing rule: its name, server and ``stop`` flag.

    ``keywords`` is the keyword-index hint: ``None`` means "no literal is required, always
    evaluate"; otherwise the rule can only fire when at least one ``(literal, lowered)``
    pair occurs in the query (``lowered`` True means "in ``query.lower()``").
    """

    name: str
    mcp_id: str
    stop: bool = False
    keywords: frozenset[tuple[str, bool]] | None = None


@runtime_checkable
class RoutingRule(Protocol):
    __llamon_rule__: RuleInfo

    def __call__(self, ctx: DeterministicContext) -> dict[str, Any] | None: ...


def deterministic_tool(
    *, mcp_id: str, stop: bool = False
) -> Callable[[Callable[[DeterministicContext], dict[str, Any] | None]], Any]:
    """Mark a function as a routing rule on ``mcp_id``; the function itself is returned unchanged."""
    if not isinstance(mcp_id, str) or not mcp_id:
        raise ValueError("deterministic_tool(mcp_id=...) needs a non-empty string")

    def mark(func: Callable[[DeterministicContext], dict[str, Any] | None]) -> Any:
        setattr(func, RULE_ATTR, RuleInfo(name=func.__name__, mcp_id=mcp_id, stop=bool(stop)))
        return func

    return mark


def rule_info(rule: Any) -> RuleInfo:
    """The :class:`RuleInfo` of a routing rule; ``TypeError`` for anything else."""
    info = getattr(rule, RULE_ATTR, None)
    if not isinstance(info, RuleInfo):
        raise TypeError(f"{rule!r} is not a routing rule: decorate it with @deterministic_tool(mcp_id=...)")
    return info


def is_rule(obj: Any) -> bool:
    return isinstance(getattr(obj, RULE_ATTR, None), RuleInfo)


@dataclass(frozen=True, slots=True)
class ToolInfo:
    """An MCP tool as the pre-step sees it when no live LangChain tool is needed (dry runs, tests)."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=dict)


def tool_view(tool: Any) -> dict[str, Any]:
    """``{name, description, input_schema}`` of a ToolInfo, an MCP ``Tool`` or a LangChain ``BaseTool``."""
    schema = getattr(tool, "input_schema", None)
    if schema is None:
        schema = getattr(tool, "inputSchema", None)
    if schema is None:
        args_schema = getattr(tool, "args_schema", None)
        schema = args_schema if isinstance(args_schema, dict) else {}
    return {
        "name": str(getattr(tool, "name", "")),
        "description": str(getattr(tool, "description", "") or ""),
        "input_schema": dict(schema),
    }


@dataclass
class AgentRequest:
    """The one normal request shape (docs/architecture.md "A2A requests, one shape").

    Built by :func:`llamon_agent.a2a.to_request` from any A2A message, or by hand.
    """

    query: str
    context: dict[str, Any] = field(default_factory=dict)
    a2a_data: list[dict[str, Any]] | None = None
    a2a_files: list[dict[str, Any]] | None = None

    def to_context(self, mcp_tools: list[Any] | None = None) -> DeterministicContext:
        """The DeterministicContext a rule on one server sees (its own tools only)."""
        return DeterministicContext(
            query=self.query,
            context=self.context,
            a2a_data=self.a2a_data,
            a2a_files=self.a2a_files,
            mcp_tools=list(mcp_tools or []),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "context": self.context,
            "a2a_data": self.a2a_data,
            "a2a_files": self.a2a_files,
        }
