"""The run lifecycle: create, publish, rerun, replay, cancel, claim, beat, finish, execute (a worker's
task body), and a run kept as a regression case or opened in the tester."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from agents import dispatch
from agents.errors import (
    DATABASE_LOST,
    AgentConflictError,
    AgentError,
    BrokerUnavailableError,
)
from agents.evidence import run_end
from agents.models import Agent, Run, RunStep
from agents.redaction import redactor
from agents.services.rollout import rollout_guard_check
from core.audit import audit_record
from core.errors import disk_full
from llamon_agent.expr import MAX_DATA_BYTES, MAX_QUERY_CHARS
from llamon_agent.tools import AgentRequest

logger = logging.getLogger(__name__)


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


def request_lookup_ids(request: AgentRequest) -> dict[str, str]:
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
        **request_lookup_ids(request),
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
        if deleted and disk_full(exc):
            raise BrokerUnavailableError(
                _(
                    "The server's disk is full, so the run could not be queued and nothing was kept. Free disk space (the embedded run queue is kept under LLAMON_VAR_DIR), then try again."
                )
            ) from None
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
    cancelled = run_end(
        run.pk,
        where={"status": Run.Status.QUEUED},
        status=Run.Status.CANCELLED,
        finished_at=now,
        error="cancelled before it started",
        error_kind="cancelled",
    )
    if not cancelled:
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

        wait_s = period_s
        while not stop.wait(wait_s):
            try:
                Run.objects.filter(pk=run_id, status=Run.Status.RUNNING).update(heartbeat_at=timezone.now())
                wait_s = period_s
            except Exception:  # a missed beat is retried; the reaper tolerates several
                logger.exception("run %s heartbeat failed", run_id)
                # A connection the database dropped stays broken until closed: the next beat
                # connects again, soon, so the run beats as soon as the database is back.
                connection.close()
                wait_s = min(period_s, 1.0)
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
    """Record how a running run ended (only a running run: a reaped one stays reaped).

    A rollout candidate's run is then counted by the rollout's guard, which may roll it back.
    """
    ended = run_end(  # the run's end and its link in the evidence chain, together
        run_id,
        where={"status": Run.Status.RUNNING},
        status=status,
        answer=answer,
        error=error[:10_000],
        error_kind=error_kind,
        **counts,
    )
    if ended:
        served = (
            Run.objects.filter(pk=run_id, rollout_candidate=True)
            .values_list("agent_id", "rule_set_version_id")
            .first()
        )
        if served is not None and served[0] is not None and served[1] is not None:
            rollout_guard_check(agent_id=served[0], version_id=served[1])


def run_execute(*, run_id: int) -> None:
    """Claim a queued run and execute it here (the Celery task's body)."""
    if not run_claim(run_id=run_id):
        logger.info("run %s is not queued any more (redelivered or cancelled): nothing to do", run_id)
        return
    from agents.runtime import (  # lazily: it loads the engine, which the web process rarely needs
        RunEnd,
        execute_claimed_run,
    )

    with run_heartbeat(run_id=run_id, period_s=settings.LLAMON_RUN_HEARTBEAT_S):
        try:
            end = execute_claimed_run(run_id=run_id)
        except (OperationalError, InterfaceError) as exc:  # the database, not the worker
            logger.warning("run %s: the database stopped answering: %s", run_id, exc)
            end = RunEnd(
                Run.Status.FAILED, error=DATABASE_LOST.format(error=_first_line(exc)), error_kind="database"
            )
        _finish_once_the_database_answers(run_id, end.fields())


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def _finish_once_the_database_answers(run_id: int, fields: dict[str, Any]) -> None:
    """run_finish, retried while the database cannot be reached (the heartbeat keeps beating, so
    the reaper leaves the run alone): a run the database lost ends saying so, never `worker_lost`."""
    from django.db import connection

    deadline = time.monotonic() + settings.LLAMON_RUN_HARD_LIMIT_S
    while True:
        try:
            run_finish(run_id=run_id, **fields)
            return
        except (OperationalError, InterfaceError) as exc:
            if time.monotonic() > deadline:
                raise
            logger.warning(
                "run %s: cannot record its end yet, the database is not answering: %s", run_id, exc
            )
            connection.close()
            time.sleep(1.0)


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
    # The version that served the run: the tester tests it (not the draft), the draft beside it.
    served = run.rule_set_version
    agent_set = run.agent.rule_set_id if run.agent else None
    version = served.number if served is not None and served.rule_set_id == agent_set else None
    return fields, {"run": run.pk, "masked": masked, "pinned": len(pins), "version": version}
