"""How the API knows who is calling and what they may do, and what it may do.

Two ways in, tried in this order on every operation:

* ``Authorization: Bearer llamon_...``: a personal API token (programs). A token that is
  present but unknown or revoked is a 401 at once (the session is not tried instead).
* The Django session cookie (the browser), with CSRF enforced for unsafe methods.

Each operation declares the role it needs with :func:`roles` (``auth=roles("editor")``): the
request holds its user's roles *now* (capped by the token's ``max_role``); too low a role is a
403, no credentials a 401. The authorization-matrix test reads the declared ``role`` back.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest
from django.utils.translation import gettext as _
from ninja.errors import AuthenticationError, AuthorizationError, HttpError
from ninja.security import APIKeyCookie, HttpBearer
from ninja.utils import check_csrf

from accounts.roles import ROLES, Role, credential_name
from accounts.token_services import token_authenticate, token_roles

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


class _RoleCheck:
    role: Role
    session_only: bool = False

    def _grant(self, request: HttpRequest, user: Any, token: Any) -> Any:
        roles = token_roles(user=user, token=token)
        request.api_token = token  # type: ignore[attr-defined]
        request.api_roles = roles  # type: ignore[attr-defined]
        # Services check roles again with has_role(actor, ...): make them see the token's cap,
        # a superuser's included (a viewer-capped token must not list everyone's tokens).
        user._llamon_roles = roles
        if token is not None:
            user._llamon_capped = True
        user._llamon_credential = credential_name(token)
        if self.role not in roles:
            held = max((r for r in roles), key=ROLES.index, default=None)
            raise AuthorizationError(
                message=f"This operation needs the {self.role} role"
                + (
                    f"; this {'token' if token else 'account'} acts as {held}."
                    if held
                    else "; you hold no role."
                )
            )
        return user


class TokenAuth(_RoleCheck, HttpBearer):
    """``Authorization: Bearer <token>``: a personal API token acting with its user's roles."""

    def __init__(self, role: Role, *, session_only: bool = False) -> None:
        self.role = role
        self.session_only = session_only
        super().__init__()

    def __call__(self, request: HttpRequest) -> Any:
        # ninja's HttpBearer logs the whole header when the scheme is not "Bearer" (with DEBUG on):
        # a token sent as "Token x", "Basic ..." or bare would land in the log in clear.
        scheme, _, token = (request.headers.get(self.header) or "").partition(" ")
        if scheme.lower() != self.openapi_scheme:
            return None
        return self.authenticate(request, token)

    def authenticate(self, request: HttpRequest, token: str) -> Any:
        found = token_authenticate(token.strip())
        if found is None:
            raise AuthenticationError(
                message="The API token is unknown, revoked or expired, or its user is inactive."
            )
        if self.session_only:
            raise AuthorizationError(
                message="This operation is only available from a logged-in browser session."
            )
        user, api_token = found
        return self._grant(request, user, api_token)


class SessionAuth(_RoleCheck, APIKeyCookie):
    """The browser's session cookie; unsafe methods need the CSRF token (``X-CSRFToken`` header)."""

    param_name = settings.SESSION_COOKIE_NAME

    def __init__(self, role: Role) -> None:
        self.role = role
        super().__init__(csrf=False)  # checked below, only for a logged-in user's unsafe request

    def authenticate(self, request: HttpRequest, key: str | None) -> Any:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return None
        if request.method not in SAFE_METHODS and check_csrf(request):
            raise HttpError(
                403,
                _(
                    "CSRF check failed: send the csrftoken cookie's value in an X-CSRFToken header (or use an API token instead of the session)."
                ),
            )
        return self._grant(request, user, None)


def roles(role: Role, *, session_only: bool = False) -> list[Any]:
    """The ``auth=`` of an operation that needs ``role`` (a token first, then the session)."""
    return [TokenAuth(role, session_only=session_only), SessionAuth(role)]


def api_has_role(request: HttpRequest, role: Role) -> bool:
    """Whether this API request holds ``role`` (the token's cap included)."""
    return role in getattr(request, "api_roles", set())


def require_api_role(request: HttpRequest, role: Role, why: str) -> None:
    """Raise a 403 unless the request holds ``role``; ``why`` completes "This needs the <role> role: ..."."""
    if not api_has_role(request, role):
        raise AuthorizationError(message=f"This needs the {role} role: {why}")
