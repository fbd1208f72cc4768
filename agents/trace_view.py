"""A run's trace as the run page draws it: the waterfall's spans, the LLM calls' usage and cost, the
chat view of a call. Reads only the steps it draws (docs/observability.md); the rows come from selectors."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext, gettext_lazy, ngettext

from agents.models import Run, RunStep

# The waterfall draws the first WATERFALL_LIMIT spans of a run, read without their input or output
# payloads, and counts the rest in the database, so it stays cheap on a 5,000-step run whose
# timeline is read a page at a time (run_trace says what each read is). The only payloads read
# are the drawn pre-steps' summaries (when each server's tools were listed) and the "tools" key of
# each LLM call's input (at most TRACE_LLM_CALLS).

WATERFALL_LIMIT = 1000  # bars drawn; a longer run says how many were left out
TRACE_LLM_CALLS = 200  # LLM calls whose offered tools are read
TRACE_LLM_USAGE = 20_000  # LLM calls whose model and token counts are summed (a longer run: its first)
_SPAN_FIELDS = (
    "seq",
    "parent_seq",
    "kind",
    "name",
    "status",
    "started_at",
    "duration_ms",
    "tokens",
    "mcp_id",
    "tool_name",
)
KIND_LABELS = {
    "guardrail": gettext_lazy("guardrail"),
    "prestep": gettext_lazy("pre-step"),
    "rule": gettext_lazy("rule"),
    "llm": "LLM",
    "tool": gettext_lazy("tool"),
    "node": "",
    "answer": gettext_lazy("answer"),
    "error": gettext_lazy("error"),
    "listing": gettext_lazy("MCP tools"),
}


@dataclass
class Span:
    """One bar of the waterfall: where it starts on the run's time axis and how long it took."""

    key: str
    seq: int | None
    kind: str
    label: str
    status: str
    offset_ms: float
    duration_ms: float | None
    depth: int = 0
    parent_seq: int | None = None
    own_ms: float | None = None  # the part of a parent's time none of its children account for
    detail: str = ""


@dataclass
class Usage:
    """Token counts and cost of one LLM call, or of a run's calls summed."""

    model: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cost: Any = None  # Decimal USD, or None: unknown (no price for the model, or no counts)
    calls: int = 0

    @property
    def cost_known(self) -> bool:
        return self.cost is not None


@dataclass
class Trace:
    spans: list[Span]
    total_ms: float
    span_count: int  # all spans, also those past WATERFALL_LIMIT
    usage: Usage
    models: list[str]
    tools_offered: list[str]
    tools_called: dict[str, int]
    prestep_calls: dict[str, int]

    @property
    def tools_not_called(self) -> list[str]:
        return [name for name in self.tools_offered if name not in self.tools_called]

    @property
    def left_out(self) -> int:
        return max(self.span_count - len(self.spans), 0)


def llm_usage(model: str, tokens: Any, prices: dict[str, Any] | None = None) -> Usage:
    """Usage and cost of one LLM call from its step's name (the model) and stored token counts."""
    from agents.pricing import model_prices, usage_counts

    counts = usage_counts(tokens)
    if counts is None:
        return Usage(model=model, calls=1)
    price = (model_prices() if prices is None else prices).get(model)
    cost = None if price is None else price.cost(counts["input_tokens"], counts["output_tokens"])
    return Usage(model=model, cost=cost, calls=1, **counts)


def run_usage(calls: Iterable[Usage]) -> Usage:
    """A run's usage: counts summed over calls that reported them; cost known only if every call's is."""
    total = Usage()
    models: dict[str, None] = {}  # in order of first use (a list's `in` made 2,500 calls quadratic)
    costs = []
    for call in calls:
        total.calls += 1
        if call.model:
            models.setdefault(call.model)
        for key in ("input_tokens", "output_tokens", "total_tokens"):
            value = getattr(call, key)
            if value is not None:
                setattr(total, key, (getattr(total, key) or 0) + value)
        costs.append(call.cost)
    total.model = ", ".join(models)
    total.cost = sum(costs) if costs and all(c is not None for c in costs) else None
    if not costs:
        from decimal import Decimal

        total.cost = Decimal(0)  # no LLM call: nothing was spent
    return total


def steps_with_usage(steps: list[RunStep]) -> list[RunStep]:
    """The page's steps, LLM ones with ``usage`` (tokens, cost) for the timeline."""
    for step in steps:
        if step.kind == RunStep.Kind.LLM:
            step.usage = llm_usage(step.name, step.tokens)
            step.chat = llm_chat(step.input, step.output)
    return steps


def llm_chat(data: Any, output: Any) -> dict[str, Any] | None:
    """An LLM step's messages, tools offered and reply, in the shapes the chat view draws; None if it has none.

    Served runs' steps come from the ingest API, so anything not shaped like a message is left
    out here (it is still in the raw JSON).
    """
    messages = data.get("messages") if isinstance(data, dict) else None
    if not isinstance(messages, list) or not messages:
        return None
    tools = data.get("tools")
    reply = output if isinstance(output, dict) else {}
    calls = _calls(reply.get("tool_calls"))
    called = {c["name"] for c in calls}
    return {
        "messages": [
            {**m, "role": str(m.get("role") or "?"), "tool_calls": _calls(m.get("tool_calls"))}
            for m in messages
            if isinstance(m, dict)
        ],
        "tools": [
            {"name": t["name"], "description": str(t.get("description") or ""), "called": t["name"] in called}
            for t in (tools if isinstance(tools, list) else [])
            if isinstance(t, dict) and isinstance(t.get("name"), str)
        ],
        "reply": {"content": reply.get("content"), "tool_calls": calls} if reply else None,
        "calls": calls,
    }


def _calls(value: Any) -> list[dict[str, Any]]:
    calls = value if isinstance(value, list) else []
    return [{**c, "name": str(c.get("name") or "")} for c in calls if isinstance(c, dict)]


def run_trace(*, run: Run, now: datetime | None = None) -> Trace:
    """The run's waterfall, usage, cost and tools offered vs called, in a bounded number of reads.

    The bars are the first WATERFALL_LIMIT steps, read without their payloads; the spans, tools
    called and pre-step calls are counted by the database over every step; the usage reads each LLM
    call's model and token counts only. A 5,000-step run's page and final poll read 1,000 compact
    rows and its LLM calls' counts, not every step.
    """
    rows = list(run.steps.order_by("seq").values(*_SPAN_FIELDS)[:WATERFALL_LIMIT])
    totals = _step_totals(run)
    listings = _tool_listings(run, [r["seq"] for r in rows if r["kind"] == RunStep.Kind.PRESTEP])
    now = now or timezone.now()
    starts = [r["started_at"] for r in rows]
    origin = min([*starts, *([run.started_at] if run.started_at else [])], default=run.started_at or now)
    by_seq: dict[int, Span] = {}
    spans: list[Span] = []
    depth_of: dict[int, int] = {}
    for row in rows:
        offset = (row["started_at"] - origin).total_seconds() * 1000
        depth = depth_of.get(row["parent_seq"], -1) + 1 if row["parent_seq"] else 0
        depth_of[row["seq"]] = depth
        duration = _span_duration(row, run, now)
        span = Span(
            key=f"step-{row['seq']}",
            seq=row["seq"],
            kind=row["kind"],
            label=_span_label(row),
            status=row["status"],
            offset_ms=round(offset, 3),
            duration_ms=None if duration is None else round(duration, 3),
            depth=min(depth, 3),
            parent_seq=row["parent_seq"],
        )
        spans.append(span)
        by_seq[row["seq"]] = span
        if row["kind"] == RunStep.Kind.LLM:
            span.detail = _usage_detail(row["tokens"])
        if row["kind"] == RunStep.Kind.PRESTEP:
            for item in listings.get(row["seq"], []):
                spans.append(_listing_span(row["seq"], span, item))
    _own_times(spans, by_seq)
    end_ms = max((s.offset_ms + (s.duration_ms or 0) for s in spans), default=0.0)
    if totals.steps > len(rows) and totals.last_start is not None:
        # Past the bars, the axis reaches the last start and the end of the last step (both from
        # an index; a step that started early and ended after the last one would be missed).
        end_ms = max(end_ms, round((totals.last_start - origin).total_seconds() * 1000, 3))
        for row in run.steps.order_by("-seq").values("started_at", "duration_ms", "status")[:1]:
            offset = (row["started_at"] - origin).total_seconds() * 1000
            end_ms = max(end_ms, round(offset + (_span_duration(row, run, now) or 0.0), 3))
    total = max(end_ms, run.duration_ms or 0.0) if run.finished else end_ms
    usage = _run_llm_usage(run, rows)
    return Trace(
        spans=spans[:WATERFALL_LIMIT],
        total_ms=round(total, 3),
        span_count=totals.steps + sum(len(items) for items in listings.values()),
        usage=usage,
        models=[m for m in usage.model.split(", ") if m],
        tools_offered=_tools_offered(run),
        tools_called=totals.tools_called,
        prestep_calls=totals.prestep_calls,
    )


def _span_duration(row: Mapping[str, Any], run: Run, now: datetime) -> float | None:
    """A step's stored duration; a step still running lasts until the run ended, or until now."""
    if row["duration_ms"] is None and row["status"] == "running":
        end = run.finished_at if run.finished and run.finished_at else now
        return max((end - row["started_at"]).total_seconds() * 1000, 0.0)
    return row["duration_ms"]


@dataclass
class StepTotals:
    """Counts over all of a run's steps, summed by the database (``_step_totals``)."""

    steps: int
    last_start: datetime | None
    tools_called: dict[str, int]  # in order of first call
    prestep_calls: dict[str, int]


def _step_totals(run: Run) -> StepTotals:
    """One grouped query over the run's steps: how many, the last start, tools called, pre-step calls.

    Only ``run_id`` is filtered on, so the database walks the run's (run, seq) index, never the
    (kind, ...) one across all runs; no payload or JSON column is read.
    """
    from django.db.models import Case, Count, F, Max, Min, Value, When

    kinds = RunStep.Kind
    # Grouped by what the counts need (a tool's name, a rule's tool), not by every step's name: a
    # flow's nodes or a long run's rules are one group per kind.
    groups = (
        run.steps.order_by()
        .annotate(
            g_name=Case(When(kind=kinds.TOOL, then=F("name")), default=Value("")),
            g_mcp=Case(When(kind=kinds.RULE, then=F("mcp_id")), default=Value("")),
            g_tool=Case(When(kind=kinds.RULE, then=F("tool_name")), default=Value("")),
        )
        .values("kind", "g_name", "g_mcp", "g_tool")
        .annotate(
            n=Count("id"),
            first=Min("seq"),
            ok=Count("id", filter=~Q(status="error")),
            last_start=Max("started_at"),
        )
    )
    totals = StepTotals(steps=0, last_start=None, tools_called={}, prestep_calls={})
    for group in sorted(groups, key=lambda g: g["first"]):
        totals.steps += group["n"]
        totals.last_start = max(filter(None, (totals.last_start, group["last_start"])), default=None)
        if group["kind"] == kinds.TOOL:
            totals.tools_called[group["g_name"]] = totals.tools_called.get(group["g_name"], 0) + group["n"]
        elif group["kind"] == kinds.RULE and group["g_tool"] and group["ok"]:
            key = f"{group['g_mcp']}/{group['g_tool']}"
            totals.prestep_calls[key] = totals.prestep_calls.get(key, 0) + group["ok"]
    return totals


def _run_llm_usage(run: Run, rows: list[dict[str, Any]]) -> Usage:
    """The run's LLM usage and cost, priced call by call, for its first TRACE_LLM_USAGE calls: those
    among the drawn ``rows`` (already read, with their token counts), then only each later call's
    model and token counts (a few bytes a call)."""
    from agents.pricing import model_prices

    prices = model_prices()  # once: the setting is read through Django's lazy settings
    drawn = [(r["name"], r["tokens"]) for r in rows if r["kind"] == RunStep.Kind.LLM][:TRACE_LLM_USAGE]
    later: Any = []
    if rows and len(drawn) < TRACE_LLM_USAGE:
        later = (
            run.steps.filter(kind=RunStep.Kind.LLM, seq__gt=rows[-1]["seq"])
            .order_by("seq")
            .values_list("name", "tokens")[: TRACE_LLM_USAGE - len(drawn)]
        )
    return run_usage(llm_usage(name, tokens, prices) for name, tokens in [*drawn, *later])


def _span_label(row: dict[str, Any]) -> str:
    kind = KIND_LABELS.get(row["kind"], row["kind"])
    if row["kind"] == RunStep.Kind.RULE and row["tool_name"]:
        return f"{kind} {row['name']} → {row['mcp_id']}/{row['tool_name']}"
    if row["kind"] == RunStep.Kind.TOOL and row["mcp_id"]:
        return f"{kind} {row['mcp_id']}/{row['name']}"
    return f"{kind} {row['name']}".strip()


def _usage_detail(tokens: Any) -> str:
    """An LLM bar's note: its token counts (no price needed)."""
    from agents.pricing import usage_counts

    counts = usage_counts(tokens)
    if counts is None:
        return gettext("tokens unknown")
    return gettext("%(input)s in / %(output)s out tokens") % {
        "input": counts["input_tokens"],
        "output": counts["output_tokens"],
    }


def _listing_span(seq: int, prestep: Span, item: dict[str, Any]) -> Span:
    """A bar for the pre-step's listing of one server's tools (which may have connected it)."""
    # Served runs' traces come from the ingest API: anything that is not a number is no time.
    offset, duration = (_number(item.get(key)) for key in ("offset_ms", "duration_ms"))
    ok = item.get("tools") is not None
    listed = item.get("tools")
    count = listed if isinstance(listed, int) else 0
    return Span(
        key=f"step-{seq}-tools-{item.get('mcp_id')}",
        seq=None,
        kind="listing",
        label=gettext("MCP tools of %(mcp_id)s (list / connect)") % {"mcp_id": item.get("mcp_id")},
        status="ok" if ok else "error",
        offset_ms=round(prestep.offset_ms + (offset or 0.0), 3),
        duration_ms=duration,
        depth=min(prestep.depth + 1, 3),
        parent_seq=seq,
        detail=ngettext("%(n)s tool", "%(n)s tools", count) % {"n": listed}
        if ok
        else gettext("tools not loaded"),
    )


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
        return float(value)
    return None


def _tool_listings(run: Run, seqs: list[int]) -> dict[int, list[dict[str, Any]]]:
    """The tools listings of the drawn pre-step steps (by seq; a run has one, a flow a few)."""
    found: dict[int, list[dict[str, Any]]] = {}
    if not seqs:
        return found
    outputs = run.steps.filter(seq__in=seqs[:20]).values_list("seq", "output")
    for seq, output in outputs:
        items = output.get("tools_listing") if isinstance(output, dict) else None
        if isinstance(items, list):
            found[seq] = [i for i in items if isinstance(i, dict)][:100]
    return found


def _own_times(spans: list[Span], by_seq: dict[int, Span]) -> None:
    """A parent's own time: its duration less the time its children cover (where the rest went)."""
    covered: dict[int, float] = {}
    for span in spans:
        if span.parent_seq in by_seq and span.duration_ms is not None:
            covered[span.parent_seq] = covered.get(span.parent_seq, 0.0) + span.duration_ms
    for seq, total in covered.items():
        parent = by_seq[seq]
        if parent.duration_ms is not None:
            parent.own_ms = round(max(parent.duration_ms - total, 0.0), 3)


def _tools_offered(run: Run) -> list[str]:
    """The tools the model was offered, over the run's LLM calls (first TRACE_LLM_CALLS of them)."""
    from django.db.models.fields.json import KeyTransform

    names: list[str] = []
    # Only the "tools" key of each call's input: its messages can be a long conversation.
    llm = (
        run.steps.filter(kind=RunStep.Kind.LLM)
        .order_by("seq")
        .annotate(tools=KeyTransform("tools", "input"))
        .values_list("tools", flat=True)
    )
    for tools in llm[:TRACE_LLM_CALLS]:
        for tool in tools if isinstance(tools, list) else []:
            name = tool.get("name") if isinstance(tool, dict) else None
            if isinstance(name, str) and name and name not in names:
                names.append(name)
    return names


# --- the pre-step's rules -----------------------------------------------------------------------
# A pre-step step stores only rule names by status (llamon_agent.prestep, capped); the rules table
# of the run page (prestep_rules) puts them back on the serving rules, in order, and explains the
# first skipped ones the way the tester does. The explanations are computed when the table is
# opened, from the run's stored request, so runs stay small.


@dataclass
class RuleRow:
    """One rule of the served rule set, as the pre-step left it in this run."""

    position: int  # 1-based, among the enabled rules (the pre-step's order)
    name: str
    mcp_id: str
    tool_name: str
    stop: bool
    status: str  # fired, error, skipped, not_reached (llamon_agent.prestep.RuleStatus)
    why: Any = None  # the explanation (llamon_agent.expr.explain.Explanation) of a skipped rule


@dataclass
class PrestepRules:
    """The rules table of one pre-step step (see :func:`prestep_rules`)."""

    step_seq: int | None
    rows: list[RuleRow]
    version_number: int | None = None  # the published version that served the run; None: the draft
    draft_changed: bool = False  # a draft run whose draft is no longer what ran
    mismatch: bool = False  # the step's stored names do not fit these rules: statuses may be wrong
    shown: Any = None  # rules.engine.RecordsShown: what is listed, counted, and the "list more" button
    missing: str = ""  # why there is no table ("no-prestep", "no-rules")


def prestep_rules(
    *, run: Run, seq: int | None = None, detail: str = "summary", offset: int | str = 0
) -> PrestepRules:
    """Every rule the run's pre-step had, in order, with its status in this run, listed as the tester
    lists its rules (rules.engine.records_shown: fired and failed always, ``detail`` and ``offset``
    for the others; RuleError when they are not valid); the first skipped ones
    (rules.tester.SKIPPED_SHOWN) explained.

    The rules are the version that served the run (its snapshot), or the agent's draft when the
    draft served it; the explanation runs on the run's stored request with the servers' tools as
    they are today, and what the privacy settings mask in the request is masked in it too. One
    step's payload, the served rules and the servers are read: bounded for a 2,000-rule set.
    """
    from core.content_hash import sha256
    from llamon_agent.prestep import RuleStatus
    from llamon_agent.tools import AgentRequest
    from rules import engine
    from rules.tester import SKIPPED_SHOWN

    steps = run.steps.filter(kind=RunStep.Kind.PRESTEP)
    if seq is not None:
        steps = steps.filter(seq=seq)
    step = steps.order_by("seq").only("seq", "output").first()
    if step is None:
        return PrestepRules(step_seq=None, rows=[], missing="no-prestep")
    version = run.rule_set_version
    rule_set = run.agent.rule_set if run.agent_id and run.agent else None
    if version is not None:
        snapshot = list(version.content)
    elif rule_set is not None and run.source != Run.Source.FLOW:
        snapshot = engine.rule_set_snapshot(rule_set)
    else:
        return PrestepRules(step_seq=step.seq, rows=[], missing="no-rules")
    summary = step.output if isinstance(step.output, dict) else {}
    fired = {n for n in summary.get("fired") or [] if isinstance(n, str)}
    errors = {n for n in summary.get("errors") or [] if isinstance(n, str)}
    not_reached = summary.get("not_reached_count")
    enabled = [r for r in snapshot if r.get("enabled", True)]
    reached = len(enabled)
    if isinstance(not_reached, int) and not isinstance(not_reached, bool):
        reached = min(max(len(enabled) - not_reached, 0), len(enabled))
    out = PrestepRules(
        step_seq=step.seq,
        rows=[],
        version_number=version.number if version is not None else None,
        draft_changed=version is None and bool(run.rule_set_hash) and sha256(snapshot) != run.rule_set_hash,
    )
    every: list[RuleRow] = []
    for i, rule in enumerate(enabled):
        name = str(rule["name"])
        if i >= reached:
            status = RuleStatus.NOT_REACHED
        elif name in fired:
            status = RuleStatus.FIRED
        elif name in errors:
            status = RuleStatus.ERROR
        else:
            status = RuleStatus.SKIPPED
        every.append(
            RuleRow(
                i + 1,
                name,
                str(rule["mcp_id"]),
                str(rule.get("tool_name") or ""),
                bool(rule.get("stop")),
                str(status),
            )
        )
    out.shown = engine.records_shown(every, detail=detail, offset=offset)
    out.rows = out.shown.records
    seen = {r["name"] for r in enabled[:reached]}
    out.mismatch = not (fired | errors) <= seen or out.shown.counts["skipped"] != summary.get(
        "skipped_count", out.shown.counts["skipped"]
    )
    # The tester's bound: the first SKIPPED_SHOWN skipped rows are explained, also when all are listed.
    explain = [r.name for r in out.rows if r.status == RuleStatus.SKIPPED][:SKIPPED_SHOWN]
    if explain:
        from agents.redaction import run_redactor

        request = AgentRequest(
            query=run.query or "",
            context=run.context if isinstance(run.context, dict) else {},
            a2a_data=run.a2a_data or None,
            a2a_files=run.a2a_files or None,
        )
        servers = engine.servers_by_id(engine.snapshot_mcp_ids(enabled))
        why = engine.explain_rules(enabled, request, explain, servers=servers)
        redact = run_redactor(run)
        for row in out.rows:
            if row.name in why:
                row.why = _masked_explanation(why[row.name], redact)
    return out


def _masked_explanation(explanation: Any, redact: Any) -> Any:
    """The explanation with what the privacy settings mask masked in its texts and errors."""
    for _depth, part in explanation.lines():
        part.text = redact(part.text)
        if part.error is not None:
            masked = redact(part.error)
            if masked != part.error:
                part.error, part.error_expr = masked, None  # its parameters would show the value
    if explanation.error is not None:
        explanation.error = redact(explanation.error)
    return explanation
