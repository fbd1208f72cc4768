"""What the pre-step saves, and the rules the traces prove would save more (llamon_agent.suggest).

Runs are read as the miner's plain :class:`~llamon_agent.suggest.Observation` values, masked by
the privacy settings first (a suggestion quotes words and values of the requests: it never quotes
what a viewer may not see). Savings are computed on the newest MAX_SAVINGS_RUNS runs of the
period, at once. Mining is a :class:`~governance.models.SuggestionJob`: three stages, each a map
over parts of the runs (one Celery task per part, spread over the workers), then a reduce done by
the task that finishes the stage's last part. Nothing here changes a rule: a suggestion becomes a
draft rule (with its cases) only when an editor asks, through the rules services (audited).
"""

from __future__ import annotations

import logging
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _
from kombu.exceptions import OperationalError

from agents.errors import BrokerUnavailableError
from agents.models import Agent, Run, RunStep
from agents.pricing import model_prices, usage_counts
from agents.redaction import redactor
from core.audit import audit_record
from governance import dispatch
from governance.errors import SuggestionError
from governance.models import SuggestionJob, SuggestionPart
from llamon_agent import suggest
from llamon_agent.tools import AgentRequest
from rules import cases as rule_cases
from rules import services as rule_services

logger = logging.getLogger(__name__)

MAX_DAYS = 90
DEFAULT_DAYS = 14
MAX_SAVINGS_RUNS = 20_000  # newest runs of the period read for the savings figures
MAX_MINED_RUNS = 200_000  # newest runs of the period a mining job reads
PART_RUNS = 5_000  # runs per part (one task per part and stage)
READ_CHUNK = 1_000  # runs whose steps are read in one query
TURN_SAMPLE = 2_000  # tool-choosing turns kept per part for the value of a turn
MIN_PRECISION = (0.5, 1.0)


# --------------------------------------------------------------------------- reading runs


def _tool_servers(agent: Agent) -> dict[str, str]:
    """Tool name -> server of the agent's ReAct servers (a ReAct tool step records only the name)."""
    found: dict[str, str] = {}
    for server in agent.react_servers.all():
        for tool in server.tools or ():
            name = tool.get("name") if isinstance(tool, dict) else None
            if isinstance(name, str):
                found.setdefault(name, server.mcp_id)
    return found


def observations(
    runs: QuerySet[Run], *, tool_servers: dict[str, str], redact: Callable[[Any], Any]
) -> list[suggest.Observation]:
    """The runs as the miner reads them, masked by ``redact``: the request, the model's and the
    rules' calls, and the model's turns (duration, tokens, tools chosen)."""
    out: list[suggest.Observation] = []
    rows = list(runs.values_list("id", "query", "context", "a2a_data", "a2a_files", "rule_set_ref"))
    for start in range(0, len(rows), READ_CHUNK):
        chunk = rows[start : start + READ_CHUNK]
        ids = [r[0] for r in chunk]
        calls: dict[int, list[tuple[str, int | None, str, str, Any, str]]] = defaultdict(list)
        for run_id, kind, parent, name, mcp_id, tool_name, status, data in (
            RunStep.objects.filter(run_id__in=ids, kind__in=(RunStep.Kind.RULE, RunStep.Kind.TOOL))
            .order_by("run_id", "seq")
            .values_list("run_id", "kind", "parent_seq", "name", "mcp_id", "tool_name", "status", "input")
        ):
            calls[run_id].append((kind, parent, tool_name or name, mcp_id, data, status))
        turns: dict[int, list[tuple[int, float | None, Any]]] = defaultdict(list)
        for run_id, seq, duration, tokens in (
            RunStep.objects.filter(run_id__in=ids, kind=RunStep.Kind.LLM)
            .order_by("run_id", "seq")
            .values_list("run_id", "seq", "duration_ms", "tokens")
        ):
            turns[run_id].append((seq, duration, tokens))
        for run_id, query, context, a2a_data, a2a_files, ref in chunk:
            out.append(
                _observation(
                    run_id, query, context, a2a_data, a2a_files, ref, calls, turns, tool_servers, redact
                )
            )
    return out


def _observation(
    run_id: int,
    query: str,
    context: Any,
    a2a_data: Any,
    a2a_files: Any,
    ref: str,
    calls: dict[int, list[tuple[str, int | None, str, str, Any, str]]],
    turns: dict[int, list[tuple[int, float | None, Any]]],
    tool_servers: dict[str, str],
    redact: Callable[[Any], Any],
) -> suggest.Observation:
    model: list[suggest.Call] = []
    ruled: list[suggest.Call] = []
    chosen: dict[int | None, list[str]] = defaultdict(list)
    for kind, parent, tool, mcp_id, data, status in calls.get(run_id, ()):
        data = data if isinstance(data, dict) else {}
        if kind == RunStep.Kind.RULE:
            if status == "ok" and tool:
                params = data.get("params")
                ruled.append(suggest.Call(mcp_id, tool, redact(params) if isinstance(params, dict) else {}))
            continue
        args = data.get("args")
        server = mcp_id or tool_servers.get(tool, "")
        model.append(suggest.Call(server, tool, redact(args) if isinstance(args, dict) else {}))
        chosen[parent].append(tool)
    model_turns = []
    for seq, duration, tokens in turns.get(run_id, ()):
        usage = usage_counts(tokens) or {}
        model_turns.append(
            suggest.Turn(
                duration, usage.get("input_tokens"), usage.get("output_tokens"), tuple(chosen.get(seq, ()))
            )
        )
    request = AgentRequest(
        query=redact(query or ""),
        context=redact(context) if isinstance(context, dict) else {},
        a2a_data=redact(a2a_data) if isinstance(a2a_data, list) else None,
        a2a_files=redact(a2a_files) if isinstance(a2a_files, list) else None,
    )
    return suggest.Observation(run_id, request, tuple(model), tuple(ruled), tuple(model_turns), ref)


def _window(days: Any) -> tuple[int, Any, Any]:
    try:
        days = int(days)
    except (TypeError, ValueError):
        raise SuggestionError(_("The period must be a whole number of days."), field="days") from None
    if not 1 <= days <= MAX_DAYS:
        raise SuggestionError(
            _("The period must be between 1 and %(max)d days.") % {"max": MAX_DAYS}, field="days"
        )
    until = timezone.now()
    return days, until - timedelta(days=days), until


def _agent_runs(agent: Agent, since: Any, until: Any) -> QuerySet[Run]:
    return Run.objects.filter(
        agent=agent, created_at__gte=since, created_at__lt=until, status__in=Run.FINISHED
    )


# --------------------------------------------------------------------------- savings


def _cost(model_name: str, input_tokens: int, output_tokens: int) -> str | None:
    price = model_prices().get(model_name)
    if price is None:
        return None
    return str(price.cost(input_tokens, output_tokens).quantize(Decimal("0.0001")))


def agent_savings(*, agent: Agent, days: Any = DEFAULT_DAYS) -> dict[str, Any]:
    """What the pre-step saved for ``agent`` over the last ``days`` days, overall and per version."""
    days, since, until = _window(days)
    runs = _agent_runs(agent, since, until).order_by("-id")[:MAX_SAVINGS_RUNS]
    found = observations(runs, tool_servers=_tool_servers(agent), redact=redactor())
    per = suggest.savings(found)
    total = per.pop("*", suggest.Savings())

    def figures(s: suggest.Savings) -> dict[str, Any]:
        out = s.to_json()
        out["cost_saved"] = _cost(agent.model_name, s.input_tokens_saved, s.output_tokens_saved)
        return out

    return {
        "agent": agent.name,
        "days": days,
        "since": since.isoformat(),
        "until": until.isoformat(),
        "runs_read": len(found),
        "capped": len(found) >= MAX_SAVINGS_RUNS,
        "total": figures(total),
        "versions": [{"version": v or "-", **figures(s)} for v, s in sorted(per.items())],
    }


# --------------------------------------------------------------------------- mining jobs


def _min_precision(value: Any) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        value = math.nan
    low, high = MIN_PRECISION
    if not low <= value <= high:  # NaN fails too
        raise SuggestionError(
            _("The precision asked for must be between %(low)s and %(high)s.") % {"low": low, "high": high},
            field="min_precision",
        )
    return value


def suggestion_start(
    *,
    actor: Any,
    agent: Agent,
    days: Any = DEFAULT_DAYS,
    min_precision: Any = 0.99,
    enqueue: bool = True,
    part_runs: int = PART_RUNS,
) -> SuggestionJob:
    """Store a mining job over the agent's newest runs of the period, split in parts of
    ``part_runs`` runs, and queue its parts (``enqueue=False``: the caller runs them)."""
    days, since, until = _window(days)
    precision = _min_precision(min_precision)
    ids = list(_agent_runs(agent, since, until).order_by("-id").values_list("id", flat=True)[:MAX_MINED_RUNS])
    ids.reverse()
    bounds = [[ids[i], ids[min(i + part_runs, len(ids)) - 1]] for i in range(0, len(ids), part_runs)]
    if not bounds:
        raise SuggestionError(
            _("This agent has no finished runs in the period: there is nothing to learn from."), field="days"
        )
    job = SuggestionJob.objects.create(
        agent=agent,
        days=days,
        since=since,
        until=until,
        min_precision=precision,
        parts=len(bounds),
        runs=len(ids),
        state={"bounds": bounds},
        created_by=actor if getattr(actor, "is_authenticated", False) else None,
    )
    audit_record(
        actor=actor,
        action="suggestions.start",
        obj=job,
        object_repr=agent.name,
        after={"agent": agent.name, "days": days, "runs": len(ids), "min_precision": precision},
    )
    if enqueue:
        try:
            _publish(job, "vocabulary")
        except (OperationalError, OSError) as exc:
            logger.warning("suggestions %s: the broker refused its task messages: %s", job.pk, exc)
            job.delete()
            raise BrokerUnavailableError(
                _(
                    "The task queue (the Celery broker) is unavailable, so the mining job was not started and nothing was kept. Try again in a moment; /healthz shows whether the broker is back."
                )
            ) from None
    return job


def _publish(job: SuggestionJob, stage: str) -> None:
    for number in range(job.parts):
        dispatch.suggestion_enqueue(job.pk, stage, number)


def _part_observations(job: SuggestionJob, number: int) -> list[suggest.Observation]:
    lo, hi = job.state["bounds"][number]
    runs = _agent_runs(job.agent, job.since, job.until).filter(id__gte=lo, id__lte=hi).order_by("id")
    return observations(runs, tool_servers=_tool_servers(job.agent), redact=redactor())


def _map(job: SuggestionJob, stage: str, number: int) -> dict[str, Any]:
    found = _part_observations(job, number)
    if stage == "vocabulary":
        turns = [[t.ms, t.input_tokens, t.output_tokens] for o in found for t in o.turns if t.tools][
            :TURN_SAMPLE
        ]
        return {"vocabulary": suggest.vocabulary_to_json(suggest.vocabulary(found)), "turns": turns}
    if stage == "features":
        features = suggest.Features.build(suggest.vocabulary_from_json(job.state["vocabulary"]))
        return {"rows": suggest.rows_to_json(suggest.featurize(found, features))}
    candidates = [suggest.Candidate.from_json(c) for c in job.state["candidates"]]
    tools = {m: set(t) for m, t in job.state["vocabulary"]["tools"].items()}
    return {"tallies": [t.to_json() for t in suggest.replay(candidates, found, tools)]}


def suggestion_part(*, job_id: int, stage: str, number: int) -> None:
    """One part of one stage (a Celery task's body); the last part of a stage does its reduce."""
    job = SuggestionJob.objects.select_related("agent").filter(pk=job_id).first()
    if job is None or job.finished or stage not in SuggestionJob.STAGES or not 0 <= number < job.parts:
        return
    if job.status == SuggestionJob.Status.QUEUED:
        SuggestionJob.objects.filter(pk=job_id, status=SuggestionJob.Status.QUEUED).update(
            status=SuggestionJob.Status.RUNNING
        )
    if not SuggestionPart.objects.filter(job_id=job_id, stage=stage, number=number).exists():
        try:
            data = _map(job, stage, number)
        except Exception as exc:
            logger.exception("suggestions %s: part %s of %s failed", job_id, number, stage)
            suggestion_fail(job_id=job_id, error=f"{type(exc).__name__}: {exc}"[:2000])
            raise
        try:
            with transaction.atomic():
                SuggestionPart.objects.create(job_id=job_id, stage=stage, number=number, data=data)
        except IntegrityError:
            pass  # a redelivered task wrote it first
    _advance(job_id, stage)


def _advance(job_id: int, stage: str) -> None:
    """Count the stage's parts; the task that sees them all does the reduce and queues the next stage."""
    follow = None
    with transaction.atomic():
        job = SuggestionJob.objects.select_for_update().select_related("agent").get(pk=job_id)
        if job.finished or job.stage != stage:
            return  # a redelivered part of a stage already merged
        finished = SuggestionPart.objects.filter(job_id=job_id, stage=stage).count()
        job.done = SuggestionJob.STAGES.index(stage) * job.parts + finished
        if finished == job.parts:
            parts = [
                p.data for p in SuggestionPart.objects.filter(job_id=job_id, stage=stage).order_by("number")
            ]
            try:
                follow = _reduce(job, stage, parts)
            except Exception as exc:
                logger.exception("suggestions %s: the %s stage failed", job_id, stage)
                job.status, job.finished_at = SuggestionJob.Status.FAILED, timezone.now()
                job.error = f"{type(exc).__name__}: {exc}"[:2000]
        job.save()
    if follow:
        try:
            _publish(job, follow)
        except (OperationalError, OSError) as exc:
            suggestion_fail(
                job_id=job_id, error=f"The task queue refused the next stage's tasks: {exc}"[:2000]
            )
            raise


def _reduce(job: SuggestionJob, stage: str, parts: Sequence[dict[str, Any]]) -> str | None:
    """Merge a finished stage; return the next stage to queue (None: the job is done)."""
    if stage == "vocabulary":
        vocab = suggest.merge_vocabularies(suggest.vocabulary_from_json(p["vocabulary"]) for p in parts)
        turns = [t for p in parts for t in p["turns"]]
        job.state = {**job.state, "vocabulary": suggest.vocabulary_to_json(vocab), "turn": _turn_value(turns)}
        job.stage = "features"
        return "features"
    if stage == "features":
        features = suggest.Features.build(suggest.vocabulary_from_json(job.state["vocabulary"]))
        rows = [suggest.row_from_json(r) for p in parts for r in p["rows"]]
        candidates, rejected = suggest.learn(rows, features)
        job.state = {
            **job.state,
            "candidates": [c.to_json() for c in candidates],
            "rejected": [r.to_json() for r in rejected],
        }
        if not candidates:
            _finish(job, [], [])
            return None
        job.stage = "replay"
        return "replay"
    candidates = [suggest.Candidate.from_json(c) for c in job.state["candidates"]]
    tallies = [suggest.Tally() for _ in candidates]
    for part in parts:
        for total, tally in zip(tallies, part["tallies"], strict=True):
            total.merge(suggest.Tally.from_json(tally))
    ms, tin, tout = job.state["turn"]
    kept, dropped = suggest.select(candidates, tallies, turn=(ms, tin, tout), min_precision=job.min_precision)
    _finish(job, kept, dropped, noise=suggest.model_noise(candidates, tallies))
    return None


def _finish(
    job: SuggestionJob, kept: list[suggest.Suggestion], dropped: list[suggest.Rejected], noise: float = 0.0
) -> None:
    rejected = [suggest.Rejected(**r) for r in job.state.get("rejected", [])] + dropped
    mined = suggest.Mined(kept, rejected, noise, job.runs)
    result = mined.to_json()
    ms, tin, tout = job.state.get("turn") or (None, None, None)
    for s in result["suggestions"]:
        s["saving"]["cost"] = _cost(
            job.agent.model_name, s["saving"]["turns"] * (tin or 0), s["saving"]["turns"] * (tout or 0)
        )
    job.result = result
    job.status, job.stage, job.finished_at = SuggestionJob.Status.SUCCEEDED, "done", timezone.now()
    job.done = job.total


def _turn_value(turns: Iterable[Sequence[Any]]) -> list[Any]:
    ms = [t[0] for t in turns if t[0] is not None]
    tin = [t[1] for t in turns if t[1] is not None]
    tout = [t[2] for t in turns if t[2] is not None]
    return [
        statistics.median(ms) if ms else None,
        round(statistics.median(tin)) if tin else None,
        round(statistics.median(tout)) if tout else None,
    ]


def suggestion_fail(*, job_id: int, error: str) -> None:
    SuggestionJob.objects.filter(pk=job_id).exclude(status=SuggestionJob.Status.SUCCEEDED).update(
        status=SuggestionJob.Status.FAILED, error=error, finished_at=timezone.now()
    )


# --------------------------------------------------------------------------- a suggestion becomes a draft


def suggestion_draft(*, actor: Any, job: SuggestionJob, index: Any) -> dict[str, Any]:
    """Append suggestion ``index`` of a finished job to the agent's rule set draft, with its cases
    (runs it must call, runs it must not), through the rules services (each change audited)."""
    suggestions = (job.result or {}).get("suggestions") or []
    try:
        index = int(index)
    except (TypeError, ValueError):
        index = -1
    if job.status != SuggestionJob.Status.SUCCEEDED or not 0 <= index < len(suggestions):
        raise SuggestionError(_("There is no such suggestion in this job."), field="index")
    rule_set = job.agent.rule_set
    if rule_set is None:
        raise SuggestionError(_("The agent has no rule set to add the rule to."), field="index")
    s = suggestions[index]
    taken = set(rule_set.rules.values_list("name", flat=True))
    name = s["name"]
    for n in range(2, 1000):
        if name not in taken:
            break
        name = f"{s['name']}_{n}"[:100]
    with transaction.atomic():
        rule = rule_services.rule_create(
            actor=actor,
            rule_set=rule_set,
            name=name,
            mcp_id=s["mcp_id"],
            tool_name=s["tool"],
            when=s["when"],
            params=s["params"],
            description=_("Suggested from %(runs)d runs of %(agent)s (job %(job)d).")
            % {"runs": job.runs, "agent": job.agent.name, "job": job.pk},
        )
        made = _cases(actor, rule_set, name, s)
    return {"rule": rule.pk, "rule_name": name, "cases": made}


def _cases(actor: Any, rule_set: Any, name: str, s: dict[str, Any]) -> list[str]:
    redact = redactor()
    made = []
    wanted = [("must", rid) for rid in s["cases"]["must_call"]] + [
        ("not", rid) for rid in s["cases"]["must_not_call"]
    ]
    runs = {r.pk: r for r in Run.objects.filter(pk__in=[rid for _k, rid in wanted])}
    taken = set(rule_set.cases.values_list("name", flat=True))
    for kind, rid in wanted:
        run = runs.get(rid)
        if run is None:
            continue  # deleted by retention since the job ran
        call = {"mcp_id": s["mcp_id"], "tool_name": s["tool"]}
        expected = (
            {"must_fire": [call], "other_calls": "allow"}
            if kind == "must"
            else {"must_not_fire": [call], "other_calls": "allow"}
        )
        case_name = f"{name} {'calls' if kind == 'must' else 'skips'} run {rid}"[:200]
        if case_name in taken:
            continue
        rule_cases.case_create(
            actor=actor,
            rule_set=rule_set,
            name=case_name,
            input={
                "query": redact(run.query),
                "context": redact(run.context or {}),
                "a2a_data": redact(run.a2a_data),
                "a2a_files": redact(run.a2a_files),
            },
            expected=expected,
        )
        made.append(case_name)
    return made


def rejected_reason(rejected: dict[str, Any]) -> str:
    """Why no rule is proposed for a tool, in the user's language (the SDK's English otherwise)."""
    code, d = rejected.get("code"), rejected.get("detail") or {}
    if code == "too_few":
        return _("only %(runs)s runs (at least %(min)s are needed)") % d
    if code == "no_condition":
        return _("no condition on the requests separates these runs from the others")
    if code == "no_argument":
        return _(
            "no part of the request gives the model's value of the argument %(argument)s on 95%% of the runs"
        ) % {"argument": d.get("argument")}
    if code == "not_compiled":
        return _("the learned rule is refused by the expression checks: %(error)s") % d
    if code == "precision":
        return _("precision %(p).1f%% (±%(m).1f%%) on %(n)s replayed runs; asked %(a).1f%%") % {
            "p": 100 * d["precision"],
            "m": 100 * d["margin"],
            "n": d["fired"],
            "a": 100 * d["asked"],
        }
    return str(rejected.get("reason", ""))
