"""Where rule sets meet llamon_agent: models become engine types, outcomes come back as dicts.

Nothing here writes to the database; services and selectors call these functions.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Generic, Protocol, TypeVar

from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from core.content_hash import sha256
from llamon_agent import rule_checks
from llamon_agent.expr import (
    BUILTIN_NAMES,
    CTX_NAMES,
    HELPER_NAMES,
    METHOD_NAMES,
    ExprError,
    check_cost,
    compile_params,
    compile_when,
    expression_rule,
)
from llamon_agent.expr.limits import CTX_ATTRS
from llamon_agent.mcp.schemas import schema_errors
from llamon_agent.prestep import (
    PrestepOutcome,
    RuleStatus,
    StaticToolBackend,
    compile_rules,
    render_results_block,
    run_prestep,
)
from llamon_agent.tools import AgentRequest, ToolInfo
from llamon_agent.trace import jsonable
from rules.errors import RuleError
from rules.models import RuleSet, RuleSetVersion
from servers.models import McpServer

SNAPSHOT_FIELDS = ("name", "description", "mcp_id", "tool_name", "when", "params", "stop", "enabled")
DRY_RUN_RESULT = "(dry run: not called)"


def rule_set_snapshot(rule_set: RuleSet) -> list[dict[str, Any]]:
    """The draft's rules in order, as plain data (what a version freezes)."""
    # Plain rows, no model instances: building 2,000 Rule objects took most of a tester request.
    rows = rule_set.rules.order_by("position", "id").values_list(*SNAPSHOT_FIELDS)
    return [dict(zip(SNAPSHOT_FIELDS, row, strict=True)) for row in rows]


def snapshot_mcp_ids(snapshot: Sequence[Mapping[str, Any]]) -> list[str]:
    """The servers the enabled rules use, in first-use order."""
    return list(dict.fromkeys(r["mcp_id"] for r in snapshot if r.get("enabled", True)))


def tool_schema_hash(servers: Iterable[McpServer]) -> str:
    """A hash of the tool lists (names and input schemas) of the given servers."""
    return sha256(
        {s.mcp_id: sorted((t["name"], t.get("input_schema", {})) for t in s.tools) for s in servers}
    )


def compile_snapshot(snapshot: Sequence[Mapping[str, Any]], *, use_index: bool = True):
    """Compile the enabled rules of a snapshot into the engine's CompiledRules (cached by content)."""
    key = tuple(
        (r["name"], r["mcp_id"], r["tool_name"], r["when"], r["params"], bool(r["stop"]))
        for r in snapshot
        if r.get("enabled", True)
    )
    return _compiled_rules(key, use_index)


# Compiled rules are immutable, so they are shared: the tester re-runs the same draft on every
# keystroke, and compiling 200 rules (400 expressions) costs ~40 ms against ~1 ms to evaluate them.
# compile_rules freezes a large set out of the garbage collector (FREEZE_AFTER_RULES).
@lru_cache(maxsize=64)
def _compiled_rules(key: tuple[tuple[str, str, str, str, str, bool], ...], use_index: bool):
    return compile_rules([_expression_rule(*fields) for fields in key], use_index=use_index)


@lru_cache(maxsize=20_000)
def _expression_rule(name: str, mcp_id: str, tool_name: str, when: str, params: str, stop: bool):
    return expression_rule(name=name, mcp_id=mcp_id, tool_name=tool_name, when=when, params=params, stop=stop)


class VersionRules:
    """A published version's rules as a run needs them: the snapshot (read-only: it is shared),
    its servers, and its compiled rules (compiled on first use; a version that does not compile
    raises each time it is asked, like compile_snapshot)."""

    __slots__ = ("_compiled", "mcp_ids", "snapshot")

    def __init__(self, snapshot: list[dict[str, Any]]) -> None:
        self.snapshot = snapshot
        self.mcp_ids = snapshot_mcp_ids(snapshot)
        self._compiled: Any = None

    def compiled(self) -> Any:
        if self._compiled is None:
            self._compiled = compile_snapshot(self.snapshot)
        return self._compiled


VERSION_CACHE_SIZE = 64  # published versions kept per process (a worker serves a few at a time)
_versions: OrderedDict[tuple[int, Any, str], VersionRules] = OrderedDict()
_versions_lock = threading.Lock()


def version_rules(version: RuleSetVersion) -> VersionRules:
    """The rules of a published version, read from the database and compiled once per process.

    A version's content never changes (RuleSetVersion.save refuses an update), so its row is the
    key: its id, when it was made and its content hash (the id alone can come back after a
    rolled-back transaction, the hash alone is not checked against the content here). Pass the
    version with ``content`` deferred and the content is read only the first time.
    """
    key = (version.pk, version.created_at, version.content_hash)
    with _versions_lock:
        found = _versions.get(key)
        if found is not None:
            _versions.move_to_end(key)
            return found
    found = VersionRules(list(version.content))
    with _versions_lock:
        _versions[key] = found
        while len(_versions) > VERSION_CACHE_SIZE:
            _versions.popitem(last=False)
    return found


def servers_by_id(mcp_ids: Iterable[str]) -> dict[str, McpServer]:
    return {s.mcp_id: s for s in McpServer.objects.filter(mcp_id__in=list(mcp_ids))}


def server_view(server: McpServer) -> dict[str, Any]:
    """A server as the static checks and a pull (ruleset.json) know it: enabled, whether its tools
    were ever listed, and its tools (llamon_agent.rule_checks.server_view)."""
    return rule_checks.server_view(
        enabled=server.enabled, listed=server.tools_refreshed_at is not None, tools=server.tools
    )


def dry_backend(servers: Mapping[str, McpServer]) -> StaticToolBackend:
    """Tools from the database; disabled or unknown servers are not bound (the contract's first row)."""
    return StaticToolBackend(
        {
            mcp_id: [
                ToolInfo(t["name"], t.get("description", ""), t.get("input_schema", {})) for t in server.tools
            ]
            for mcp_id, server in servers.items()
            if server.enabled
        }
    )


@dataclass
class Evaluation:
    """A pre-step outcome plus what the workbench adds: per-call schema checks and the LLM block."""

    outcome: PrestepOutcome
    schema_errors: dict[str, list[str]]
    block: str

    def to_json(self) -> dict[str, Any]:
        """Every rule's record (for code that needs them all; an answer to a client is :meth:`answer`)."""
        data = self.outcome.to_json()
        data["schema_errors"] = self.schema_errors
        data["block"] = self.block
        return data

    def answer(
        self, *, detail: str = "summary", offset: int = 0, fired_shown: int | None = None
    ) -> dict[str, Any]:
        """What a client is told (the tester's API, the MCP endpoint, a stored case outcome): the
        outcome with the records :func:`records_shown` chooses and the counts of every status."""
        shown = records_shown(self.outcome.records, detail=detail, offset=offset, fired_shown=fired_shown)
        out = self.outcome
        return {
            "ok": out.ok,
            "error": out.error,
            "dry_run": out.dry_run,
            "calls": out.calls,
            "duration_ms": out.duration_ms,
            "results": jsonable(out.results),
            "records": [rec.to_json() for rec in shown.records],
            "counts": shown.counts,
            "omitted": shown.omitted,
            "detail": detail,
            "next_offset": shown.next_offset,
            "schema_errors": self.schema_errors,
            "block": self.block,
        }


# What one answer about an evaluation lists, for every route alike (the tester's page, its API and the
# MCP endpoint, stored case outcomes): every rule that fired or failed, in full, and of the others
# (skipped, not reached) the first QUIET_SHOWN, counted beyond that. 2,000 rules made a 355 KB API
# answer (470 KB on the page) when each had its record. ``detail="all"`` lists the others too, a page
# of QUIET_PAGE at a time from ``offset`` (``next_offset`` is where the next page starts).
DETAILS = ("summary", "all")
QUIET_SHOWN = 20
# The tester's API (and the MCP endpoint) lists at most this many fired rules in a summary: at
# 2,000 rules a request firing 100 of them made a 54 KB answer (docs/performance.md).
FIRED_SHOWN = 30
QUIET_PAGE = 500
_QUIET = (RuleStatus.SKIPPED, RuleStatus.NOT_REACHED)
R = TypeVar("R", bound="HasStatus")


def detail_check(detail: Any, offset: Any) -> int:
    """``offset`` as checked: RuleError unless ``detail`` is one of DETAILS and ``offset`` a whole number
    >= 0 (with "all" only; a text typed on a page is refused here, with this message)."""
    if detail not in DETAILS:
        raise RuleError(
            gettext('detail must be "summary" or "all", not %(value)s.')
            % {"value": json.dumps(detail, ensure_ascii=False, default=str)[:60]},
            field="detail",
        )
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise RuleError(gettext("offset must be a whole number, 0 or more."), field="offset")
    if offset and detail != "all":
        raise RuleError(
            gettext(
                'offset pages the skipped and not-reached rules of detail "all"; send detail "all" with it.'
            ),
            field="offset",
        )
    return offset


class HasStatus(Protocol):
    @property
    def status(self) -> str: ...  # a RuleStatus (a str enum) or its value


@dataclass
class RecordsShown(Generic[R]):
    """The records an answer lists, in evaluation order, and what it leaves out."""

    detail: str
    records: list[R] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # every rule, by status
    omitted: dict[str, int] = field(default_factory=dict)  # the skipped and not-reached ones not listed
    next_offset: int | None = None  # detail="all": where the next page of the others starts

    @property
    def hidden_skipped(self) -> int:
        return self.omitted[RuleStatus.SKIPPED]

    @property
    def hidden_not_reached(self) -> int:
        return self.omitted[RuleStatus.NOT_REACHED]

    @property
    def hidden(self) -> int:
        return self.hidden_skipped + self.hidden_not_reached

    @property
    def more_offset(self) -> int | None:
        """Where a page's "list more" starts (None: no such button): the first page of ``all`` after
        the summary, then each next page."""
        if self.detail != "all":
            return 0 if self.hidden else None
        return self.next_offset

    @property
    def more_count(self) -> int:
        """How many rules that button lists."""
        if self.more_offset is None:
            return 0
        quiet = self.counts[RuleStatus.SKIPPED] + self.counts[RuleStatus.NOT_REACHED]
        return min(QUIET_PAGE, quiet - self.more_offset)

    @property
    def more_is_all(self) -> bool:
        """The button lists every rule (they fit in one page)."""
        quiet = self.counts[RuleStatus.SKIPPED] + self.counts[RuleStatus.NOT_REACHED]
        return self.more_offset == 0 and quiet <= QUIET_PAGE


def records_shown(
    records: Sequence[R], *, detail: str = "summary", offset: int | str = 0, fired_shown: int | None = None
) -> RecordsShown[R]:
    """Choose the records an answer lists: fired and failed always, the others from ``offset`` on,
    QUIET_SHOWN of them (``summary``) or QUIET_PAGE (``all``). RuleError for a detail or offset
    that is not one of these (``offset`` pages ``all`` only). The tester's answers and the run
    page's rules table both list through it.

    ``fired_shown``: a ``summary`` lists at most that many fired rules, the first ones, and counts
    the others in ``omitted["fired"]`` (the tester's API: FIRED_SHOWN); failed rules are always all
    listed, and ``all`` lists every fired rule."""
    offset = detail_check(detail, offset)
    limit = QUIET_PAGE if detail == "all" else QUIET_SHOWN
    shown: RecordsShown[R] = RecordsShown(
        detail=detail, counts={str(s): 0 for s in RuleStatus}, omitted={str(s): 0 for s in _QUIET}
    )
    if fired_shown is not None:
        shown.omitted[str(RuleStatus.FIRED)] = 0
    quiet = fired = 0
    for rec in records:
        status = str(rec.status)
        shown.counts[status] += 1
        if status not in _QUIET:
            if status == RuleStatus.FIRED and fired_shown is not None and detail != "all":
                fired += 1
                if fired > fired_shown:
                    shown.omitted[status] += 1
                    continue
            shown.records.append(rec)
            continue
        if offset <= quiet < offset + limit:
            shown.records.append(rec)
        else:
            shown.omitted[status] += 1
        quiet += 1
    if detail == "all" and offset + limit < quiet:
        shown.next_offset = offset + limit
    return shown


def evaluate(
    snapshot: Sequence[Mapping[str, Any]],
    request: AgentRequest,
    *,
    servers: Mapping[str, McpServer] | None = None,
    backend: Any = None,
    dry_run: bool = True,
) -> Evaluation:
    """Run the pre-step of a snapshot on one request; dry run by default (nothing is called)."""
    servers = servers if servers is not None else servers_by_id(snapshot_mcp_ids(snapshot))
    compiled = compile_snapshot(snapshot)
    outcome = run_prestep(compiled, request, backend=backend or dry_backend(servers), dry_run=dry_run)
    schema_errors = {
        rec.rule: errors
        for rec in outcome.records
        if rec.status is RuleStatus.FIRED
        and (errors := params_schema_errors(servers.get(rec.mcp_id), rec.tool_name, rec.params))
    }
    if dry_run:
        would = [
            {
                "rule": r.rule,
                "mcp_id": r.mcp_id,
                "tool_name": r.tool_name,
                "params": r.params,
                "result": DRY_RUN_RESULT,
            }
            for r in outcome.fired
        ]
        block = render_results_block(would)
    else:
        block = outcome.system_block()
    return Evaluation(outcome=outcome, schema_errors=schema_errors, block=block)


def params_schema_errors(server: McpServer | None, tool_name: str | None, params: Any) -> list[str]:
    """Why ``params`` does not fit the tool's input schema (empty when it does or no schema is known)."""
    if server is None or tool_name is None:
        return []
    tool = next((t for t in server.tools if t["name"] == tool_name), None)
    return schema_errors((tool or {}).get("input_schema") or {}, params)


def live_backend(servers: Mapping[str, McpServer]) -> Any:
    """A backend that really calls the tools, over the process's pooled sessions (enabled servers only)."""
    from llamon_agent.mcp import PoolToolBackend
    from servers.pool import pool_for_server, web_pool

    bound = [mcp_id for mcp_id, server in servers.items() if server.enabled]
    for mcp_id in bound:
        pool_for_server(servers[mcp_id])
    return PoolToolBackend(web_pool(), bound)


def apply_draft_edit(
    snapshot: list[dict[str, Any]], edit: Mapping[str, Any], *, original_name: str | None
) -> list[dict[str, Any]]:
    """The snapshot with one rule replaced by its unsaved edit (or the edit appended when new)."""
    edited = {f: edit.get(f, "" if f not in {"stop", "enabled"} else False) for f in SNAPSHOT_FIELDS}
    out = [dict(r) for r in snapshot]
    for i, rule in enumerate(out):
        if original_name and rule["name"] == original_name:
            out[i] = edited
            return out
    out.append(edited)
    return out


def params_skeleton(tool: Mapping[str, Any] | None) -> str:
    """A params expression with the tool's required fields, each with a placeholder of its type."""
    if not tool:
        return "{}"
    schema = tool.get("input_schema") or {}
    props = schema.get("properties") or {}
    placeholders = {
        "string": "query",
        "integer": "0",
        "number": "0",
        "boolean": "False",
        "array": "[]",
        "object": "{}",
    }
    parts = []
    for name in schema.get("required") or []:
        kind = (props.get(name) or {}).get("type", "string")
        value = placeholders.get(kind if isinstance(kind, str) else "string", "None")
        if kind == "string" and name not in {"query", "q", "text"}:
            value = f"context.get({json.dumps(name)})"
        parts.append(f"{json.dumps(name, ensure_ascii=False)}: {value}")
    return "{" + ", ".join(parts) + "}"


def explain_rules(
    snapshot: Sequence[Mapping[str, Any]],
    request: AgentRequest,
    names: Iterable[str],
    *,
    servers: Mapping[str, McpServer],
) -> dict[str, Any]:
    """Why each named rule's ``when`` is false (or failed): ``{name: Explanation}`` (llamon_agent.expr.explain).

    Each rule is explained on the namespace the pre-step gives it (the request and its server's
    tools), with a fresh cost budget; nothing is called.
    """
    from llamon_agent.expr import ExprError, build_namespace
    from llamon_agent.expr.explain import explain_when

    wanted = set(names)
    backend = dry_backend(servers)
    namespaces: dict[str, dict[str, Any]] = {}
    out: dict[str, Any] = {}
    for rule in snapshot:
        if rule["name"] not in wanted:
            continue
        mcp_id = rule["mcp_id"]
        try:
            if mcp_id not in namespaces:
                namespaces[mcp_id] = build_namespace(
                    request.to_context(list(backend.tools_for(mcp_id) or []))
                )
            namespace = namespaces[mcp_id]
            out[rule["name"]] = explain_when(rule["when"], namespace)
        except ExprError:
            continue  # the record already says why (a request too big, an invalid draft expression)
    return out


# --- the expression editor ------------------------------------------------------------------
EXPRESSION_FIELDS = {"when": compile_when, "params": compile_params}
# What the editor's completion shows beside each helper; the names themselves come from limits.py.
_HELPER_SIGNATURES = {
    "contains_any": ("contains_any(text, words)", _("True when one of the words occurs in the text")),
    "contains_all": ("contains_all(text, words)", _("True when every one of the words occurs in the text")),
    "re_search": ("re_search(pattern, text)", _("True when the RE2 pattern matches somewhere in the text")),
    "re_find": ("re_find(pattern, text, group=0)", _("The first RE2 match (or its group), None when none")),
    "data_get": ("data_get(key, default=None)", _("The first value of key across the DataParts")),
    "to_number": (
        "to_number(value, default=None)",
        _('The value as a number (also from text such as "86"); the default when it is not one'),
    ),
}


def expression_vocabulary() -> dict[str, Any]:
    """The names an expression may use, for the editor's completion (the checker's own lists)."""
    return {
        "names": list(CTX_NAMES),
        "ctx_attrs": sorted(CTX_ATTRS),
        "helpers": [
            {
                "name": name,
                "signature": _HELPER_SIGNATURES.get(name, (name, ""))[0],
                "info": str(_HELPER_SIGNATURES.get(name, (name, ""))[1]),
            }
            for name in HELPER_NAMES
        ],
        "builtins": list(BUILTIN_NAMES),
        "methods": sorted(METHOD_NAMES),
        "words": {
            "required": gettext("required"),
            "param": gettext("param"),
            "tool": gettext("tool"),
            "request": gettext("request"),
            "builtin": gettext("builtin"),
            "place": gettext("line %(line)s, column %(column)s: "),
        },
    }


def expression_diagnostics(field: str, source: str) -> list[dict[str, Any]]:
    """What the compile check says of ``source`` as the rule's ``field``: [] or one error with its place.

    Line and column are 1-based and count characters (code points) of ``source`` as given, so
    the editor can mark the place; both are None when the error has no place.
    """
    try:
        check_cost(EXPRESSION_FIELDS[field](source))  # the editor checks what a save checks
    except ExprError as exc:
        from rules.expr_messages import expr_reason

        return [{"line": exc.line, "column": exc.column, "message": expr_reason(exc)}]
    return []


def completion_data(server: McpServer | None, tool: Mapping[str, Any] | None) -> dict[str, Any]:
    """The chosen server's tool names and the chosen tool's params keys (from its input schema)."""
    schema = (tool or {}).get("input_schema") or {}
    props = schema.get("properties") if isinstance(schema, dict) else None
    required = schema.get("required") if isinstance(schema, dict) else None
    required = set(required) if isinstance(required, list) else set()
    params = []
    for name, spec in props.items() if isinstance(props, dict) else ():
        spec = spec if isinstance(spec, dict) else {}
        kind = spec.get("type")
        params.append(
            {
                "name": str(name),
                "type": kind if isinstance(kind, str) else "",
                "description": str(spec.get("description") or "")[:200],
                "required": name in required,
            }
        )
    tools = [
        {"name": str(t.get("name", "")), "description": str(t.get("description") or "")[:200]}
        for t in (server.tools if server else [])
        if isinstance(t, dict)
    ]
    return {"tools": tools, "params": params}
