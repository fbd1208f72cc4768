"""Site-wide writes: the admin account."""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.db import transaction

from llamon_web.audit import audit_record
from llamon_web.roles import role_set


@transaction.atomic
def admin_ensure(*, username: str = "admin", password: str | None = None) -> tuple[object, str | None]:
    """Create the admin user once; returns (user, the password when it was just set, else None).

    With ``password`` given the existing account's password is (re)set to it, so that
    ``LLAMON_ADMIN_PASSWORD`` always works; without it an existing account is left alone.
    """
    User = get_user_model()
    user = User.objects.filter(username=username).first()
    created = user is None
    if created:
        user = User(username=username, is_staff=True, is_superuser=True)
    new_password = password or (secrets.token_urlsafe(12) if created else None)
    if new_password:
        user.set_password(new_password)
    user.save()
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
