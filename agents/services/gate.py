"""The gate of change control: every service that changes what a protected agent serves calls it.

On a protected agent, the services that change what it serves (publishing a version it would
serve, starting, changing, promoting or ending a rollout, changing its rule-set mode, pinned version
or model) call :func:`change_gate` after validating the change and before writing it. The gate
records a change request (or edits the requester's pending one of the same action, which resets
its approvals) and the service raises :class:`agents.errors.ChangeRequested` once that is committed:
the check is inside the services, so the pages, the API and the MCP endpoint all pass through it.
Review and application: agents.services.changes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import transaction
from django.urls import reverse
from django.utils import translation
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from accounts.roles import is_approver
from accounts.services import UserError, language_of
from agents.change_reads import Grants, grantee
from agents.errors import AgentError, ChangeRequested
from agents.models import Agent, ChangeRequest
from core.audit import audit_record
from core.gates import gated_atomic as gated_atomic  # the agents services' name for it
from rules.selectors import version_diff

logger = logging.getLogger(__name__)

MAX_REASON_CHARS = 2000

# Set while an approved change is applied (and by the rollout guard, which acts for nobody): the
# services then act instead of asking again.
_ungated: ContextVar[bool] = ContextVar("llamon_change_ungated", default=False)


@contextmanager
def ungated() -> Iterator[None]:
    """Run the protected services without the gate (an approved change, the guard's roll back)."""
    token = _ungated.set(True)
    try:
        yield
    finally:
        _ungated.reset(token)


def _user(actor: Any) -> Any:
    return actor if getattr(actor, "is_authenticated", False) else None


def bounded(text: Any, *, most: int, field: str) -> str:
    if text is None:
        return ""
    if not isinstance(text, str):
        raise AgentError(_("Write the text as text."), field=field)
    text = text.strip()
    if len(text) > most:
        raise AgentError(
            _("At most %(most)s characters, please (this has %(count)s).")
            % {"most": f"{most:,}", "count": f"{len(text):,}"},
            field=field,
        )
    if "\x00" in text:
        raise AgentError(_("The text holds a NUL character."), field=field)
    return text


def field_diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The fields whose values differ, as rows {field, before, after}."""
    return [
        {"field": k, "before": before.get(k), "after": after.get(k)}
        for k in dict.fromkeys([*before, *after])
        if before.get(k) != after.get(k)
    ]


def change_gate(
    *,
    actor: Any,
    agent: Agent | None,
    action: str,
    payload: dict[str, Any],
    diff: dict[str, Any],
    reason: str = "",
    rule_set_revision: int | None = None,
) -> ChangeRequested | None:
    """None: go on and apply the change. Otherwise the change request was recorded (in the caller's
    transaction) and the caller raises the answer once that transaction is committed.

    ``agent`` None: a grant of power (:func:`grant_gate`), whose payload names the user."""
    if _ungated.get() or (agent is not None and not agent.protected):
        return None
    reason = bounded(reason, most=MAX_REASON_CHARS, field="change_reason")
    base = Agent.objects.values_list("revision", flat=True).get(pk=agent.pk) if agent is not None else 0
    user = _user(actor)
    request = None
    if user is not None or agent is None:  # the system's grants too: ensure_admin at every start
        mine = ChangeRequest.objects.select_for_update().filter(
            agent=agent, action=action, state=ChangeRequest.State.PENDING, requested_by=user
        )
        # A grant's user is in its payload (stored as json, not jsonb, on PostgreSQL: no lookups in it).
        request = next(
            (r for r in mine if agent is not None or r.payload.get("user") == payload["user"]), None
        )
    if request is not None:  # the requester edits their pending change: earlier approvals no longer count
        before = {"round": request.round, "payload": request.payload, "reason": request.reason}
        request.payload, request.diff, request.reason = payload, diff, reason
        request.base_revision, request.rule_set_revision = base, rule_set_revision
        request.round += 1
        request.save()
        audit_record(
            actor=actor,
            action="change_request.edit",
            obj=request,
            before=before,
            after={"round": request.round, "payload": payload, "reason": reason},
        )
    else:
        request = ChangeRequest.objects.create(
            agent=agent,
            action=action,
            payload=payload,
            diff=diff,
            reason=reason,
            requested_by=user,
            requested_by_name=user.get_username() if user else "system",
            base_revision=base,
            rule_set_revision=rule_set_revision,
        )
        audit_record(
            actor=actor,
            action="change_request.create",
            obj=request,
            after={"agent": request.subject, "action": action, "payload": payload, "reason": reason},
        )
    if settings.LLAMON_APPROVAL_MAIL:
        transaction.on_commit(lambda: change_request_mail(request.pk))
    url = reverse("agents:change_detail", args=[request.pk])
    if agent is None:
        message = _(
            "Agents are protected, so granting power takes four eyes: giving %(name)s %(what)s is change request #%(id)s and waits for an approval by someone else (not %(name)s). Nothing changed yet."
        ) % {"name": request.subject, "what": grant_words(payload), "id": request.pk}
        return ChangeRequested(message, change_request_id=request.pk, url=url)
    needed = agent.approvals_required
    message = ngettext(
        "Agent %(name)r is protected: your change is change request #%(id)s and waits for %(n)s approval by someone else. Nothing changed yet.",
        "Agent %(name)r is protected: your change is change request #%(id)s and waits for %(n)s approvals by others. Nothing changed yet.",
        needed,
    ) % {"name": agent.name, "id": request.pk, "n": needed}
    return ChangeRequested(message, change_request_id=request.pk, url=url)


def grant_words(payload: Mapping[str, Any]) -> str:
    """What a grant gives, in words: the admin role, the approver permission, their account back."""
    if payload.get("role") == "admin":
        return _("the admin role")
    if payload.get("approver"):
        return _("the approver permission")
    return _("their account back (an admin or an approver)")


def grant_gate(
    *, actor: Any, user: Any, action: str, payload: dict[str, Any], diff: dict[str, Any]
) -> Exception | None:
    """accounts' grant gate (registered at app ready): while any agent is protected, making someone
    an admin or an approver, or reactivating one, is a change request that someone else approves
    (not the requester, not the account it empowers, independent of the requester); creating an
    account as an admin is refused (add it with another role, then ask for the admin role)."""
    if _ungated.get() or not Agent.objects.filter(protected=True).exists():
        return None
    if user is None:
        return UserError(
            _(
                "Agents are protected, so the admin role is given by a change request: add the account with another role, then make it an admin on its page (someone else approves)."
            ),
            field="role",
        )
    return change_gate(actor=actor, agent=None, action=action, payload=payload, diff=diff)


def change_request_mail(change_request_id: int) -> int:
    """E-mail each approver who may review the request (active, with an address, independent of the
    requester), in their language, through Django's mail settings; returns how many were sent. A mail
    server that fails is logged: the request stands, the inbox shows it."""
    request = ChangeRequest.objects.select_related("agent").get(pk=change_request_id)
    users = get_user_model()._default_manager.filter(is_active=True).exclude(email="").order_by("pk")
    grants = Grants()
    sent = 0
    for user in users:
        if user.pk == request.requested_by_id or not is_approver(user):
            continue
        if not grants.independent(request.requested_by_id, user.pk) or grantee(request) == user.pk:
            continue
        with translation.override(language_of(user) or settings.LANGUAGE_CODE):
            subject = _("Change request #%(id)s on %(agent)s waits for your review") % {
                "id": request.pk,
                "agent": request.subject,
            }
            body = _(
                "%(who)s asks for %(action)s on agent %(agent)s.\n\nWhy: %(reason)s\n\nReview it: %(url)s"
            ) % {
                "who": request.requested_by_name,
                "action": request.action,
                "agent": request.subject,
                "reason": request.reason or "-",
                "url": reverse("agents:change_detail", args=[request.pk]),
            }
        try:
            sent += send_mail(subject, body, None, [user.email])
        except OSError:
            logger.warning("change request %s: no mail to %s (the mail server failed)", request.pk, user.pk)
    return sent


def publish_gate(
    *, actor: Any, rule_set: Any, message: str, reason: str, content: list[Any], latest: Any
) -> ChangeRequested | None:
    """rules' publish gate (registered at app ready): a publish that a protected agent following
    "latest" would serve at once is a change request on that agent (the one needing most approvals)."""
    if _ungated.get():
        return None
    agent = (
        Agent.objects.select_for_update(of=("self",))
        .filter(rule_set=rule_set, rule_set_mode=Agent.RuleSetMode.LATEST, protected=True)
        .order_by("-approvals_required", "name")
        .first()
    )
    if agent is None:
        return None
    diff = {
        "versions": {
            "from": f"v{latest.number}" if latest else "",
            "to": "draft",
            "rows": version_diff(old=latest.content if latest else [], new=content),
        }
    }
    return change_gate(
        actor=actor,
        agent=agent,
        action="rule_set.publish",
        payload={"rule_set": rule_set.pk, "message": message},
        diff=diff,
        reason=reason,
        rule_set_revision=rule_set.revision,
    )


def _served_versions(agent: Agent) -> list[Any]:
    """The versions a protected agent may serve now: pinned or latest, its rollout's, its shadow's."""
    versions = [agent.pinned_version, agent.rollout_version, agent.shadow_version]
    if agent.rule_set_mode == Agent.RuleSetMode.LATEST and agent.rule_set is not None:
        versions.append(agent.rule_set.versions.order_by("-number").first())
    return [v for v in versions if v is not None]


def server_users(server: Any, mcp_id: str) -> list[Agent]:
    """The protected agents that use an MCP server (stored as ``mcp_id``): offered to their LLM (ReAct
    servers) or called by a rule of a version they serve; the one needing most approvals first."""
    agents = (
        Agent.objects.select_for_update(of=("self",))
        .filter(protected=True)
        .select_related("rule_set", "pinned_version", "rollout_version", "shadow_version")
        .order_by("-approvals_required", "name")
    )
    offered = set(server.react_agents.values_list("pk", flat=True)) if server.pk else set()
    return [
        agent
        for agent in agents
        if agent.pk in offered
        or any(r.get("mcp_id") == mcp_id for v in _served_versions(agent) for r in v.content)
    ]


def server_gate(
    *, actor: Any, server: Any, action: str, payload: dict[str, Any], diff: dict[str, Any]
) -> Exception | None:
    """servers' gate (core.gates, kind "mcp_server"; registered at app ready): changing or deleting
    an MCP server a protected agent uses changes what that agent does, so it is a change request on
    the agent (the one needing most approvals), like a change of the agent's own fields."""
    if _ungated.get():
        return None
    users = server_users(server, payload["mcp_id"])  # its id as stored: the change may rename it
    if not users:
        return None
    return change_gate(actor=actor, agent=users[0], action=action, payload=payload, diff=diff)
