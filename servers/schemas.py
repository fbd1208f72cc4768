"""API schemas of MCP servers, tool calls and the registry."""

from __future__ import annotations

from typing import Any, Literal

from ninja import Field, ModelSchema, Schema

from core.api import PatchIn, StrictIn
from servers.models import McpServer
from servers.selectors import command_line

# --- MCP servers ----------------------------------------------------------------------------------


class ToolOut(Schema):
    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=dict)


class McpServerIn(StrictIn):
    """A server to register. stdio: ``command`` + ``args`` (no shell); http: ``url``. Names, never values."""

    mcp_id: str = Field(max_length=64, examples=["order-service"])
    transport: Literal["stdio", "http"]
    description: str = Field("", max_length=10_000)
    command: str = Field("", max_length=500)
    args: list[str] = Field(default_factory=list, max_length=100)
    env_names: list[str] = Field(default_factory=list, max_length=50)
    url: str = Field("", max_length=2000)
    header_names: list[str] = Field(default_factory=list, max_length=50)
    timeout_s: float = 30.0
    enabled: bool = True


class McpServerPatchIn(PatchIn):
    """The fields to change; absent fields keep their value."""

    mcp_id: str | None = Field(None, max_length=64)
    transport: Literal["stdio", "http"] | None = None
    description: str | None = Field(None, max_length=10_000)
    command: str | None = Field(None, max_length=500)
    args: list[str] | None = Field(None, max_length=100)
    env_names: list[str] | None = Field(None, max_length=50)
    url: str | None = Field(None, max_length=2000)
    header_names: list[str] | None = Field(None, max_length=50)
    timeout_s: float | None = None
    enabled: bool | None = None


class McpServerOut(ModelSchema):
    args: list[str]
    env_names: list[str]
    header_names: list[str]
    tools: list[ToolOut]
    command_line: str
    healthy: bool | None

    class Meta:
        model = McpServer
        fields = [
            "id",
            "mcp_id",
            "description",
            "transport",
            "command",
            "url",
            "timeout_s",
            "enabled",
            "tools_hash",
            "tools_refreshed_at",
            "last_error",
            "last_checked_at",
            "created_at",
            "updated_at",
        ]

    @staticmethod
    def resolve_args(obj: McpServer) -> list[str]:
        return obj.args_shown

    @staticmethod
    def resolve_command_line(obj: McpServer) -> str:
        return command_line(command=obj.command, args=obj.args_shown)

    @staticmethod
    def resolve_last_error(obj: McpServer, context: dict[str, Any]) -> str:
        from accounts.api_auth import api_has_role
        from servers.selectors import mcp_error_for

        return mcp_error_for(text=obj.last_error, admin=api_has_role(context["request"], "admin"))


class ToolsDiffOut(Schema):
    added: list[str]
    removed: list[str]
    changed: dict[str, list[str]]
    first: bool
    tools: list[ToolOut]


class ToolCallIn(StrictIn):
    tool: str = Field(max_length=200)
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolCallOut(Schema):
    result: Any = Field(description="What the pre-step would store: structured content, or text.")
    raw: dict[str, Any] = Field(description="The server's CallToolResult (long binary data shortened).")
    latency_ms: float


class RegistrySpecOut(Schema):
    """One registry entry, in ``llamon_agent.mcp.McpServerSpec``'s JSON shape."""

    mcp_id: str
    transport: Literal["stdio", "http"]
    command: str | None
    args: list[str]
    env: list[str]
    url: str | None
    headers: list[str]
    timeout_s: float


# --- Rule sets, rules, versions --------------------------------------------------------------------
