"""A sample request as every entry point reads it: the live tester's form, the run form, and the
REST API's evaluate and run bodies (through their schemas). One check of each part, one message.

The parts arrive parsed (the forms parse their JSON text boxes first; the API's body is JSON):
``context`` an object, ``data`` DataParts (one object, a list of objects, or a whole A2A message),
``files`` FileParts, ``pinned`` recorded tool outputs for Execute. Every refusal is a
:class:`~rules.errors.RuleError` naming its field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext as _

from llamon_agent.a2a import A2AFormatError, to_request
from llamon_agent.expr import MAX_DATA_BYTES
from llamon_agent.tools import AgentRequest
from rules.errors import RuleError, json_type_name

FILE_PART_KEYS = ("name", "mimeType", "uri", "size")


@dataclass(frozen=True)
class Sample:
    """The request the pre-step sees, and the A2A message it came from when one was pasted."""

    request: AgentRequest
    message: AgentRequest | None = None


def looks_like_a2a_message(value: Any) -> bool:
    return isinstance(value, dict) and (
        "parts" in value or "message" in value or "jsonrpc" in value or "params" in value
    )


def context_check(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RuleError(
            _('Context must be a JSON object like {"userId": "C-1001"}, not %(value)s.')
            % {"value": json_type_name(value)},
            field="context",
        )
    return value


def data_check(value: Any) -> list[dict[str, Any]] | dict[str, Any] | None:
    """DataParts as a list of objects, or the whole A2A message (a dict) when one was pasted."""
    if value is None or looks_like_a2a_message(value):
        return value
    if isinstance(value, dict):
        return [value]
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise RuleError(
            _("DataParts must be a JSON object, a list of objects, or an A2A message."), field="data"
        )
    return value or None


def files_check(value: Any) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise RuleError(
            _(
                'FileParts must be a JSON list of objects like {"name": "a.pdf", "mimeType": "application/pdf", "uri": "https://..."}.'
            ),
            field="files",
        )
    for i, item in enumerate(value, start=1):
        unknown = set(item) - set(FILE_PART_KEYS)
        if unknown:
            raise RuleError(
                _("FilePart %(i)s: unknown field(s) %(join)s; use name, mimeType, uri, size.")
                % {"i": i, "join": ", ".join(sorted(unknown))},
                field="files",
            )
    return [{k: item.get(k) for k in FILE_PART_KEYS} for item in value] or None


def pins_check(value: Any) -> list[dict[str, Any]]:
    """Pinned tool outputs checked against the servers they name (shape, size, each tool known)."""
    from rules.engine import servers_by_id
    from rules.pins import pins_clean

    ids = [p.get("mcp_id") for p in value if isinstance(p, dict)] if isinstance(value, list) else []
    if isinstance(value, dict):
        ids = [value.get("mcp_id")]
    try:
        return pins_clean(value, servers_by_id([i for i in ids if isinstance(i, str)]))
    except RuleError as exc:
        raise RuleError(exc.message, field="pinned") from None


def sample_read(*, query: str, context: Any, data: Any, files: Any) -> Sample:
    """The sample from its parts, each checked; a pasted A2A message goes through
    llamon_agent.a2a.to_request, and the Query and Context given beside it win over its own."""
    context, data, files = context_check(context), data_check(data), files_check(files)
    size = len(json.dumps([context, data, files], ensure_ascii=False).encode())
    if size > MAX_DATA_BYTES:
        raise RuleError(
            _(
                "Context, DataParts and FileParts together are %(size)s bytes; the limit is %(MAX_DATA_BYTES)s."
            )
            % {"size": format(size, ","), "MAX_DATA_BYTES": format(MAX_DATA_BYTES, ",")}
        )
    if not isinstance(data, dict):
        return Sample(AgentRequest(query=query or "", context=dict(context), a2a_data=data, a2a_files=files))
    try:
        message = to_request(data)
    except A2AFormatError as exc:
        raise RuleError(_("Not a valid A2A message: %(reason)s") % {"reason": exc}, field="data") from None
    request = AgentRequest(
        query=query or message.query,
        context={**message.context, **context},
        a2a_data=message.a2a_data,
        a2a_files=files if files is not None else message.a2a_files,
    )
    return Sample(request, message)
