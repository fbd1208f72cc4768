"""People and their roles: add or invite a user, set the role, deactivate, the language they chose.

Every write is audited with who did it (``actor``; None is the system, e.g. ``manage.py users``
run without ``--actor``). The one rule no write may break: at least one active admin remains,
so nobody can lock the site out of its own user administration.

An invitation is a one-time link to set a password: the secret (256 bits) is returned once and
only its SHA-256 is stored, like API tokens; it expires after ``LLAMON_INVITE_HOURS`` and a new
invitation for the same user replaces the old one. No email is sent: the admin passes the link on.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model, password_validation
from django.contrib.auth.hashers import UNUSABLE_PASSWORD_PREFIX
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.validators import EmailValidator
from django.db import transaction
from django.db.models import Count, Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts.models import ApiToken, UserInvite, UserProfile
from accounts.roles import APPROVER, ROLES, approver_set, has_role, role_set, user_roles
from core.audit import audit_record
from core.errors import DomainError
from core.gates import gate_check, gated_atomic

MAX_USERNAME_CHARS = 150  # django.contrib.auth's own limit
MAX_EMAIL_CHARS = 254  # RFC 5321's path limit, and Django's EmailField
MAX_PASSWORD_CHARS = 4096
INVITE_RE = re.compile(r"^[A-Za-z0-9_-]{43}$")


class UserError(DomainError):
    """A change to a user was refused; the message says why."""


# Grant gates (core.gates, kind "grant"): a grant of power (the admin role, the approver permission,
# reactivating an admin or an approver) asks them in its transaction before it is made; agents
# registers the one that, while any agent is protected, turns it into a change request another
# person approves (agents.services.gate.grant_gate).


def _grant_gate(
    *, actor: Any, user: Any, action: str, payload: dict[str, Any], before: Any
) -> Exception | None:
    fields = [
        {"field": k, "before": before, "after": v}
        for k, v in payload.items()
        if k not in ("user", "username")
    ]
    return gate_check(
        "grant", actor=actor, user=user, action=action, payload=payload, diff={"fields": fields}
    )


@dataclass(frozen=True)
class CreatedInvite:
    """A new invitation and its secret, which is never shown again."""

    invite: UserInvite
    secret: str


def _require_admin(actor: Any) -> None:
    """The CLI acts as the system (actor None); anyone else must hold the admin role."""
    if actor is not None and not has_role(actor, "admin"):
        raise PermissionDenied(_("Managing users needs the admin role."))


def _invite_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def role_of(user: Any) -> str:
    """The user's highest role as a word ('' for none), whatever their active flag says."""
    if user.is_superuser:
        return "admin"
    names = {g.name for g in user.groups.all()} & set(ROLES)
    return max(names, key=ROLES.index, default="")


def _snapshot(user: Any) -> dict[str, Any]:
    return {
        "username": user.get_username(),
        "email": user.email,
        "role": role_of(user),
        "is_active": user.is_active,
    }


def _active_admins() -> QuerySet:
    """Admins who can log in: active, with a usable password (not llamon-system, which load_demo
    acts as and which has none): the last-admin guard counts only people who can manage users."""
    User = get_user_model()
    return (
        User.objects.filter(is_active=True)
        .exclude(password__startswith=UNUSABLE_PASSWORD_PREFIX)
        .exclude(password="")
        .filter(Q(is_superuser=True) | Q(groups__name="admin"))
        .distinct()
    )


def _check_leaves_an_admin(user: Any, *, becomes_admin: bool, stays_active: bool) -> None:
    """Refuse a change that would leave no active admin (the target is the last one)."""
    if becomes_admin and stays_active:
        return
    if not (user.is_active and role_of(user) == "admin"):
        return
    # Lock the admins' rows so that two admins demoting each other at once cannot both succeed.
    # Locked through a subquery: PostgreSQL refuses FOR UPDATE on the DISTINCT that the groups join needs.
    admins = _active_admins().exclude(pk=user.pk).values("pk")
    others = list(
        get_user_model().objects.select_for_update().filter(pk__in=admins).values_list("pk", flat=True)
    )
    if not others:
        raise UserError(
            _(
                "%(name)s is the last active admin; make another user an admin first, "
                "or nobody could manage users any more."
            )
            % {"name": user.get_username()}
        )


def clean_username(username: Any) -> str:
    """A username as Django's own validator accepts it, bounded, with a message a person can act on."""
    if not isinstance(username, str):
        raise UserError(_("Give a username."), field="username")
    username = username.strip()
    if not username:
        raise UserError(_("Give a username."), field="username")
    if len(username) > MAX_USERNAME_CHARS:
        raise UserError(
            _("The username is longer than %(max)d characters.") % {"max": MAX_USERNAME_CHARS},
            field="username",
        )
    try:
        UnicodeUsernameValidator()(username)
    except ValidationError:
        raise UserError(
            _("A username may hold only letters, digits and @ . + - _ (no spaces)."), field="username"
        ) from None
    return username


def clean_email(email: Any) -> str:
    """An email address or '' (optional), bounded and checked for shape."""
    email = (email or "").strip() if isinstance(email, str) else ""
    if not email:
        return ""
    if len(email) > MAX_EMAIL_CHARS:
        raise UserError(
            _("The email address is longer than %(max)d characters.") % {"max": MAX_EMAIL_CHARS},
            field="email",
        )
    try:
        EmailValidator()(email)
    except ValidationError:
        raise UserError(_("Enter a valid email address, like name@example.com."), field="email") from None
    return email


def clean_role(role: Any) -> str:
    if role not in ROLES:
        raise UserError(_("The role must be viewer, editor or admin."), field="role")
    return role


def _clean_password(password: str, user: Any) -> None:
    if len(password) > MAX_PASSWORD_CHARS:
        raise UserError(
            _("The password is longer than %(max)d characters.") % {"max": MAX_PASSWORD_CHARS},
            field="password",
        )
    try:
        password_validation.validate_password(password, user)
    except ValidationError as exc:
        raise UserError(" ".join(exc.messages), field="password") from None


def user_list() -> QuerySet:
    """Every user with their groups and their count of active API tokens, by username."""
    User = get_user_model()
    return (
        User.objects.order_by("username")
        .prefetch_related("groups")
        .annotate(active_tokens=Count("api_tokens", filter=Q(api_tokens__revoked_at__isnull=True)))
    )


def user_tokens(user: Any) -> QuerySet[ApiToken]:
    """The user's API tokens, newest first (revoked ones included, marked)."""
    return ApiToken.objects.filter(user=user).order_by("-created_at", "-id")


@gated_atomic
def user_create(
    *, actor: Any, username: Any, email: Any = "", role: Any = "viewer", password: str | None = None
) -> Any:
    """Add a user with a role; without a password they cannot log in until invited. Audited.

    While any agent is protected, an account is not created an admin (the grant gate refuses it):
    it is added with another role and made an admin by a change request."""
    _require_admin(actor)
    username = clean_username(username)
    email = clean_email(email)
    role = clean_role(role)
    User = get_user_model()
    if User.objects.filter(username__iexact=username).exists():
        raise UserError(_("A user named %(name)s exists already.") % {"name": username}, field="username")
    if role == "admin" and (
        refused := _grant_gate(
            actor=actor,
            user=None,
            action="user.create",
            payload={"username": username, "role": role},
            before="",
        )
    ):
        return refused
    user = User(username=username, email=email)
    if password:
        _clean_password(password, user)
        user.set_password(password)
    else:
        user.set_unusable_password()
    user.save()
    role_set(user=user, role=role)
    audit_record(actor=actor, action="user.create", obj=user, object_repr=username, after=_snapshot(user))
    return user


@gated_atomic
def user_set_role(*, actor: Any, user: Any, role: Any) -> Any:
    """Give the user exactly this role; a superuser demoted below admin stops being one. Audited.

    Making someone an admin passes the grant gates (a change request while any agent is protected)."""
    _require_admin(actor)
    role = clean_role(role)
    User = get_user_model()
    user = User.objects.select_for_update().get(pk=user.pk)
    before = _snapshot(user)
    if before["role"] == role:
        return user
    if role == "admin" and (
        pending := _grant_gate(
            actor=actor,
            user=user,
            action="user.set_role",
            payload={"user": user.pk, "username": user.get_username(), "role": role},
            before=before["role"],
        )
    ):
        return pending
    _check_leaves_an_admin(user, becomes_admin=role == "admin", stays_active=True)
    if role != "admin" and user.is_superuser:
        user.is_superuser = False
        user.is_staff = False
        user.save(update_fields=["is_superuser", "is_staff"])
    role_set(user=user, role=role)
    audit_record(actor=actor, action="user.set_role", obj=user, before=before, after=_snapshot(user))
    return user


def is_approver_flag(user: Any) -> bool:
    """Whether the user holds the approver permission itself (admins approve whatever it says)."""
    return user.groups.filter(name=APPROVER).exists()


@gated_atomic
def user_set_approver(*, actor: Any, user: Any, approver: bool) -> Any:
    """Give or take the permission to approve change requests on protected agents. Audited.

    Giving it passes the grant gates (a change request while any agent is protected)."""
    _require_admin(actor)
    User = get_user_model()
    user = User.objects.select_for_update().get(pk=user.pk)
    before = is_approver_flag(user)
    if before == approver:
        return user
    if approver and (
        pending := _grant_gate(
            actor=actor,
            user=user,
            action="user.set_approver",
            payload={"user": user.pk, "username": user.get_username(), "approver": True},
            before=False,
        )
    ):
        return pending
    approver_set(user=user, approver=approver)
    audit_record(
        actor=actor,
        action="user.set_approver",
        obj=user,
        before={"username": user.get_username(), "approver": before},
        after={"username": user.get_username(), "approver": approver},
    )
    return user


@gated_atomic
def user_set_active(*, actor: Any, user: Any, active: bool) -> Any:
    """Deactivate (they cannot log in; their tokens stop working) or reactivate a user. Audited.

    Reactivating an admin or an approver gives their power back: it passes the grant gates."""
    _require_admin(actor)
    User = get_user_model()
    user = User.objects.select_for_update().get(pk=user.pk)
    if user.is_active == active:
        return user
    before = _snapshot(user)
    if (
        active
        and (before["role"] == "admin" or is_approver_flag(user))
        and (
            pending := _grant_gate(
                actor=actor,
                user=user,
                action="user.activate",
                payload={"user": user.pk, "username": user.get_username(), "active": True},
                before=False,
            )
        )
    ):
        return pending
    if not active:
        _check_leaves_an_admin(user, becomes_admin=role_of(user) == "admin", stays_active=False)
    user.is_active = active
    user.save(update_fields=["is_active"])
    audit_record(
        actor=actor,
        action="user.activate" if active else "user.deactivate",
        obj=user,
        before=before,
        after=_snapshot(user),
    )
    return user


@transaction.atomic
def invite_create(*, actor: Any, user: Any) -> CreatedInvite:
    """A one-time set-password link for the user (older unused ones stop working). Audited."""
    _require_admin(actor)
    if not user.is_active:
        raise UserError(_("%(name)s is deactivated; reactivate them first.") % {"name": user.get_username()})
    now = timezone.now()
    UserInvite.objects.filter(user=user, used_at__isnull=True).update(expires_at=now)
    secret = secrets.token_urlsafe(32)
    invite = UserInvite.objects.create(
        user=user,
        token_hash=_invite_hash(secret),
        created_by=actor if getattr(actor, "is_authenticated", False) else None,
        expires_at=now + timedelta(hours=settings.LLAMON_INVITE_HOURS),
    )
    audit_record(
        actor=actor,
        action="user.invite",
        obj=user,
        after={"username": user.get_username(), "expires_at": invite.expires_at.isoformat()},
    )
    return CreatedInvite(invite=invite, secret=secret)


def invite_find(secret: Any) -> UserInvite | None:
    """The invitation a link stands for, if it is still usable (unused, unexpired, active user)."""
    if not isinstance(secret, str) or not INVITE_RE.match(secret):
        return None
    invite = UserInvite.objects.select_related("user").filter(token_hash=_invite_hash(secret)).first()
    if invite is None or invite.used_at is not None or invite.expires_at <= timezone.now():
        return None
    if not invite.user.is_active:
        return None
    return invite


@transaction.atomic
def invite_accept(*, secret: Any, password: str) -> Any:
    """Set the invited user's password and use the link up; audited as the user themself."""
    invite = invite_find(secret)
    if invite is None:
        raise UserError(_("This invitation link cannot be used: it expired, was used or was replaced."))
    invite = UserInvite.objects.select_for_update().get(pk=invite.pk)
    if invite.used_at is not None:  # a second tab accepted it meanwhile
        raise UserError(_("This invitation link cannot be used: it expired, was used or was replaced."))
    user = invite.user
    _clean_password(password, user)
    user.set_password(password)
    user.save(update_fields=["password"])
    invite.used_at = timezone.now()
    invite.save(update_fields=["used_at"])
    audit_record(actor=user, action="user.invite_accept", obj=user, after={"username": user.get_username()})
    return user


def language_of(user: Any) -> str:
    """The language the user chose ('' = follow the browser)."""
    if not getattr(user, "is_authenticated", False):
        return ""
    return UserProfile.objects.filter(user_id=user.pk).values_list("language", flat=True).first() or ""


def language_set(*, user: Any, language: Any) -> str:
    """Keep the user's interface language ('' = the browser's); one of settings.LANGUAGES."""
    codes = {code for code, _name in settings.LANGUAGES}
    if language not in codes and language != "":
        raise UserError(_("Choose one of the offered languages."), field="language")
    if not user_roles(user) and not getattr(user, "is_authenticated", False):
        raise PermissionDenied(_("Log in first."))
    UserProfile.objects.update_or_create(user=user, defaults={"language": language})
    return language


@gated_atomic
def admin_ensure(
    *, username: str = "admin", password: str | None = None
) -> tuple[object, str | None] | Exception:
    """Create the admin user once; returns (user, the password when it was just set, else None).

    With ``password`` given the existing account's password is (re)set to it, so that
    ``LLAMON_ADMIN_PASSWORD`` always works; without it an existing account is left alone. An existing
    account that is no longer an admin gets the role back through the grant gates: while any agent
    is protected that is a change request by "system" (the password is still set), raised after;
    a new admin account is refused then (UserError).
    """
    User = get_user_model()
    user = User.objects.filter(username=username).first()
    created = user is None
    if created and (
        refused := _grant_gate(
            actor=None,
            user=None,
            action="user.create",
            payload={"username": username, "role": "admin"},
            before="",
        )
    ):
        return refused  # while agents are protected, no new admin account, from the shell either
    if created:
        user = User(username=username, is_staff=True, is_superuser=True)
    new_password = password or (secrets.token_urlsafe(12) if created else None)
    if new_password:
        user.set_password(new_password)
    user.save()
    if not created and role_of(user) != "admin":
        pending = _grant_gate(
            actor=None,
            user=user,
            action="user.set_role",
            payload={"user": user.pk, "username": username, "role": "admin"},
            before=role_of(user),
        )
        if pending is not None:
            return pending
    role_set(user=user, role="admin")
    if created:
        audit_record(
            actor=None, action="user.create", obj=user, after={"username": username, "role": "admin"}
        )
    return user, new_password


@transaction.atomic
def system_user_ensure() -> object:
    """The account that load_demo acts as: admin role, no usable password (it cannot log in)."""
    User = get_user_model()
    user, created = User.objects.get_or_create(username="llamon-system", defaults={"is_active": True})
    if created:
        user.set_unusable_password()
        user.save()
        role_set(user=user, role="admin")
    return user
