"""A2A message (protocol 0.3 or 1.0, as JSON or as a2a-sdk objects) -> the one normal request.

Every shape is first turned into JSON-like data (a 0.3 pydantic object is dumped by alias, a
1.0 protobuf goes through protobuf's JSON mapping), then one reader handles both part
spellings: 0.3 parts carry ``kind`` (``text`` / ``data`` / ``file``), 1.0 parts hold exactly
one of ``text`` / ``data`` / ``url`` / ``raw``. One path is what makes the shapes agree.

This module imports neither a2a-sdk nor protobuf nor pydantic: it recognises their objects
only when the caller has already imported them, so ``import llamon_agent.a2a`` stays cheap.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import sys
from collections.abc import Mapping
from typing import Any, cast

from llamon_agent import strictjson
from llamon_agent.tools import AgentRequest

__all__ = ["MAX_DEPTH", "MAX_MESSAGE_BYTES", "A2AFormatError", "to_request"]

MAX_MESSAGE_BYTES = 1024 * 1024
"""Largest message accepted, measured as its JSON text (protobuf: the JSON mapping) in UTF-8."""
MAX_DEPTH = 64
"""Deepest nesting accepted inside a DataPart or the metadata."""

SEND_METHODS = frozenset({"message/send", "message/stream", "SendMessage", "SendStreamingMessage"})
ROLES = frozenset({"user", "agent", "ROLE_USER", "ROLE_AGENT", "ROLE_UNSPECIFIED"})
# Doubles hold every integer exactly only up to 2**53; beyond it a "whole" float is not an int someone sent.
_EXACT_INT_LIMIT = 2**53
# Protobuf's JSON mapping accepts URL-safe base64 as well as the standard alphabet.
_URLSAFE_TO_STD = str.maketrans("-_", "+/")


class A2AFormatError(ValueError):
    """The input is not an A2A message this SDK can read; the text says which part and what is wrong."""


def to_request(message: Any) -> AgentRequest:
    """Read an A2A message (0.3 or 1.0; dict, JSON text, a2a-sdk object, or a send envelope) into an AgentRequest."""
    return _read_message(_unwrap(_as_json_object(message)))


# --- input shapes -> one JSON object ------------------------------------------------------------


def _as_json_object(message: Any) -> dict[str, Any]:
    if isinstance(message, (bytes, bytearray)):
        _check_size(len(message))
        try:
            message = bytes(message).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise A2AFormatError(
                f"the A2A message is not UTF-8 text ({exc.reason} at byte {exc.start})"
            ) from None
    if isinstance(message, str):
        return _parse_json_text(message)

    proto = sys.modules.get("google.protobuf.message")
    if proto is not None and isinstance(message, proto.Message):
        # Binary size is a cheap lower bound of the JSON size: refuse before converting a huge message.
        _check_size(message.ByteSize())
        from google.protobuf.json_format import MessageToDict

        try:
            obj: Any = MessageToDict(message)
        except Exception as exc:  # protobuf raises its own error types (e.g. NaN in a Value)
            raise A2AFormatError(
                f"the protobuf {type(message).__name__} cannot be read as JSON: {exc}"
            ) from exc
    else:
        pydantic = sys.modules.get("pydantic")
        if pydantic is not None and isinstance(message, pydantic.BaseModel):
            # by_alias: the 0.3 types' wire names (mimeType, contextId) are what the reader expects.
            obj = message.model_dump(mode="json", by_alias=True, exclude_none=True)
        elif isinstance(message, Mapping):
            obj = dict(message)
        else:
            raise A2AFormatError(
                "expected an A2A message as a dict, JSON text, or an a2a-sdk Message object, "
                f"got {type(message).__name__}"
            )
    if not isinstance(obj, dict):
        raise A2AFormatError(f"an A2A message is a JSON object, got {_json_type(obj)}")
    _check_size(_json_size(obj))
    return obj


def _parse_json_text(text: str) -> dict[str, Any]:
    # A str has at most as many characters as UTF-8 bytes: a long one is refused before encoding it.
    _check_size(len(text))
    _check_size(len(text.encode("utf-8", errors="surrogatepass")))
    try:
        obj = strictjson.loads(text, allow_nul=True)  # the web refuses NUL before it gets here
    except strictjson.JSONInputError as exc:
        if (err := exc.decode_error) is not None:
            raise A2AFormatError(
                f"the A2A message is not valid JSON: {err.msg} at line {err.lineno} column {err.colno}"
            ) from None
        raise A2AFormatError(f"the A2A message is refused: {exc}") from None
    if not isinstance(obj, dict):
        raise A2AFormatError(f"an A2A message is a JSON object, got {_json_type(obj)}")
    return obj


def _json_size(obj: dict[str, Any]) -> int:
    try:
        # default=repr: only measuring here; values that are not JSON are reported, with their place, later.
        text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=repr)
    except ValueError as exc:  # "Circular reference detected"
        raise A2AFormatError(f"the A2A message cannot be JSON: {exc}") from None
    except RecursionError:
        raise A2AFormatError(f"the A2A message is nested more than {MAX_DEPTH} levels deep") from None
    return len(text.encode("utf-8", errors="surrogatepass"))


def _check_size(size: int) -> None:
    if size > MAX_MESSAGE_BYTES:
        raise A2AFormatError(
            f"the A2A message is over {MAX_MESSAGE_BYTES:,} bytes ({MAX_MESSAGE_BYTES // 1024} KiB) "
            f"(at least {size:,}); send large files by uri/url instead of inline bytes"
        )


def _unwrap(obj: dict[str, Any]) -> dict[str, Any]:
    """The message inside a JSON-RPC send request or a ``{"message": ...}`` wrapper, else ``obj`` itself."""
    if "jsonrpc" in obj or "method" in obj:
        method = obj.get("method")
        if method not in SEND_METHODS:
            raise A2AFormatError(
                f"JSON-RPC method {method!r} does not carry a message: expected "
                "'message/send' (A2A 0.3) or 'SendMessage' (A2A 1.0), or their streaming forms"
            )
        params = obj.get("params")
        if not isinstance(params, dict) or not isinstance(params.get("message"), dict):
            raise A2AFormatError(f"a JSON-RPC {method} request needs 'params.message', an object")
        return cast(dict[str, Any], params["message"])
    if "parts" not in obj and "message" in obj:
        inner = obj["message"]
        if not isinstance(inner, dict):
            raise A2AFormatError(
                f"'message' must be an object holding the A2A message, got {_json_type(inner)}"
            )
        return inner
    return obj


# --- one JSON message -> AgentRequest ------------------------------------------------------------


def _read_message(msg: dict[str, Any]) -> AgentRequest:
    kind = msg.get("kind")
    if kind not in (None, "message"):
        raise A2AFormatError(f"expected an A2A message, got an object of kind {kind!r}")
    if "parts" not in msg:
        found = ", ".join(sorted(map(str, msg))[:8]) or "none"
        raise A2AFormatError(f"the A2A message has no 'parts' list (keys found: {found})")
    parts = msg["parts"]
    if not isinstance(parts, list):
        raise A2AFormatError(f"'parts' must be a list, got {_json_type(parts)}")
    if not parts:
        raise A2AFormatError("the A2A message has no parts: 'parts' is empty")
    role = msg.get("role")
    if role is not None and role not in ROLES:
        raise A2AFormatError(
            f"unknown role {role!r}: expected 'user' or 'agent' (0.3), 'ROLE_USER' or 'ROLE_AGENT' (1.0)"
        )

    metadata = msg.get("metadata")
    if metadata is None:
        metadata = {}
    elif not isinstance(metadata, dict):
        raise A2AFormatError(f"'metadata' must be an object, got {_json_type(metadata)}")
    context: dict[str, Any] = _json_value(metadata, "metadata")

    texts: list[str] = []
    data: list[dict[str, Any]] = []
    files: list[dict[str, Any]] = []
    for index, part in enumerate(parts, start=1):
        where = f"part {index}"
        if not isinstance(part, dict):
            raise A2AFormatError(f"{where} must be an object, got {_json_type(part)}")
        if "kind" in part:
            _read_v03_part(part, where, texts, data, files)
        else:
            _read_v10_part(part, where, texts, data, files)

    session_id = _optional_str(msg, "message", "contextId", "context_id")
    task_id = _optional_str(msg, "message", "taskId", "task_id")
    # An explicit metadata sessionId wins; the protocol's contextId is the fallback.
    if session_id is not None and "sessionId" not in context:
        context["sessionId"] = session_id
    if task_id is not None:
        context["taskId"] = task_id
    return AgentRequest(
        query="\n".join(texts),
        context=context,
        a2a_data=data or None,
        a2a_files=files or None,
    )


def _read_v03_part(
    part: dict[str, Any],
    where: str,
    texts: list[str],
    data: list[dict[str, Any]],
    files: list[dict[str, Any]],
) -> None:
    kind = part["kind"]
    if kind == "text":
        text = part.get("text")
        if not isinstance(text, str):
            raise A2AFormatError(f"{where} (kind 'text') needs a 'text' string, got {_json_type(text)}")
        texts.append(text)
    elif kind == "data":
        if "data" not in part:
            raise A2AFormatError(f"{where} (kind 'data') has no 'data'")
        data.append(_data_object(part["data"], where))
    elif kind == "file":
        file = part.get("file")
        if not isinstance(file, dict):
            raise A2AFormatError(f"{where} (kind 'file') needs a 'file' object with 'uri' or 'bytes'")
        if ("uri" in file) == ("bytes" in file):
            raise A2AFormatError(f"{where} (kind 'file'): 'file' needs exactly one of 'uri' and 'bytes'")
        where_file = f"{where} (file)"
        files.append(
            _file_entry(
                name=_optional_str(file, where_file, "name"),
                mime_type=_optional_str(file, where_file, "mimeType", "mime_type"),
                uri=_required_uri(file["uri"], f"{where_file} 'uri'") if "uri" in file else None,
                size=_base64_size(file["bytes"], f"{where_file} 'bytes'") if "bytes" in file else None,
            )
        )
    else:
        raise A2AFormatError(f"{where} has unknown kind {kind!r}: expected 'text', 'data' or 'file'")


def _read_v10_part(
    part: dict[str, Any],
    where: str,
    texts: list[str],
    data: list[dict[str, Any]],
    files: list[dict[str, Any]],
) -> None:
    present = [key for key in ("text", "data", "url", "raw") if key in part]
    if not present:
        found = ", ".join(sorted(map(str, part))[:8]) or "none"
        raise A2AFormatError(
            f"{where} has no content: expected 'kind' (A2A 0.3) or one of 'text', 'data', 'url', 'raw' "
            f"(A2A 1.0); keys found: {found}"
        )
    if len(present) > 1:
        raise A2AFormatError(f"{where} holds {' and '.join(present)}: a 1.0 part holds exactly one of them")
    key = present[0]
    if key == "text":
        text = part["text"]
        if not isinstance(text, str):
            raise A2AFormatError(f"{where} 'text' must be a string, got {_json_type(text)}")
        texts.append(text)
    elif key == "data":
        data.append(_data_object(part["data"], where))
    else:
        files.append(
            _file_entry(
                name=_optional_str(part, where, "filename"),
                mime_type=_optional_str(part, where, "mediaType", "media_type"),
                uri=_required_uri(part["url"], f"{where} 'url'") if key == "url" else None,
                size=_base64_size(part["raw"], f"{where} 'raw'") if key == "raw" else None,
            )
        )


def _file_entry(
    *, name: str | None, mime_type: str | None, uri: str | None, size: int | None
) -> dict[str, Any]:
    return {"name": name, "mimeType": mime_type, "uri": uri, "size": size}


def _data_object(value: Any, where: str) -> dict[str, Any]:
    value = _json_value(value, f"{where} data")
    # Rules read a2a_data as a list of objects; a bare value (a 1.0 data part may hold any JSON) is boxed.
    return value if isinstance(value, dict) else {"value": value}


def _optional_str(obj: dict[str, Any], where: str, *keys: str) -> str | None:
    for key in keys:
        if key in obj:
            value = obj[key]
            if value is None:
                return None
            if not isinstance(value, str):
                raise A2AFormatError(f"{where} '{key}' must be a string, got {_json_type(value)}")
            # Protobuf cannot tell "" from unset, so an empty string means absent in every shape.
            return value or None
    return None


def _required_uri(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise A2AFormatError(f"{where} must be a non-empty string, got {_json_type(value)}")
    return value


def _base64_size(value: Any, where: str) -> int:
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    if not isinstance(value, str):
        raise A2AFormatError(f"{where} must be a base64 string, got {_json_type(value)}")
    # Pasted base64 is often wrapped across lines, and protobuf JSON may leave out the padding.
    compact = "".join(value.split()).translate(_URLSAFE_TO_STD).rstrip("=")
    compact += "=" * (-len(compact) % 4)
    try:
        return len(base64.b64decode(compact, validate=True))
    except (binascii.Error, ValueError) as exc:
        raise A2AFormatError(f"{where} is not valid base64 ({exc})") from None


class _NotJson(Exception):
    """Raised deep inside a value; each level adds its key on the way out, so paths cost nothing when valid."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path: list[str] = []


def _json_value(value: Any, where: str) -> Any:
    """A copy of a JSON-like value with whole-number floats made ints; A2AFormatError names the bad spot."""
    try:
        return _normalise(value, 0)
    except _NotJson as exc:
        raise A2AFormatError(f"{where}{''.join(reversed(exc.path))} {exc.reason}") from None


def _normalise(value: Any, depth: int) -> Any:
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _NotJson(f"is {value}, which JSON does not allow")
        # protobuf's Value stores every number as a double: 3 arrives as 3.0.
        if value.is_integer() and abs(value) <= _EXACT_INT_LIMIT:
            return int(value)
        return value
    if depth >= MAX_DEPTH:
        raise _NotJson(f"is nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise _NotJson(f"has the key {key!r}, but JSON object keys are strings")
            try:
                out[key] = _normalise(item, depth + 1)
            except _NotJson as exc:
                exc.path.append(f".{key}")
                raise
        return out
    if isinstance(value, (list, tuple)):
        items: list[Any] = []
        for index, item in enumerate(value):
            try:
                items.append(_normalise(item, depth + 1))
            except _NotJson as exc:
                exc.path.append(f"[{index}]")
                raise
        return items
    raise _NotJson(f"is a {type(value).__name__}, which is not JSON")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"
