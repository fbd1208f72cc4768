"""What decides a replayed request: runs that ask the same are decided once.

The candidate's dry-run pre-step is a function of the request it gets (the query, the context,
the DataParts and the FileParts; the servers' tools are the same for a whole replay). Runs that
give it equal requests get equal decisions, so a replay evaluates each distinct request once and
counts the others from it. Runs seldom repeat a context exactly (a session id, a trace id), but
the rules read only some of its keys: :func:`context_reads` finds them in the rules' syntax, and
a request is then told by the query, the DataParts, the FileParts and those keys' values.

What else of the context the pre-step reads is its size and nesting (the expression caps, checked
when it copies the request): a request is told by the read keys only when its stored data is far
enough under the caps that no copy can fail; any other request is told by all of it.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable, Mapping
from typing import Any

from governance.selectors import json_value
from llamon_agent.expr.hints import is_ctx_name
from llamon_agent.expr.limits import MAX_DATA_BYTES, MAX_DATA_DEPTH

# The attributes of ``ctx`` that are not the context (namespace._CtxView): all in the key, or
# the same for every request of a replay (the tools).
_CTX_OTHER = frozenset({"query", "a2a_data", "a2a_files", "tool_names", "mcp_tools"})
_COPY_UNITS_PER_CHAR = 4  # the most the caps' copy (view._plain) counts for one character of JSON text
_MISSING = ()  # a key the context does not have
NOT_DECODED = object()


def _is_context(node: ast.AST) -> bool:
    """``context`` or ``ctx.context``."""
    return is_ctx_name(node, "context")


def _text_key(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and type(node.value) is str else None


def expression_reads(source: str) -> set[str] | None:
    """The context keys one expression can read (None: more than named keys, or not known).

    Every use of the context must read one key named by a text literal: ``context.get("k", ...)``,
    ``context["k"]`` or ``"k" in context`` (``ctx.context`` alike). Any other use (the whole
    context, a key computed at run time, ``ctx`` itself) reads more: None.
    """
    try:
        tree = ast.parse(source, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    keys: set[str] = set()
    used: set[int] = set()  # the context nodes read as one named key
    ctx_ok: set[int] = set()  # the ``ctx`` names read as an attribute other than the context
    for node in ast.walk(tree):
        key, target = None, None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            if node.args and not node.keywords and len(node.args) <= 2:
                key, target = _text_key(node.args[0]), node.func.value
        elif isinstance(node, ast.Subscript):
            key, target = _text_key(node.slice), node.value
        elif (
            isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and isinstance(node.ops[0], ast.In | ast.NotIn)
        ):
            key, target = _text_key(node.left), node.comparators[0]
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "ctx"
            and (node.attr in _CTX_OTHER or node.attr == "context")
        ):
            ctx_ok.add(id(node.value))
        if key is not None and target is not None and _is_context(target):
            keys.add(key)
            used.add(id(target))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_context(node) and id(node) not in used:
            return None
        if isinstance(node, ast.Name):
            if node.id == "ctx" and id(node) not in ctx_ok:
                return None
            if node.id == "context" and id(node) not in used:
                return None
    return keys


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
