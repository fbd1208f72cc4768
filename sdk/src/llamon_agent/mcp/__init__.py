"""The MCP client side of the engine: pooled sessions, MCPHandle, registries, result normalization.

Importing this package is cheap: the pool (httpx, anyio), the handle, the registries and the
result helpers load on first attribute access. The pool speaks MCP itself (:mod:`.session`,
:mod:`.transports`, :mod:`.protocol`), so the SDK works with either major of the mcp library
installed beside it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from llamon_agent.mcp.errors import (
    McpConnectionError,
    McpError,
    MCPNotBoundError,
    McpProtocolError,
    McpTimeoutError,
    McpToolError,
    PoolUsageError,
    RegistryError,
    UnknownServerError,
    UnknownToolError,
)
from llamon_agent.mcp.spec import McpServerSpec

if TYPE_CHECKING:
    from llamon_agent.mcp.adapters import PoolToolBackend
    from llamon_agent.mcp.handle import MCPHandle
    from llamon_agent.mcp.pool import McpPool, get_pool, set_pool
    from llamon_agent.mcp.registry import FileRegistry, HttpRegistry, Registry, registry_from_settings
    from llamon_agent.mcp.results import normalize_result
    from llamon_agent.mcp.transports import child_env

__all__ = [
    "FileRegistry",
    "HttpRegistry",
    "MCPHandle",
    "MCPNotBoundError",
    "McpConnectionError",
    "McpError",
    "McpPool",
    "McpProtocolError",
    "McpServerSpec",
    "McpTimeoutError",
    "McpToolError",
    "PoolToolBackend",
    "PoolUsageError",
    "Registry",
    "RegistryError",
    "UnknownServerError",
    "UnknownToolError",
    "child_env",
    "get_pool",
    "normalize_result",
    "registry_from_settings",
    "set_pool",
]

_LAZY = {
    "MCPHandle": "llamon_agent.mcp.handle",
    "McpPool": "llamon_agent.mcp.pool",
    "PoolToolBackend": "llamon_agent.mcp.adapters",
    "child_env": "llamon_agent.mcp.transports",
    "get_pool": "llamon_agent.mcp.pool",
    "set_pool": "llamon_agent.mcp.pool",
    "FileRegistry": "llamon_agent.mcp.registry",
    "HttpRegistry": "llamon_agent.mcp.registry",
    "Registry": "llamon_agent.mcp.registry",
    "registry_from_settings": "llamon_agent.mcp.registry",
    "normalize_result": "llamon_agent.mcp.results",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'llamon_agent.mcp' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
