"""llamon_agent: agents that answer in five stages (guardrail -> deterministic pre-step -> ReAct -> guardrail).

Framework-free: nothing here imports Django.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["MCPHandle", "resolve_env_override"]

if TYPE_CHECKING:
    from llamon_agent.env import resolve_env_override
    from llamon_agent.mcp.handle import MCPHandle


def __getattr__(name: str) -> Any:
    # Lazy so that `import llamon_agent.tools` stays cheap (no mcp / langchain import).
    if name == "MCPHandle":
        from llamon_agent.mcp.handle import MCPHandle

        return MCPHandle
    if name == "resolve_env_override":
        from llamon_agent.env import resolve_env_override

        return resolve_env_override
    raise AttributeError(name)
