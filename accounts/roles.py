"""Roles: viewer < editor < admin, as Django groups; superusers hold every role.

Every page declares the role it needs with :func:`require_role`; the authorization-matrix
test reads that declaration (``view.required_role``) and checks the real responses.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, Literal

from django.contrib.auth.models import AnonymousUser, Group
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.utils.translation import gettext as _

Role = Literal["viewer", "editor", "admin"]
ROLES: tuple[Role, ...] = ("viewer", "editor", "admin")
PUBLIC = "public"
# Not a role but a permission beside one (a Django group of its own): approving change requests on
# protected agents (agents.services.changes). Admins approve too; a viewer may be an approver, so that
# whoever approves need not be able to write changes.
APPROVER = "approver"


def user_roles(user: Any) -> set[str]:
    """The roles a user holds, higher roles implying the lower ones."""
    if user is None or isinstance(user, AnonymousUser) or not user.is_authenticated or not user.is_active:
        return set()
    if user.is_superuser and not getattr(user, "_llamon_capped", False):
        return set(ROLES)
    cached = getattr(user, "_llamon_roles", None)
    if cached is None:
        names = set(user.groups.filter(name__in=ROLES).values_list("name", flat=True))
        top = max((ROLES.index(n) for n in names), default=-1)
        cached = set(ROLES[: top + 1])
        user._llamon_roles = cached
    return cached


def has_role(user: Any, role: Role) -> bool:
    """Whether the user holds ``role`` (or a higher one)."""
    return role in user_roles(user)


def is_approver(user: Any) -> bool:
    """Whether the user may approve or reject change requests: an admin, or an approver with a role."""
    roles = user_roles(user)
    if "admin" in roles:
        return True
    if not roles:
        return False
    return bool(user.groups.filter(name=APPROVER).exists())


def credential_name(token: Any) -> str:
    """How a request authenticated, as a review records it: "session", "token", or "token:<role>" for a
    token capped at that role."""
    if token is None:
        return "session"
    return f"token:{token.max_role}" if token.max_role else "token"


def credential_of(user: Any) -> str:
    """The credential the user acts with in this request (the API and the MCP endpoint set it)."""
    return str(getattr(user, "_llamon_credential", "session"))


def credential_may_approve(credential: str) -> bool:
    """Approving is a person's act: a token capped at a role (a program's narrowed credential) may not."""
    return not credential.startswith("token:")


def approver_set(*, user: Any, approver: bool) -> None:
    """Give or take the approver permission (the caller audits)."""
    group, _ = Group.objects.get_or_create(name=APPROVER)
    if approver:
        user.groups.add(group)
    else:
        user.groups.remove(group)


def role_set(*, user: Any, role: Role | None) -> None:
    """Give a user exactly one role (None removes all); superuser status is left alone."""
    groups = Group.objects.filter(name__in=ROLES)
    user.groups.remove(*groups)
    if role is not None:
        group, _ = Group.objects.get_or_create(name=role)
        user.groups.add(group)
    if hasattr(user, "_llamon_roles"):
        del user._llamon_roles


def require_role(
    role: Role | Literal["public"],
) -> Callable[[Callable[..., HttpResponseBase]], Callable[..., HttpResponseBase]]:
    """View decorator: anonymous -> login page, authenticated without the role -> 403."""

    def decorate(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
        if role == PUBLIC:
            view.required_role = PUBLIC  # type: ignore[attr-defined]
            return view

        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if not has_role(request.user, role):
                raise PermissionDenied(_("This page needs the %(role)s role.") % {"role": _(role)})
            return view(request, *args, **kwargs)

        wrapped.required_role = role  # type: ignore[attr-defined]
        return wrapped

    return decorate


def roles_context(request: HttpRequest) -> dict[str, Any]:
    """Template context: ``roles`` (a set) so templates show only what the user may use."""
    return {"roles": user_roles(getattr(request, "user", None))}
