"""langchain-mcp-adapters' connection dict as a llamon registry.

A LangGraph app that already has the dict it gives ``MultiServerMCPClient`` uses the same dict
for llamon's pooled sessions and pre-step::

    connections = {
        "orders": {"transport": "streamable_http", "url": "http://127.0.0.1:8765/mcp"},
        "kb": {"transport": "stdio", "command": "python", "args": ["kb.py"]},
    }
    registry = ConnectionsRegistry(connections)      # or specs_from_connections(connections)

Each entry becomes an :class:`McpServerSpec` (its key is the ``mcp_id``). The dict is checked
when the registry is made, so a mistake fails at start-up with one readable
:class:`RegistryError`, not at the first request.

Mapped: ``transport`` ``stdio`` / ``streamable_http`` / ``streamable-http`` / ``http``;
``command``, ``args``, ``url``; ``timeout`` (seconds or a ``timedelta``) becomes the per-call
``timeout_s``. Values differ from the adapters where llamon keeps secrets out of specs (a spec
names environment variables, it never holds their values):

* ``env``: each variable must already hold that value in this process's environment (the usual
  ``{"API_KEY": os.environ["API_KEY"]}``); the child gets it by name, plus PATH and HOME. Any
  other value is refused: set it in ``os.environ`` first.
* ``headers``: a value ``"${NAME}"`` sends variable NAME's value; ``"Bearer ${NAME}"`` as
  ``Authorization`` sends a bearer token. A literal value is refused.

Refused with a reason: ``sse`` and ``websocket`` (the pool speaks stdio and streamable HTTP
only; FastMCP servers serve streamable HTTP on ``/mcp``), ``cwd`` (use absolute paths),
``auth``, ``httpx_client_factory``, non-empty ``session_kwargs`` and any unknown key. Ignored,
as they only tune the adapters' own client: ``sse_read_timeout``, ``terminate_on_close``,
``encoding="utf-8"``, ``encoding_error_handler="strict"``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

from llamon_agent.mcp.errors import RegistryError
from llamon_agent.mcp.registry import _pick, spec_from_entry
from llamon_agent.mcp.spec import ENV_NAME_RE, McpServerSpec

__all__ = ["ConnectionsRegistry", "spec_from_connection", "specs_from_connections"]

SOURCE = "MultiServerMCPClient connections"
_HTTP_NAMES = frozenset({"streamable_http", "streamable-http", "http"})
_COMMON_KEYS = frozenset({"transport", "session_kwargs"})
_STDIO_KEYS = _COMMON_KEYS | {"command", "args", "env", "cwd", "encoding", "encoding_error_handler"}
_HTTP_KEYS = _COMMON_KEYS | {
    "url",
    "headers",
    "timeout",
    "sse_read_timeout",
    "terminate_on_close",
    "httpx_client_factory",
    "auth",
}
_ENV_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_BEARER_REF = re.compile(r"^Bearer \$\{([A-Za-z_][A-Za-z0-9_]*)\}$")


def spec_from_connection(
    mcp_id: str, connection: Mapping[str, Any], *, environ: Mapping[str, str] | None = None
) -> McpServerSpec:
    """One ``MultiServerMCPClient`` connection as a spec; RegistryError saying what cannot be mapped."""
    where = f"{SOURCE}: '{mcp_id}'"
    if not isinstance(connection, Mapping):
        raise RegistryError(f"{where} must be a dict, not {type(connection).__name__}")
    env_now = os.environ if environ is None else environ
    transport = connection.get("transport")
    if transport in ("sse", "websocket"):
        raise RegistryError(
            f"{where}: transport {transport!r} is not supported: llamon's MCP pool speaks 'stdio' and "
            "'streamable_http' (also spelled 'http' / 'streamable-http'). Serve the server over streamable "
            "HTTP (FastMCP: mcp.run(transport='streamable-http'), at /mcp) and use that URL"
        )
    if transport == "stdio":
        allowed = _STDIO_KEYS
    elif transport in _HTTP_NAMES:
        allowed = _HTTP_KEYS
    else:
        raise RegistryError(
            f"{where}: transport must be 'stdio', 'streamable_http', 'streamable-http' or 'http', "
            f"not {transport!r}"
        )
    unknown = sorted(str(k) for k in connection if k not in allowed)
    if unknown:
        raise RegistryError(f"{where}: unknown key(s) for transport {transport!r}: {', '.join(unknown)}")
    for key in ("auth", "httpx_client_factory", "cwd"):
        if connection.get(key) is not None:
            hint = (
                "use absolute paths in command and args" if key == "cwd" else "use headers with ${ENV_NAME}"
            )
            raise RegistryError(f"{where}: {key!r} is not supported by llamon's MCP pool ({hint})")
    if connection.get("session_kwargs"):
        raise RegistryError(
            f"{where}: session_kwargs (MCP session callbacks) are not supported by llamon's MCP pool"
        )
    if connection.get("encoding", "utf-8").lower().replace("_", "-") not in ("utf-8", "utf8"):
        raise RegistryError(f"{where}: only the utf-8 encoding is supported, not {connection['encoding']!r}")
    if connection.get("encoding_error_handler", "strict") != "strict":
        raise RegistryError(f"{where}: only encoding_error_handler='strict' is supported")

    entry: dict[str, Any] = {"mcp_id": mcp_id}
    if transport == "stdio":
        entry.update(transport="stdio", command=connection.get("command"), args=connection.get("args") or [])
        entry["env"] = _env_names(where, connection.get("env"), env_now)
    else:
        entry.update(transport="http", url=connection.get("url"))
        entry["headers"] = _header_refs(where, connection.get("headers"))
    timeout = connection.get("timeout")
    if timeout is not None:
        entry["timeout_s"] = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
    return spec_from_entry(mcp_id, entry, source=SOURCE)


def specs_from_connections(
    connections: Mapping[str, Mapping[str, Any]], *, environ: Mapping[str, str] | None = None
) -> dict[str, McpServerSpec]:
    """Every connection as a spec, keyed by ``mcp_id``; RegistryError for the first one that cannot be."""
    if not isinstance(connections, Mapping):
        raise RegistryError(f"{SOURCE} must be a dict {{name: connection}}, not {type(connections).__name__}")
    return {
        str(mcp_id): spec_from_connection(str(mcp_id), connection, environ=environ)
        for mcp_id, connection in connections.items()
    }


class ConnectionsRegistry:
    """A registry over a ``MultiServerMCPClient`` connection dict (checked once, when made)."""

    def __init__(
        self, connections: Mapping[str, Mapping[str, Any]], *, environ: Mapping[str, str] | None = None
    ) -> None:
        self.specs = specs_from_connections(connections, environ=environ)

    async def get(self, mcp_ids: Iterable[str]) -> dict[str, McpServerSpec]:
        """The specs of ``mcp_ids``; UnknownServerError for a name the dict does not have."""
        return _pick(self.specs, mcp_ids, where=SOURCE)

    async def all(self) -> dict[str, McpServerSpec]:
        """Every spec."""
        return dict(self.specs)


def _env_names(where: str, env: Any, environ: Mapping[str, str]) -> list[str]:
    if env is None:
        return []
    if not isinstance(env, Mapping):
        raise RegistryError(f"{where}: env must be a dict {{NAME: value}}")
    names: list[str] = []
    for name, value in env.items():
        if not isinstance(name, str) or not ENV_NAME_RE.match(name):
            raise RegistryError(f"{where}: env name {name!r} is not a variable name")
        if environ.get(name) != value:
            raise RegistryError(
                f"{where}: env {name!r} must hold the same value in this process's environment: llamon "
                "passes a stdio server variables by name, never values written into its spec "
                f"(set os.environ[{name!r}] before building the registry)"
            )
        names.append(name)
    return names


def _header_refs(where: str, headers: Any) -> list[str]:
    if headers is None:
        return []
    if not isinstance(headers, Mapping):
        raise RegistryError(f"{where}: headers must be a dict {{Header-Name: value}}")
    refs: list[str] = []
    for header, value in headers.items():
        text = value if isinstance(value, str) else ""
        bearer = _BEARER_REF.match(text) if str(header).lower() == "authorization" else None
        ref = _ENV_REF.match(text)
        if bearer is not None:
            refs.append(bearer.group(1))
        elif ref is not None:
            refs.append(f"{header}={ref.group(1)}")
        else:
            raise RegistryError(
                f"{where}: header {header!r} must name an environment variable ('${{NAME}}', or "
                "'Bearer ${NAME}' for Authorization): llamon keeps header values out of MCP specs"
            )
    return refs
