"""Personal API tokens: create (the secret is returned once), revoke, authenticate. Writes are audited.

A token reads ``llamon_<prefix>_<secret>``: ``prefix`` (8 hex characters) is stored in clear
to find the row and to show which token is which; only a SHA-256 of the whole token is stored,
so a database leak does not leak usable tokens. The secret has 256 bits of entropy, which is
why a fast hash is enough (no password-style stretching).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts.models import ApiToken
from accounts.roles import ROLES, has_role, user_roles
from core.audit import audit_record
from core.errors import DomainError

TOKEN_RE = re.compile(r"^llamon_([0-9a-f]{8})_([A-Za-z0-9_-]{43})$")
MAX_NAME_CHARS = 100
MAX_ACTIVE_TOKENS = 50
# last_used_at is written at most this often per token: one UPDATE per request would serialize
# every API call on SQLite's single writer.
LAST_USED_GRANULARITY = timedelta(seconds=60)


class TokenError(DomainError):
    """A token write was refused; the message says why."""


@dataclass(frozen=True)
class CreatedToken:
    """A new token and its secret, which is never shown again."""

    token: ApiToken
    secret: str


def token_hash(secret: str) -> str:
    """The SHA-256 (hex) stored for a token string."""
    return hashlib.sha256(secret.encode()).hexdigest()


def token_list(*, user: Any, all_users: bool = False) -> QuerySet[ApiToken]:
    """The user's tokens, newest first (every user's with ``all_users``: admins only)."""
    tokens = ApiToken.objects.select_related("user").order_by("-created_at", "-id")
    if all_users:
        if not has_role(user, "admin"):
            raise PermissionDenied(_("Listing other users' tokens needs the admin role."))
        return tokens
    return tokens.filter(user=user)


@transaction.atomic
def token_create(
    *, actor: Any, name: str, max_role: str = "", expires_days: int | None = None
) -> CreatedToken:
    """Create a token for ``actor`` and return it with its secret (shown once); audited.

    It expires after ``expires_days`` (default ``LLAMON_API_TOKEN_DAYS``; at most
    ``LLAMON_API_TOKEN_MAX_DAYS``; 0 for never, where the operator allows it)."""
    if not user_roles(actor):
        raise PermissionDenied(_("Only users with a role (viewer, editor or admin) can create API tokens."))
    name = (name or "").strip()
    if not name:
        raise TokenError(
            _("Give the token a name that says where it is used (like 'ci-pipeline')."), field="name"
        )
    if len(name) > MAX_NAME_CHARS:
        raise TokenError(
            _("The name is longer than %(max)d characters.") % {"max": MAX_NAME_CHARS}, field="name"
        )
    if max_role and max_role not in ROLES:
        raise TokenError(_("max_role must be viewer, editor, admin or empty."), field="max_role")
    if max_role and not has_role(actor, max_role):
        raise TokenError(
            _("You do not hold the %(role)s role, so a token cannot either.") % {"role": max_role},
            field="max_role",
        )
    if ApiToken.objects.filter(user=actor, revoked_at__isnull=True).count() >= MAX_ACTIVE_TOKENS:
        raise TokenError(
            _("You already have %(count)d active tokens; revoke some first.") % {"count": MAX_ACTIVE_TOKENS}
        )
    expires_at = _expiry(expires_days)
    prefix = secrets.token_hex(4)
    secret = f"llamon_{prefix}_{secrets.token_urlsafe(32)}"
    token = ApiToken.objects.create(
        user=actor,
        name=name,
        prefix=prefix,
        token_hash=token_hash(secret),
        max_role=max_role,
        expires_at=expires_at,
    )
    audit_record(
        actor=actor,
        action="api_token.create",
        obj=token,
        after={
            "name": name,
            "prefix": prefix,
            "user": actor.get_username(),
            "max_role": max_role,
            "expires_at": expires_at.isoformat() if expires_at else None,
        },
    )
    return CreatedToken(token=token, secret=secret)


def _expiry(days: int | None) -> datetime | None:
    """When a token made now expires (None: never), within the operator's limit."""
    longest = settings.LLAMON_API_TOKEN_MAX_DAYS
    if days is None:
        days = settings.LLAMON_API_TOKEN_DAYS
    if isinstance(days, bool) or not isinstance(days, int) or days < 0:
        raise TokenError(_("The lifetime is a whole number of days (0: never)."), field="expires_days")
    if longest and (days == 0 or days > longest):
        raise TokenError(
            _("A token lives at most %(days)d days here (the operator's LLAMON_API_TOKEN_MAX_DAYS).")
            % {"days": longest},
            field="expires_days",
        )
    return timezone.now() + timedelta(days=days) if days else None


@transaction.atomic
def token_revoke(*, actor: Any, token: ApiToken) -> ApiToken:
    """Revoke a token (its owner, or an admin for anyone's); revoking twice changes nothing; audited."""
    if token.user_id != getattr(actor, "pk", None) and not has_role(actor, "admin"):
        raise PermissionDenied(_("Only the token's owner or an admin may revoke it."))
    current = ApiToken.objects.select_for_update().get(pk=token.pk)
    if current.revoked_at is None:
        current.revoked_at = timezone.now()
        current.save(update_fields=["revoked_at"])
        audit_record(
            actor=actor,
            action="api_token.revoke",
            obj=current,
            after={"name": current.name, "prefix": current.prefix, "user": current.user.get_username()},
        )
    return current


def token_authenticate(secret: str) -> tuple[Any, ApiToken] | None:
    """The (user, token) a token string stands for, or None (unknown, revoked, inactive user).

    The stored hash is compared in constant time; ``last_used_at`` is updated (at most once a minute).
    """
    match = TOKEN_RE.match(secret or "")
    if match is None:
        return None
    wanted = token_hash(secret)
    found = None
    for candidate in ApiToken.objects.select_related("user").filter(prefix=match.group(1)):
        # Every candidate is compared (no early exit) so timing says nothing about which matched.
        if hmac.compare_digest(candidate.token_hash, wanted):
            found = candidate
    if found is None or not found.active or not found.user.is_active:
        return None
    now = timezone.now()
    if found.last_used_at is None or now - found.last_used_at >= LAST_USED_GRANULARITY:
        ApiToken.objects.filter(pk=found.pk).update(last_used_at=now)
        found.last_used_at = now
    return found.user, found


def token_roles(*, user: Any, token: ApiToken | None) -> set[str]:
    """The roles a request holds: the user's roles now, capped by the token's ``max_role``."""
    roles = set(user_roles(user))
    if token is not None and token.max_role:
        roles &= set(ROLES[: ROLES.index(token.max_role) + 1])
    return roles
