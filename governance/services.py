"""Impact analysis: start one (checked, audited, queued), and replay it (the worker's task body).

The replay is the pre-step only, as a dry run: nothing is called. The candidate is compiled once
(with its keyword index), the runs are streamed in keyset chunks with only the columns needed,
and each run's recorded rule calls (the old side) are compared with the candidate's decision on
the run's real stored input (the new side) by ``governance.impact``. Both sides are masked by the
privacy settings before comparing, and the report keeps only masked values.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import logging
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts.roles import has_role, is_approver
from agents.errors import BrokerUnavailableError
from agents.models import Agent
from agents.redaction import redactor
from agents.sink import json_safe
from core.audit import audit_record
from core.content_hash import sha256
from core.errors import disk_full
from governance import dispatch, selectors
from governance.errors import ImpactError
from governance.impact import Call, ImpactReport, Side, run_diff
from governance.models import ImpactAnalysis
from governance.requests import NOT_DECODED, RequestKeys
from llamon_agent.prestep import RuleStatus, run_prestep
from llamon_agent.tools import AgentRequest
from rules import engine
from rules.models import RuleSet

logger = logging.getLogger(__name__)

MAX_DAYS = 90
MAX_RUNS = 200_000  # runs replayed by one analysis (the oldest of the window first)
MAX_FILTER_CHARS = 200  # the run columns' own length
DRAFT = "draft"
ERROR_PRESTEP = "(pre-step)"  # the group of a candidate failure no rule owns


# --- Starting ------------------------------------------------------------------------------------


def impact_candidate(*, rule_set: RuleSet, version: str | int) -> tuple[list[dict[str, Any]], str, str]:
    """The rules to replay: ``(snapshot, ref, hash)`` of the draft or of a published version number."""
    if version == DRAFT:
        snapshot = engine.rule_set_snapshot(rule_set)
        return snapshot, f"draft@{rule_set.revision}", sha256(snapshot)
    try:
        number = int(version)
    except (TypeError, ValueError):
        raise ImpactError(
            _("The version must be 'draft' or a version number, not %(version)r.")
            % {"version": str(version)[:40]},
            field="version",
        ) from None
    found = rule_set.versions.filter(number=number).first() if 0 < number < 2**31 else None
    if found is None:
        raise ImpactError(
            _("Rule set %(name)r has no version %(number)s: choose the draft or a published version.")
            % {"name": rule_set.name, "number": number},
            field="version",
        )
    return list(found.content), f"v{found.number}", found.content_hash


def _check_text(value: str, *, field: str, what: str) -> str:
    value = (value or "").strip()
    if len(value) > MAX_FILTER_CHARS:
        raise ImpactError(
            _("The %(what)s filter is %(n_value)s characters; at most %(MAX_FILTER_CHARS)s.")
            % {"what": what, "n_value": format(len(value), ","), "MAX_FILTER_CHARS": MAX_FILTER_CHARS},
            field=field,
        )
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ImpactError(
            _("The %(what)s filter contains control characters (a NUL or similar).") % {"what": what},
            field=field,
        )
    return value


def impact_check(
    *,
    rule_set: RuleSet,
    version: str | int,
    days: Any,
    agent: str = "",
    chatbot_id: str = "",
    user_id: str = "",
) -> dict[str, Any]:
    """Validate what an analysis replays; the fields of the row to create (raises ImpactError)."""
    try:
        days = int(days)
    except (TypeError, ValueError):
        raise ImpactError(_("The number of days must be a whole number."), field="days") from None
    if not 1 <= days <= MAX_DAYS:
        raise ImpactError(
            _("The number of days must be between 1 and %(MAX_DAYS)s, not %(days)s.")
            % {"MAX_DAYS": MAX_DAYS, "days": days},
            field="days",
        )
    agent_name = _check_text(agent, field="agent", what="agent")
    if agent_name and not Agent.objects.filter(name=agent_name).exists():
        raise ImpactError(
            _("There is no agent named %(agent_name)r.") % {"agent_name": agent_name}, field="agent"
        )
    snapshot, ref, content_hash = impact_candidate(rule_set=rule_set, version=version)
    until = timezone.now()
    return {
        "rule_set": rule_set,
        "candidate_ref": ref,
        "candidate_hash": content_hash,
        "snapshot": snapshot,
        "days": days,
        "agent_name": agent_name,
        "chatbot_id": _check_text(chatbot_id, field="chatbot_id", what="chatbotId"),
        "user_id": _check_text(user_id, field="user_id", what="userId"),
        "since": until - timedelta(days=days),
        "until": until,
    }


def impact_start(*, actor: Any, enqueue: bool = True, **choice: Any) -> ImpactAnalysis:
    """Store a queued analysis, audit it, and hand it to a worker (``enqueue=False``: the caller runs it).

    A broker that refuses the message takes the row back: nothing is kept, and the caller hears
    BrokerUnavailableError (the API's 503).
    """
    fields = impact_check(**choice)
    with transaction.atomic():
        analysis = ImpactAnalysis.objects.create(
            created_by=actor if getattr(actor, "is_authenticated", False) else None, **fields
        )
    if enqueue:
        impact_publish(analysis_id=analysis.pk)
    audit_record(
        actor=actor,
        action="impact.start",
        obj=analysis,
        object_repr=f"{analysis.rule_set.name} {analysis.candidate_ref}"[:200],
        after={
            "rule_set": analysis.rule_set.name,
            "candidate": analysis.candidate_ref,
            "candidate_hash": analysis.candidate_hash,
            "days": analysis.days,
            "agent": analysis.agent_name,
            "chatbot_id": analysis.chatbot_id,
            "user_id": analysis.user_id,
        },
    )
    return analysis


def impact_publish(*, analysis_id: int) -> None:
    """Send the analysis task; when the broker is down, delete the still-queued row and say so."""
    from kombu.exceptions import OperationalError

    try:
        dispatch.impact_enqueue(analysis_id)
    except (OperationalError, OSError) as exc:
        logger.warning("impact analysis %s: the broker refused its task message: %s", analysis_id, exc)
        ImpactAnalysis.objects.filter(pk=analysis_id, status=ImpactAnalysis.Status.QUEUED).delete()
        if disk_full(exc):
            raise BrokerUnavailableError(
                _(
                    "The server's disk is full, so the analysis could not be queued and nothing was kept. Free disk space (the embedded task queue is kept under LLAMON_VAR_DIR), then try again."
                )
            ) from None
        raise BrokerUnavailableError(
            _(
                "The task queue (the Celery broker) is unavailable, so the analysis was not started and nothing was kept. Try again in a moment; /healthz shows whether the broker is back."
            )
        ) from None


# --- Running -------------------------------------------------------------------------------------


def impact_execute(*, analysis_id: int) -> None:
    """Claim a queued analysis, replay it, store the report (the Celery task's body)."""
    claimed = ImpactAnalysis.objects.filter(pk=analysis_id, status=ImpactAnalysis.Status.QUEUED).update(
        status=ImpactAnalysis.Status.RUNNING, started_at=timezone.now()
    )
    if not claimed:
        logger.info("impact analysis %s is not queued any more: nothing to do", analysis_id)
        return
    analysis = ImpactAnalysis.objects.select_related("rule_set").get(pk=analysis_id)
    try:
        result = impact_replay(
            snapshot=analysis.snapshot,
            runs=_run_filter(analysis),
            on_progress=lambda done, total: ImpactAnalysis.objects.filter(pk=analysis_id).update(
                done=done, total=total
            ),
        )
    except Exception as exc:
        logger.exception("impact analysis %s failed", analysis_id)
        impact_fail(analysis_id=analysis_id, error=f"The analysis failed: {type(exc).__name__}: {exc}"[:2000])
        raise
    ImpactAnalysis.objects.filter(pk=analysis_id).update(
        status=ImpactAnalysis.Status.SUCCEEDED,
        result=result,
        done=result["considered"],
        total=result["considered"],
        finished_at=timezone.now(),
    )


def impact_fail(*, analysis_id: int, error: str) -> None:
    """Record that an analysis ended without a report."""
    ImpactAnalysis.objects.filter(pk=analysis_id).exclude(status=ImpactAnalysis.Status.SUCCEEDED).update(
        status=ImpactAnalysis.Status.FAILED, error=error, finished_at=timezone.now()
    )


def _run_filter(analysis: ImpactAnalysis) -> selectors.RunFilter:
    agent = Agent.objects.filter(name=analysis.agent_name).first() if analysis.agent_name else None
    if analysis.agent_name and agent is None:
        raise ImpactError(
            _("The agent %(agent_name)r was deleted after the analysis was started.")
            % {"agent_name": analysis.agent_name}
        )
    return selectors.RunFilter(
        rule_set_name=analysis.rule_set.name,
        since=analysis.since,
        until=analysis.until,
        agent=agent,
        chatbot_id=analysis.chatbot_id,
        user_id=analysis.user_id,
    )


def impact_replay(
    *,
    snapshot: list[dict[str, Any]],
    runs: selectors.RunFilter,
    on_progress: Callable[[int, int], Any] | None = None,
    max_runs: int = MAX_RUNS,
    chunk: int = selectors.CHUNK,
) -> dict[str, Any]:
    """Replay the candidate ``snapshot`` over the recorded runs; the report as JSON data.

    Each distinct request (what the candidate can read of it: governance.requests) is decided
    once by the candidate's pre-step, and each distinct pair of a request and its recorded steps
    compared once; the other runs are counted from them.
    """
    started = time.perf_counter()
    compiled = engine.compile_snapshot(snapshot)  # once, with its keyword index
    backend = engine.dry_backend(engine.servers_by_id(engine.snapshot_mcp_ids(snapshot)))
    mask = memo_mask(redactor())
    stored = memo_stored(mask)
    total = selectors.recorded_count(runs=runs, limit=max_runs + 1)
    truncated = total > max_runs
    total = min(total, max_runs)
    report = ImpactReport()
    done = 0
    if on_progress is not None:
        on_progress(0, total)
    after = None
    texts = selectors.JsonTexts()
    request_keys = RequestKeys(snapshot)
    decisions: dict[Any, _Decision] = {}  # the candidate's decision by request key
    # By (request key, recorded steps): None when the runs are unchanged, else _compared's sides.
    comparisons: dict[Any, Any] = {}
    with _young_collections() as collect:
        for rows, last in selectors.recorded_chunks(runs=runs, limit=max_runs, chunk=chunk):
            presteps = selectors.recorded_presteps(
                run_ids=selectors.chunk_runs(runs=runs, after=after, last=last)
            )
            after = last
            for run_id, query, context, a2a_data, a2a_files in rows:
                recorded = presteps.get(run_id)
                if recorded is None or recorded.status not in ("ok", "error"):
                    report.skip()  # never reached a completed pre-step: blocked, queued or died in it
                    continue
                rule_steps = recorded.rules
                # Each distinct request decided once, each distinct pair of a request and its recorded
                # steps compared once; the other runs are counted from them.
                request_key, decoded = request_keys(query, context, a2a_data, a2a_files)
                pair = (request_key, tuple(rule_steps))
                compared = comparisons.get(pair, _UNDECIDED)
                if compared is _UNDECIDED:
                    full = decisions.get(request_key)
                    if full is None:
                        request_made = stored_request(query, context, a2a_data, a2a_files, decoded=decoded)
                        full = _Decision(run_prestep(compiled, request_made, backend=backend, dry_run=True))
                        _remember(decisions, request_key, full)
                    compared = _compared(rule_steps, texts, full, mask, stored)
                    _remember(comparisons, pair, compared)
                if compared is None:
                    report.add_unchanged()
                    continue
                old, new, shown = compared
                report.add(
                    run_id=run_id,
                    created_at=functools.partial(selectors.run_created, run_id),
                    query=functools.partial(_masked_text, mask, query),
                    old=old,
                    new=new,
                    mask=mask,
                    shown=shown,
                )
            done += len(rows)
            if on_progress is not None:
                on_progress(done, total)
            collect()  # the chunk's cyclic garbage; what survives it is not walked again
    return {
        "candidate_rules": sum(1 for r in snapshot if r.get("enabled", True)),
        "considered": done,
        "truncated": truncated,
        "max_runs": max_runs,
        **report.to_json(),
        "duration_ms": round((time.perf_counter() - started) * 1000),
    }


@contextlib.contextmanager
def _young_collections() -> Any:
    """The collector's young generations only, collected by the caller (``collect()``) after each chunk.

    A replay keeps what repeats (decisions, comparisons, decoded texts, masked values) and the
    process holds Django and the compiled rules: each automatic full collection walked all of it
    again, ~70 ms, a dozen times in 100,000 runs (~9 % of the replay). Young collections still
    free the replay's cyclic garbage chunk by chunk; the full ones resume when it ends.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield functools.partial(gc.collect, 1)
    finally:
        if enabled:
            gc.enable()


def _compared(
    rule_steps: list[tuple[str, str, str, str, str | None]],
    decode: Callable[[str | None], Any],
    decision: _Decision,
    mask: Callable[[Any], Any],
    stored: Callable[[Any], Any],
) -> tuple[Side, Side, Callable[[], tuple[Side, Side]]] | None:
    """A run's recorded side against the candidate's decision: None when they do not differ, else
    the two sides to count the changes from and the whole masked sides a sample shows.

    The sides are compared as stored, masked by the privacy settings; calls equal before masking
    are equal after it, so only the calls that differ are masked to be compared.
    """
    old, new = old_side(rule_steps, decode=decode), decision.side
    if old.calls == new.calls and old.error_rule == new.error_rule:
        return None  # the usual case, without the per-rule diff
    if not run_diff(old, new):
        return None
    old_calls: dict[str, Call] = {}
    new_calls: dict[str, Call] = {}
    for rule, call in old.calls.items():
        same = new.calls.get(rule) == call
        old_calls[rule] = call if same else Call(call.mcp_id, call.tool_name, mask(call.params))
    for rule, call in new.calls.items():
        same = old.calls.get(rule) == call
        new_calls[rule] = call if same else _call_stored(call, stored)
    error = mask(new.error) if new.error is not None else None
    return (
        Side(old_calls, old.error_rule),
        Side(new_calls, new.error_rule, error),
        lambda: (old_side(rule_steps, mask, decode), decision.masked(mask, stored)),
    )


class _Decision:
    """The candidate's decision on one request: its side as the engine made it, and masked (once)."""

    __slots__ = ("_masked", "side")

    def __init__(self, outcome: Any) -> None:
        self.side = new_side(outcome)
        self._masked: Side | None = None

    def masked(self, mask: Callable[[Any], Any], stored: Callable[[Any], Any]) -> Side:
        """``new_side(outcome, mask)``: the params as the step sink stores them (``stored``), the
        error masked."""
        if self._masked is None:
            side = self.side
            calls = {rule: _call_stored(call, stored) for rule, call in side.calls.items()}
            error = mask(side.error) if side.error is not None else None
            self._masked = Side(calls, side.error_rule, error)
        return self._masked


_UNDECIDED = object()  # an outcome not remembered yet
OUTCOMES = 10_000  # decisions (and comparisons) remembered per replay


def _remember(outcomes: dict[Any, Any], key: Any, outcome: Any) -> None:
    if key is not None and len(outcomes) < OUTCOMES:
        outcomes[key] = outcome


def stored_request(
    query: str,
    context: str | None,
    a2a_data: str | None,
    a2a_files: str | None,
    *,
    decoded: Any = NOT_DECODED,
) -> AgentRequest:
    """A run's request from its stored JSON texts (``decoded``: the context's, when already decoded)."""
    value = selectors.json_value(context) if decoded is NOT_DECODED else decoded
    data, files = selectors.json_value(a2a_data), selectors.json_value(a2a_files)
    return AgentRequest(query=query, context=value or {}, a2a_data=data, a2a_files=files)


MASK_MEMO = 100_000  # masked strings remembered per replay
MASK_MEMO_CHARS = 2_000  # longer strings are masked every time


def memo_mask(mask: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``mask`` (``agents.redaction.redactor()``) with each distinct value masked once per replay.

    A string, and a dict or list as a whole (the redaction reads JSON-like data as one text, so a
    card number split across a list's strings is found: ``guardrails.Redactor``), are remembered
    by their text; a query and the params that repeat it, or a user id on thousands of runs, cost
    one masking each.
    """
    known: dict[str, Any] = {}

    def masked(value: Any) -> Any:
        key = _memo_key(value)
        if key is None:
            return mask(value)
        found = known.get(key, _MISSING)
        if found is _MISSING:
            found = mask(value)
            if len(key) <= MASK_MEMO_CHARS and len(known) < MASK_MEMO:
                known[key] = found
        return found  # shared between runs with the same value: read, never changed

    return masked


_MISSING = object()


def _memo_key(value: Any) -> str | None:
    """The text a value is remembered by: a string as itself, a dict or list by its JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict | list):
        try:
            return "\x00" + json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        except (TypeError, ValueError):  # not JSON (a tuple inside is fine; a set is not): not remembered
            return None
    return None


def _masked_text(mask: Callable[[Any], Any], text: str) -> str:
    return str(mask(text))


def old_side(
    rule_steps: list[tuple[str, str, str, str, Any]],
    mask: Callable[[Any], Any] | None = None,
    decode: Callable[[Any], Any] | None = None,
) -> Side:
    """What a run recorded: every rule that decided a call (made, running or failed when made), masked.

    A rule step with no tool name and an error is a decision that failed (its expression raised,
    or it returned something malformed): the run's pre-step stopped there. ``decode``: the steps'
    input is their stored JSON text (``selectors.recorded_presteps``), read with it.
    """
    calls: dict[str, Call] = {}
    error_rule = None
    for name, status, mcp_id, tool_name, data in rule_steps:
        if tool_name:
            if decode is not None:
                data = decode(data)
            params = data.get("params") if isinstance(data, dict) else None
            calls[name] = Call(mcp_id, tool_name, mask(params) if mask is not None else params)
        elif status == "error" and error_rule is None:
            error_rule = name
    return Side(calls, error_rule)


def new_side(outcome: Any, mask: Callable[[Any], Any] | None = None) -> Side:
    """The candidate's decision as a live run would make it: the calls before the first error.

    With ``mask`` the params are stored the way the step sink stores them (JSON data, masked, NaN as
    text) and the error is masked; without it they are the engine's own values (the quick first look).
    """
    if outcome.error is None:
        if mask is None:  # the replay's first look at every request: no call per record
            return Side({rec.rule: Call(rec.mcp_id, rec.tool_name, rec.params) for rec in outcome.fired})
        return Side({rec.rule: _call(rec, mask) for rec in outcome.fired})
    calls: dict[str, Call] = {}
    for rec in outcome.records:
        if rec.status is RuleStatus.ERROR:
            return Side(calls, rec.rule, mask(outcome.error) if mask is not None else outcome.error)
        if rec.status is RuleStatus.FIRED:
            calls[rec.rule] = _call(rec, mask)
    return Side(calls, ERROR_PRESTEP, mask(outcome.error) if mask is not None else outcome.error)


def _call(rec: Any, mask: Callable[[Any], Any] | None) -> Call:
    return Call(rec.mcp_id, rec.tool_name, rec.params if mask is None else _stored(rec.params, mask))


def _call_stored(call: Call, stored: Callable[[Any], Any]) -> Call:
    return Call(call.mcp_id, call.tool_name, stored(call.params))


def _stored(params: Any, mask: Callable[[Any], Any]) -> Any:
    """Params as the run's step sink stores them: JSON data (tuples become lists), masked, NaN as text."""
    return json_safe(mask(json.loads(json.dumps(params, ensure_ascii=False, default=str))))


def memo_stored(mask: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``_stored(params, mask)`` with each distinct params text made once per replay.

    Params are told by their JSON text (the first step of ``_stored``): equal texts load to equal
    data, so they are stored and masked alike. Shared between runs: read, never changed.
    """
    known: dict[str, Any] = {}

    def stored(params: Any) -> Any:
        text = json.dumps(params, ensure_ascii=False, default=str)
        found = known.get(text, _MISSING)
        if found is _MISSING:
            found = json_safe(mask(json.loads(text)))
            if len(text) <= MASK_MEMO_CHARS and len(known) < MASK_MEMO:
                known[text] = found
        return found

    return stored


# Which rules a change request would serve, by its action: the draft (a publish), or a version.
def _change_candidate(change: Any) -> tuple[Any, str | int]:
    payload, agent = change.payload, change.agent
    if change.action in ("rule_set.publish", "rollout.publish"):
        return RuleSet.objects.filter(pk=payload.get("rule_set")).first(), "draft"
    if change.action == "rollout.set":
        return agent.rule_set, payload.get("version")
    if change.action == "shadow.set" and payload.get("version") is not None:
        return agent.rule_set, payload["version"]
    if change.action == "agent.update" and payload.get("pinned_version") is not None:
        return RuleSet.objects.filter(pk=payload.get("rule_set")).first(), payload["pinned_version"]
    if (
        change.action == "agent.update"
        and payload.get("rule_set_mode") == "latest"
        and payload.get("rule_set")
    ):
        rule_set = RuleSet.objects.filter(pk=payload["rule_set"]).first()
        latest = rule_set.versions.order_by("-number").first() if rule_set else None
        if latest is not None:
            return rule_set, latest.number
    return None, ""


def change_impact_start(*, actor: Any, change_request: Any, enqueue: bool = True) -> ImpactAnalysis:
    """The impact analysis of what a change request would serve, on the agent's recorded runs of the
    last 7 days: for whoever may review it (an approver, a viewer included) or an editor."""
    if not (is_approver(actor) or has_role(actor, "editor")):
        raise PermissionDenied(
            _("Analysing a change request's impact needs the approver permission or the editor role.")
        )
    rule_set, version = _change_candidate(change_request)
    if rule_set is None or version in ("", None):
        raise ImpactError(
            _("This change does not change the rules the agent serves: there is nothing to replay.")
        )
    return impact_start(
        actor=actor,
        enqueue=enqueue,
        rule_set=rule_set,
        version=version,
        days=7,
        agent=change_request.agent.name,
    )
