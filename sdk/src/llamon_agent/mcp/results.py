"""Turn an MCP ``CallToolResult`` into the plain value callers get: a JSON value (mostly a dict, a list
or a string).

Rules, in order:

1. ``isError`` -> :class:`McpToolError` carrying the error's text.
2. ``structuredContent`` present -> that dict. FastMCP wraps a non-object return value as
   ``{"result": value}`` and says so in the tool's output schema (one required property,
   ``result``); when that output schema is passed in, the wrapper is removed and the value keeps
   its JSON type (``{"result": 42}`` gives the number 42, not the string "42").
3. Only text blocks -> their text joined with newlines; if that text is a JSON object or
   array, the parsed value (a JSON scalar stays the string it came as).
4. Any non-text block -> a list with one dict per block. Binary payloads are never
   returned: an image/audio block becomes ``{"type", "mimeType", "bytes"}`` (decoded size),
   a resource link ``{"type", "uri", "name", "mimeType"}``, an embedded resource its
   text or, for a blob, its size. Text blocks in that list are ``{"type": "text", "text"}``.
   Binary content is for a model's eyes, not for a pre-step result stored in the run log.
5. No content at all -> ``""``.

A malformed result (not a ``CallToolResult``, a block of unknown type, base64 that does
not decode) raises :class:`McpProtocolError`.

A result whose text is over the cap (``LLAMON_TOOL_RESULT_MAX_BYTES``, default 256 KB) is cut by
:func:`cap_result` as the pool receives it: one text block, the first bytes and a marker with the
full size, so the pre-step, the model, the run log and the inspector all get the same bounded value.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from llamon_agent.guardrails import safe_cut
from llamon_agent.mcp import protocol as types
from llamon_agent.mcp.errors import McpProtocolError, McpToolError
from llamon_agent.mcp.schemas import schema_errors

# dict | list | str, or a number, bool or None unwrapped from a scalar structured result.
Normalized = Any

_MAX_ERROR_CHARS = 2000


def normalize_result(
    result: types.CallToolResult,
    *,
    mcp_id: str | None = None,
    tool_name: str | None = None,
    output_schema: dict[str, Any] | None = None,
) -> Normalized:
    """The plain value of a tool result (see the module docstring); raises McpToolError / McpProtocolError.

    ``result`` is a :class:`llamon_agent.mcp.protocol.CallToolResult`, or one of mcp 1.x's or mcp 2's."""
    try:
        result = types.as_call_tool_result(result)
    except (TypeError, ValidationError):
        raise McpProtocolError.about(
            f"expected a CallToolResult, got {type(result).__name__}", mcp_id=mcp_id, tool_name=tool_name
        ) from None
    if result.isError:
        raise McpToolError.about(_error_text(result), mcp_id=mcp_id, tool_name=tool_name)
    if result.structuredContent is not None:
        return _unwrap(result.structuredContent, output_schema)
    blocks = list(result.content)
    texts = [block.text for block in blocks if isinstance(block, types.TextContent)]
    if len(texts) == len(blocks):
        return _text_value("\n".join(texts))
    return [_summarize(block, mcp_id=mcp_id, tool_name=tool_name) for block in blocks]


def is_wrapped_output_schema(schema: dict[str, Any] | None) -> bool:
    """True for FastMCP's ``{"result": value}`` wrapper schema (a non-object return value)."""
    if not isinstance(schema, dict):
        return False
    properties = schema.get("properties")
    return (
        isinstance(properties, dict)
        and list(properties) == ["result"]
        and schema.get("required") == ["result"]
    )


def _unwrap(structured: dict[str, Any], output_schema: dict[str, Any] | None) -> Normalized:
    if is_wrapped_output_schema(output_schema) and list(structured) == ["result"]:
        return structured["result"]
    return structured


def output_problems(result: types.CallToolResult, output_schema: dict[str, Any] | None) -> list[str]:
    """Why a successful result does not fit the tool's declared output schema (empty when it does, or
    when the tool declares none). A warning for the trace, never a failure: MCP's own client refuses
    such a result outright, which would end a run over a server's slip in a field it may not need."""
    if not output_schema:
        return []
    result = types.as_call_tool_result(result)
    if result.isError:
        return []
    if result.structuredContent is None:
        return ["the tool declares an output schema but returned no structured content"]
    return schema_errors(output_schema, result.structuredContent, what="output", limit=5)


def _text_value(text: str) -> Normalized:
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            parsed = json.loads(stripped)
        except ValueError:
            return text
        if isinstance(parsed, dict | list):
            return parsed
    return text


def _error_text(result: types.CallToolResult) -> str:
    texts = [block.text for block in result.content if isinstance(block, types.TextContent)]
    text = "\n".join(texts).strip()
    if not text:
        others = len(result.content) - len(texts)
        text = f"the tool reported an error ({others} non-text block(s), no text)" if others else ""
    text = text or "the tool reported an error without any message"
    if len(text) > _MAX_ERROR_CHARS:
        text = text[:_MAX_ERROR_CHARS] + "... (truncated)"
    return text


def _summarize(block: Any, *, mcp_id: str | None, tool_name: str | None) -> dict[str, Any]:
    if isinstance(block, types.TextContent):
        return {"type": "text", "text": block.text}
    if isinstance(block, types.ImageContent | types.AudioContent):
        size = _decoded_size(block.data, what=f"{block.type} block", mcp_id=mcp_id, tool_name=tool_name)
        return {"type": block.type, "mimeType": block.mimeType, "bytes": size}
    if isinstance(block, types.ResourceLink):
        return {
            "type": "resource_link",
            "uri": str(block.uri),
            "name": block.name,
            "mimeType": block.mimeType,
        }
    if isinstance(block, types.EmbeddedResource):
        return _summarize_resource(block.resource, mcp_id=mcp_id, tool_name=tool_name)
    raise McpProtocolError.about(
        f"unsupported content block of type {type(block).__name__}", mcp_id=mcp_id, tool_name=tool_name
    )


def _summarize_resource(resource: Any, *, mcp_id: str | None, tool_name: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "resource", "uri": str(resource.uri), "mimeType": resource.mimeType}
    if isinstance(resource, types.TextResourceContents):
        out["text"] = resource.text
    elif isinstance(resource, types.BlobResourceContents):
        out["bytes"] = _decoded_size(resource.blob, what="resource blob", mcp_id=mcp_id, tool_name=tool_name)
    else:
        raise McpProtocolError.about(
            f"unsupported embedded resource {type(resource).__name__}", mcp_id=mcp_id, tool_name=tool_name
        )
    return out


def _decoded_size(data: str, *, what: str, mcp_id: str | None, tool_name: str | None) -> int:
    try:
        return len(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError) as exc:
        raise McpProtocolError.about(
            f"the {what} is not valid base64 ({exc})", mcp_id=mcp_id, tool_name=tool_name
        ) from None


# --------------------------------------------------------------------------- the size cap

RESULT_CAP_ENV = "LLAMON_TOOL_RESULT_MAX_BYTES"
DEFAULT_MAX_RESULT_BYTES = 256 * 1024
MIN_MAX_RESULT_BYTES = 1024
# Appended to a result cut at the cap; the web app finds it (TRUNCATED_RE) to say so in the user's language.
TRUNCATED_MARKER = "\n\n[truncated: the tool returned {size:,} bytes; the first {kept:,} are kept]"
TRUNCATED_RE = re.compile(
    r"\n\n\[truncated: the tool returned ([\d,]+) bytes; the first ([\d,]+) are kept\]\Z"
)


def max_result_bytes_from_env(environ: Mapping[str, str] | None = None) -> int:
    """``LLAMON_TOOL_RESULT_MAX_BYTES`` (at least 1024), or the default 256 KB when unset."""
    raw = (os.environ if environ is None else environ).get(RESULT_CAP_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_RESULT_BYTES
    try:
        value = int(raw.replace("_", ""))
    except ValueError:
        raise ValueError(f"{RESULT_CAP_ENV} must be a whole number of bytes, got {raw!r}") from None
    if value < MIN_MAX_RESULT_BYTES:
        raise ValueError(f"{RESULT_CAP_ENV} must be at least {MIN_MAX_RESULT_BYTES}, got {value}")
    return value


def result_text_bytes(result: types.CallToolResult) -> int:
    """The UTF-8 size of what a result says in text: its text blocks and embedded texts, or its
    structured content as JSON when that is larger (servers send both, the text a rendering of the
    structure; binary payloads are never handed on, only their size: not counted)."""
    result = types.as_call_tool_result(result)
    size = 0
    for block in result.content:
        if isinstance(block, types.TextContent):
            size += len(block.text.encode())
        elif isinstance(block, types.EmbeddedResource) and isinstance(
            block.resource, types.TextResourceContents
        ):
            size += len(block.resource.text.encode())
    if result.structuredContent is not None:
        size = max(size, len(json.dumps(result.structuredContent, ensure_ascii=False, default=str).encode()))
    return size


def cap_result(result: types.CallToolResult, max_bytes: int | None) -> types.CallToolResult:
    """``result`` as it is, or, when its text is over ``max_bytes``, one text block with the first
    ``max_bytes`` bytes of it and a marker with the full size (structured content dropped: cut JSON
    is no longer JSON). Whatever reads the result after the call (the pre-step, the model, the run
    log, the inspector) gets the same cut value.
    """
    if max_bytes is None:
        return result
    original, result = result, types.as_call_tool_result(result)
    if result.isError:
        return original  # an error's text is cut to _MAX_ERROR_CHARS where it is read
    size = result_text_bytes(result)
    if size <= max_bytes:
        return original
    parts = [block.text for block in result.content if isinstance(block, types.TextContent)]
    parts += [
        block.resource.text
        for block in result.content
        if isinstance(block, types.EmbeddedResource)
        and isinstance(block.resource, types.TextResourceContents)
    ]
    if not parts and result.structuredContent is not None:
        parts = [json.dumps(result.structuredContent, ensure_ascii=False, default=str)]
    text = _head("\n".join(parts), max_bytes)
    marker = TRUNCATED_MARKER.format(size=size, kept=len(text.encode()))
    others = [
        block
        for block in result.content
        if not isinstance(block, types.TextContent)
        and not (
            isinstance(block, types.EmbeddedResource)
            and isinstance(block.resource, types.TextResourceContents)
        )
    ]
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text + marker), *others], isError=False
    )


def _head(text: str, max_bytes: int) -> str:
    """The longest start of ``text`` whose UTF-8 form fits in ``max_bytes``: no character cut, and no
    number cut in two (guardrails.safe_cut: a card number's first half would escape the masks)."""
    if len(text) <= max_bytes // 4:
        return text
    head = text[:max_bytes].encode()[:max_bytes].decode("utf-8", "ignore")
    return head[: safe_cut(text, len(head))]


def truncation(value: Any) -> dict[str, int] | None:
    """``{"size", "kept"}`` (bytes) when ``value`` is a result cut by :func:`cap_result`, else None."""
    if not isinstance(value, str):
        return None
    match = TRUNCATED_RE.search(value)
    if match is None:
        return None
    return {"size": int(match.group(1).replace(",", "")), "kept": int(match.group(2).replace(",", ""))}


def cap_value(value: Any, max_bytes: int | None) -> Any:
    """A plain value (a tool step's output) cut like :func:`cap_result` when its text is over ``max_bytes``:
    a string by its UTF-8 size, anything else by its JSON; a value already cut is left as it is."""
    if max_bytes is None or value is None or truncation(value) is not None:
        return value
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if len(text) <= max_bytes // 4:
        return value
    size = len(text.encode())
    if size <= max_bytes:
        return value
    kept = _head(text, max_bytes)
    return kept + TRUNCATED_MARKER.format(size=size, kept=len(kept.encode()))
