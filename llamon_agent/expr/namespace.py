"""The per-request namespace: a read-only, JSON-like view of the request built once per request and server."""

from __future__ import annotations

import json
from typing import Any

from llamon_agent.expr.budget import _BASE_NAMESPACE, _METER, READ_CHARS_PER_UNIT, CostMeter
from llamon_agent.expr.errors import ExprError, _type_name
from llamon_agent.expr.limits import MAX_DATA_BYTES, MAX_QUERY_CHARS
from llamon_agent.expr.view import _Budget, _CtxView, _plain
from llamon_agent.tools import DeterministicContext

PlainRequest = tuple[str, dict[str, Any], list[Any] | None, list[Any] | None]


def plain_request(ctx: DeterministicContext) -> PlainRequest:
    """The JSON-like copies of a request an expression reads: (query, context, a2a_data, a2a_files).

    The same for every server of a request, so the pre-step makes them once and shares them
    (expressions cannot modify anything). ExprError when the request is over the caps.
    """
    query = ctx.query
    if type(query) is not str:
        query = "" if query is None else str(query)
    if len(query) > MAX_QUERY_CHARS:
        raise ExprError(f"the query is longer than {MAX_QUERY_CHARS:,} characters")
    budget = _Budget(MAX_DATA_BYTES)
    context = {} if ctx.context is None else _plain(ctx.context, budget)
    if type(context) is not dict:
        raise ExprError(f"ctx.context must be a dict, not {_type_name(context)}")
    a2a_data = None if ctx.a2a_data is None else _plain(list(ctx.a2a_data), budget)
    a2a_files = None if ctx.a2a_files is None else _plain(list(ctx.a2a_files), budget)
    return query, context, a2a_data, a2a_files


def build_namespace(
    ctx: DeterministicContext, *, meter: CostMeter | None = None, plain: PlainRequest | None = None
) -> dict[str, Any]:
    """The evaluation globals for one request on one server; build once, reuse for every rule.

    ``meter`` is the request's cost budget (share one between the namespaces of a request);
    by default a new one with the budgets of :func:`llamon_agent.settings.cost_budgets`.
    ``plain`` is :func:`plain_request` of ``ctx``, when already made for another server.
    """
    query, context, a2a_data, a2a_files = plain_request(ctx) if plain is None else plain
    view = _CtxView(query, context, a2a_data, a2a_files, list(ctx.mcp_tools or ()))
    namespace = _BASE_NAMESPACE.copy()
    namespace["ctx"] = view
    namespace["query"] = query
    namespace["context"] = context
    namespace["a2a_data"] = a2a_data
    namespace["a2a_files"] = a2a_files
    namespace["tool_names"] = view.tool_names
    if meter is None:
        meter = CostMeter()
    meter.qcost = 1 + len(query) // READ_CHARS_PER_UNIT
    namespace[_METER] = meter
    return namespace


def request_size_error(
    *, query: str, context: Any = None, a2a_data: Any = None, a2a_files: Any = None
) -> str | None:
    """Why a request is too big for the pre-step (MAX_QUERY_CHARS, MAX_DATA_BYTES), or None."""
    if len(query or "") > MAX_QUERY_CHARS:
        return f"the query is longer than {MAX_QUERY_CHARS:,} characters"
    try:
        payload = json.dumps([context, a2a_data, a2a_files], ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError) as exc:
        return f"the request data cannot be read as JSON: {exc}"
    if len(payload.encode("utf-8")) > MAX_DATA_BYTES:
        return f"the request data is larger than {MAX_DATA_BYTES:,} bytes"
    return None
