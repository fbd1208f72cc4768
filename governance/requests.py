"""What decides a replayed request: runs that ask the same are decided once.

The candidate's dry-run pre-step is a function of the request it gets (the query, the context,
the DataParts and the FileParts; the servers' tools are the same for a whole replay). Runs that
give it equal requests get equal decisions, so a replay evaluates each distinct request once and
counts the others from it. Runs seldom repeat a context exactly (a session id, a trace id), but
the rules read only some of its keys: :func:`context_reads` asks the engine which, and
a request is then told by the query, the DataParts, the FileParts and those keys' values.

What else of the context the pre-step reads is its size and nesting (the expression caps, checked
when it copies the request): a request is told by the read keys only when its stored data is far
enough under the caps that no copy can fail; any other request is told by all of it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from governance.selectors import json_value
from llamon_agent.expr.limits import MAX_DATA_BYTES, MAX_DATA_DEPTH
from llamon_agent.expr.reads import reads

_COPY_UNITS_PER_CHAR = 4  # the most the caps' copy (view._plain) counts for one character of JSON text
_MISSING = ()  # a key the context does not have
NOT_DECODED = object()


def expression_reads(source: str) -> set[str] | None:
    """The context keys one expression can read (None: more than named keys, or not known), as
    the engine says (llamon_agent.expr.reads)."""
    keys = reads(source).context_keys
    return None if keys is None else set(keys)


def context_reads(snapshot: Iterable[Mapping[str, Any]]) -> tuple[str, ...] | None:
    """The context keys the enabled rules' expressions can read (None: more than named keys)."""
    keys: dict[str, None] = {}
    for rule in snapshot:
        if not rule.get("enabled", True):
            continue
        for source in (rule.get("when"), rule.get("params")):
            if not isinstance(source, str):
                return None
            found = expression_reads(source)
            if found is None:
                return None
            keys.update(dict.fromkeys(sorted(found)))
    return tuple(keys)


def _value_key(value: Any) -> Any:
    """A hashable stand-in for a JSON value, type-exact (True, 1 and 1.0 stay apart, so do 0.0 and -0.0)."""
    if type(value) is str:
        return value
    return (json.dumps(value, ensure_ascii=False, allow_nan=True),)


class RequestKeys:
    """The key of a stored request for one candidate: equal keys, equal decisions."""

    def __init__(self, snapshot: Iterable[Mapping[str, Any]]) -> None:
        self.reads = context_reads(snapshot)

    def __call__(
        self, query: str, context: str | None, a2a_data: str | None, a2a_files: str | None
    ) -> tuple[tuple[Any, ...], Any]:
        """The key of a request from its stored JSON texts (``selectors.recorded_chunks``), and its
        context decoded (``NOT_DECODED`` when the key did not need it)."""
        if self.reads is None:
            return ("all", query, context, a2a_data, a2a_files), NOT_DECODED
        chars = brackets = 0
        for text in (context, a2a_data, a2a_files):
            if text is not None:
                chars += len(text)
                brackets += text.count("{") + text.count("[")
        # Under these bounds the copy of the whole request cannot fail (each character of JSON
        # text counts at most 4 units; nesting needs a bracket a level).
        if chars * _COPY_UNITS_PER_CHAR > MAX_DATA_BYTES or brackets >= MAX_DATA_DEPTH:
            return ("all", query, context, a2a_data, a2a_files), NOT_DECODED
        decoded = json_value(context)
        values = decoded or {}  # as the request is built (services.stored_request)
        if type(values) is not dict:
            return ("all", query, context, a2a_data, a2a_files), decoded
        key: list[Any] = ["read", query, a2a_data, a2a_files]
        for k in self.reads:
            value = values.get(k, _MISSING)  # JSON holds no tuple: () is no value
            key.append(value if type(value) is str or value is _MISSING else _value_key(value))
        return tuple(key), decoded
