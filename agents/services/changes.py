"""Change requests on protected agents: their review and their one application (the gate that
records them: agents.services.gate; docs/governance.md).

When enough approvers (other than the requester) approve, :func:`change_request_review` applies the
change by calling the same service again, once: the request's row is locked and moved out of
"pending" by a conditional UPDATE in the same transaction as the change itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts.roles import credential_may_approve, credential_of, has_role, is_approver
from accounts.services import user_set_active, user_set_approver, user_set_role
from agents.change_reads import change_request_stale, grantee, independent, review_problems
from agents.errors import AgentConflictError, AgentError, ChangeRequested
from agents.models import Agent, ChangeRequest, ChangeReview, ModelConnection
from agents.services.agents import agent_delete, agent_save_values
from agents.services.connections import connection_save
from agents.services.gate import bounded, change_gate, field_diff, gated_atomic, ungated
from agents.services.rollout import (
    rollout_promote,
    rollout_publish,
    rollout_rollback,
    rollout_set,
    shadow_set,
)
from core.audit import audit_record
from rules.models import RuleSet
from rules.services import rule_set_publish
from servers.models import McpServer
from servers.services import mcp_server_delete, mcp_server_update

MAX_COMMENT_CHARS = 2000
MAX_APPROVALS = 10


# --- Applying an approved change ---------------------------------------------------------------------


def _apply_agent_update(actor: Any, agent: Agent, payload: dict[str, Any]) -> None:
    agent_save_values(actor=actor, agent=agent, values=payload)


def _version(agent: Agent, number: Any) -> Any:
    version = agent.rule_set.versions.filter(number=number).first() if agent.rule_set else None
    if version is None:
        raise AgentError(_("The agent's rule set has no published version %(pinned)s.") % {"pinned": number})
    return version


def _apply_rollout_set(actor: Any, agent: Agent, payload: dict[str, Any]) -> None:
    rollout_set(
        actor=actor,
        agent=agent,
        version=_version(agent, payload["version"]),
        percent=payload["percent"],
        chatbot_ids=payload["chatbot_ids"],
        guard_error_percent=payload["guard_error_percent"],
        guard_min_runs=payload["guard_min_runs"],
    )


def _apply_rollout_promote(actor: Any, agent: Agent, payload: dict[str, Any]) -> None:
    rollout_promote(actor=actor, agent=agent)


def _apply_rollout_rollback(actor: Any, agent: Agent, payload: dict[str, Any]) -> None:
    rollout_rollback(actor=actor, agent=agent)


def _apply_rollout_publish(actor: Any, agent: Agent, payload: dict[str, Any]) -> None:
    rollout_publish(
        actor=actor,
        agent=agent,
        percent=payload["percent"],
        message=payload.get("message", ""),
        chatbot_ids=payload.get("chatbot_ids", []),
        guard_error_percent=payload["guard_error_percent"],
        guard_min_runs=payload["guard_min_runs"],
    )


def _apply_publish(actor: Any, agent: Agent, payload: dict[str, Any]) -> None:
    rule_set = RuleSet.objects.get(pk=payload["rule_set"])
    rule_set_publish(actor=actor, rule_set=rule_set, message=payload.get("message", ""))


def _apply_protect(actor: Any, agent: Agent, payload: dict[str, Any]) -> None:
    agent_protect(
        actor=actor,
        agent=agent,
        protected=payload["protected"],
        approvals_required=payload["approvals_required"],
    )


def _apply_delete(actor: Any, agent: Agent, payload: dict[str, Any]) -> None:
    agent_delete(actor=actor, agent=agent)


def _grantee(payload: dict[str, Any]) -> Any:
    user = get_user_model()._default_manager.filter(pk=payload["user"]).first()
    if user is None:
        raise AgentConflictError(_("The account this grant is for no longer exists."))
    return user


def _apply_set_role(actor: Any, agent: Any, payload: dict[str, Any]) -> None:
    user_set_role(actor=actor, user=_grantee(payload), role=payload["role"])


def _apply_set_approver(actor: Any, agent: Any, payload: dict[str, Any]) -> None:
    user_set_approver(actor=actor, user=_grantee(payload), approver=True)


def _apply_activate(actor: Any, agent: Any, payload: dict[str, Any]) -> None:
    user_set_active(actor=actor, user=_grantee(payload), active=True)


def _apply_server_update(actor: Any, agent: Agent, payload: dict[str, Any]) -> None:
    mcp_server_update(actor=actor, server=McpServer.objects.get(pk=payload["server"]), **payload["changes"])


def _apply_server_delete(actor: Any, agent: Agent, payload: dict[str, Any]) -> None:
    mcp_server_delete(actor=actor, server=McpServer.objects.get(pk=payload["server"]))


def _apply_connection_update(actor: Any, agent: Agent, payload: dict[str, Any]) -> None:
    connection = ModelConnection.objects.get(pk=payload["connection"])
    connection_save(actor=actor, connection=connection, values=payload["values"])


def _apply_shadow(actor: Any, agent: Agent, payload: dict[str, Any]) -> None:
    number = payload["version"]
    shadow_set(actor=actor, agent=agent, version=None if number is None else _version(agent, number))


APPLY: dict[str, Callable[[Any, Any, dict[str, Any]], None]] = {
    "agent.protect": _apply_protect,
    "agent.delete": _apply_delete,
    "shadow.set": _apply_shadow,
    "agent.update": _apply_agent_update,
    "rollout.set": _apply_rollout_set,
    "rollout.promote": _apply_rollout_promote,
    "rollout.rollback": _apply_rollout_rollback,
    "rule_set.publish": _apply_publish,
    "rollout.publish": _apply_rollout_publish,
    # What a protected agent uses: an MCP server, a model connection (servers, agents.services).
    "mcp_server.update": _apply_server_update,
    "mcp_server.delete": _apply_server_delete,
    "connection.update": _apply_connection_update,
    # Grants (agent None): the accounts service, as the requester asked it (accounts.services).
    "user.set_role": _apply_set_role,
    "user.set_approver": _apply_set_approver,
    "user.activate": _apply_activate,
}


def _apply(request: ChangeRequest) -> None:
    if request.agent_id is not None:
        request.agent = Agent.objects.select_for_update(of=("self",)).get(pk=request.agent_id)
    if stale := change_request_stale(request):
        raise AgentConflictError(stale)
    with ungated():  # the requester's change, as they asked it (audited under their name)
        APPLY[request.action](request.requested_by, request.agent, dict(request.payload))


# --- Review ----------------------------------------------------------------------------------------


def change_request_review(
    *, actor: Any, change_request: ChangeRequest, decision: str, comment: str = ""
) -> ChangeRequest:
    """Approve or reject a pending change request (an approver or admin other than the requester).

    The approval that makes the count applies the change in the same transaction; a rejection ends
    the request and changes nothing. Approving a stale change is refused and records nothing.
    """
    if decision not in (ChangeReview.Decision.APPROVE, ChangeReview.Decision.REJECT):
        raise AgentError(_("Approve or reject."), field="decision")
    comment = bounded(comment, most=MAX_COMMENT_CHARS, field="comment")
    with transaction.atomic():
        request = (
            ChangeRequest.objects.select_for_update(of=("self",))
            .select_related("agent")
            .get(pk=change_request.pk)
        )
        if request.state != ChangeRequest.State.PENDING:
            raise AgentConflictError(
                _("Change request #%(id)s is already %(state)s.")
                % {"id": request.pk, "state": request.get_state_display()}
            )
        if not is_approver(actor):
            raise PermissionDenied(
                _("Approving or rejecting changes needs the approver permission (or admin).")
            )
        if request.requested_by_id == actor.pk:
            raise PermissionDenied(_("You asked for this change: someone else must approve or reject it."))
        if grantee(request) == actor.pk:
            raise PermissionDenied(_("This change gives you power: someone else must approve or reject it."))
        credential = credential_of(actor)
        if not credential_may_approve(credential):
            raise PermissionDenied(
                _(
                    "A token capped at a role cannot approve or reject changes: use your own session or an uncapped token."
                )
            )
        if not independent(request.requested_by_id, actor.pk):
            raise PermissionDenied(
                _(
                    "You are not independent of the requester: one of you made or empowered the other, or one account made or empowered you both. Someone independent must review it."
                )
            )
        if request.reviews.filter(reviewer=actor, round=request.round).exists():
            raise AgentConflictError(_("You already reviewed this version of the change."))
        ChangeReview.objects.create(
            change_request=request,
            reviewer=actor,
            reviewer_name=actor.get_username(),
            decision=decision,
            comment=comment,
            round=request.round,
            credential=credential,
        )
        # Only approvals valid now count: the approver is still active, still an approver, independent
        # of the requester, and approved with a credential allowed to (agents.change_reads.review_problems).
        approvals = request.reviews.filter(
            round=request.round, decision=ChangeReview.Decision.APPROVE
        ).count() - len(review_problems(request))
        needed = request.approvals_needed
        audit_record(
            actor=actor,
            action=f"change_request.{decision}",
            obj=request,
            after={"round": request.round, "comment": comment, "approvals": approvals, "needed": needed},
        )
        final = decision == ChangeReview.Decision.REJECT or approvals >= needed
        state = (
            ChangeRequest.State.REJECTED
            if decision == ChangeReview.Decision.REJECT
            else ChangeRequest.State.APPLIED
        )
        # The one transition out of "pending": only the transaction whose UPDATE changes the row acts.
        moved = final and ChangeRequest.objects.filter(
            pk=request.pk, state=ChangeRequest.State.PENDING, round=request.round
        ).update(state=state, decided_at=timezone.now())
        if moved and state == ChangeRequest.State.APPLIED:
            _apply(request)
            audit_record(
                actor=actor,
                action="change_request.apply",
                obj=request,
                after={"agent": request.subject, "action": request.action, "payload": request.payload},
            )
        if ChangeRequest.objects.filter(pk=request.pk).exists():
            request.refresh_from_db()
        else:  # an approved deletion: the agent went, and its change requests with it (the audit keeps them)
            request.state = ChangeRequest.State.APPLIED
    return request


@transaction.atomic
def change_request_withdraw(*, actor: Any, change_request: ChangeRequest) -> ChangeRequest:
    """The requester (or an admin) withdraws a pending change request; audited."""
    request = ChangeRequest.objects.select_for_update(of=("self",)).get(pk=change_request.pk)
    if request.requested_by_id != getattr(actor, "pk", None) and not has_role(actor, "admin"):
        raise PermissionDenied(_("Only the requester or an admin withdraws a change request."))
    if request.state != ChangeRequest.State.PENDING:
        raise AgentConflictError(
            _("Change request #%(id)s is already %(state)s.")
            % {"id": request.pk, "state": request.get_state_display()}
        )
    request.state, request.decided_at = ChangeRequest.State.WITHDRAWN, timezone.now()
    request.save(update_fields=["state", "decided_at", "updated_at"])
    audit_record(actor=actor, action="change_request.withdraw", obj=request, after={"state": request.state})
    return request


# --- Protection --------------------------------------------------------------------------------------


@gated_atomic
def agent_protect(
    *, actor: Any, agent: Agent, protected: bool, approvals_required: int = 1, change_reason: str = ""
) -> Agent | ChangeRequested:
    """Mark an agent protected (or not) and how many approvals its changes need (admin); audited.

    Raising protection applies at once; lowering it on a protected agent (no longer protected, fewer
    approvals) is a change request like any other change of it: one admin cannot unprotect, edit and
    protect again alone.
    """
    if not has_role(actor, "admin"):
        raise PermissionDenied(_("Protecting an agent needs the admin role."))
    if (
        isinstance(approvals_required, bool)
        or not isinstance(approvals_required, int)
        or not 1 <= approvals_required <= MAX_APPROVALS
    ):
        raise AgentError(
            _("The number of approvals is from 1 to %(most)s.") % {"most": MAX_APPROVALS},
            field="approvals_required",
        )
    agent = Agent.objects.select_for_update(of=("self",)).get(pk=agent.pk)
    if protected and agent.rule_set_mode == Agent.RuleSetMode.DRAFT:
        raise AgentError(
            _(
                "Agent %(name)r serves its rule set's draft, which is edited without approval: pin a published version or follow the latest one first."
            )
            % {"name": agent.name},
            field="protected",
        )
    before = {"protected": agent.protected, "approvals_required": agent.approvals_required}
    after = {"protected": bool(protected), "approvals_required": approvals_required}
    if before == after:
        return agent
    lowering = agent.protected and (not protected or approvals_required < agent.approvals_required)
    if lowering and (
        pending := change_gate(
            actor=actor,
            agent=agent,
            action="agent.protect",
            payload=after,
            diff={"fields": field_diff(before, after)},
            reason=change_reason,
        )
    ):
        return pending
    agent.protected, agent.approvals_required = bool(protected), approvals_required
    agent.revision += 1
    agent.save(update_fields=["protected", "approvals_required", "revision", "updated_at"])
    audit_record(actor=actor, action="agent.protect", obj=agent, before=before, after=after)
    return agent
