"""The MCP messages the pool reads, as the SDK's own pydantic models (no dependency on an mcp major).

Field names are the protocol's wire names (``inputSchema``, ``isError``, ``structuredContent``,
``mimeType``), which are also mcp 1.x's attribute names; mcp 2 renamed its attributes to snake_case
(``is_error``) and keeps the wire names as aliases only. Models keep fields they do not name
(``extra="allow"``), so a newer server's additions survive a ``model_dump``.

:func:`as_call_tool_result` takes a result in mcp 1.x's or mcp 2's models too (by their wire form).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

RequestId = int | str

# JSON-RPC error codes the pool tells apart.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
CONNECTION_CLOSED = -32000  # not sent by servers: what a request gets when its connection ends


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    meta: dict[str, Any] | None = Field(default=None, alias="_meta")


class TextContent(_Model):
    type: Literal["text"] = "text"
    text: str
    annotations: dict[str, Any] | None = None


class ImageContent(_Model):
    type: Literal["image"] = "image"
    data: str
    mimeType: str
    annotations: dict[str, Any] | None = None


class AudioContent(_Model):
    type: Literal["audio"] = "audio"
    data: str
    mimeType: str
    annotations: dict[str, Any] | None = None


class ResourceLink(_Model):
    type: Literal["resource_link"] = "resource_link"
    uri: str
    name: str
    title: str | None = None
    description: str | None = None
    mimeType: str | None = None
    size: int | None = None
    annotations: dict[str, Any] | None = None


class TextResourceContents(_Model):
    uri: str
    mimeType: str | None = None
    text: str


class BlobResourceContents(_Model):
    uri: str
    mimeType: str | None = None
    blob: str


class EmbeddedResource(_Model):
    type: Literal["resource"] = "resource"
    resource: TextResourceContents | BlobResourceContents
    annotations: dict[str, Any] | None = None


ContentBlock = Annotated[
    TextContent | ImageContent | AudioContent | ResourceLink | EmbeddedResource,
    Field(discriminator="type"),
]


class CallToolResult(_Model):
    """A ``tools/call`` result."""

    content: list[ContentBlock]
    structuredContent: dict[str, Any] | None = None
    isError: bool = False


class ToolAnnotations(_Model):
    title: str | None = None
    readOnlyHint: bool | None = None
    destructiveHint: bool | None = None
    idempotentHint: bool | None = None
    openWorldHint: bool | None = None


class Tool(_Model):
    """One tool of a ``tools/list`` result."""

    name: str
    title: str | None = None
    description: str | None = None
    inputSchema: dict[str, Any]
    outputSchema: dict[str, Any] | None = None
    annotations: ToolAnnotations | None = None


class ListToolsResult(_Model):
    tools: list[Tool]
    nextCursor: str | None = None


class Implementation(_Model):
    name: str
    version: str
    title: str | None = None


class InitializeResult(_Model):
    protocolVersion: str
    capabilities: dict[str, Any]
    serverInfo: Implementation
    instructions: str | None = None


def as_call_tool_result(result: Any) -> CallToolResult:
    """``result`` as this module's model: as it is, or another library's (mcp 1.x's, mcp 2's) read by
    its wire form. TypeError for anything else; pydantic's ValidationError for a model that is not a
    tools/call result."""
    if isinstance(result, CallToolResult):
        return result
    if not isinstance(result, BaseModel):
        raise TypeError(f"expected a CallToolResult, got {type(result).__name__}")
    return CallToolResult.model_validate(result.model_dump(mode="json", by_alias=True, exclude_none=True))
