"""Four eyes even with one admin (issue 41): no sequence of up to five actions by one person, with
every account and token they can make, changes a protected agent alone.

The actions: creating an admin or a viewer account, making any account an approver or an admin (both
grants are change requests while the agent is protected), editing the agent, unprotecting it, and
approving any pending request (the agent's or a grant) as any of the person's accounts, with the
session, an uncapped token or a token capped at viewer.

The search is exhaustive over the actions below, depth first with a savepoint per step; states
already explored with as many steps left are not explored again (what happens next depends only on
the state, read from the database).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db import transaction

from accounts import services as accounts
from accounts.roles import is_approver, user_roles
from agents import services
from agents.errors import AgentError
from agents.models import Agent, ChangeRequest
from core.errors import DomainError

pytestmark = pytest.mark.django_db

DEPTH = 5
MADE = 2  # accounts the admin may create in a sequence
# The credentials an approval is given with: the session, an uncapped token (a token the account
# made for itself: tokens are never made for someone else) and a token capped at viewer.
CREDENTIALS = ("session", "token", "token:viewer")


def _users() -> list[Any]:
    return list(get_user_model().objects.order_by("pk"))  # fresh: no role cached


def _as(user: Any, credential: str = "session") -> Any:
    user._llamon_credential = credential
    if credential == "token:viewer":  # what the API's token check does with a viewer cap
        user._llamon_roles = user_roles(user) & {"viewer"}
        user._llamon_capped = True
    return user


def _actions(agent_id: int, person: int) -> list[tuple[Any, ...]]:
    # Only the person acts: their own account and those they made (others exist, and never act).
    users = [u for u in _users() if u.pk == person or u.username.startswith("made-")]
    everyone = _users()
    admins = [u for u in users if "admin" in user_roles(u)]
    editors = [u for u in users if "editor" in user_roles(u)]
    found: list[tuple[Any, ...]] = []
    if len(users) <= MADE:
        found += [("make", a.pk, role) for a in admins for role in ("admin", "editor", "viewer")]
    # Grants of power: each a change request while the agent is protected.
    found += [("approver", a.pk, u.pk) for a in admins for u in everyone if not is_approver(u)]
    found += [("admin", a.pk, u.pk) for a in admins for u in everyone if "admin" not in user_roles(u)]
    made = [u for u in users if u.pk != person]
    found += [("active", a.pk, u.pk, not u.is_active) for a in admins for u in made]
    found += [("edit", e.pk) for e in editors]
    found += [("unprotect", a.pk) for a in admins]
    pending = ChangeRequest.objects.filter(state="pending").values_list("pk", flat=True)
    found += [
        ("approve", u.pk, change, credential)
        for change in pending
        for u in users
        if is_approver(u)
        for credential in CREDENTIALS
    ]
    return found


def _act(agent_id: int, action: tuple[Any, ...]) -> None:
    User = get_user_model()
    kind, actor = action[0], User.objects.get(pk=action[1])
    agent = Agent.objects.get(pk=agent_id)
    try:
        if kind == "make":
            accounts.user_create(
                actor=actor, username=f"made-{User.objects.count()}", role=action[2], password=None
            )
        elif kind == "approver":
            accounts.user_set_approver(actor=actor, user=User.objects.get(pk=action[2]), approver=True)
        elif kind == "admin":
            accounts.user_set_role(actor=actor, user=User.objects.get(pk=action[2]), role="admin")
        elif kind == "active":  # deactivating is at once; reactivating an approver or admin is a grant
            accounts.user_set_active(actor=actor, user=User.objects.get(pk=action[2]), active=action[3])
        elif kind == "edit":
            values = {**services.agent_values(agent), "system_prompt": f"changed by {actor.pk}"}
            services.agent_save_values(actor=actor, agent=agent, values=values)
        elif kind == "unprotect":
            services.agent_protect(actor=actor, agent=agent, protected=False)
        elif kind == "approve":
            services.change_request_review(
                actor=_as(actor, action[3]),
                change_request=ChangeRequest.objects.get(pk=action[2]),
                decision="approve",
            )
    except (AgentError, DomainError, PermissionDenied) as exc:  # a refusal: a request, a 403, a 409
        assert getattr(exc, "message", None) or str(exc), (action, exc)


def _state(agent_id: int) -> tuple[Any, ...]:
    agent = Agent.objects.get(pk=agent_id)
    users = _users()
    return (
        agent.protected,
        agent.approvals_required,
        agent.system_prompt,
        tuple(
            (u.username, u.is_active, accounts.role_of(u), accounts.is_approver_flag(u)) for u in users
        ).__repr__(),
        tuple(
            (c.requested_by_id, c.round, tuple(c.reviews.values_list("reviewer_id", "credential", "round")))
            for c in ChangeRequest.objects.order_by("pk")
        ).__repr__(),
    )


@pytest.mark.slow  # ~40-60 s on SQLite (~1,600 actions, each with a savepoint): scheduled first
def test_one_admin_alone_never_changes_a_protected_agent(agent, make_user) -> None:
    admin = make_user("admin")
    services.agent_protect(actor=admin, agent=agent, protected=True, approvals_required=1)
    start = Agent.objects.get(pk=agent.pk)
    seen: dict[tuple[Any, ...], int] = {}
    explored = 0

    def search(path: list[tuple[Any, ...]]) -> None:
        nonlocal explored
        now = Agent.objects.get(pk=agent.pk)
        assert (now.protected, now.approvals_required, now.system_prompt) == (
            start.protected,
            start.approvals_required,
            start.system_prompt,
        ), f"one admin changed the protected agent alone: {path}"
        left = DEPTH - len(path)
        if left == 0:
            return
        key = _state(agent.pk)
        if seen.get(key, -1) >= left:
            return
        seen[key] = left
        for action in _actions(agent.pk, admin.pk):
            explored += 1
            point = transaction.savepoint()
            _act(agent.pk, action)
            search([*path, action])
            transaction.savepoint_rollback(point)

    search([])
    print(f"one admin: {explored} actions explored, {len(seen)} distinct states")
    assert explored > 1000, explored  # the search really branched
