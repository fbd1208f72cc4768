"""Users and roles: the admin page, the services behind it, invitations and ``manage.py users``."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from accounts import services as user_services
from accounts.models import UserInvite
from accounts.roles import has_role
from accounts.services import UserError, system_user_ensure
from accounts.token_services import token_authenticate, token_create
from core.models import AuditEvent

pytestmark = pytest.mark.django_db
User = get_user_model()


def _audit(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("id"))


# --- services ---------------------------------------------------------------------------------


def test_add_set_role_deactivate_are_audited_with_who_did_it(make_user) -> None:
    admin = make_user("admin")
    user = user_services.user_create(actor=admin, username="mina", email="mina@example.com", role="viewer")
    assert has_role(user, "viewer") and not has_role(user, "editor")
    assert not user.has_usable_password()  # added without a password: only an invitation lets them in
    user_services.user_set_role(actor=admin, user=user, role="editor")
    user_services.user_set_active(actor=admin, user=user, active=False)
    user_services.user_set_active(actor=admin, user=user, active=True)
    for action in ("user.create", "user.set_role", "user.deactivate", "user.activate"):
        (event,) = _audit(action)
        assert event.actor_name == admin.username
        assert event.object_repr == "mina"
    (role_event,) = _audit("user.set_role")
    assert role_event.before["role"] == "viewer" and role_event.after["role"] == "editor"


def test_a_deactivated_users_tokens_stop_working(make_user) -> None:
    admin = make_user("admin")
    user = make_user("editor")
    created = token_create(actor=user, name="ci")
    assert token_authenticate(created.secret) is not None
    user_services.user_set_active(actor=admin, user=user, active=False)
    assert token_authenticate(created.secret) is None


@pytest.mark.parametrize("no_login", ["system", "invited"])
def test_an_admin_who_cannot_log_in_does_not_count_as_another_admin(make_user, no_login: str) -> None:
    """llamon-system (load_demo's account, no password) and an invited admin who has not set one
    cannot manage users: with them as the only other admins, the last human admin stays."""
    admin = make_user("admin")
    User.objects.filter(is_superuser=True).update(is_active=False)
    if no_login == "system":
        system_user_ensure()
    else:
        invited = make_user("admin", "invited-admin")
        invited.set_unusable_password()
        invited.save()
    with pytest.raises(UserError, match="last active admin"):
        user_services.user_set_role(actor=admin, user=admin, role="editor")
    assert has_role(User.objects.get(pk=admin.pk), "admin")


@pytest.mark.parametrize("change", ["demote", "deactivate"])
def test_the_last_active_admin_cannot_remove_themself(make_user, change: str) -> None:
    admin = make_user("admin")
    User.objects.filter(is_superuser=True).update(is_active=False)  # nobody else is an admin
    with pytest.raises(UserError, match="last active admin"):
        if change == "demote":
            user_services.user_set_role(actor=admin, user=admin, role="editor")
        else:
            user_services.user_set_active(actor=admin, user=admin, active=False)
    admin.refresh_from_db()
    assert admin.is_active and has_role(User.objects.get(pk=admin.pk), "admin")
    assert not _audit("user.set_role") and not _audit("user.deactivate")


def test_an_admin_may_step_down_when_another_admin_remains(make_user) -> None:
    admin = make_user("admin")
    make_user("admin")
    user_services.user_set_role(actor=admin, user=admin, role="viewer")
    assert not has_role(User.objects.get(pk=admin.pk), "admin")


def test_a_demoted_superuser_loses_the_superuser_flag_too(make_user) -> None:
    admin = make_user("admin")
    boss = User.objects.create_superuser(username="boss", password="pw-long-enough-42")
    user_services.user_set_role(actor=admin, user=boss, role="viewer")
    boss = User.objects.get(pk=boss.pk)
    assert not boss.is_superuser and not has_role(boss, "editor")


@pytest.mark.parametrize(
    ("username", "email", "role", "field"),
    [
        ("", "", "viewer", "username"),
        ("x" * 151, "", "viewer", "username"),
        ("a" * 100_000, "", "viewer", "username"),
        ("nul\x00name", "", "viewer", "username"),
        ("with space", "", "viewer", "username"),
        ("<script>", "", "viewer", "username"),
        ("ok", "not-an-email", "viewer", "email"),
        ("ok", "a@" + "b" * 260 + ".com", "viewer", "email"),
        ("ok", "nul\x00@example.com", "viewer", "email"),
        ("ok", "", "root", "role"),
        ("ok", "", "", "role"),
        ("ok", "", None, "role"),
    ],
)
def test_hostile_user_values_are_refused_with_the_field(make_user, username, email, role, field) -> None:
    admin = make_user("admin")
    before = User.objects.count()
    with pytest.raises(UserError) as caught:
        user_services.user_create(actor=admin, username=username, email=email, role=role)
    assert caught.value.field == field
    assert User.objects.count() == before


def test_a_duplicate_username_is_refused_whatever_its_case(make_user) -> None:
    admin = make_user("admin")
    user_services.user_create(actor=admin, username="Mina", role="viewer")
    with pytest.raises(UserError, match="exists already"):
        user_services.user_create(actor=admin, username="mina", role="editor")
    assert User.objects.filter(username__iexact="mina").count() == 1


def test_a_weak_password_is_refused(make_user) -> None:
    admin = make_user("admin")
    with pytest.raises(UserError) as caught:
        user_services.user_create(actor=admin, username="weak", role="viewer", password="password")
    assert caught.value.field == "password"
    assert not User.objects.filter(username="weak").exists()


@pytest.mark.parametrize("role", ["viewer", "editor"])
def test_only_admins_may_manage_users(make_user, role: str) -> None:
    from django.core.exceptions import PermissionDenied

    actor = make_user(role)
    with pytest.raises(PermissionDenied):
        user_services.user_create(actor=actor, username="sneaky", role="admin")
    with pytest.raises(PermissionDenied):
        user_services.user_set_role(actor=actor, user=actor, role="admin")


# --- invitations --------------------------------------------------------------------------------


def test_an_invitation_sets_the_password_once(client, make_user) -> None:
    admin = make_user("admin")
    user = user_services.user_create(actor=admin, username="newbie", role="editor")
    created = user_services.invite_create(actor=admin, user=user)
    url = reverse("invite_accept", args=[created.secret])
    assert client.get(url).status_code == 200
    response = client.post(url, {"password1": "correct horse 42", "password2": "correct horse 42"})
    assert response.status_code == 302 and response["Location"] == reverse("login")
    assert User.objects.get(username="newbie").check_password("correct horse 42")
    assert client.get(url).status_code == 404  # used up
    assert UserInvite.objects.get().token_hash != created.secret  # only the hash is stored
    assert _audit("user.invite_accept")[0].actor_name == "newbie"


def test_an_expired_or_replaced_invitation_is_refused(client, make_user) -> None:
    admin = make_user("admin")
    user = user_services.user_create(actor=admin, username="late", role="viewer")
    first = user_services.invite_create(actor=admin, user=user)
    second = user_services.invite_create(actor=admin, user=user)
    assert client.get(reverse("invite_accept", args=[first.secret])).status_code == 404
    UserInvite.objects.filter(pk=second.invite.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = client.post(
        reverse("invite_accept", args=[second.secret]),
        {"password1": "x-long-pass-9", "password2": "x-long-pass-9"},
    )
    assert response.status_code == 404
    assert b"cannot be used" in response.content
    assert not User.objects.get(pk=user.pk).has_usable_password()


@pytest.mark.parametrize("secret", ["short", "a" * 5000, "%00" * 43, "../../etc/passwd"])
def test_a_hostile_invitation_link_is_a_404(client, secret: str) -> None:
    assert client.get(f"/accounts/invite/{secret}/").status_code in (400, 404)


def test_an_invitation_with_mismatched_passwords_keeps_the_link(client, make_user) -> None:
    admin = make_user("admin")
    user = user_services.user_create(actor=admin, username="typo", role="viewer")
    created = user_services.invite_create(actor=admin, user=user)
    url = reverse("invite_accept", args=[created.secret])
    response = client.post(url, {"password1": "correct horse 42", "password2": "correct horse 43"})
    assert response.status_code == 400 and b"differ" in response.content
    assert client.get(url).status_code == 200


# --- pages ------------------------------------------------------------------------------------


def test_the_users_page_lists_role_state_and_tokens(admin_client, make_user) -> None:
    editor = make_user("editor", username="ed")
    token_create(actor=editor, name="ci")
    page = admin_client.get(reverse("users")).content.decode()
    assert 'data-username="ed"' in page
    row = page.split('data-username="ed"')[1].split("</tr>")[0]
    assert "editor" in row and "active" in row and "<td>1</td>" in row


def test_adding_a_user_without_password_shows_an_invitation_link(admin_client) -> None:
    response = admin_client.post(reverse("user_create"), {"username": "invited", "role": "editor"})
    assert response.status_code == 201
    assert b"/accounts/invite/" in response.content
    assert has_role(User.objects.get(username="invited"), "editor")


@pytest.mark.parametrize(
    "data",
    [
        {"username": "x" * 10_000, "role": "viewer"},
        {"username": "ok", "role": "superadmin"},
        {"username": "ok", "role": "viewer", "email": "e" * 10_000},
        {"username": "ok", "role": "viewer", "password": "p" * 100_000},
    ],
)
def test_hostile_add_forms_are_a_400_and_add_nobody(admin_client, data) -> None:
    before = User.objects.count()
    response = admin_client.post(reverse("user_create"), data)
    assert response.status_code == 400
    assert User.objects.count() == before


def test_the_last_admin_demoting_themself_gets_a_clear_400(client, make_user) -> None:
    admin = make_user("admin")
    User.objects.filter(is_superuser=True).update(is_active=False)
    client.force_login(admin)
    response = client.post(reverse("user_set_role", args=[admin.pk]), {"role": "viewer"})
    assert response.status_code == 400
    assert "last active admin" in response.content.decode()
    response = client.post(reverse("user_set_active", args=[admin.pk]), {"active": "0"})
    assert response.status_code == 400
    assert User.objects.get(pk=admin.pk).is_active


def test_an_unknown_role_on_the_page_is_a_400(admin_client, make_user) -> None:
    user = make_user("viewer")
    response = admin_client.post(reverse("user_set_role", args=[user.pk]), {"role": "root"})
    assert response.status_code == 400
    assert not has_role(User.objects.get(pk=user.pk), "editor")


def test_an_admin_revokes_someones_token_from_their_page(admin_client, make_user) -> None:
    user = make_user("editor")
    created = token_create(actor=user, name="ci")
    response = admin_client.post(reverse("user_token_revoke", args=[user.pk, created.token.pk]))
    assert response.status_code == 302
    assert token_authenticate(created.secret) is None


def test_a_token_of_another_user_cannot_be_revoked_through_this_users_url(admin_client, make_user) -> None:
    one, other = make_user("editor"), make_user("editor")
    created = token_create(actor=other, name="theirs")
    response = admin_client.post(reverse("user_token_revoke", args=[one.pk, created.token.pk]))
    assert response.status_code == 404
    assert token_authenticate(created.secret) is not None


def test_the_language_choice_is_kept_and_an_unknown_one_refused(viewer_client) -> None:
    response = viewer_client.post(reverse("language_set"), {"language": "ko", "next": "/rules/"})
    assert response.status_code == 302 and response["Location"] == "/rules/"
    assert 'lang="ko"' in viewer_client.get(reverse("home")).content.decode()
    response = viewer_client.post(
        reverse("language_set"), {"language": "xx" * 1000, "next": "https://evil.example/"}
    )
    assert response["Location"] == reverse("home")  # an off-site next is not followed
    for hostile in ("NaN", "home", "//evil.example/", "javascript:alert(1)", "\\evil.example"):
        response = viewer_client.post(reverse("language_set"), {"language": "ko", "next": hostile})
        assert response.status_code == 302 and response["Location"] == reverse("home"), hostile
    assert 'lang="ko"' in viewer_client.get(reverse("home")).content.decode()


# --- manage.py users ----------------------------------------------------------------------------


def _cmd(*args: str) -> str:
    out = StringIO()
    call_command("users", *args, stdout=out)
    return out.getvalue()


def test_the_command_adds_sets_roles_deactivates_and_lists(make_user) -> None:
    admin = make_user("admin", username="boss")
    out = _cmd(
        "--actor", "boss", "add", "cli-user", "--role", "editor", "--base-url", "https://llamon.example"
    )
    assert "https://llamon.example/accounts/invite/" in out
    _cmd("set-role", "cli-user", "admin")
    _cmd("deactivate", "cli-user")
    rows = {row["username"]: row for row in json.loads(_cmd("list", "--json"))}
    assert rows["cli-user"]["role"] == "admin" and rows["cli-user"]["is_active"] is False
    _cmd("activate", "cli-user")
    assert {r["username"]: r for r in json.loads(_cmd("list", "--json"))}["cli-user"]["is_active"] is True
    assert _audit("user.create")[0].actor_name == admin.username
    assert _audit("user.set_role")[0].actor_name == "system"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("add", "dup"), "exists already"),
        (("add", "new", "--role", "root"), "role must be one of"),
        (("set-role", "dup", "root"), "role must be viewer, editor or admin"),
        (("set-role", "ghost", "viewer"), "No user named"),
        (("add", "bad name"), "letters, digits"),
        (("--actor", "dup", "add", "x"), "not an active admin"),
    ],
)
def test_the_command_refuses_with_one_line(make_user, args, message) -> None:
    make_user("viewer", username="dup")
    with pytest.raises(CommandError, match=message):
        _cmd(*args)


def test_the_command_will_not_deactivate_the_last_admin(make_user) -> None:
    make_user("admin", username="only")
    User.objects.filter(is_superuser=True).update(is_active=False)
    with pytest.raises(CommandError, match="last active admin"):
        _cmd("deactivate", "only")
    assert User.objects.get(username="only").is_active
