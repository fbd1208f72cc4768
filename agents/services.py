"""Writes for agents and runs: creating, executing (on a worker), cancelling, reaping, expiring."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone
from django.utils.translation import gettext as _

from agents import dispatch
from agents.checks import llm_key_env_check, llm_url_check
from agents.errors import (
    NOT_DELIVERED,
    SERVED_LOST,
    WORKER_LOST,
    AgentConflictError,
    AgentError,
    BrokerUnavailableError,
)
from agents.models import Agent, PrivacySettings, Run, RunStep, WorkerHeartbeat
from agents.privacy import privacy_get, redactor
from llamon_agent.expr import MAX_DATA_BYTES, MAX_QUERY_CHARS
from llamon_agent.tools import AgentRequest
from llamon_web.audit import audit_record
from llamon_web.roles import has_role

logger = logging.getLogger(__name__)


def worker_heartbeat_record(
    *, hostname: str, pid: int, started_at: datetime | None = None
) -> WorkerHeartbeat:
    """Record that a worker process is alive now (one row per hostname)."""
    now = timezone.now()
    heartbeat, _created = WorkerHeartbeat.objects.update_or_create(
        hostname=hostname,
        defaults={"pid": pid, "seen_at": now, "started_at": started_at or now},
    )
    return heartbeat


# --- Runs ---------------------------------------------------------------------------------------


def request_check_size(request: AgentRequest) -> None:
    """Refuse a request over the size limits before anything is stored or enqueued."""
    if len(request.query) > MAX_QUERY_CHARS:
        raise AgentError(
            _("The query is %(n_query)s characters; the limit is %(MAX_QUERY_CHARS)s.")
            % {"n_query": format(len(request.query), ","), "MAX_QUERY_CHARS": format(MAX_QUERY_CHARS, ",")},
            field="query",
        )
    size = len(
        json.dumps(
            [request.context, request.a2a_data, request.a2a_files], ensure_ascii=False, default=str
        ).encode()
    )
    if size > MAX_DATA_BYTES:
        raise AgentError(
            _(
                "Context, DataParts and FileParts are %(size)s bytes together; the limit is %(MAX_DATA_BYTES)s."
            )
            % {"size": format(size, ","), "MAX_DATA_BYTES": format(MAX_DATA_BYTES, ",")},
            field="data",
        )


def _lookup_ids(request: AgentRequest) -> dict[str, str]:
    """userId, sessionId and chatbotId from the context, else from the first DataPart that has them."""
    found = {}
    for key, column in (("userId", "user_id"), ("sessionId", "session_id"), ("chatbotId", "chatbot_id")):
        value = request.context.get(key)
        if value is None:
            value = next(
                (part[key] for part in request.a2a_data or [] if isinstance(part, dict) and key in part), None
            )
        found[column] = "" if value is None else str(value)[:200]
    return found


@transaction.atomic
def run_create(
    *,
    actor: Any,
    agent: Agent,
    request: AgentRequest,
    rerun_of: Run | None = None,
    replay_of: Run | None = None,
) -> Run:
    """Store a queued run and enqueue it once the transaction commits (``replay_of``: see run_replay)."""
    request_check_size(request)
    run = Run.objects.create(
        agent=agent,
        agent_name=agent.name,
        source=Run.Source.WORKER,
        query=request.query,
        context=request.context,
        a2a_data=request.a2a_data,
        a2a_files=request.a2a_files,
        created_by=actor if getattr(actor, "is_authenticated", False) else None,
        rerun_of=rerun_of,
        replay_of=replay_of,
        queued_at=timezone.now(),
        **_lookup_ids(request),
    )
    transaction.on_commit(lambda: run_publish(run_id=run.pk))
    return run


def run_publish(*, run_id: int) -> None:
    """Hand a committed run to the broker; if the broker refuses, take the run back and say so.

    Called once the run's row is committed (a worker must find it). When the broker is down the
    run is deleted, so a 503 means "nothing was queued, try again" and a retry cannot make a
    duplicate. If the message got through after all (a timeout after the write) and a worker
    already claimed the run, it is not deleted and no error is raised.
    """
    from kombu.exceptions import OperationalError

    try:
        dispatch.run_enqueue(run_id)
    except (OperationalError, OSError) as exc:
        logger.warning("run %s: the broker refused its task message: %s", run_id, exc)
        deleted, _count = Run.objects.filter(pk=run_id, status=Run.Status.QUEUED).delete()
        if deleted:
            raise BrokerUnavailableError(
                _(
                    "The run queue (the Celery broker) is unavailable, so the run was not started and nothing was kept. Try again in a moment; /healthz shows whether the broker is back."
                )
            ) from None


def run_rerun(*, actor: Any, run: Run) -> Run:
    """Run the same input again with the agent as it is now."""
    if run.agent is None:
        raise AgentError(
            _("This run has no agent (it was served or a flow), so it cannot be run again here.")
        )
    request = AgentRequest(
        query=run.query, context=run.context, a2a_data=run.a2a_data, a2a_files=run.a2a_files
    )
    return run_create(actor=actor, agent=run.agent, request=request, rerun_of=run)


@transaction.atomic
def run_replay(*, actor: Any, run: Run, agent: Agent | None = None) -> Run:
    """Run a finished run's input again, every tool call answered from its recorded outputs (audited).

    ``agent``: whose settings (model, prompt, rule set) the replay runs with; by default the run's
    own agent as it is now. The worker answers the tools from the original's steps
    (agents.replay), so the replay never reaches a server.
    """
    # Read again: a row read for display has its input masked, and the replay needs the real one.
    run = Run.objects.select_related("agent").get(pk=run.pk)
    if not run.finished:
        raise AgentConflictError(
            _(
                "Run %(pk)s is still %(status)s: replay it once it has finished, when all its tool outputs are recorded."
            )
            % {"pk": run.pk, "status": run.status}
        )
    agent = agent or run.agent
    if agent is None:
        raise AgentError(
            _(
                "Run %(pk)s has no agent here (a served or flow run, or its agent was deleted): choose the agent whose settings the replay should use."
            )
            % {"pk": run.pk},
            field="agent",
        )
    request = AgentRequest(
        query=run.query, context=run.context, a2a_data=run.a2a_data, a2a_files=run.a2a_files
    )
    replay = run_create(actor=actor, agent=agent, request=request, replay_of=run)
    audit_record(
        actor=actor,
        action="run.replay",
        obj=replay,
        after={"replay_of": run.pk, "agent": agent.name, "agent_revision": agent.revision},
    )
    return replay


def run_cancel(*, actor: Any, run: Run) -> Run:
    """Cancel a queued run at once; ask a running one to stop at its next step."""
    now = timezone.now()
    if Run.objects.filter(pk=run.pk, status=Run.Status.QUEUED).update(
        status=Run.Status.CANCELLED,
        finished_at=now,
        error="cancelled before it started",
        error_kind="cancelled",
    ):
        pass
    else:
        Run.objects.filter(pk=run.pk, status=Run.Status.RUNNING).update(cancel_requested=True)
    run.refresh_from_db()
    return run


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def run_claim(*, run_id: int) -> bool:
    """Move a run from queued to running; False when it is not queued (a redelivery, a cancel)."""
    now = timezone.now()
    return bool(
        Run.objects.filter(pk=run_id, status=Run.Status.QUEUED).update(
            status=Run.Status.RUNNING, started_at=now, heartbeat_at=now, worker=_worker_name()
        )
    )


@contextmanager
def run_heartbeat(*, run_id: int, period_s: float) -> Iterator[None]:
    """Touch the run's heartbeat every ``period_s`` while the body runs (the reaper watches it)."""
    stop = threading.Event()

    def beat() -> None:
        from django.db import connection

        while not stop.wait(period_s):
            try:
                Run.objects.filter(pk=run_id, status=Run.Status.RUNNING).update(heartbeat_at=timezone.now())
            except Exception:  # a missed beat is retried; the reaper tolerates several
                logger.exception("run %s heartbeat failed", run_id)
        # This thread's own connection, closed as the thread ends. (close_old_connections() asks the
        # connection for its autocommit first, which may connect again: a beat that outlived its
        # run's join did that after the run, and in the tests while another test ran.)
        connection.close()

    thread = threading.Thread(target=beat, name=f"run-{run_id}-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=period_s + 5)


def run_finish(
    *, run_id: int, status: str, answer: str = "", error: str = "", error_kind: str = "", **counts: int
) -> None:
    """Record how a running run ended (only a running run: a reaped one stays reaped)."""
    Run.objects.filter(pk=run_id, status=Run.Status.RUNNING).update(
        status=status,
        answer=answer,
        error=error[:10_000],
        error_kind=error_kind,
        finished_at=timezone.now(),
        **counts,
    )
    RunStep.objects.filter(run_id=run_id, status="running").update(status="interrupted")


def run_execute(*, run_id: int) -> None:
    """Claim a queued run and execute it here (the Celery task's body)."""
    if not run_claim(run_id=run_id):
        logger.info("run %s is not queued any more (redelivered or cancelled): nothing to do", run_id)
        return
    from agents.runtime import (
        execute_claimed_run,  # lazily: it loads the engine, which the web process rarely needs
    )

    with run_heartbeat(run_id=run_id, period_s=settings.LLAMON_RUN_HEARTBEAT_S):
        end = execute_claimed_run(run_id=run_id)
    run_finish(run_id=run_id, **end.fields())


def runs_reap(*, stale_after_s: int | None = None, served_stale_after_s: int | None = None) -> int:
    """Fail running runs that stopped showing signs of life; returns how many.

    Worker runs beat every LLAMON_RUN_HEARTBEAT_S, so a stale heartbeat means the worker died.
    Served and flow runs beat with every batch of trace events they send (one LLM turn can
    take minutes without any), so they get the longer LLAMON_SERVED_STALE_AFTER_S.
    """
    stale_after_s = stale_after_s or settings.LLAMON_RUN_STALE_AFTER_S
    served_stale_after_s = served_stale_after_s or settings.LLAMON_SERVED_STALE_AFTER_S
    worker_runs = Run.objects.filter(source=Run.Source.WORKER)
    served_runs = Run.objects.exclude(source=Run.Source.WORKER)
    overdue = _reap_hard_limited(worker_runs, stale_after_s)
    return (
        overdue
        + _reap(worker_runs, stale_after_s, WORKER_LOST, "worker_lost")
        + _reap(served_runs, served_stale_after_s, SERVED_LOST, "served_lost")
    )


def _reap_hard_limited(runs: Any, stale_after_s: int) -> int:
    """Worker runs the hard time limit killed (silent, started longer ago than it): timed_out, not failed."""
    now = timezone.now()
    limit_s = settings.LLAMON_RUN_HARD_LIMIT_S
    overdue = runs.filter(
        status=Run.Status.RUNNING,
        heartbeat_at__lt=now - timedelta(seconds=stale_after_s),
        started_at__lte=now - timedelta(seconds=limit_s),
    )
    error = f"The run took longer than the hard limit of {limit_s} s and its worker process was stopped."
    ids = list(overdue.values_list("pk", flat=True))
    for run_id in ids:
        if overdue.filter(pk=run_id).update(
            status=Run.Status.TIMED_OUT, error=error, error_kind="timeout", finished_at=now
        ):
            RunStep.objects.filter(run_id=run_id, status="running").update(status="interrupted")
            logger.warning("run %s timed out: %s", run_id, error)
    return len(ids)


def runs_redeliver(*, sent_before: datetime | None = None) -> dict[str, int]:
    """Re-send the task of queued worker runs whose message was lost; fail those re-sent too often.

    ``sent_before`` is when the message of the task calling this was sent (the reaper's, see
    agents.tasks). The queue is first in, first out, and that message has been taken by a
    worker, so every message sent before it has been taken too: a worker run still queued whose
    message was sent more than LLAMON_RUN_CLAIM_GRACE_S earlier lost it (a Redis restart, a
    crash between commit and publish). A run waiting behind a backlog is never touched, since its
    message is still ahead in the queue. Without ``sent_before`` (a direct call) it is now.

    A lost run is sent again, at most LLAMON_RUN_DELIVERY_ATTEMPTS times; after that it fails
    with NOT_DELIVERED. A duplicate message is harmless: the claim is conditional.
    Returns ``{"resent": n, "failed": m}``.
    """
    cutoff = (sent_before or timezone.now()) - timedelta(seconds=settings.LLAMON_RUN_CLAIM_GRACE_S)
    lost = Run.objects.filter(source=Run.Source.WORKER, status=Run.Status.QUEUED).filter(
        Q(queued_at__lt=cutoff) | Q(queued_at__isnull=True, created_at__lt=cutoff)
    )
    counts = {"resent": 0, "failed": 0}
    for run_id, attempts in lost.values_list("pk", "delivery_attempts"):
        mine = Run.objects.filter(pk=run_id, status=Run.Status.QUEUED, delivery_attempts=attempts)
        if attempts >= settings.LLAMON_RUN_DELIVERY_ATTEMPTS:
            error = NOT_DELIVERED.format(attempts=attempts + 1)
            if mine.update(
                status=Run.Status.FAILED, error=error, error_kind="not_delivered", finished_at=timezone.now()
            ):
                counts["failed"] += 1
                logger.warning("run %s failed: %s", run_id, error)
        elif mine.update(delivery_attempts=attempts + 1, queued_at=timezone.now()):
            dispatch.run_enqueue(run_id)
            counts["resent"] += 1
            logger.warning("run %s: its task message was lost; sent again (attempt %s)", run_id, attempts + 2)
    return counts


def _reap(runs: Any, stale_after_s: int, message: str, kind: str) -> int:
    cutoff = timezone.now() - timedelta(seconds=stale_after_s)
    stale = list(runs.filter(status=Run.Status.RUNNING, heartbeat_at__lt=cutoff).values_list("pk", flat=True))
    error = message.format(seconds=stale_after_s)
    for run_id in stale:
        updated = Run.objects.filter(pk=run_id, status=Run.Status.RUNNING, heartbeat_at__lt=cutoff).update(
            status=Run.Status.FAILED, error=error, error_kind=kind, finished_at=timezone.now()
        )
        if updated:
            RunStep.objects.filter(run_id=run_id, status="running").update(status="interrupted")
            logger.warning("run %s failed: %s", run_id, error)
    return len(stale)


RETENTION_BATCH = 500


def runs_delete_expired(*, now: datetime | None = None, batch: int = RETENTION_BATCH) -> int:
    """Delete finished runs older than the retention period; returns how many runs.

    In batches of ``batch`` runs (with their steps), each its own short transaction: one
    DELETE of a million rows would hold its locks (SQLite: the whole database) for minutes,
    while workers are writing steps. A run that finishes meanwhile is simply left for next time.
    """
    days = privacy_get().retention_days
    cutoff = (now or timezone.now()) - timedelta(days=days)
    expired = Run.objects.filter(status__in=Run.FINISHED, finished_at__lt=cutoff).order_by(
        "finished_at", "id"
    )
    total = 0
    while ids := list(expired.values_list("id", flat=True)[:batch]):
        with transaction.atomic():
            deleted = Run.objects.filter(id__in=ids).delete()[1].get(Run._meta.label, 0)
        total += deleted
        logger.info("retention: deleted %d runs finished before %s", deleted, cutoff.isoformat())
    return total


# --- Privacy ------------------------------------------------------------------------------------


# --- Agents -------------------------------------------------------------------------------------


AGENT_FIELDS = (
    "name",
    "description",
    "system_prompt",
    "rule_set_id",
    "rule_set_mode",
    "pinned_version_id",
    "model_provider",
    "model_name",
    "model_base_url",
    "model_api_key_env",
    "model_script",
    "temperature",
    "input_max_chars",
    "input_blocked_patterns",
    "output_blocked_patterns",
    "output_masks",
    "max_iterations",
    "answer_from_prestep",
)


def _agent_snapshot(agent: Agent) -> dict[str, Any]:
    data = {f: getattr(agent, f) for f in AGENT_FIELDS}
    data["react_servers"] = sorted(agent.react_servers.values_list("mcp_id", flat=True)) if agent.pk else []
    return data


def _agent_validate(agent: Agent) -> None:
    import re2

    for field in ("input_blocked_patterns", "output_blocked_patterns"):
        for pattern in getattr(agent, field):
            try:
                re2.compile(pattern)
            except re2.error as exc:
                raise AgentError(
                    _("The pattern %(pattern)r is not a valid regular expression: %(exc)s")
                    % {"pattern": pattern, "exc": exc},
                    field=field,
                ) from None
    pinned = agent.pinned_version
    if agent.rule_set_mode == Agent.RuleSetMode.PINNED and (
        pinned is None or pinned.rule_set_id != agent.rule_set_id
    ):
        raise AgentError(
            _("Choose a published version of the agent's rule set to pin."), field="pinned_version"
        )
    if agent.model_provider == Agent.Provider.OPENAI and not agent.model_base_url:
        raise AgentError(
            _("An OpenAI-compatible model needs its base URL (e.g. http://127.0.0.1:11434/v1)."),
            field="model_base_url",
        )
    if agent.model_provider == Agent.Provider.OPENAI:
        llm_url_check(agent.model_base_url)
    if agent.model_api_key_env:
        llm_key_env_check(agent.model_api_key_env)
    if agent.model_provider == Agent.Provider.SCRIPTED and not agent.model_script:
        raise AgentError(_("A scripted model needs at least one reply."), field="model_script")
    if not 1 <= agent.max_iterations <= 50:
        raise AgentError(_("Maximum iterations must be between 1 and 50."), field="max_iterations")


@transaction.atomic
def agent_save(
    *, actor: Any, agent: Agent, react_servers: list[Any] | None = None, revision: int | None = None
) -> Agent:
    """Create or update an agent (validated, audited); a stale revision is refused."""
    creating = agent.pk is None
    before = None
    if not creating:
        current = Agent.objects.select_for_update().get(pk=agent.pk)
        if revision is not None and revision != current.revision:
            raise AgentConflictError(
                _(
                    "Agent %(name)r was changed while you were editing (revision %(revision)s, yours was %(revision2)s). Nothing was overwritten: reload and apply your change again."
                )
                % {"name": current.name, "revision": current.revision, "revision2": revision}
            )
        before = _agent_snapshot(current)
        agent.revision = current.revision + 1
        _rollout_keep(agent, current)
    if Agent.objects.filter(name=agent.name).exclude(pk=agent.pk).exists():
        raise AgentError(_("An agent named %(name)r already exists.") % {"name": agent.name}, field="name")
    _agent_validate(agent)
    agent.save()
    if react_servers is not None:
        agent.react_servers.set(react_servers)
    after = _agent_snapshot(agent)
    if creating or after != before:
        audit_record(
            actor=actor,
            action="agent.create" if creating else "agent.update",
            obj=agent,
            before=before,
            after=after,
        )
    return agent


def run_save_as_case(*, actor: Any, run: Run, name: str) -> Any:
    """Keep a run's input as a regression case of its agent's rule set, expecting what the pre-step did."""
    from rules.cases import case_create
    from rules.errors import RuleError

    if run.agent is None or run.agent.rule_set is None:
        raise AgentError(_("This run has no agent with a rule set to keep the case in."))
    fired = [
        {
            "mcp_id": s.mcp_id,
            "tool_name": s.tool_name,
            "params": (s.input or {}).get("params") or {},
            "match": "exact",
        }
        for s in run.steps.filter(kind=RunStep.Kind.RULE).order_by("seq")
        if s.status == "ok"
    ]
    prestep_failed = (
        run.error_kind not in ("", "guardrail")
        and run.steps.filter(kind=RunStep.Kind.PRESTEP, status="error").exists()
    )
    expected = {
        "must_fire": [] if prestep_failed else fired,
        "must_not_fire": [],
        "error": run.error if prestep_failed else None,
    }

    redact = redactor()  # a case leaves the run (exports, other rule sets): it keeps the masked input
    case_input = {
        "query": redact(run.query),
        "context": redact(run.context),
        "a2a_data": redact(run.a2a_data),
        "a2a_files": redact(run.a2a_files),
    }
    try:
        return case_create(
            actor=actor,
            rule_set=run.agent.rule_set,
            name=name or f"run {run.pk}",
            input=case_input,
            expected=expected,
        )
    except RuleError as exc:
        raise AgentError(exc.message) from None


def run_tester_inputs(*, run: Run, with_outputs: bool) -> tuple[dict[str, str], dict[str, Any]]:
    """A run's input as the rule set tester's fields, masked as pages show it, and where it came from.

    The tester never gets the real input of a masked run: it gets the masked copy, and
    ``origin["masked"]`` lists each masked value by path so the tester can say which values are
    the mask's text (and refuse to Execute with them). ``with_outputs`` adds the run's recorded
    pre-step calls as pinned outputs (stored steps are masked already, when they were stored).
    """
    from rules.pins import pins_from_steps
    from rules.tester import masked_paths

    redact = redactor()
    real = {
        "query": run.query,
        "context": run.context or {},
        "a2a_data": run.a2a_data,
        "a2a_files": run.a2a_files,
    }
    shown = {key: redact(value) for key, value in real.items()}
    masked = [[list(path), value] for path, value in masked_paths(real, shown)]
    pins = (
        pins_from_steps(list(run.steps.filter(kind=RunStep.Kind.RULE).order_by("seq")))
        if with_outputs
        else []
    )

    def as_json(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False) if value else ""

    fields = {
        "query": shown["query"] or "",
        "context": json.dumps(shown["context"] or {}, ensure_ascii=False),
        "data": as_json(shown["a2a_data"]),
        "files": as_json(shown["a2a_files"]),
        "pinned": as_json(pins),
    }
    return fields, {"run": run.pk, "masked": masked, "pinned": len(pins)}


def privacy_preview(*, patterns: list[str], presets: list[str], text: str) -> str:
    """What a sample text would look like once stored, under the given settings."""

    return redactor(patterns=patterns, presets=presets)(text)


def privacy_preview_run(*, patterns: list[str], presets: list[str]) -> dict[str, Any] | None:
    """The newest run's own input as pages, the API and exports would show it under these settings."""
    from agents.selectors import RUN_INPUT_FIELDS

    run = Run.objects.order_by("-created_at", "-id").first()
    if run is None:
        return None
    redact = redactor(patterns=patterns, presets=presets)
    return {"run": run.pk, **{field: redact(getattr(run, field)) for field in RUN_INPUT_FIELDS}}


def privacy_update(
    *, actor: Any, redaction_patterns: list[str], mask_presets: list[str], retention_days: int
) -> PrivacySettings:
    """Change how stored traces are redacted and how long runs are kept (audited)."""
    current = privacy_get()
    before = {
        "redaction_patterns": current.redaction_patterns,
        "mask_presets": current.mask_presets,
        "retention_days": current.retention_days,
    }
    current.redaction_patterns, current.mask_presets, current.retention_days = (
        redaction_patterns,
        mask_presets,
        retention_days,
    )
    current.save()
    audit_record(
        actor=actor,
        action="privacy.update",
        obj=current,
        before=before,
        after={
            "redaction_patterns": redaction_patterns,
            "mask_presets": mask_presets,
            "retention_days": retention_days,
        },
    )
    return current


@transaction.atomic
def agent_delete(*, actor: Any, agent: Agent) -> None:
    """Delete an agent (its runs stay, with the agent's name); audited."""
    audit_record(actor=actor, action="agent.delete", obj=agent, before=_agent_snapshot(agent))
    agent.delete()


# --- Trace ingest: runs of served agents and flows (llamon run), posted as they happen ----------


@transaction.atomic
def run_ingest(
    *,
    actor: Any,
    run: Run | None,
    events: list[Any],
    source: str = Run.Source.SERVED,
    agent: Agent | None = None,
    agent_name: str = "",
    request: AgentRequest | None = None,
    finish: dict[str, Any] | None = None,
) -> tuple[Run, bool]:
    """Create a served/flow run (``run`` None) or add to one: store TraceEvents as steps, redacted; maybe finish it.

    Returns (run, created). Steps go through the same DbStepSink as worker runs, so an end event
    completes the step its start event created in an earlier batch. ``finish`` is
    ``{status, answer, error, error_kind}``; a finished run takes no more events.
    """
    from agents.sink import DbStepSink

    created = run is None
    if run is None:
        if source not in (Run.Source.SERVED, Run.Source.FLOW):
            raise AgentError(_("Ingested runs have the source 'served' or 'flow'."), field="source")
        if agent is None and not agent_name.strip():
            raise AgentError(
                _(
                    "A new ingested run needs the agent it traces: send 'agent' (a registered agent's id) or 'agent_name'. To add to a run, send its 'run_id'."
                ),
                field="agent_name",
            )
        if request is None and not events and finish is None:
            raise AgentError(
                _(
                    "A new ingested run needs its 'request', some 'events' or its 'finish': this body holds nothing to record."
                ),
                field="events",
            )
        request = request or AgentRequest(query="")
        request_check_size(request)
        run = Run.objects.create(
            agent=agent,
            agent_name=(agent.name if agent else agent_name)[:100],
            source=source,
            status=Run.Status.RUNNING,
            query=request.query,
            context=request.context,
            a2a_data=request.a2a_data,
            a2a_files=request.a2a_files,
            created_by=actor if getattr(actor, "is_authenticated", False) else None,
            started_at=timezone.now(),
            heartbeat_at=timezone.now(),
            **_lookup_ids(request),
        )
    else:
        run = Run.objects.select_for_update().get(pk=run.pk)  # one batch at a time: seq numbers stay unique
        if run.source == Run.Source.WORKER:
            raise AgentConflictError(
                _("Run %(pk)s ran on a worker; only served and flow runs take ingested events.")
                % {"pk": run.pk}
            )
        if run.finished:
            raise AgentConflictError(
                _("Run %(pk)s has already finished (%(status)s); it takes no more events.")
                % {"pk": run.pk, "status": run.status}
            )
        owner = run.created_by_id is not None and run.created_by_id == getattr(actor, "pk", None)
        if actor is not None and not owner and not has_role(actor, "admin"):  # None: the system itself
            # An editor could otherwise write steps into, or end, someone else's served run.
            raise PermissionDenied(
                _(
                    "Run %(pk)s was started by another user: only they (or an admin) may add to it or finish it."
                )
                % {"pk": run.pk}
            )
    redact = redactor()
    sink = DbStepSink(run, redact=redact, resume=True)
    for event in events:
        sink.emit(event)
    prestep = sum(1 for e in events if e.kind == "rule" and e.phase == "end" and e.status == "ok")
    counts = {
        "heartbeat_at": timezone.now(),  # every batch is a sign of life (see runs_reap)
        "llm_calls": F("llm_calls") + sink.counts["llm"],
        "tool_calls": F("tool_calls") + sink.counts["tool"],
        "prestep_calls": F("prestep_calls") + prestep,
    }
    if finish is not None:
        Run.objects.filter(pk=run.pk).update(
            status=finish["status"],
            answer=redact(finish.get("answer") or ""),
            error=redact(finish.get("error") or "")[:10_000],
            error_kind=(finish.get("error_kind") or "")[:20],
            finished_at=timezone.now(),
            **counts,
        )
        RunStep.objects.filter(run_id=run.pk, status="running").update(status="interrupted")
    else:
        Run.objects.filter(pk=run.pk).update(**counts)
    run.refresh_from_db()
    return run, created


# --- Staged rollout and shadow mode (agents.rollout decides per run; docs/agents.md) -------------

MAX_ROLLOUT_CHATBOTS = 200  # chatbotIds on one rollout's list
MAX_CHATBOT_ID_CHARS = 200  # as long as a run's chatbot_id column


def _rollout_state(agent: Agent) -> dict[str, Any]:
    return {
        "rule_set_mode": agent.rule_set_mode,
        "pinned_version": agent.pinned_version.number if agent.pinned_version else None,
        "rollout_version": agent.rollout_version.number if agent.rollout_version else None,
        "rollout_percent": agent.rollout_percent,
        "rollout_chatbot_ids": list(agent.rollout_chatbot_ids or []),
        "shadow_version": agent.shadow_version.number if agent.shadow_version else None,
    }


def _version_of_agent(agent: Agent, version: Any, *, field: str) -> Any:
    """Refuse a version that is not a published version of the agent's own rule set."""
    if agent.rule_set is None:
        raise AgentError(
            _("Agent %(name)r has no rule set, so it has no versions to roll out.") % {"name": agent.name},
            field=field,
        )
    if version is None or version.rule_set_id != agent.rule_set_id:
        raise AgentError(
            _("Choose a published version of the agent's rule set %(name)r.") % {"name": agent.rule_set.name},
            field=field,
        )
    return version


def _chatbot_ids_clean(chatbot_ids: list[Any]) -> list[str]:
    if not isinstance(chatbot_ids, list):
        raise AgentError(_("The chatbotIds are a list of strings."), field="chatbot_ids")
    if len(chatbot_ids) > MAX_ROLLOUT_CHATBOTS:
        raise AgentError(
            _("A rollout names at most %(most)s chatbotIds; this list has %(count)s.")
            % {"most": MAX_ROLLOUT_CHATBOTS, "count": f"{len(chatbot_ids):,}"},
            field="chatbot_ids",
        )
    cleaned: list[str] = []
    for value in chatbot_ids:
        if not isinstance(value, str) or not value.strip():
            raise AgentError(_("Each chatbotId is a non-empty string."), field="chatbot_ids")
        value = value.strip()
        if len(value) > MAX_CHATBOT_ID_CHARS:
            raise AgentError(
                _("A chatbotId is at most %(most)s characters (%(start)r... has %(count)s).")
                % {"most": MAX_CHATBOT_ID_CHARS, "start": value[:20], "count": f"{len(value):,}"},
                field="chatbot_ids",
            )
        if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
            raise AgentError(
                _("The chatbotId %(value)r holds a control character (NUL, a line break ...).")
                % {"value": value[:40]},
                field="chatbot_ids",
            )
        if value not in cleaned:
            cleaned.append(value)
    return cleaned


ROLLOUT_FIELDS = (
    "rollout_version_id",
    "rollout_percent",
    "rollout_chatbot_ids",
    "rollout_started_at",
    "shadow_version_id",
)


def _rollout_keep(agent: Agent, current: Agent) -> None:
    """The agent form never changes the rollout or the shadow (their own services do): keep them."""
    for name in ROLLOUT_FIELDS:
        setattr(agent, name, getattr(current, name))
    if agent.rule_set_id != current.rule_set_id and (current.rollout_version_id or current.shadow_version_id):
        raise AgentError(
            _("Roll back the staged rollout and stop shadow mode before changing the agent's rule set."),
            field="rule_set",
        )


def _locked_agent(agent: Agent) -> Agent:
    return (
        Agent.objects.select_for_update(of=("self",))
        .select_related("rule_set", "pinned_version", "rollout_version", "shadow_version")
        .get(pk=agent.pk)
    )


def _agent_bump(agent: Agent, fields: list[str]) -> None:
    # A rollout change is a change of the agent: an editor's open form (an older revision) is refused.
    agent.revision += 1
    agent.save(update_fields=[*fields, "revision", "updated_at"])


@transaction.atomic
def rollout_set(*, actor: Any, agent: Agent, version: Any, percent: int, chatbot_ids: list[Any]) -> Agent:
    """Start a staged rollout of ``version`` (or change the running one): a share of sessions and/or chatbots."""
    agent = _locked_agent(agent)
    version = _version_of_agent(agent, version, field="version")
    if isinstance(percent, bool) or not isinstance(percent, int) or not 0 <= percent <= 100:
        raise AgentError(
            _("The share of traffic is a whole percentage from 0 to 100, not %(value)r.")
            % {"value": percent},
            field="percent",
        )
    chatbots = _chatbot_ids_clean(chatbot_ids)
    before = _rollout_state(agent)
    starting = agent.rollout_version_id is None or agent.rollout_version_id != version.pk
    agent.rollout_version, agent.rollout_percent, agent.rollout_chatbot_ids = version, percent, chatbots
    if starting:
        agent.rollout_started_at = timezone.now()
    _agent_bump(agent, ["rollout_version", "rollout_percent", "rollout_chatbot_ids", "rollout_started_at"])
    audit_record(
        actor=actor,
        action="agent.rollout.start" if starting else "agent.rollout.change",
        obj=agent,
        before=before,
        after=_rollout_state(agent),
    )
    return agent


def _rollout_clear(agent: Agent) -> None:
    agent.rollout_version, agent.rollout_percent, agent.rollout_chatbot_ids = None, 0, []
    agent.rollout_started_at = None


@transaction.atomic
def rollout_promote(*, actor: Any, agent: Agent) -> Agent:
    """The candidate becomes the agent's stable (pinned) version; the rollout ends."""
    agent = _locked_agent(agent)
    candidate = agent.rollout_version
    if candidate is None:
        raise AgentConflictError(_("Agent %(name)r has no rollout to promote.") % {"name": agent.name})
    before = _rollout_state(agent)
    agent.rule_set_mode, agent.pinned_version = Agent.RuleSetMode.PINNED, candidate
    _rollout_clear(agent)
    _agent_bump(
        agent,
        [
            "rule_set_mode",
            "pinned_version",
            "rollout_version",
            "rollout_percent",
            "rollout_chatbot_ids",
            "rollout_started_at",
        ],
    )
    audit_record(
        actor=actor, action="agent.rollout.promote", obj=agent, before=before, after=_rollout_state(agent)
    )
    return agent


@transaction.atomic
def rollout_rollback(*, actor: Any, agent: Agent) -> Agent:
    """End the rollout: every run gets the stable version again."""
    agent = _locked_agent(agent)
    if agent.rollout_version_id is None:
        raise AgentConflictError(_("Agent %(name)r has no rollout to roll back.") % {"name": agent.name})
    before = _rollout_state(agent)
    _rollout_clear(agent)
    _agent_bump(agent, ["rollout_version", "rollout_percent", "rollout_chatbot_ids", "rollout_started_at"])
    audit_record(
        actor=actor, action="agent.rollout.rollback", obj=agent, before=before, after=_rollout_state(agent)
    )
    return agent


@transaction.atomic
def shadow_set(*, actor: Any, agent: Agent, version: Any) -> Agent:
    """Name the version evaluated in shadow beside every run (None: shadow mode off)."""
    agent = _locked_agent(agent)
    if version is not None:
        version = _version_of_agent(agent, version, field="version")
    before = _rollout_state(agent)
    if (version.pk if version else None) == agent.shadow_version_id:
        return agent
    agent.shadow_version = version
    _agent_bump(agent, ["shadow_version"])
    audit_record(
        actor=actor,
        action="agent.shadow.start" if version else "agent.shadow.stop",
        obj=agent,
        before=before,
        after=_rollout_state(agent),
    )
    return agent
