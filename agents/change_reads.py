"""Reads of change requests that both the services and the selectors need."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.utils.translation import gettext as _

from accounts.roles import credential_may_approve, is_approver
from agents.models import CONNECTION_FIELDS, ChangeRequest, ChangeReview, ModelConnection
from core.audit import snapshot
from core.models import AuditEvent
from rules.models import RuleSet
from servers.models import McpServer
from servers.services import MCP_SERVER_FIELDS


def grantee(request: ChangeRequest) -> int | None:
    """The account a grant empowers (None: not a grant): it may not approve its own grant."""
    if request.agent_id is not None:
        return None
    user = request.payload.get("user")
    return user if isinstance(user, int) else None


def _used_now(request: ChangeRequest) -> dict[str, Any] | None:
    """For a change of an MCP server or a model connection: its settings now ({} when it is gone)."""
    if request.action.startswith("mcp_server."):
        server = McpServer.objects.filter(pk=request.payload.get("server")).first()
        return snapshot(server, MCP_SERVER_FIELDS) if server else {}
    if request.action == "connection.update":
        connection = ModelConnection.objects.filter(pk=request.payload.get("connection")).first()
        return snapshot(connection, CONNECTION_FIELDS) if connection else {}
    return None


def change_request_stale(request: ChangeRequest) -> str:
    """Why the change cannot be applied as it was asked ('' when it still can). A grant is applied
    by the accounts service itself, which checks the account as it is then."""
    agent = request.agent
    if agent is None:
        return ""
    if agent.revision != request.base_revision:
        return _(
            "Agent %(name)r changed since this was asked (revision %(now)s, asked at %(then)s): the change might no longer mean what was reviewed. The requester asks again (that resets the approvals), or withdraws it."
        ) % {"name": agent.name, "now": agent.revision, "then": request.base_revision}
    if (now := _used_now(request)) is not None and now != request.payload.get("before"):
        return _(
            "What this changes (%(what)s) changed since it was asked: the change might no longer mean what was reviewed. The requester asks again, or withdraws it."
        ) % {"what": request.payload.get("mcp_id") or request.payload.get("name")}
    if request.rule_set_revision is not None:
        rule_set = RuleSet.objects.filter(pk=request.payload.get("rule_set")).first()
        if rule_set is None or rule_set.revision != request.rule_set_revision:
            return _(
                "The rule set's draft changed since this publish was asked: what would be published is not what was reviewed. The requester publishes again (that resets the approvals), or withdraws it."
            )
    return ""


# What puts an account under another's hand: created, given a role or the approver permission,
# re-activated or sent a password invite by it. Counted from the first protection of an agent on
# (before, no change needed a second person).
ACCOUNT_GRANTS = ("user.create", "user.set_role", "user.set_approver", "user.activate", "user.invite")


class Grants:
    """Who made or empowered whom since change control began, read from the audit chain in two
    queries (the first protection, then every grant after it), so that any number of independence
    checks costs no further query: the inbox of an approver with many pending requests included."""

    def __init__(self) -> None:
        since = (
            AuditEvent.objects.filter(action="agent.protect")
            .order_by("id")
            .values_list("id", flat=True)
            .first()
        )
        self.active = since is not None
        self.made_by: dict[int, set[int]] = {}
        if since is None:
            return
        rows = AuditEvent.objects.filter(
            id__gt=since,
            action__in=ACCOUNT_GRANTS,
            object_type=get_user_model()._meta.label_lower,
            actor_id__isnull=False,
        ).values_list("object_id", "actor_id")
        for object_id, actor_id in rows:
            if str(object_id).isdigit():
                self.made_by.setdefault(int(object_id), set()).add(actor_id)

    def controllers(self, user_id: int | None) -> set[int]:
        """The user and every account that made or empowered it since change control began,
        transitively: the people who may act as it."""
        if user_id is None:
            return set()
        found, frontier = {user_id}, [user_id]
        while frontier:
            for maker in self.made_by.get(frontier.pop(), ()):
                if maker not in found:
                    found.add(maker)
                    frontier.append(maker)
        return found

    def independent(self, requester_id: int | None, reviewer_id: int) -> bool:
        """Whether no one could act as both: neither made or empowered the other, nor one account both."""
        return not self.controllers(requester_id) & self.controllers(reviewer_id)


def controllers(user_id: int | None) -> set[int]:
    """The user and every account that made or empowered it since change control began (:class:`Grants`)."""
    return Grants().controllers(user_id)


def independent(requester_id: int | None, reviewer_id: int) -> bool:
    """Whether no one could act as both: neither made or empowered the other, nor one account both."""
    return Grants().independent(requester_id, reviewer_id)


def review_problems(request: ChangeRequest) -> dict[int, str]:
    """Why an approval of the current round no longer counts, per review id (none: it counts).

    Read when the request is applied and on its page: an approval counts only from a person still
    active, still an approver, independent of the requester (:func:`independent`), who approved with a credential allowed to approve.
    """
    reviews = [
        r
        for r in request.reviews.all()
        if r.round == request.round and r.decision == ChangeReview.Decision.APPROVE
    ]
    if not reviews:
        return {}
    users = get_user_model()._default_manager.in_bulk([r.reviewer_id for r in reviews if r.reviewer_id])
    grants = Grants()
    theirs = grants.controllers(request.requested_by_id)
    problems = {}
    for review in reviews:
        user = users.get(review.reviewer_id) if review.reviewer_id else None
        if user is None:
            problems[review.pk] = _("the account was deleted")
        elif not user.is_active:
            problems[review.pk] = _("the account is deactivated")
        elif not is_approver(user):
            problems[review.pk] = _("no longer an approver")
        elif user.pk == request.requested_by_id:
            problems[review.pk] = _("the requester")
        elif user.pk == grantee(request):
            problems[review.pk] = _("the account this grant empowers")
        elif theirs & grants.controllers(user.pk):
            problems[review.pk] = _(
                "not independent of the requester (one made or empowered the other, or one account both)"
            )
        elif not credential_may_approve(review.credential):
            problems[review.pk] = _("approved with a token capped at a role")
    return problems
