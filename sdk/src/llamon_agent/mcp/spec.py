"""How to reach one MCP server: the registry's JSON shape as a typed object."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MCP_ID_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class McpServerSpec(BaseModel):
    """One registry entry: ``{"mcp_id", "transport", "command", "args", "env", "url", "headers", "timeout_s"}``.

    ``env`` and ``headers`` hold *names* of environment variables, never their values:
    for a stdio server each named variable is passed to the child (plus PATH and HOME);
    for an http server each ``headers`` entry is ``"Header-Name=ENV_NAME"`` or just
    ``ENV_NAME`` (sent as ``Authorization: Bearer <value>``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    mcp_id: str
    transport: Literal["stdio", "http"]
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: list[str] = Field(default_factory=list)
    url: str | None = None
    headers: list[str] = Field(default_factory=list)
    timeout_s: float = Field(default=30.0, gt=0, le=600)

    @field_validator("mcp_id")
    @classmethod
    def _mcp_id_is_slug(cls, value: str) -> str:
        if not MCP_ID_RE.match(value):
            raise ValueError(
                "mcp_id must be 1-64 characters of lowercase letters, digits, '-', '_' or '.', "
                "starting with a letter or digit"
            )
        return value

    @field_validator("env")
    @classmethod
    def _env_are_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not ENV_NAME_RE.match(name):
                raise ValueError(f"env entries are variable names, not values: {name!r}")
        return value

    @field_validator("headers")
    @classmethod
    def _headers_are_names(cls, value: list[str]) -> list[str]:
        for entry in value:
            header, _, env_name = entry.rpartition("=")
            if not ENV_NAME_RE.match(env_name) or (header and not re.match(r"^[A-Za-z0-9-]+$", header)):
                raise ValueError(f"headers entries are 'Header-Name=ENV_NAME' or 'ENV_NAME': {entry!r}")
        return value

    @model_validator(mode="after")
    def _transport_fields(self) -> McpServerSpec:
        if self.transport == "stdio" and not self.command:
            raise ValueError("a stdio server needs a command")
        if self.transport == "http" and not self.url:
            raise ValueError("an http server needs a url")
        return self

    def header_pairs(self, environ: dict[str, str]) -> dict[str, str]:
        """HTTP headers built from the named variables; a bare name becomes a bearer token."""
        out: dict[str, str] = {}
        for entry in self.headers:
            header, _, env_name = entry.rpartition("=")
            value = environ.get(env_name)
            if value is None:
                continue
            if header:
                out[header] = value
            else:
                out["Authorization"] = f"Bearer {value}"
        return out

    def to_registry_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
