"""The per-request namespace: a read-only, JSON-like view of the request built once per request and server."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from llamon_agent.expr.budget import (
    _BASE_NAMESPACE,
    READ_CHARS_PER_UNIT,
    CostMeter,
)
from llamon_agent.expr.errors import ExprError, _type_name
from llamon_agent.expr.guard import REQUEST_NAMES
from llamon_agent.expr.limits import MAX_DATA_BYTES, MAX_FILES_BYTES, MAX_PARTS, MAX_QUERY_CHARS
from llamon_agent.expr.messages import Message as M
from llamon_agent.expr.view import _Budget, _CtxView, _plain
from llamon_agent.tools import AgentRequest, DeterministicContext

PlainRequest = tuple[str, dict[str, Any], list[Any] | None, list[Any] | None]


def plain_request(ctx: DeterministicContext | AgentRequest) -> PlainRequest:
    """The JSON-like copies of a request an expression reads: (query, context, a2a_data, a2a_files).

    The same for every server of a request, so the pre-step makes them once and shares them
    (expressions cannot modify anything). ExprError when the request is over the caps.
    """
    query = ctx.query
    if type(query) is not str:
        query = "" if query is None else str(query)
    if len(query) > MAX_QUERY_CHARS:
        raise ExprError(M("run.query_too_long", limit=f"{MAX_QUERY_CHARS:,}"))
    budget = _Budget(MAX_DATA_BYTES)
    context = {} if ctx.context is None else _plain(ctx.context, budget)
    if type(context) is not dict:
        raise ExprError(M("run.context_type", type=_type_name(context)))
    a2a_data = None if ctx.a2a_data is None else _plain(_parts(ctx.a2a_data), budget)
    files = _Budget(MAX_FILES_BYTES, files=True)
    a2a_files = None if ctx.a2a_files is None else _plain(_parts(ctx.a2a_files), files)
    return query, context, a2a_data, a2a_files


def _parts(parts: Any) -> list[Any]:
    """A request's DataParts (FileParts) as a list, or ExprError past MAX_PARTS of them."""
    listed = list(parts)
    if len(listed) > MAX_PARTS:
        raise ExprError(M("run.too_many_parts", limit=f"{MAX_PARTS:,}"))
    return listed


# From this length on, `"w" in query` tests read a table of the literals the query holds, made
# once per request (the pre-step's index fills it from its automaton's one pass), instead of
# each scanning the query: 10,000 rules on a 32,000-character query no longer read it 10,000
# times.
LONG_QUERY_CHARS = 2_048


class LiteralTable(dict[str, bool]):
    """Which literals one text holds, for ``"w" in <text>``: ``found`` and ``known`` (a set the
    text was searched for in one pass: known but not found means absent) answer at once; any
    other literal is searched for once and remembered (its static bound counts a full read)."""

    __slots__ = ("text", "found", "known")

    def __init__(self, text: str, found: Any, known: Any) -> None:
        super().__init__()
        self.text = text
        self.found = found
        self.known = known

    def __contains__(self, word: object) -> bool:
        hit: bool | None = self.get(word)  # type: ignore[call-overload]
        if hit is None:
            if word in self.found:
                hit = True
            elif word in self.known:
                hit = False
            else:
                hit = word in self.text  # type: ignore[operator]
            self[word] = hit  # type: ignore[index]
        return hit


# What the pre-step's index found in a long query: (found in the query, found in query.lower(),
# every literal it searched for).
Found = tuple[Any, Any, Any]
_NOTHING: frozenset[str] = frozenset()


def build_namespace(
    ctx: DeterministicContext,
    *,
    meter: CostMeter | None = None,
    plain: PlainRequest | None = None,
    found: Found | None = None,
) -> dict[str, Any]:
    """The evaluation globals for one request on one server; build once, reuse for every rule.

    ``meter`` is the request's cost budget (share one between the namespaces of a request);
    by default a new one with the budgets of :func:`llamon_agent.settings.cost_budgets`.
    ``plain`` is :func:`plain_request` of ``ctx``, when already made for another server.
    ``found``: the literals a long query holds, when the pre-step's index searched for them.
    """
    args = server_args(
        plain_request(ctx) if plain is None else plain, list(ctx.mcp_tools or ()), meter=meter, found=found
    )
    return namespace_of(args)


def namespace_of(args: tuple[Any, ...]) -> dict[str, Any]:
    """The namespace holding :func:`server_args`' values under their names, and the helpers."""
    namespace = _BASE_NAMESPACE.copy()
    namespace.update(zip(REQUEST_NAMES, args, strict=True))
    return namespace


def server_args(
    plain: PlainRequest,
    tools: Sequence[Any],
    tool_names: frozenset[str] | None = None,
    *,
    meter: CostMeter | None = None,
    found: Found | None = None,
) -> tuple[Any, ...]:
    """The request's values an expression's function takes (guard.REQUEST_NAMES, in that order)
    for one server, from the request's :func:`plain_request` and the server's tools (never
    modified), with their names when already known (the pre-step keeps both per rule set):
    what :func:`build_namespace` holds besides the helpers, without the dict."""
    query, context, a2a_data, a2a_files = plain
    view = _CtxView(query, context, a2a_data, a2a_files, tools, tool_names)
    if meter is None:
        meter = CostMeter()
    meter.qcost = 1 + len(query) // READ_CHARS_PER_UNIT
    lowered = meter.lowered if meter.query is query else None
    if lowered is None:  # once per request: the namespaces of its servers share the meter
        lowered = query.lower()
        meter.query, meter.lowered, meter.tables, meter.searched = query, lowered, None, {}
    if meter.parts is not a2a_data or meter.first is None:
        # Once per request, like plain_request's copies (and, like them, bounded by the
        # request caps and not charged): what data_get with a literal key reads.
        first: dict[Any, Any] = {}
        if a2a_data and len(a2a_data) == 1 and type(a2a_data[0]) is dict:
            first = a2a_data[0]  # one DataPart (the usual request): itself, read-only as all data
        else:
            part: Any
            for part in reversed(a2a_data or ()):  # the first DataPart holding a key wins
                if type(part) is dict:
                    first.update(part)
        meter.parts, meter.first = a2a_data, first
    if len(query) < LONG_QUERY_CHARS:
        in_query, in_lowered = query, lowered
        meter.rcost = meter.qcost
    else:
        if meter.tables is None:
            raw, low, known = found if found is not None else (_NOTHING, _NOTHING, _NOTHING)
            meter.tables = (LiteralTable(query, raw, known), LiteralTable(lowered, low, known))
        in_query, in_lowered = meter.tables
        meter.rcost = 1  # a literal test is a lookup; a search is charged when it happens
    # In REQUEST_NAMES' order: ctx, query, context, a2a_data, a2a_files, tool_names, LOWERED,
    # FIRST, IN_QUERY, IN_LOWERED, _METER.
    return (
        view,
        query,
        context,
        a2a_data,
        a2a_files,
        view.tool_names,
        lowered,
        meter.first,
        in_query,
        in_lowered,
        meter,
    )


def request_size_error(
    *, query: str, context: Any = None, a2a_data: Any = None, a2a_files: Any = None
) -> str | None:
    """Why a request is too big for the pre-step (MAX_QUERY_CHARS, MAX_DATA_BYTES), or None."""
    if len(query or "") > MAX_QUERY_CHARS:
        return f"the query is longer than {MAX_QUERY_CHARS:,} characters"
    try:
        payload = json.dumps([context, a2a_data], ensure_ascii=False, default=str)
        files = json.dumps(a2a_files, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError) as exc:
        return f"the request data cannot be read as JSON: {exc}"
    if len(payload.encode("utf-8")) > MAX_DATA_BYTES:
        return f"the request data is larger than {MAX_DATA_BYTES:,} bytes"
    if len(files.encode("utf-8")) > MAX_FILES_BYTES:
        return f"the request's FileParts are larger than {MAX_FILES_BYTES:,} bytes"
    if any(len(parts) > MAX_PARTS for parts in (a2a_data or [], a2a_files or [])):
        return f"the request has more than {MAX_PARTS:,} DataParts or FileParts"
    return None
