"""The NinjaAPI under ``/api/``: authentication, the one error shape, and the apps' routers.

Docs at ``/api/docs``, schema at ``/api/openapi.json`` (both public: they describe, never act).
Every operation declares its role (accounts.api_auth.roles); domain errors become ErrorOut
responses here, once: RuleError/AgentError and form errors 422 (409 for a stale revision or a
conflicting state), PermissionDenied 403, Http404 404, bad JSON 400 (core.userinput says why).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied, SuspiciousOperation
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import InterfaceError, OperationalError
from django.db.models import ProtectedError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.defaults import page_not_found
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError

from accounts.api import router as accounts_router
from agents.api import router as agents_router
from agents.errors import AgentConflictError, AgentError, BrokerUnavailableError, ChangeRequested
from core.api import FormInvalid
from core.errors import DATABASE_UNAVAILABLE, DomainError, database_unavailable
from core.userinput import StrictParser, UserInputError
from governance.api import router as governance_router
from rules.api import router as rules_router
from rules.errors import StaleEditError
from servers.api import router as servers_router


class CachedSchemaAPI(NinjaAPI):
    """A NinjaAPI that builds its OpenAPI schema once per process.

    Building it walks every operation and its pydantic models (1.5-8.7 s measured under load, on
    every ``/api/openapi.json`` the docs page loads). The operations are fixed when the URLconf is
    imported, so the first build serves every later request.
    """

    def get_openapi_schema(self, *, path_prefix: str | None = None, path_params: dict | None = None) -> Any:
        key = (path_prefix, tuple(sorted((path_params or {}).items())))
        cache = self.__dict__.setdefault("_schema_cache", {})
        if key not in cache:
            cache[key] = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        return cache[key]


api = CachedSchemaAPI(
    title="llamon-web API",
    version="1",
    description=(
        "MCP servers, rule sets, the live tester, regression cases, agents, runs, audit, the MCP registry "
        "and trace ingest. Authenticate with `Authorization: Bearer <token>` (a personal API token, "
        "made on the *API tokens* page) or the browser session (CSRF token required for writes). "
        "Every error is an ErrorOut: `{detail, field?, errors?}`. See docs/api.md."
    ),
    urls_namespace="api",
    parser=StrictParser(),
)


# --- Errors: one shape, mapped once ---------------------------------------------------------------


def _error(request: HttpRequest, status: int, detail: str, **extra: Any) -> HttpResponse:
    body = {"detail": detail, **{k: v for k, v in extra.items() if v is not None}}
    return api.create_response(request, body, status=status)


@api.exception_handler(NinjaValidationError)
def _invalid_input(request: HttpRequest, exc: NinjaValidationError) -> HttpResponse:
    errors = [
        {
            "field": ".".join(str(p) for p in err.get("loc", ())[1:]) or None,
            "location": str(err.get("loc", ("",))[0]),
            "message": str(err.get("msg", "")),
            "type": str(err.get("type", "")),
        }
        for err in exc.errors
    ]
    first = errors[0] if errors else {"field": None, "message": "The input is not valid."}
    where = f"{first['field']}: " if first["field"] else ""
    return _error(request, 422, f"{where}{first['message']}", field=first["field"], errors=errors)


@api.exception_handler(FormInvalid)
def _invalid_form(request: HttpRequest, exc: FormInvalid) -> HttpResponse:
    return api.create_response(request, exc.body(), status=422)


@api.exception_handler(DomainError)
def _domain_error(request: HttpRequest, exc: DomainError) -> HttpResponse:
    return _error(request, 409 if isinstance(exc, StaleEditError) else 422, exc.message, field=exc.field)


@api.exception_handler(ChangeRequested)
def _change_requested(request: HttpRequest, exc: ChangeRequested) -> HttpResponse:
    """A protected agent's change was recorded as a change request, not applied: 202 Accepted."""
    body = {
        "detail": exc.message,
        "change_request": exc.change_request_id,
        "url": f"/api/change-requests/{exc.change_request_id}",
    }
    return api.create_response(request, body, status=202)


@api.exception_handler(AgentError)
def _agent_error(request: HttpRequest, exc: AgentError) -> HttpResponse:
    if isinstance(exc, BrokerUnavailableError):
        return _error(request, 503, exc.message)
    return _error(request, 409 if isinstance(exc, AgentConflictError) else 422, exc.message, field=exc.field)


@api.exception_handler(ProtectedError)
def _protected(request: HttpRequest, exc: ProtectedError) -> HttpResponse:
    return _error(
        request, 409, "This is still used elsewhere (an agent or a pinned version); remove that use first."
    )


@api.exception_handler(DjangoValidationError)
def _django_invalid(request: HttpRequest, exc: DjangoValidationError) -> HttpResponse:
    return _error(request, 422, "; ".join(exc.messages) or "The input is not valid.")


@api.exception_handler(PermissionDenied)
def _forbidden(request: HttpRequest, exc: PermissionDenied) -> HttpResponse:
    return _error(request, 403, str(exc) or "You may not do this.")


@api.exception_handler(Http404)
def _not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return _error(request, 404, str(exc) or "Not found.")


@api.exception_handler(AuthenticationError)
def _unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    detail = exc.message
    if detail == "Unauthorized":
        detail = "Log in, or send a personal API token as 'Authorization: Bearer <token>'."
    response = _error(request, 401, detail)
    response["WWW-Authenticate"] = 'Bearer realm="llamon-web"'
    return response


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    # A body StrictParser refused: ninja wraps it as "Cannot parse request body"; say why instead.
    if isinstance(exc.__cause__, UserInputError):
        return _error(request, exc.status_code, str(exc.__cause__))
    return _error(request, exc.status_code, str(exc))


@api.exception_handler(OperationalError)
@api.exception_handler(InterfaceError)
def _database_unavailable(request: HttpRequest, exc: Exception) -> HttpResponse:
    if not database_unavailable(exc):
        raise exc  # a query error: Django's 500, logged with its traceback
    response = _error(request, 503, str(DATABASE_UNAVAILABLE))
    response["Retry-After"] = "5"
    return response


@api.exception_handler(SuspiciousOperation)
def _bad_request(request: HttpRequest, exc: SuspiciousOperation) -> HttpResponse:
    # RequestDataTooBig and friends: Django would answer an HTML 400.
    return _error(request, 400, str(exc) or "Bad request.")


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """The site's 404 handler: an ErrorOut under /api/ (a URL that matched no operation), else the page."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": f"There is no API operation at {request.path}."}, status=404)
    return page_not_found(request, exception)


api.add_router("", accounts_router)
api.add_router("", servers_router)
api.add_router("", rules_router)
api.add_router("", agents_router)
api.add_router("", governance_router)
