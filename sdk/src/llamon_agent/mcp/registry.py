"""Registry clients: where the specs of MCP servers come from (a file, or a llamon-web).

A registry maps each ``mcp_id`` to the object of :class:`McpServerSpec` (docs/architecture.md, "Data model").
``await registry.get([...])`` returns ``{mcp_id: McpServerSpec}`` for the ids asked for and
raises :class:`UnknownServerError` for an id the registry does not know.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

from pydantic import ValidationError

from llamon_agent.mcp.errors import McpError, RegistryError, UnknownServerError
from llamon_agent.mcp.spec import McpServerSpec

if TYPE_CHECKING:
    from llamon_agent.mcp.pool import McpPool
    from llamon_agent.urlguard import UrlPolicy

logger = logging.getLogger("llamon_agent.mcp")


class Registry(Protocol):
    """Anything that can turn mcp_ids into specs."""

    async def get(self, mcp_ids: Iterable[str]) -> dict[str, McpServerSpec]: ...


async def bind_servers(registry: Registry, mcp_ids: Iterable[str], pool: McpPool) -> list[str]:
    """Register each server the registry knows in ``pool`` and open its session; the ids bound.

    An id the registry does not know is logged, not fatal, on purpose: the pre-step then fails each
    request with the seed's ``MCP '<id>'의 tool이 로드되지 않음``, as the seed's troubleshooting table
    expects. A server that does not start is registered anyway (the pool reconnects, and a request
    gets the call's own error). Any other RegistryError (the registry itself unreachable) propagates.
    ``llamon run`` and a flow's pre-step node both bind through here.
    """
    bound: list[str] = []
    for mcp_id in mcp_ids:
        try:
            spec = (await registry.get([mcp_id]))[mcp_id]
        except UnknownServerError as exc:
            logger.error("MCP server %r is not in the registry: %s", mcp_id, exc)
            continue
        pool.register(spec)
        try:
            tools = await pool.list_tools(mcp_id)
        except McpError as exc:
            logger.error("MCP server %r did not start: %s", mcp_id, exc)
        else:
            logger.info(
                "bound MCP server %s (%d tools: %s)", mcp_id, len(tools), ", ".join(t.name for t in tools)
            )
        bound.append(mcp_id)
    return bound


def spec_from_entry(mcp_id: str, entry: Any, *, source: str) -> McpServerSpec:
    """One registry entry as a spec; ``mcp_id`` may be omitted in the entry (the key names it)."""
    if not isinstance(entry, Mapping):
        raise RegistryError(
            f"{source}: the entry for '{mcp_id}' must be an object, not {type(entry).__name__}"
        )
    data = dict(entry)
    data.setdefault("mcp_id", mcp_id)
    if data["mcp_id"] != mcp_id:
        raise RegistryError(f"{source}: the entry under '{mcp_id}' says mcp_id={data['mcp_id']!r}")
    try:
        return McpServerSpec.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(entry)'}: {err['msg']}" for err in exc.errors()
        )
        raise RegistryError(f"{source}: the entry for '{mcp_id}' is invalid: {problems}") from None


def _pick(specs: Mapping[str, McpServerSpec], mcp_ids: Iterable[str], where: str) -> dict[str, McpServerSpec]:
    out: dict[str, McpServerSpec] = {}
    for mcp_id in mcp_ids:
        if mcp_id not in specs:
            raise UnknownServerError(mcp_id, specs, where=where)
        out[mcp_id] = specs[mcp_id]
    return out


class FileRegistry:
    """A JSON or YAML file holding one object ``{mcp_id: spec}``; read again on every ``get``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    async def get(self, mcp_ids: Iterable[str]) -> dict[str, McpServerSpec]:
        """The specs of ``mcp_ids``; UnknownServerError / RegistryError."""
        return _pick(self.load(), mcp_ids, where=f"registry file {self.path}")

    async def all(self) -> dict[str, McpServerSpec]:
        """Every spec in the file."""
        return self.load()

    def load(self) -> dict[str, McpServerSpec]:
        """Read and validate the whole file (blocking; files are small)."""
        source = f"registry file {self.path}"
        try:
            text = self.path.read_text(encoding="utf-8")
        except OSError as exc:
            raise RegistryError(f"{source}: cannot be read: {exc.strerror or exc}") from None
        data = self._parse(text, source)
        if not isinstance(data, Mapping):
            raise RegistryError(f"{source}: must hold one object mapping each mcp_id to its spec")
        return {
            str(mcp_id): spec_from_entry(str(mcp_id), entry, source=source) for mcp_id, entry in data.items()
        }

    def _parse(self, text: str, source: str) -> Any:
        if self.path.suffix.lower() == ".json":
            try:
                return json.loads(text)
            except ValueError as exc:
                raise RegistryError(f"{source}: invalid JSON: {exc}") from None
        import yaml  # YAML is a superset of JSON: any other extension goes through it

        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise RegistryError(f"{source}: invalid YAML: {exc}") from None


class HttpRegistry:
    """A llamon-web registry: ``GET {base_url}/api/registry[/{mcp_id}]`` with a bearer token."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = 10.0,
        url_policy: UrlPolicy | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.url_policy = url_policy  # None: llamon_agent.net's default (private allowed, metadata never)

    async def get(self, mcp_ids: Iterable[str]) -> dict[str, McpServerSpec]:
        """The specs of ``mcp_ids``, one request each; UnknownServerError on 404."""
        import httpx

        out: dict[str, McpServerSpec] = {}
        async with self._client(httpx) as client:
            for mcp_id in mcp_ids:
                url = f"{self.base_url}/api/registry/{quote(mcp_id, safe='')}"
                data = await self._get_json(client, url, mcp_id=mcp_id)
                out[mcp_id] = spec_from_entry(mcp_id, data, source=f"registry {self.base_url}")
        return out

    async def all(self) -> dict[str, McpServerSpec]:
        """Every spec the registry lists."""
        import httpx

        async with self._client(httpx) as client:
            data = await self._get_json(client, f"{self.base_url}/api/registry")
        if not isinstance(data, Mapping):
            raise RegistryError(
                f"registry {self.base_url}: /api/registry must answer an object {{mcp_id: spec}}"
            )
        return {
            str(mcp_id): spec_from_entry(str(mcp_id), entry, source=f"registry {self.base_url}")
            for mcp_id, entry in data.items()
        }

    async def privacy(self) -> dict[str, Any] | None:
        """The workbench's privacy settings (``GET /api/privacy``): what served agents mask their
        exported spans with; None from a workbench that has no such endpoint (HTTP 404)."""
        import httpx

        async with self._client(httpx) as client:
            try:
                data = await self._get_json(client, f"{self.base_url}/api/privacy")
            except RegistryError as exc:
                if "answered HTTP 404" in str(exc):
                    return None
                raise
        if not isinstance(data, dict):
            raise RegistryError(f"registry {self.base_url}: /api/privacy must answer an object")
        return data

    def _client(self, httpx: Any) -> Any:
        from llamon_agent.net import guarded_async_client

        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        # Reaches only the registry's server, at checked addresses; a redirect is answered as an error.
        return guarded_async_client(self.base_url, self.url_policy, headers=headers, timeout=self.timeout)

    async def _get_json(self, client: Any, url: str, *, mcp_id: str | None = None) -> Any:
        import httpx

        try:
            response = await client.get(url)
        except httpx.HTTPError as exc:
            raise RegistryError(
                f"registry {self.base_url} could not be reached: {type(exc).__name__}: {exc}"
            ) from None
        if response.status_code == 404 and mcp_id is not None:
            raise UnknownServerError(mcp_id, where=f"registry {self.base_url}")
        if response.status_code in (401, 403):
            raise RegistryError(
                f"registry {self.base_url} refused the token (HTTP {response.status_code}); check LLAMON_REGISTRY_TOKEN"
            )
        if response.is_redirect:
            raise RegistryError(
                f"registry {self.base_url}: GET {url} answered a redirect (HTTP {response.status_code} to "
                f"{response.headers.get('location', '?')}), which is not followed: set LLAMON_REGISTRY_URL "
                "to the address that answers"
            )
        if response.status_code != 200:
            raise RegistryError(f"registry {self.base_url}: GET {url} answered HTTP {response.status_code}")
        try:
            return response.json()
        except ValueError:
            raise RegistryError(f"registry {self.base_url}: GET {url} did not answer JSON") from None


def registry_from_settings(settings: Any) -> FileRegistry | HttpRegistry:
    """The registry the settings name: ``registry_file`` first, else ``registry_url`` (+ ``registry_token``)."""
    registry_file = getattr(settings, "registry_file", None)
    if registry_file:
        return FileRegistry(registry_file)
    registry_url = getattr(settings, "registry_url", None)
    if registry_url:
        return HttpRegistry(str(registry_url), _secret(getattr(settings, "registry_token", None)))
    raise RegistryError(
        "no MCP registry is configured: set LLAMON_REGISTRY_FILE (a JSON/YAML file mapping each mcp_id "
        "to its spec) or LLAMON_REGISTRY_URL (+ LLAMON_REGISTRY_TOKEN) for a llamon-web registry"
    )


def _secret(value: Any) -> str | None:
    if value is None:
        return None
    getter = getattr(value, "get_secret_value", None)
    return str(getter() if callable(getter) else value) or None
