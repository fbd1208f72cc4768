"""An MCP tool as a LangChain ``StructuredTool`` (what the ReAct loop calls), without an adapter library.

The tool's input schema is its ``args_schema`` as it came (a JSON schema dict); a call returns
``(content, artifact)`` (``response_format="content_and_artifact"``): the result's content blocks as
LangChain content blocks, and ``{"structured_content": ...}`` when the server sent structured content.
An ``isError`` result is handed back to the model as a failed tool message carrying its blocks (so it
can correct itself) rather than ending the run; a failure to reach the server raises.

Blocks, as langchain-mcp-adapters converted them (the ReAct loop's behaviour did not change when
this module replaced it):

* text -> ``{"type": "text", "text"}``; image -> ``{"type": "image", "base64", "mime_type"}``;
* resource link -> an image (``image/*``) or file block with its ``url``;
* embedded resource -> its text, or its blob as an image or file block;
* audio -> NotImplementedError (LangChain has no block a chat model takes it in).

Blocks are read by their ``type`` and attribute names, so a result in mcp 1.x's models, mcp 2's
(``mime_type``) or :mod:`llamon_agent.mcp.protocol`'s converts the same.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.messages.content import create_file_block, create_image_block, create_text_block
from langchain_core.tools import StructuredTool, ToolException

from llamon_agent.mcp.results import output_problems

__all__ = ["ToolErrorResult", "convert_result", "langchain_tool"]

ToolCaller = Callable[[str, dict[str, Any]], Awaitable[Any]]


class ToolErrorResult(ToolException):
    """The tool answered ``isError``: its converted blocks, shown to the model as a failed tool message."""

    def __init__(self, blocks: list[dict[str, Any]]) -> None:
        texts = [block["text"] for block in blocks if block.get("type") == "text"]
        if texts:
            message = "\n".join(texts)
        elif blocks:
            message = (
                f"MCP tool returned an error with no text content ({len(blocks)} non-text content block(s))."
            )
        else:
            message = "MCP tool returned an error with empty content."
        super().__init__(message)
        self.blocks = blocks


def _on_tool_error(error: ToolException) -> Any:
    # LangChain passes only ToolExceptions here; a list of blocks becomes the ToolMessage's content.
    if isinstance(error, ToolErrorResult):
        return error.blocks or [dict(create_text_block(text=str(error)))]
    raise error


def _field(obj: Any, *names: str) -> Any:
    for name in names:
        value = obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
        if value is not None:
            return value
    return None


def _mime(obj: Any) -> str | None:
    return _field(obj, "mimeType", "mime_type") or None


def _block(content: Any) -> dict[str, Any]:
    kind = _field(content, "type")
    if kind == "text":
        return dict(create_text_block(text=_field(content, "text") or ""))
    if kind == "image":
        return dict(create_image_block(base64=_field(content, "data"), mime_type=_mime(content)))
    if kind == "audio":
        raise NotImplementedError(
            "AudioContent conversion to LangChain content blocks is not yet supported. "
            f"Received audio with mime type: {_mime(content)}"
        )
    if kind == "resource_link":
        mime, url = _mime(content), str(_field(content, "uri"))
        if mime and mime.startswith("image/"):
            return dict(create_image_block(url=url, mime_type=mime))
        return dict(create_file_block(url=url, mime_type=mime))
    if kind == "resource":
        resource = _field(content, "resource")
        text = _field(resource, "text")
        if text is not None:
            return dict(create_text_block(text=text))
        blob, mime = _field(resource, "blob"), _mime(resource)
        if blob is not None:
            if mime and mime.startswith("image/"):
                return dict(create_image_block(base64=blob, mime_type=mime))
            return dict(create_file_block(base64=blob, mime_type=mime))
        raise ValueError(f"Unknown embedded resource type: {type(resource).__name__}")
    raise ValueError(f"Unknown MCP content type: {kind!r}")


def convert_result(
    result: Any, output_schema: dict[str, Any] | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """A tool result as ``(content blocks, artifact)``; :class:`ToolErrorResult` for ``isError``.

    The artifact holds the structured content (``structured_content``) and, when the result does
    not fit the tool's declared ``output_schema``, why (``schema_warnings``: a warning for the
    trace, never a failure; the check is the pool's own, ``results.output_problems``).
    """
    blocks = [_block(content) for content in _field(result, "content") or []]
    if _field(result, "isError", "is_error"):
        raise ToolErrorResult(blocks)
    artifact: dict[str, Any] = {}
    structured = _field(result, "structuredContent", "structured_content")
    if structured is not None:
        artifact["structured_content"] = structured
    if output_schema and (problems := output_problems(result, output_schema)):
        artifact["schema_warnings"] = problems
    return blocks, artifact or None


def langchain_tool(tool: Any, call: ToolCaller) -> StructuredTool:
    """``tool`` (an MCP tool definition) as a StructuredTool whose coroutine runs ``call(name, arguments)``
    and converts the raw result it returns."""
    name = str(_field(tool, "name"))

    output_schema = _field(tool, "outputSchema", "output_schema")

    async def call_tool(**arguments: Any) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        return convert_result(await call(name, arguments), output_schema)

    annotations = _field(tool, "annotations")
    if annotations is not None and not isinstance(annotations, dict):
        annotations = annotations.model_dump()
    meta = _field(tool, "meta", "_meta")
    metadata = {**(annotations or {}), **({"_meta": meta} if meta is not None else {})} or None
    return StructuredTool(
        name=name,
        description=_field(tool, "description") or "",
        args_schema=_field(tool, "inputSchema", "input_schema") or {"type": "object", "properties": {}},
        coroutine=call_tool,
        response_format="content_and_artifact",
        metadata=metadata,
        handle_tool_error=_on_tool_error,
    )
