"""Trace ingest: runs of served agents and flows (`llamon run`), posted as they happen."""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts.roles import has_role
from agents.errors import (
    AgentConflictError,
    AgentError,
)
from agents.evidence import run_end
from agents.models import Agent, Run
from agents.privacy import run_redactor
from agents.services.runs import request_check_size, request_lookup_ids
from llamon_agent.tools import AgentRequest

logger = logging.getLogger(__name__)


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
            **request_lookup_ids(request),
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
    redact = run_redactor(run)
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
        run_end(
            run.pk,
            where={"finished_at__isnull": True},
            status=finish["status"],
            answer=redact(finish.get("answer") or ""),
            error=redact(finish.get("error") or "")[:10_000],
            error_kind=(finish.get("error_kind") or "")[:20],
            **counts,
        )
    else:
        Run.objects.filter(pk=run.pk).update(**counts)
    run.refresh_from_db()
    return run, created
