"""The agents app's API: agents, runs (start, read, list, steps, cancel, rerun) and trace ingest.

Agents are validated by the agent page's own form and runs are parsed by the run page's form,
so the API accepts and refuses exactly what the pages do.
"""

from __future__ import annotations

from typing import Annotated, Any

from django.http import Http404, HttpRequest
from django.utils.translation import gettext as _
from ninja import Path, Query, Router, Status
from ninja.errors import AuthenticationError, AuthorizationError
from ninja.security import HttpBearer

from accounts.api_auth import roles
from accounts.token_services import token_authenticate
from agents import selectors, services
from agents.errors import AgentError
from agents.evidence_rows import evidence_response
from agents.models import Agent, ChangeRequest, ModelConnection, Run
from agents.schemas import (
    AgentIn,
    AgentOut,
    AgentPatchIn,
    ChangeRequestFilterIn,
    ChangeRequestOut,
    IngestIn,
    IngestOut,
    ModelConnectionIn,
    ModelConnectionOut,
    ModelConnectionPatchIn,
    ProtectionIn,
    ReviewIn,
    RolloutIn,
    RolloutOut,
    RunAcceptedOut,
    RunCreateIn,
    RunExportIn,
    RunFilterIn,
    RunOut,
    RunPageOut,
    RunStepsOut,
    ShadowIn,
    ShadowOut,
    StepValueIn,
    StepValueOut,
)
from core.api import CHANGE_REQUESTED, DbId, error_responses, get_or_404
from llamon_agent.tools import AgentRequest
from llamon_agent.trace import TraceEvent
from rules.models import RuleSetVersion

router = Router()
VIEWER, EDITOR, ADMIN = roles("viewer"), roles("editor"), roles("admin")
AGENTS, RUNS = ["agents"], ["runs"]

# --- Agents --------------------------------------------------------------------------------------


@router.get("/privacy", response={200: dict[str, list[str]], **error_responses()}, auth=VIEWER, tags=RUNS)
def privacy(request: HttpRequest) -> Any:
    """The privacy settings served agents mask their OTel spans with: ``redaction_patterns`` (RE2)
    and ``mask_presets`` (names of ``llamon_agent.guardrails.MASK_PRESETS``). docs/observability.md."""
    from agents.redaction import privacy_get

    current = privacy_get()
    return {
        "redaction_patterns": list(current.redaction_patterns),
        "mask_presets": list(current.mask_presets),
    }


@router.get("/agents", response={200: list[AgentOut], **error_responses()}, auth=VIEWER, tags=AGENTS)
def list_agents(request: HttpRequest) -> Any:
    """Every agent."""
    return selectors.agent_list().prefetch_related("react_servers")


@router.post("/agents", response={201: AgentOut, **error_responses()}, auth=EDITOR, tags=AGENTS)
def create_agent(request: HttpRequest, payload: AgentIn) -> Any:
    """Create an agent (editor), validated as the agent page validates it."""
    return Status(201, _agent_save(request, Agent(), payload.dict(), revision=None))


@router.get("/agents/{agent_id}", response={200: AgentOut, **error_responses(404)}, auth=VIEWER, tags=AGENTS)
def get_agent(request: HttpRequest, agent_id: DbId) -> Any:
    """One agent (its ``revision`` is what a PATCH sends back)."""
    return get_or_404(Agent, "agent", pk=agent_id)


@router.patch(
    "/agents/{agent_id}",
    response={200: AgentOut, **CHANGE_REQUESTED, **error_responses(404, 409)},
    auth=EDITOR,
    tags=AGENTS,
)
def update_agent(request: HttpRequest, agent_id: DbId, payload: AgentPatchIn) -> Any:
    """Change an agent (editor); absent fields keep their value; a stale ``revision`` is a 409."""
    agent = get_or_404(Agent, "agent", pk=agent_id)
    changes = payload.dict(exclude_unset=True)
    revision = changes.pop("revision")
    reason = changes.pop("change_reason", "") or ""
    return services.agent_save_values(
        actor=request.auth,
        agent=agent,
        values={**services.agent_values(agent), **changes},
        revision=revision,
        change_reason=reason,
    )


@router.put(
    "/agents/{agent_id}/protection",
    response={200: AgentOut, **CHANGE_REQUESTED, **error_responses(404, 409)},
    auth=ADMIN,
    tags=AGENTS,
)
def set_protection(request: HttpRequest, agent_id: DbId, payload: ProtectionIn) -> Any:
    """Protect the agent (its changes become change requests) and how many approvals they need (admin);
    lowering either on a protected agent is itself a change request (202)."""
    return services.agent_protect(
        actor=request.auth,
        agent=get_or_404(Agent, "agent", pk=agent_id),
        protected=payload.protected,
        approvals_required=payload.approvals_required,
    )


# --- Change requests (docs/governance.md) --------------------------------------------------------

CHANGES = ["change requests"]


@router.get(
    "/change-requests",
    response={200: list[ChangeRequestOut], **error_responses(404)},
    auth=VIEWER,
    tags=CHANGES,
)
def list_change_requests(request: HttpRequest, filters: Query[ChangeRequestFilterIn]) -> Any:
    """Change requests (at most 200), pending first, newest first; ``?agent=`` and ``?state=`` narrow."""
    agent = get_or_404(Agent, "agent", pk=filters.agent) if filters.agent is not None else None
    found = selectors.change_request_list(agent=agent, state=filters.state or "")
    return [selectors.change_request_view(r) for r in found.prefetch_related("reviews")[:200]]


@router.get(
    "/change-requests/{change_id}",
    response={200: ChangeRequestOut, **error_responses(404)},
    auth=VIEWER,
    tags=CHANGES,
)
def get_change_request(request: HttpRequest, change_id: DbId) -> Any:
    """One change request: action, payload, diff, reason, who asked, the reviews and the approvals counted."""
    return selectors.change_request_view(get_or_404(ChangeRequest, "change request", pk=change_id))


def _review(request: HttpRequest, change_id: DbId, decision: str, comment: str) -> Any:
    change = get_or_404(ChangeRequest, "change request", pk=change_id)
    change = services.change_request_review(
        actor=request.auth, change_request=change, decision=decision, comment=comment
    )
    return selectors.change_request_view(change)


@router.post(
    "/change-requests/{change_id}/approve",
    response={200: ChangeRequestOut, **error_responses(404, 409)},
    auth=VIEWER,
    tags=CHANGES,
)
def approve_change_request(request: HttpRequest, change_id: DbId, payload: ReviewIn) -> Any:
    """Approve (an approver or admin, not the requester); the approval that makes the count applies it
    (``state`` "applied"); a stale change is a 409 and nothing is recorded."""
    return _review(request, change_id, "approve", payload.comment)


@router.post(
    "/change-requests/{change_id}/reject",
    response={200: ChangeRequestOut, **error_responses(404, 409)},
    auth=VIEWER,
    tags=CHANGES,
)
def reject_change_request(request: HttpRequest, change_id: DbId, payload: ReviewIn) -> Any:
    """Reject with a comment (an approver or admin, not the requester): the request ends, nothing changes."""
    return _review(request, change_id, "reject", payload.comment)


@router.delete(
    "/agents/{agent_id}",
    response={204: None, **CHANGE_REQUESTED, **error_responses(404, 409)},
    auth=EDITOR,
    tags=AGENTS,
)
def delete_agent(request: HttpRequest, agent_id: DbId) -> Any:
    """Delete an agent (editor); its runs stay, with its name. A protected agent's deletion is a
    change request (202); an agent with pending change requests is a 409."""
    services.agent_delete(actor=request.auth, agent=get_or_404(Agent, "agent", pk=agent_id))
    return Status(204, None)


# --- Model connections (admins define them; editors pick one for an agent) ----------------------

CONNECTIONS = ["model connections"]


@router.get(
    "/model-connections",
    response={200: list[ModelConnectionOut], **error_responses()},
    auth=VIEWER,
    tags=CONNECTIONS,
)
def list_model_connections(request: HttpRequest) -> Any:
    """Every model connection (the endpoints and models an agent may use)."""
    return selectors.connection_list()


@router.post(
    "/model-connections",
    response={201: ModelConnectionOut, **error_responses()},
    auth=ADMIN,
    tags=CONNECTIONS,
)
def create_model_connection(request: HttpRequest, payload: ModelConnectionIn) -> Any:
    """Define a connection (admin): the key variable's value is sent to this base URL only."""
    connection = services.connection_save(
        actor=request.auth, connection=ModelConnection(), values=payload.dict(), revision=None
    )
    return Status(201, connection)


@router.patch(
    "/model-connections/{connection_id}",
    response={200: ModelConnectionOut, **CHANGE_REQUESTED, **error_responses(404, 409)},
    auth=ADMIN,
    tags=CONNECTIONS,
)
def update_model_connection(
    request: HttpRequest, connection_id: DbId, payload: ModelConnectionPatchIn
) -> Any:
    """Change a connection (admin); absent fields keep their value; a stale ``revision`` is a 409."""
    connection = get_or_404(ModelConnection, "model connection", pk=connection_id)
    changes = payload.dict(exclude_unset=True)
    revision = changes.pop("revision")
    values = {**services.connection_values(connection), **changes}
    return services.connection_save(
        actor=request.auth, connection=connection, values=values, revision=revision
    )


@router.delete(
    "/model-connections/{connection_id}",
    response={204: None, **error_responses(404, 409)},
    auth=ADMIN,
    tags=CONNECTIONS,
)
def delete_model_connection(request: HttpRequest, connection_id: DbId) -> Any:
    """Delete a connection no agent uses (admin); one in use is a 409 naming its agents."""
    connection = get_or_404(ModelConnection, "model connection", pk=connection_id)
    services.connection_delete(actor=request.auth, connection=connection)
    return Status(204, None)


@router.get(
    "/agents/{agent_id}/rollout", response={200: RolloutOut, **error_responses(404)}, auth=VIEWER, tags=AGENTS
)
def get_rollout(request: HttpRequest, agent_id: DbId) -> Any:
    """The agent's staged rollout (candidate version, share, chatbotIds) and shadow version."""
    return selectors.rollout_view(get_or_404(Agent, "agent", pk=agent_id))


@router.put(
    "/agents/{agent_id}/rollout",
    response={200: RolloutOut, **CHANGE_REQUESTED, **error_responses(404, 409)},
    auth=EDITOR,
    tags=AGENTS,
)
def set_rollout(request: HttpRequest, agent_id: DbId, payload: RolloutIn) -> Any:
    """Start or change a staged rollout (editor): a share of sessions and/or chatbotIds get ``version``."""
    agent = get_or_404(Agent, "agent", pk=agent_id)
    if payload.publish_draft:  # the Versions page's "publish as a staged rollout", one service call
        agent = services.rollout_publish(
            actor=request.auth,
            agent=agent,
            number=payload.version,
            percent=payload.percent,
            message=payload.message,
            chatbot_ids=payload.chatbot_ids,
            guard_error_percent=payload.guard_error_percent,
            guard_min_runs=payload.guard_min_runs,
            change_reason=payload.change_reason,
        )
        return selectors.rollout_view(agent)
    version = _agent_version(agent, payload.version)
    agent = services.rollout_set(
        actor=request.auth,
        agent=agent,
        version=version,
        percent=payload.percent,
        chatbot_ids=payload.chatbot_ids,
        guard_error_percent=payload.guard_error_percent,
        guard_min_runs=payload.guard_min_runs,
        change_reason=payload.change_reason,
    )
    return selectors.rollout_view(agent)


@router.post(
    "/agents/{agent_id}/rollout/promote",
    response={200: RolloutOut, **CHANGE_REQUESTED, **error_responses(404, 409)},
    auth=EDITOR,
    tags=AGENTS,
)
def promote_rollout(
    request: HttpRequest, agent_id: DbId, change_reason: str = Query("", max_length=2000)
) -> Any:
    """The candidate becomes the agent's pinned version and the rollout ends (editor); 409 without one."""
    agent = services.rollout_promote(
        actor=request.auth,
        agent=get_or_404(Agent, "agent", pk=agent_id),
        change_reason=change_reason,
    )
    return selectors.rollout_view(agent)


@router.post(
    "/agents/{agent_id}/rollout/rollback",
    response={200: RolloutOut, **CHANGE_REQUESTED, **error_responses(404, 409)},
    auth=EDITOR,
    tags=AGENTS,
)
def rollback_rollout(
    request: HttpRequest, agent_id: DbId, change_reason: str = Query("", max_length=2000)
) -> Any:
    """End the rollout: every run gets the stable version again (editor); 409 without one."""
    agent = services.rollout_rollback(
        actor=request.auth,
        agent=get_or_404(Agent, "agent", pk=agent_id),
        change_reason=change_reason,
    )
    return selectors.rollout_view(agent)


@router.get(
    "/agents/{agent_id}/shadow", response={200: ShadowOut, **error_responses(404)}, auth=VIEWER, tags=AGENTS
)
def get_shadow(request: HttpRequest, agent_id: DbId) -> Any:
    """Shadow mode's counts per shadow version, with the newest divergences (live calls vs shadow calls)."""
    agent = get_or_404(Agent, "agent", pk=agent_id)
    return _shadow_body(agent)


@router.put(
    "/agents/{agent_id}/shadow",
    response={200: ShadowOut, **CHANGE_REQUESTED, **error_responses(404)},
    auth=EDITOR,
    tags=AGENTS,
)
def set_shadow(request: HttpRequest, agent_id: DbId, payload: ShadowIn) -> Any:
    """Name the version evaluated in shadow beside every run (editor); ``null`` stops shadow mode."""
    agent = get_or_404(Agent, "agent", pk=agent_id)
    version = _agent_version(agent, payload.version) if payload.version is not None else None
    return _shadow_body(services.shadow_set(actor=request.auth, agent=agent, version=version))


def _shadow_body(agent: Agent) -> dict[str, Any]:
    tallies = [
        {
            "version": t.version.number,
            "evaluated": t.evaluated,
            "diverged": t.diverged,
            "errors": t.errors,
            "examples": [
                {
                    "run": e.run_id,
                    "live_calls": e.live_calls,
                    "shadow_calls": e.shadow_calls,
                    "error": e.error,
                    "created_at": e.created_at,
                }
                for e in t.examples.all()
            ],
        }
        for t in selectors.shadow_tallies(agent=agent)
    ]
    return {
        "shadow_version": agent.shadow_version.number if agent.shadow_version is not None else None,
        "tallies": tallies,
    }


def _agent_version(agent: Agent, number: int) -> RuleSetVersion:
    """A published version of the agent's rule set by number (422 with the reason otherwise)."""
    if agent.rule_set is None:
        raise AgentError(
            _("Agent %(name)r has no rule set, so it has no versions.") % {"name": agent.name},
            field="version",
        )
    version = selectors.agent_version(agent, number)
    if version is None:
        raise AgentError(
            _("Rule set %(name)r has no published version %(number)s.")
            % {"name": agent.rule_set.name, "number": number},
            field="version",
        )
    return version


def _agent_save(request: HttpRequest, agent: Agent, values: dict[str, Any], *, revision: int | None) -> Agent:
    return services.agent_save_values(actor=request.auth, agent=agent, values=values, revision=revision)


# --- Runs ----------------------------------------------------------------------------------------


@router.get("/runs", response={200: RunPageOut, **error_responses(400)}, auth=VIEWER, tags=RUNS)
def list_runs(request: HttpRequest, filters: Query[RunFilterIn]) -> Any:
    """Runs newest first, with the run list's filters (agent, status, rule, tool, ids, text, time).

    Keyset paging: pass the answer's ``next_cursor`` as ``?cursor=`` for the next page.
    """
    chosen = filters.dict(exclude={"limit", "offset", "cursor"})
    chosen = {k: v for k, v in chosen.items() if v not in (None, "")}
    if filters.cursor and filters.offset:
        return Status(400, {"detail": "Page with cursor or with offset, not both.", "field": "offset"})
    if filters.offset:  # the old paging (OFFSET reads every skipped run), kept for existing clients
        runs = selectors.run_list(filters=chosen)
        rows = list(runs[filters.offset : filters.offset + filters.limit + 1])
        more = len(rows) > filters.limit
        page = selectors.RunPage(
            runs=rows[: filters.limit],
            cursor=None,
            next_cursor=selectors.cursor_encode(rows[filters.limit - 1]) if more else None,
        )
    else:
        try:
            page = selectors.run_page(filters=chosen, cursor=filters.cursor, limit=filters.limit)
        except selectors.CursorError as exc:
            return Status(400, {"detail": str(exc), "field": "cursor"})
    count, capped = selectors.run_count(filters=chosen)
    items = selectors.runs_with_calls(selectors.runs_for_display(page.runs))
    return {"count": count, "count_capped": capped, "next_cursor": page.next_cursor, "items": items}


@router.get("/runs/export", response={200: None, **error_responses()}, auth=VIEWER, tags=RUNS)
def export_runs(request: HttpRequest, filters: Query[RunExportIn]) -> Any:
    """Evidence export of the runs the filters pick: one row per deterministic call, streamed (audited).

    ``format=csv`` for spreadsheets; ``format=jsonl`` adds each run's decision record and evidence
    link, checkable offline with ``tools/verify_evidence.py``.
    """
    chosen = filters.dict(exclude={"limit", "offset", "cursor", "format"})
    chosen = {k: v for k, v in chosen.items() if v not in (None, "")}
    stream = services.runs_export(actor=request.auth, filters=chosen, fmt=filters.format)
    return evidence_response(stream, filters.format)


@router.get("/runs/{run_id}/export", response={200: dict, **error_responses(404)}, auth=VIEWER, tags=RUNS)
def export_run(request: HttpRequest, run_id: DbId) -> Any:
    """One run as a JSON document: input (masked), every step, its decision record and link (audited)."""
    run = get_or_404(Run, "run", pk=run_id)
    return services.run_export_document(actor=request.auth, run=run)


@router.post("/runs", response={202: RunAcceptedOut, **error_responses(404, 503)}, auth=EDITOR, tags=RUNS)
def create_run(request: HttpRequest, payload: RunCreateIn) -> Any:
    """Queue a run on a worker (editor); 202 with its id, 503 (nothing kept) if the broker is down."""
    agent = get_or_404(Agent, "agent", pk=payload.agent)
    run = services.run_create(actor=request.auth, agent=agent, request=payload.to_request())
    return Status(202, _accepted(run))


class IngestAuth(HttpBearer):
    """``Authorization: Bearer llamon_ingest_...``: a served agent's ingest credential, never a
    person's token or session (an editor could otherwise make up runs under any agent)."""

    def authenticate(self, request: HttpRequest, token: str) -> Any:
        credential = services.ingest_credential_authenticate(token.strip())
        if credential is not None:
            return credential
        if token_authenticate(token.strip()) is not None:
            raise AuthorizationError(
                message=_(
                    "Ingest takes a served agent's ingest credential (an admin issues it: manage.py ingest_credential issue NAME), not a person's API token."
                )
            )
        raise AuthenticationError(message=_("The ingest credential is unknown or revoked."))


@router.post(
    "/runs/ingest",
    response={200: IngestOut, 201: IngestOut, **error_responses(404, 409)},
    auth=[IngestAuth()],
    tags=RUNS,
)
def ingest_run(request: HttpRequest, payload: IngestIn) -> Any:
    """Trace ingest for served and flow runs (a served agent's ingest credential): create the run,
    append events, finish it. docs/api.md."""
    run = get_or_404(Run, "run", pk=payload.run_id) if payload.run_id is not None else None
    agent = get_or_404(Agent, "agent", pk=payload.agent) if payload.agent is not None else None
    sample = AgentRequest(**payload.request.dict()) if payload.request is not None else None
    run, created = services.run_ingest(
        credential=request.auth,
        run=run,
        events=[TraceEvent.from_json(e.dict()) for e in payload.events],
        source=payload.source,
        agent=agent,
        agent_name=payload.agent_name,
        request=sample,
        finish=payload.finish.dict() if payload.finish is not None else None,
        version=payload.version.dict() if payload.version is not None else None,
    )
    body = {"run_id": run.pk, "created": created, "status": run.status, "steps": run.steps.count()}
    return Status(201 if created else 200, body)


@router.get("/runs/{run_id}", response={200: RunOut, **error_responses(404)}, auth=VIEWER, tags=RUNS)
def get_run(request: HttpRequest, run_id: DbId) -> Any:
    """One run: input (masked by the privacy settings), status, answer or error, counts."""
    return selectors.runs_for_display([get_or_404(Run, "run", pk=run_id)])[0]


@router.get(
    "/runs/{run_id}/steps", response={200: RunStepsOut, **error_responses(404)}, auth=VIEWER, tags=RUNS
)
def list_run_steps(request: HttpRequest, run_id: DbId, after: int = Query(0, ge=0, le=2**31)) -> Any:
    """Up to 200 of the run's steps with seq > ``after`` (the run page's pages); poll or page with
    ``after=last_seq`` until ``finished``."""
    run = get_or_404(Run, "run", pk=run_id)
    page = selectors.run_step_page(run=run, after=after)
    return {
        "run_id": run.pk,
        "status": run.status,
        "finished": run.finished and page.settled and not page.more,
        "more": page.more,
        "last_seq": page.last_seq,
        "steps": page.steps,
    }


@router.get(
    "/runs/{run_id}/steps/{seq}/value",
    response={200: StepValueOut, **error_responses(404)},
    auth=VIEWER,
    tags=RUNS,
)
def get_run_step_value(
    request: HttpRequest, run_id: DbId, seq: Annotated[int, Path(ge=0, le=2**31)], which: Query[StepValueIn]
) -> Any:
    """One part of a step's input or output (a value over 256 KB is given in parts on the steps' pages)."""
    run = get_or_404(Run, "run", pk=run_id)
    part = selectors.run_step_value(run=run, seq=seq, field=which.field, part=which.part)
    if part is None:
        raise Http404(
            _("Run %(run)s has no step %(seq)s with a part %(part)s of its %(field)s.")
            % {"run": run_id, "seq": seq, "part": which.part, "field": which.field}
        )
    return part


@router.post("/runs/{run_id}/cancel", response={200: RunOut, **error_responses(404)}, auth=EDITOR, tags=RUNS)
def cancel_run(request: HttpRequest, run_id: DbId) -> Any:
    """Cancel a queued run at once, or ask a running one to stop at its next step (editor)."""
    run = services.run_cancel(actor=request.auth, run=get_or_404(Run, "run", pk=run_id))
    return selectors.runs_for_display([run])[0]


@router.post(
    "/runs/{run_id}/rerun",
    response={202: RunAcceptedOut, **error_responses(404, 503)},
    auth=EDITOR,
    tags=RUNS,
)
def rerun_run(request: HttpRequest, run_id: DbId) -> Any:
    """Run the same input again with the agent as it is now (editor); 202 with the new run's id."""
    return Status(
        202, _accepted(services.run_rerun(actor=request.auth, run=get_or_404(Run, "run", pk=run_id)))
    )


@router.post(
    "/runs/{run_id}/replay",
    response={202: RunAcceptedOut, **error_responses(404, 409, 503)},
    auth=EDITOR,
    tags=RUNS,
)
def replay_run(request: HttpRequest, run_id: DbId, agent: DbId | None = None) -> Any:
    """Run a finished run's input again with its recorded tool outputs (editor); 202 with the new run.

    No tool call reaches a server: each is answered from the original run's steps, or fails with
    "no recorded output". ``?agent=<id>`` chooses whose settings (model, prompt, rule set) to use;
    by default the run's own agent as it is now. No body. A run still queued or running is a 409.
    """
    run = get_or_404(Run, "run", pk=run_id)
    chosen = Agent.objects.filter(pk=agent).first() if agent is not None else None
    if agent is not None and chosen is None:
        raise AgentError(
            _("There is no agent with id %(value)s to replay the run with.") % {"value": agent}, field="agent"
        )
    return Status(202, _accepted(services.run_replay(actor=request.auth, run=run, agent=chosen)))


def _accepted(run: Run) -> dict[str, Any]:
    return {"id": run.pk, "status": run.status, "url": f"/api/runs/{run.pk}"}
