"""Granting power is itself four eyes while any agent is protected (issue 41, part 3).

Making someone an admin, giving the approver permission and reactivating an admin or an approver
are change requests on every route (the service, the users page, ``manage.py users``,
``manage.py ensure_admin``); creating an account as an admin is refused. Whoever asked, and the
account the grant empowers, cannot approve it; an independent approver can, and the grant is then
applied as the requester asked it (so the account is the requester's for the independence rule).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from accounts import services as accounts
from accounts.roles import approver_set, is_approver, user_roles
from agents import services
from agents.errors import ChangeRequested
from agents.models import ChangeRequest
from core.models import AuditEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(make_user):
    return make_user("admin")


@pytest.fixture
def approver(make_user):
    user = make_user("viewer")
    approver_set(user=user, approver=True)
    return user


@pytest.fixture
def protected(agent, admin):
    return services.agent_protect(actor=admin, agent=agent, protected=True, approvals_required=2)


def _fresh(user: Any) -> Any:
    return get_user_model().objects.get(pk=user.pk)  # no role cached


def _power(user: Any) -> tuple[Any, ...]:
    user = _fresh(user)
    return (sorted(user_roles(user)), is_approver(user), user.is_active)


GRANTS = {
    "admin role": lambda admin, user: accounts.user_set_role(actor=admin, user=user, role="admin"),
    "approver": lambda admin, user: accounts.user_set_approver(actor=admin, user=user, approver=True),
}


def test_without_a_protected_agent_a_grant_applies_at_once(agent, admin, make_user) -> None:
    user = make_user("viewer")
    accounts.user_set_role(actor=admin, user=user, role="admin")
    accounts.user_set_approver(actor=admin, user=user, approver=True)
    assert "admin" in user_roles(_fresh(user)) and not ChangeRequest.objects.exists()


@pytest.mark.parametrize("grant", sorted(GRANTS))
def test_a_grant_is_a_change_request_that_neither_requester_nor_grantee_approves(
    protected, admin, approver, make_user, grant
) -> None:
    user = make_user("viewer")
    before = _power(user)
    with pytest.raises(ChangeRequested) as asked:
        GRANTS[grant](admin, user)
    assert _power(user) == before  # nothing granted yet
    change = ChangeRequest.objects.get(pk=asked.value.change_request_id)
    assert (change.agent, change.payload["user"], change.approvals_needed) == (None, user.pk, 1)
    assert "change request #" in asked.value.message and user.username in asked.value.message
    # The grantee may be an approver already (its own approval would make it admin): refused too.
    approver_set(user=user, approver=True)
    for who, words in ((admin, "You asked"), (_fresh(user), "gives you power")):
        with pytest.raises(PermissionDenied, match=words):
            services.change_request_review(actor=who, change_request=change, decision="approve")
    approver_set(user=user, approver=False)
    change = services.change_request_review(actor=approver, change_request=change, decision="approve")
    assert change.state == "applied" and _power(user) != before
    # Applied as the requester asked it: the account is the admin's now, for the independence rule.
    event = AuditEvent.objects.filter(action__in=("user.set_role", "user.set_approver")).latest("id")
    assert (event.actor_id, event.object_id) == (admin.pk, str(user.pk))


def test_reactivating_an_approver_is_a_request_and_creating_an_admin_is_refused(
    protected, admin, approver, make_user
) -> None:
    accounts.user_set_active(actor=admin, user=approver, active=False)  # taking power: at once
    with pytest.raises(ChangeRequested):
        accounts.user_set_active(actor=admin, user=approver, active=True)
    assert not _fresh(approver).is_active
    plain = make_user("viewer")
    accounts.user_set_active(actor=admin, user=plain, active=False)
    accounts.user_set_active(actor=admin, user=plain, active=True)  # no power: at once
    with pytest.raises(accounts.UserError, match="change request") as refused:
        accounts.user_create(actor=admin, username="boss", role="admin")
    assert refused.value.field == "role" and not get_user_model().objects.filter(username="boss").exists()
    assert accounts.user_create(actor=admin, username="clerk", role="editor").username == "clerk"
    # Taking power away never waits: demoting, removing the permission.
    accounts.user_set_approver(actor=admin, user=approver, approver=False)
    assert not is_approver(_fresh(approver))


@pytest.mark.parametrize(
    "language, words", [("en", "granting power takes four eyes"), ("ko", "권한 부여에도 두 사람")]
)
def test_the_users_page_links_to_the_request_and_grants_nothing(
    protected, admin, make_user, language, words
) -> None:
    user = make_user("viewer")
    client = Client()
    client.force_login(admin)
    for path, data in (("user_set_role", {"role": "admin"}), ("user_set_approver", {"approver": "1"})):
        response = client.post(
            reverse(path, args=[user.pk]), data, HTTP_ACCEPT_LANGUAGE=language, follow=True
        )
        assert response.status_code == 200 and response.redirect_chain[0][0].startswith("/agents/changes/")
        assert words in response.content.decode(), (path, language)
    assert _power(user) == (["viewer"], False, True)
    assert ChangeRequest.objects.filter(agent=None, state="pending").count() == 2
    response = client.post(
        reverse("user_create"), {"username": "boss", "email": "", "role": "admin", "password": ""}
    )
    assert response.status_code == 400 and not get_user_model().objects.filter(username="boss").exists()


def test_the_commands_are_no_way_around_it(protected, admin, make_user, capsys) -> None:
    user = make_user("viewer")
    with pytest.raises(CommandError, match="change request #") as asked:
        call_command("users", "set-role", user.username, "admin")
    assert asked.value.returncode == 2 and _power(user) == (["viewer"], False, True)
    with pytest.raises(CommandError, match="change request"):
        call_command("users", "add", "boss", "--role", "admin")
    with pytest.raises(accounts.UserError, match="change request"):
        accounts.admin_ensure(username="root", password="a-long-password-1")  # no new admin account
    # ensure_admin gives a demoted "admin" account its role back only by a request (filed once).
    first = make_user("admin", username="admin")
    accounts.user_set_role(actor=admin, user=first, role="viewer")
    for _round in range(2):
        call_command("ensure_admin")
    assert "change request #" in capsys.readouterr().out
    assert "admin" not in user_roles(_fresh(first))
    pending = ChangeRequest.objects.filter(agent=None, state="pending")
    assert [c.payload["user"] for c in pending].count(first.pk) == 1


def test_a_grant_request_reads_on_every_page_and_the_api(protected, admin, approver, make_user) -> None:
    user = make_user("viewer")
    with pytest.raises(ChangeRequested) as asked:
        accounts.user_set_role(actor=admin, user=user, role="admin")
    change_id = asked.value.change_request_id
    client = Client()
    client.force_login(approver)
    inbox = client.get(reverse("agents:change_list"), {"inbox": "1"}).content.decode()
    assert f"#{change_id}" in inbox and user.username in inbox
    page = client.get(reverse("agents:change_detail", args=[change_id])).content.decode()
    assert user.username in page and 'id="change-approve"' in page and "0 of 1" in page
    body = client.get(f"/api/change-requests/{change_id}").json()
    assert (body["agent"], body["agent_name"], body["action"]) == (None, user.username, "user.set_role")
    assert client.get("/api/change-requests").status_code == 200
    grantee = Client()
    grantee.force_login(user)  # the account it empowers sees no request waiting for it
    approver_set(user=user, approver=True)
    assert "nav-inbox-count" not in grantee.get(reverse("agents:list")).content.decode()
