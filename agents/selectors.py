"""Reads for agents, runs and workers."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Case, Count, F, FilteredRelation, Q, QuerySet, Value, When
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts.roles import is_approver
from agents.change_reads import Grants, change_request_stale, grantee, review_problems
from agents.models import Agent, ChangeRequest, ChangeReview, ModelConnection, Run, RunStep, WorkerHeartbeat
from agents.redaction import RUN_INPUT_FIELDS, redactor, redactor_active
from agents.subjects import subject_parse
from core.models import ChainRecord
from llamon_agent.mcp.results import truncation
from llamon_agent.prestep import PRESTEP_FAILED
from rules.expr_messages import engine_text
from rules.models import RuleSetVersion


def worker_live_list(*, within_s: int) -> QuerySet[WorkerHeartbeat]:
    """Workers seen in the last ``within_s`` seconds."""
    return WorkerHeartbeat.objects.filter(seen_at__gte=timezone.now() - timedelta(seconds=within_s))


# --- Runs ---------------------------------------------------------------------------------------


def agent_list() -> QuerySet[Agent]:
    return Agent.objects.select_related("rule_set", "pinned_version", "model_connection").order_by("name")


def connection_list() -> QuerySet[ModelConnection]:
    return ModelConnection.objects.annotate(agent_count=Count("agents")).order_by("name")


# The run list's period presets ("last 7 days" and so on), measured back from the request.
PERIODS = {"24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}


def period_absolute(filters: dict[str, Any], now: datetime) -> dict[str, Any]:
    """The filters with their period as absolute times: a preset ("7d") becomes ``since``, and
    ``until`` is at most ``now`` (an export or a report covers exactly the period it states)."""
    out = {k: v for k, v in filters.items() if k != "period"}
    if filters.get("period") in PERIODS:
        start = now - PERIODS[filters["period"]]
        out["since"] = max(out["since"], start) if out.get("since") else start
    out["until"] = min(out["until"], now) if out.get("until") else now
    return out


def run_list(*, filters: dict[str, Any]) -> QuerySet[Run]:
    """Runs newest first, filtered like the run list: agent, status, rule fired, tool called, ids, text, time."""
    runs = Run.objects.select_related("agent").order_by("-created_at", "-id")
    if filters.get("agent"):
        runs = runs.filter(agent=filters["agent"])
    if filters.get("status"):
        runs = runs.filter(status=filters["status"])
    if filters.get("version"):  # the version that served the run: "v4" (the draft: "draft@12")
        runs = runs.filter(rule_set_ref=filters["version"])
    if filters.get("candidate") in ("yes", "no"):  # a staged rollout's candidate, or not
        runs = runs.filter(rollout_candidate=filters["candidate"] == "yes")
    # Step filters are subqueries, not joins: no duplicate runs, so no DISTINCT, which PostgreSQL
    # cannot apply to the run's json columns (json, unlike jsonb, has no equality; see OrderedJSONField).
    if filters.get("rule"):
        # A rule fired when it returned a call: the call succeeded, is running, or failed (an error
        # step with a tool name; a rule whose own expression failed has none).
        steps = RunStep.objects.filter(kind=RunStep.Kind.RULE, name=filters["rule"]).filter(
            Q(status__in=["ok", "running"]) | (Q(status="error") & ~Q(tool_name=""))
        )
        runs = runs.filter(id__in=steps.values("run_id"))
    if filters.get("tool"):
        # A join with the run's one RunTool row for the tool (no duplicates, so no DISTINCT), ordered
        # by that row's copy of (created_at, run): the database walks the (tool_name, created_at,
        # run) index newest first and stops after a page, instead of probing every run's steps.
        runs = (
            runs.annotate(
                tool_use=FilteredRelation(
                    "tools_called", condition=Q(tools_called__tool_name=filters["tool"])
                )
            )
            .filter(tool_use__isnull=False)
            .order_by("-tool_use__created_at", "-tool_use__run_id")
        )
    if filters.get("subject"):
        # The same join as the tool's, with the run's RunSubject row for key=value (one at most):
        # the (key, value, created_at, run) index newest first, a page read and no more.
        key, value = subject_parse(filters["subject"])
        runs = (
            runs.annotate(
                subject_row=FilteredRelation(
                    "subjects", condition=Q(subjects__key=key, subjects__value=value)
                )
            )
            .filter(subject_row__isnull=False)
            .order_by("-subject_row__created_at", "-subject_row__run_id")
        )
    ids = {field: filters[field] for field in ("user_id", "chatbot_id", "session_id") if filters.get(field)}
    if filters.get("subject"):
        ids["subject"] = subject_parse(filters["subject"])[1]
    if ids and redactor_active():
        redact = redactor()
        if any(redact(value) != value for value in ids.values()):
            # A value the masks hide (an e-mail as userId) is shown as [이메일] on every run: finding
            # runs by its real text would tell who is there. Like the text search, match nothing.
            return runs.none()
    for field, value in ids.items():
        if field != "subject":
            runs = runs.filter(**{field: value})
    if filters.get("q"):
        runs = _search_unmasked(runs.filter(query__icontains=filters["q"]), filters["q"])
    if filters.get("period") in PERIODS:
        runs = runs.filter(created_at__gte=timezone.now() - PERIODS[filters["period"]])
    if filters.get("since"):
        runs = runs.filter(created_at__gte=filters["since"])
    if filters.get("until"):
        runs = runs.filter(created_at__lte=filters["until"])
    # The keyset's columns under one name (run_page's cursor): an annotation reuses the subject's
    # or the tool's join, where a filter on the joined row would add a second join of it, and an
    # exclude an EXISTS per run, which the database cannot walk in index order (~400 ms a page
    # half way down a common subject at 1,000,000 runs, docs/performance.md).
    at, pk = keyset_columns(filters)
    return runs.annotate(keyset_at=F(at), keyset_id=F(pk))


# --- Keyset pages -------------------------------------------------------------------------------
# A page of runs ends at a cursor, the (created_at, id) of its last run; the next page is the runs
# strictly after it in (-created_at, -id) order. Unlike OFFSET, reading page 1,000 costs what
# page 1 costs (an index range scan from the cursor), and a run created meanwhile cannot shift
# a run onto two pages or off both. Runs with the same created_at are ordered by id.

COUNT_CAP = 1_000
CURSOR_HELP = "Use the next_cursor of the previous page, or leave cursor out to start from the newest run."


class CursorError(ValueError):
    """A cursor this server did not give out (or one mangled on the way): the API's 400."""


@dataclass(frozen=True)
class RunPage:
    runs: list[Run]
    next_cursor: str | None  # None: this is the last page
    cursor: str | None  # where this page started (None: the newest run)


def cursor_encode(run: Run) -> str:
    raw = f"{run.created_at.isoformat()}|{run.pk}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def cursor_decode(cursor: str) -> tuple[datetime, int]:
    """The (created_at, id) a cursor stands for; CursorError with a sentence if it is not one of ours."""
    try:
        if len(cursor) > 100 or not cursor.isascii():
            raise ValueError
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        stamp, _sep, pk = raw.partition("|")
        created_at, run_id = datetime.fromisoformat(stamp), int(pk)
        if created_at.tzinfo is None or not 0 < run_id < 2**63:
            raise ValueError
    except (ValueError, binascii.Error, UnicodeDecodeError, OverflowError):
        raise CursorError(
            _("The cursor %(cursor)r is not one this server gave out. %(CURSOR_HELP)s")
            % {"cursor": cursor[:40], "CURSOR_HELP": CURSOR_HELP}
        ) from None
    return created_at, run_id


def keyset_columns(filters: dict[str, Any]) -> tuple[str, str]:
    """The (time, id) columns a filtered run list is ordered by: the joined row's copies when a
    subject or a tool filter joins one (run_list orders by the subject's when both), else the run's."""
    if filters.get("subject"):
        return "subject_row__created_at", "subject_row__run_id"
    if filters.get("tool"):
        return "tool_use__created_at", "tool_use__run_id"
    return "created_at", "id"


def run_page(*, filters: dict[str, Any], cursor: str | None = None, limit: int = 50) -> RunPage:
    """One page of :func:`run_list` after ``cursor``: ``limit`` runs and the cursor of the next page."""
    runs = run_list(filters=filters)
    if cursor:
        created_at, run_id = cursor_decode(cursor)
        # created_at <= c AND NOT (created_at = c AND id >= c_id): one backward range scan of the
        # (created_at, id) index, on SQLite and PostgreSQL alike. Filtered by a tool, the same
        # condition on the RunTool row's copies (equal values), so that its index is scanned.
        after = {"keyset_at__lte": created_at}  # annotations (run_list): the stubs know model fields only
        runs = runs.filter(**after).exclude(**{"keyset_at": created_at, "keyset_id__gte": run_id})
    rows = list(runs[: limit + 1])
    shown = rows[:limit]
    return RunPage(
        runs=shown, next_cursor=cursor_encode(shown[-1]) if len(rows) > limit else None, cursor=cursor or None
    )


def run_newer(*, filters: dict[str, Any], cursor: str | None, limit: int = 50) -> tuple[list[Run], bool]:
    """The runs strictly newer than ``cursor`` (all when None), newest first: the run list's live rows.

    Keyset like :func:`run_page`, the other way: created_at >= c AND NOT (created_at = c AND id <= c_id),
    one forward range scan of the (created_at, id) index. Returns at most ``limit`` runs (the
    newest) and whether more were newer still.
    """
    runs = run_list(filters=filters)
    if cursor:
        created_at, run_id = cursor_decode(cursor)
        runs = runs.filter(created_at__gte=created_at).exclude(created_at=created_at, id__lte=run_id)
    rows = list(runs[: limit + 1])
    return rows[:limit], len(rows) > limit


def run_count(*, filters: dict[str, Any], cap: int | None = None) -> tuple[int, bool]:
    """How many runs match, counted up to ``cap`` (stops reading there); and whether there are more."""
    cap = COUNT_CAP if cap is None else cap
    ids = run_list(filters=filters).order_by().values("id")[: cap + 1]
    found = ids.count()  # SELECT COUNT(*) FROM (... LIMIT cap + 1)
    return min(found, cap), found > cap


# What a run was asked (its own input) as shown and exported: masked by the privacy settings.


def runs_for_display(runs: Iterable[Run], *, redact: Callable[[Any], Any] | None = None) -> list[Run]:
    """The runs with their own input masked by the privacy settings (pages, API, search results, cases).

    The row keeps the real input: the worker runs on it and a re-run repeats it. Masking happens
    when a run is read for showing, with the settings in force then, so a pattern added today also
    hides yesterday's queries. The instances are marked and cannot be saved back (Run.save refuses).
    """

    redact = redact or redactor()
    shown = list(runs)
    for run in shown:
        if getattr(run, "input_masked", False):
            continue
        for field in RUN_INPUT_FIELDS:
            setattr(run, field, redact(getattr(run, field)))
        run.input_masked = True
    return shown


def run_link(*, run: Run) -> ChainRecord | None:
    """A finished run's link in the evidence chain."""
    return ChainRecord.objects.filter(kind="run", ref=str(run.pk)).first()


def runs_with_calls(runs: list[Run]) -> list[Run]:
    """Attach to each run the deterministic calls its rules made (``run.calls``: rule, mcp_id, tool,
    status), read in one query: the run list and the API show which rule called which tool."""
    calls: dict[int, list[dict[str, str]]] = {run.pk: [] for run in runs}
    steps = RunStep.objects.filter(run_id__in=list(calls), kind=RunStep.Kind.RULE).exclude(tool_name="")
    for run_id, rule, mcp_id, tool, status in steps.order_by("run_id", "seq").values_list(
        "run_id", "name", "mcp_id", "tool_name", "status"
    ):
        calls[run_id].append({"rule": rule, "mcp_id": mcp_id, "tool": tool, "status": status})
    for run in runs:
        run.calls = calls[run.pk]
    return runs


def _search_unmasked(runs: QuerySet[Run], text: str) -> QuerySet[Run]:
    """Keep only runs whose query matches ``text`` once masked: a search must not find what is hidden."""

    if not redactor_active():
        return runs
    redact, wanted = redactor(), text.casefold()
    hidden = [pk for pk, query in runs.values_list("pk", "query") if wanted not in redact(query).casefold()]
    return runs.exclude(pk__in=hidden) if hidden else runs


def run_steps(*, run: Run, after: int = 0) -> QuerySet[RunStep]:
    """The run's steps with seq > after (the live timeline fetches only new ones)."""
    return run.steps.filter(seq__gt=after).order_by("seq")


STEP_PAGE = 200  # steps per page, on the run page and in the API: a 5,000-step run is 25 pages
# A page also ends after the step whose stored input, output and error bring it past this many
# bytes of JSON (a page holds one step at least): 200 steps of a run near LLAMON_RUN_MAX_BYTES
# would otherwise be the whole run on one page.
STEP_PAGE_BYTES = 1 << 20
# A value (a step's input or output) longer than this as indented JSON is shown in parts of this
# size: the page and the API carry its first part and say how to read the next ones.
VALUE_PART_BYTES = 256 << 10
STEP_VALUE_FIELDS = ("input", "output")


@dataclass
class StepPage:
    """Up to STEP_PAGE steps after a seq, the seq up to which every one has ended, and what follows."""

    steps: list[RunStep]
    more: bool  # more steps follow this page
    last_seq: int  # ask for after=last_seq next: every step up to it has ended
    settled: bool  # no step of this page is still running


def _json_bytes(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str).encode()) if value is not None else 0


def run_step_page(*, run: Run, after: int = 0) -> StepPage:
    """The page of a run's steps after ``after`` that the run page and the API both serve: at most
    STEP_PAGE steps and about STEP_PAGE_BYTES of their values, each value over VALUE_PART_BYTES
    replaced by its first part (value_part)."""
    rows = list(run_steps(run=run, after=after)[: STEP_PAGE + 1])
    steps, total = rows[:STEP_PAGE], 0
    more = len(rows) > STEP_PAGE
    for index, step in enumerate(steps):
        total += sum(_json_bytes(getattr(step, f)) for f in STEP_VALUE_FIELDS) + len(step.error.encode())
        if total > STEP_PAGE_BYTES and index + 1 < len(steps):
            steps, more = steps[: index + 1], True
            break
    for step in steps:
        step.parted = []
        step.result_cut = truncation(step.output)  # read on the whole value: a part may not hold its marker
        for field in STEP_VALUE_FIELDS:
            value = getattr(step, field)
            if value is not None and _json_bytes(value) > VALUE_PART_BYTES // 2:  # indented, it may double
                part = value_part(value, 1, run_id=run.pk, seq=step.seq, field=field)
                if part["parts"] > 1:
                    setattr(step, field, part)
                    step.parted.append(part)
    running = [s.seq for s in steps if s.status == "running"]
    last_seq = min(running) - 1 if running else (steps[-1].seq if steps else after)
    return StepPage(steps, more, last_seq, not running)


def value_text(value: Any) -> bytes:
    """A step's value as the parts cut it: indented JSON (as the page shows it), UTF-8."""
    return json.dumps(value, ensure_ascii=False, indent=2, default=str).encode()


def _part_bounds(data: bytes) -> list[int]:
    """Where the parts of ``data`` start: every VALUE_PART_BYTES, moved back to a character's start."""
    starts, at = [0], VALUE_PART_BYTES
    while at < len(data):
        while data[at] & 0xC0 == 0x80:  # a UTF-8 continuation byte: the character began before
            at -= 1
        starts.append(at)
        at += VALUE_PART_BYTES
    return starts


def value_part(value: Any, part: int, *, run_id: int, seq: int, field: str) -> dict[str, Any]:
    """Part ``part`` (1-based) of a value as indented JSON text, with how many there are, the size
    and SHA-256 of the whole text (to check the parts put together) and where the next part is.
    ValueError when there is no such part."""
    import hashlib

    data = value_text(value)
    starts = _part_bounds(data)
    if not 1 <= part <= len(starts):
        raise ValueError(part)
    end = starts[part] if part < len(starts) else len(data)
    path = f"/api/runs/{run_id}/steps/{seq}/value?field={field}&part="
    return {
        "llamon_part": part,
        "parts": len(starts),
        "field": field,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "text": data[starts[part - 1] : end].decode(),
        "next": path + str(part + 1) if part < len(starts) else None,
    }


def run_step_value(*, run: Run, seq: int, field: str, part: int) -> dict[str, Any] | None:
    """Part ``part`` of one step's input or output (value_part); None when there is no such step,
    field or part (the page's and the API's 404)."""
    if field not in STEP_VALUE_FIELDS:
        return None
    step = run.steps.filter(seq=seq).only(field).first()
    if step is None:
        return None
    try:
        return value_part(getattr(step, field), part, run_id=run.pk, seq=seq, field=field)
    except ValueError:
        return None


def run_error_text(text: str) -> str:
    """A run's or a step's stored error in the viewer's language where the engine's words are known
    (an MCP call's failure, a missing tool, an invalid regex): the engine stores them in English.
    The seed's Korean prefix of a failed pre-step and the rule's name stay as stored."""
    text = str(text or "")
    prefix = f"{PRESTEP_FAILED}: "
    if text.startswith(prefix):
        rule, sep, reason = text[len(prefix) :].partition(": ")
        if sep:
            return f"{prefix}{rule}: {engine_text(reason)}"
    return engine_text(text)


def run_diagnostics(*, run: Run) -> list[dict[str, str]]:
    """What the trace suggests: repeated calls, rules that raised, tools that were missing."""
    # Only rule steps, and the tool steps that called a tool a rule already called, matter here;
    # a 5,000-step run's LLM turns, outputs and other tool calls stay in the database.
    fields = ("seq", "kind", "name", "status", "tool_name", "input", "error")
    rules = list(run.steps.filter(kind=RunStep.Kind.RULE).only(*fields).order_by("seq"))
    found: list[dict[str, str]] = []
    prestep_calls = {
        (s.tool_name, _canonical((s.input or {}).get("params"))): s.name for s in rules if s.status == "ok"
    }
    tools = {tool for tool, _ in prestep_calls}
    repeated = run.steps.filter(kind=RunStep.Kind.TOOL, tool_name__in=tools).only(*fields) if tools else []
    steps = sorted([*rules, *repeated], key=lambda s: s.seq)
    for step in steps:
        if step.kind == RunStep.Kind.TOOL:
            key = (
                step.tool_name,
                _canonical(
                    step.input
                    if not isinstance(step.input, dict) or "args" not in step.input
                    else step.input["args"]
                ),
            )
            if key in prestep_calls:
                found.append(
                    {
                        "level": "warning",
                        "message": _(
                            "The LLM called %(tool)s with the same params the pre-step rule %(rule)s already "
                            "used. Tell it to use the pre-step results first: add the seed's line to the "
                            "system prompt (%(line)s)."
                        )
                        % {
                            "tool": step.tool_name,
                            "rule": prestep_calls[key],
                            "line": '제공된 "확정 호출 결과"가 있으면 그 내용을 우선 사용하여 답변하고, ...',
                        },
                    }
                )
        if step.kind == RunStep.Kind.RULE and step.status == "error":
            if "not in" in step.error or "unknown tool" in step.error.lower() or "lacks" in step.error:
                found.append(
                    {
                        "level": "error",
                        "message": _("Rule %(rule)s named a tool its server does not have: %(error)s")
                        % {"rule": step.name, "error": run_error_text(step.error)},
                    }
                )
            else:
                found.append(
                    {
                        "level": "error",
                        "message": _("Rule %(rule)s raised: %(error)s")
                        % {"rule": step.name, "error": run_error_text(step.error)},
                    }
                )
    if run.error and "tool이 로드되지 않음" in run.error:
        found.append(
            {
                "level": "error",
                "message": _("%(error)s: register the server or fix the rule's mcp_id.")
                % {"error": run.error},
            }
        )
    return found


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


# --- Staged rollout and shadow mode -------------------------------------------------------------


def stable_ref(agent: Agent) -> str:
    """What serves the runs the rollout does not take: ``v3`` (pinned), ``latest`` or ``draft``."""
    if agent.rule_set_id is None:
        return ""
    if agent.rule_set_mode == Agent.RuleSetMode.PINNED and agent.pinned_version is not None:
        return f"v{agent.pinned_version.number}"
    return agent.rule_set_mode


GUARD_STATUSES = (Run.Status.SUCCEEDED, Run.Status.FAILED, Run.Status.TIMED_OUT)  # what the guard judges
ERROR_STATUSES = (Run.Status.FAILED, Run.Status.TIMED_OUT)
# Refusals every version gives alike (the input or output guardrail: a pattern, an over-long input;
# the model endpoint's rate limit, HTTP 429: llamon_agent.react.run_error_kind): never the
# candidate's own failure, so the guard neither counts nor judges them. What it counts: pre-step,
# tool and model errors, time-outs, the run's own failures.
GUARD_REFUSALS = ("guardrail", "rate_limit")


def guard_judgement(agent: Agent) -> dict[str, Any]:
    """Where the rollout guard stands: the one judgement the worker acts on and the page shows.

    Per side (the candidate, the stable version), the runs it judges since the rollout started
    (finished, not cancelled, not a refusal both versions give) and those that failed. It waits
    until each side serving traffic has ``rollout_guard_min_runs`` (the stable side only when the
    share is under 100 %), then rolls back when the candidate fails more than the threshold and
    more often than the stable version on the same traffic (``act``).
    """
    threshold, least = agent.rollout_guard_error_percent, agent.rollout_guard_min_runs
    counts = {
        row["rollout_candidate"]: row
        for row in Run.objects.filter(
            agent=agent,
            created_at__gte=agent.rollout_started_at,
            status__in=GUARD_STATUSES,
            rule_set_version_id__isnull=False,
        )
        .exclude(error_kind__in=GUARD_REFUSALS)
        .filter(Q(rollout_candidate=False) | Q(rule_set_version_id=agent.rollout_version_id))
        .values("rollout_candidate")
        .annotate(judged=Count("id"), errors=Count("id", filter=Q(status__in=ERROR_STATUSES)))
        .order_by("rollout_candidate")
    }
    candidate = counts.get(True, {"judged": 0, "errors": 0})
    stable = counts.get(False, {"judged": 0, "errors": 0})
    candidate_rate = _percent(candidate["errors"], candidate["judged"])
    stable_rate = _percent(stable["errors"], stable["judged"])
    stable_needed = agent.rollout_percent < 100
    if threshold is None:
        state = "off"
    elif candidate["judged"] < least or (stable_needed and stable["judged"] < least):
        state = "waiting"
    else:
        state = "watching"
    act = (
        threshold is not None
        and state == "watching"
        and candidate["errors"] * 100 > threshold * candidate["judged"]
        and (not stable_needed or candidate_rate > stable_rate)
    )
    return {
        "error_percent": threshold,
        "min_runs": least,
        "state": state,
        "judged_runs": candidate["judged"],
        "errors": candidate["errors"],
        "candidate_error_percent": candidate_rate,
        "stable_judged_runs": stable["judged"],
        "stable_error_percent": stable_rate,
        "stable_needed": stable_needed,
        "act": act,
    }


def _percent(part: int, whole: int) -> float:
    return round(part * 100 / whole, 1) if whole else 0.0


def rollout_figures(agent: Agent) -> dict[str, Any] | None:
    """A running rollout's figures, live, since it started (None without one): the page and the API.

    ``served``: per version and side (stable first) the sessions, runs, errors and the pre-step's
    fire rate (the share of runs where at least one rule fired, that is made a call). ``versions``:
    one row per role (stable, candidate, and the shadow version where it is another one) with the
    same figures and the calls that differ from the live ones, from shadow mode's counts (None: no
    shadow data). ``guard``: its threshold and where it stands. One aggregate query over the
    agent's finished runs since the start (index agent, created_at) and one over its shadow counts.
    """
    from agents.models import ShadowTally

    candidate = agent.rollout_version
    if candidate is None or agent.rollout_started_at is None:
        return None
    rows = (
        Run.objects.filter(agent=agent, created_at__gte=agent.rollout_started_at)
        .exclude(status__in=[Run.Status.QUEUED, Run.Status.RUNNING])
        .values("rule_set_ref", "rollout_candidate")
        .annotate(
            runs=Count("id"),
            sessions=Count("session_id", distinct=True, filter=~Q(session_id="")),
            errors=Count("id", filter=Q(status__in=ERROR_STATUSES)),
            fired=Count("id", filter=Q(prestep_calls__gt=0)),
        )
        .order_by("rollout_candidate", "rule_set_ref")
    )
    served, sides = [], {False: dict.fromkeys(("runs", "sessions", "errors", "fired"), 0)}
    sides[True] = dict(sides[False])
    for row in rows:
        runs, errors, fired = row["runs"], row["errors"], row["fired"]
        served.append(
            {
                "version": row["rule_set_ref"],
                "candidate": row["rollout_candidate"],
                "sessions": row["sessions"],
                "runs": runs,
                "errors": errors,
                "error_percent": _percent(errors, runs),
                "fired": fired,
                "fire_percent": _percent(fired, runs),
            }
        )
        counted: dict[str, int] = dict(row)  # type: ignore[arg-type]  # the annotated counts
        for key in sides[False]:  # a session seen on both refs of one side is counted once per ref
            sides[row["rollout_candidate"]][key] += counted[key]
    shadow = agent.shadow_version
    wanted = [candidate.pk] + ([shadow.pk] if shadow is not None else [])
    tallies = {t.version_id: t for t in ShadowTally.objects.filter(agent=agent, version_id__in=wanted)}

    def differ(version_id: int) -> dict[str, Any]:
        tally = tallies.get(version_id)
        if tally is None or not tally.evaluated:
            return {"shadow_evaluated": None, "differ": None, "differ_percent": None}
        return {
            "shadow_evaluated": tally.evaluated,
            "differ": tally.diverged,
            "differ_percent": _percent(tally.diverged, tally.evaluated),
        }

    def side(candidate_side: bool) -> dict[str, Any]:
        s = sides[candidate_side]
        return {
            "sessions": s["sessions"],
            "runs": s["runs"],
            "errors": s["errors"],
            "error_percent": _percent(s["errors"], s["runs"]),
            "fired": s["fired"],
            "fire_percent": _percent(s["fired"], s["runs"]),
        }

    nothing = dict.fromkeys(("sessions", "runs", "errors", "error_percent", "fired", "fire_percent"))
    versions = [
        {"role": "stable", "version": stable_ref(agent), **side(False), **differ(-1)},
        {"role": "candidate", "version": f"v{candidate.number}", **side(True), **differ(candidate.pk)},
    ]
    if shadow is not None and shadow.pk != candidate.pk:
        versions.append({"role": "shadow", "version": f"v{shadow.number}", **nothing, **differ(shadow.pk)})
    guard = guard_judgement(agent)
    return {"served": served, "versions": versions, "guard": guard}


def rollout_guard_event(agent: Agent) -> Any:
    """The newest roll back the guard made for this agent (an audit event), or None."""
    from core.models import AuditEvent

    return (
        AuditEvent.objects.filter(
            action="agent.rollout.guard_rollback", object_type="agents.agent", object_id=str(agent.pk)
        )
        .order_by("-id")
        .first()
    )


def rollout_view(agent: Agent) -> dict[str, Any]:
    """An agent's rollout and shadow as the page and the API show them."""
    candidate = agent.rollout_version
    return {
        "agent": agent.pk,
        "revision": agent.revision,
        "rule_set": agent.rule_set.name if agent.rule_set is not None else None,
        "stable": stable_ref(agent),
        "rollout": None
        if candidate is None
        else {
            "version": candidate.number,
            "percent": agent.rollout_percent,
            "chatbot_ids": list(agent.rollout_chatbot_ids or []),
            "started_at": agent.rollout_started_at,
            "guard_error_percent": agent.rollout_guard_error_percent,
            "guard_min_runs": agent.rollout_guard_min_runs,
            **(rollout_figures(agent) or {}),
        },
        "shadow_version": agent.shadow_version.number if agent.shadow_version is not None else None,
    }


def shadow_tallies(*, agent: Agent | None = None, rule_set: Any = None) -> list[Any]:
    """Shadow counts with their kept examples (newest first), of one agent or of one rule set's versions."""
    from django.db.models import Prefetch

    from agents.models import ShadowExample, ShadowTally

    tallies = ShadowTally.objects.select_related("agent", "version").order_by(
        "-version__number", "agent__name"
    )
    if agent is not None:
        tallies = tallies.filter(agent=agent)
    if rule_set is not None:
        tallies = tallies.filter(version__rule_set=rule_set)
    return list(
        tallies.prefetch_related(Prefetch("examples", queryset=ShadowExample.objects.order_by("-id")))
    )


def agent_version(agent: Agent, number: int | None) -> RuleSetVersion | None:
    """The published version ``number`` of the agent's rule set, or None (no number, no rule set, no such version)."""
    if number is None or agent.rule_set_id is None:
        return None
    return RuleSetVersion.objects.filter(rule_set_id=agent.rule_set_id, number=number).first()


def agent_versions(agent: Agent) -> list[Any]:
    """The published versions of the agent's rule set, newest first (the rollout's choices)."""
    if agent.rule_set is None:
        return []
    return list(agent.rule_set.versions.order_by("-number").only("id", "number", "message", "created_at"))


# --- Change requests ------------------------------------------------------------------------------


def change_request_list(*, agent: Agent | None = None, state: str = "") -> QuerySet[ChangeRequest]:
    """Change requests, newest first (pending first when no state is asked), of one agent or all."""
    requests = ChangeRequest.objects.select_related("agent")
    if agent is not None:
        requests = requests.filter(agent=agent)
    if state:
        return requests.filter(state=state).order_by("-id")
    pending_first = Case(When(state=ChangeRequest.State.PENDING, then=Value(0)), default=Value(1))
    return requests.order_by(pending_first, "-id")


def change_request_view(request: ChangeRequest) -> dict[str, Any]:
    """A change request as its page and the API show it: reviews of the current round counted."""
    reviews = list(request.reviews.all())
    current = [r for r in reviews if r.round == request.round]
    problems = review_problems(request) if request.state == ChangeRequest.State.PENDING else {}
    return {
        "id": request.pk,
        "agent": request.agent_id,
        "agent_name": request.subject,
        "action": request.action,
        "state": request.state,
        "payload": request.payload,
        "diff": request.diff,
        "reason": request.reason,
        "requested_by": request.requested_by_name,
        "created_at": request.created_at,
        "updated_at": request.updated_at,
        "decided_at": request.decided_at,
        "round": request.round,
        "approvals": sum(
            1 for r in current if r.decision == ChangeReview.Decision.APPROVE and r.pk not in problems
        ),
        "approvals_required": request.approvals_needed,
        "stale": change_request_stale(request) if request.state == ChangeRequest.State.PENDING else "",
        "reviews": [
            {
                "reviewer": r.reviewer_name,
                "decision": r.decision,
                "comment": r.comment,
                "round": r.round,
                "current": r.round == request.round,
                "not_counted": problems.get(r.pk, ""),
                "created_at": r.created_at,
            }
            for r in reviews
        ],
    }


def change_inbox(user: Any) -> list[ChangeRequest]:
    """The pending change requests waiting for this user: they may approve (an approver, not the
    requester, independent of them) and have not reviewed the current round."""
    if not getattr(user, "is_authenticated", False) or not is_approver(user):
        return []
    pending = (
        ChangeRequest.objects.filter(state=ChangeRequest.State.PENDING)
        .exclude(requested_by=user)
        .select_related("agent")
        .order_by("-id")
    )
    reviewed = set(
        ChangeReview.objects.filter(
            reviewer=user, change_request__state=ChangeRequest.State.PENDING
        ).values_list("change_request_id", "round")
    )
    grants = Grants()  # every independence check below without a further query
    return [
        r
        for r in pending
        if (r.pk, r.round) not in reviewed
        and grants.independent(r.requested_by_id, user.pk)
        and grantee(r) != user.pk
    ]
