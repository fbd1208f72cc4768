"""The NinjaAPI under ``/api/``: authentication, the one error shape, and the apps' routers.

Docs at ``/api/docs``, schema at ``/api/openapi.json`` (both public: they describe, never act).
Every operation declares its role (accounts.api_auth.roles); domain errors become ErrorOut
responses here, once: RuleError/AgentError and form errors 422 (409 for a stale revision or a
conflicting state), PermissionDenied 403, Http404 404, bad JSON 400 (core.userinput says why).
"""

from __future__ import annotations

from typing import Any, get_args

from django.core.exceptions import ImproperlyConfigured, PermissionDenied, SuspiciousOperation
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import InterfaceError, OperationalError
from django.db.models import ProtectedError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.utils.translation import gettext as _
from django.views.defaults import page_not_found
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError
from ninja.operation import Operation
from pydantic import BaseModel

from accounts.api import router as accounts_router
from agents.api import router as agents_router
from agents.errors import AgentConflictError, AgentError, BrokerUnavailableError, ChangeRequested
from core.api import StrictIn, error_field
from core.errors import DATABASE_UNAVAILABLE, DomainError, database_unavailable
from core.userinput import StrictParser, UserInputError
from governance.api import router as governance_router
from llamon_agent.strictjson import JSONInputError, loads
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
            "field": error_field(list(err.get("loc", ())[1:]), err),  # after body, query or path
            "location": str(err.get("loc", ("",))[0]),
            "message": str(err.get("msg", "")),
            "type": str(err.get("type", "")),
        }
        for err in exc.errors
    ]
    first = errors[0] if errors else {"field": None, "message": "The input is not valid."}
    where = f"{first['field']}: " if first["field"] else ""
    return _error(request, 422, f"{where}{first['message']}", field=first["field"], errors=errors)


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


# --- Strict inputs: every operation refuses a field it does not read ------------------------------

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (``list[X] | None`` gives X)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def _loose_schemas(model: type[BaseModel], seen: set[type[BaseModel]]) -> list[str]:
    """The input models under ``model`` (itself included) that would drop an unknown field."""
    if model in seen:
        return []
    seen.add(model)
    found = [] if issubclass(model, StrictIn) else [model.__qualname__]
    for field in model.model_fields.values():
        for inner in _models_in(field.annotation):
            found += _loose_schemas(inner, seen)
    return found


def _no_body_fields(operation: Operation) -> Any:
    """An operation without a body refuses one with fields (it would ignore them in silence)."""
    run = operation.run

    def checked(request: HttpRequest, **kw: Any) -> HttpResponseBase:
        if request.body:
            try:
                data = loads(request.body)
            except JSONInputError:
                data = None
            if isinstance(data, dict) and data:
                name = str(next(iter(data)))
                detail = _("This operation takes no fields in its body; `%(name)s` is not read.") % {
                    "name": name
                }
                return _error(request, 422, detail, field=name)
        return run(request, **kw)

    return checked


def strict_inputs(ninja_api: NinjaAPI) -> None:
    """Hold every operation to strict inputs: its body schemas are StrictIn all the way down (else
    the API refuses to start: a new operation cannot forget it), and a write operation without a
    body refuses one with fields."""
    loose: list[str] = []
    # The bound routers are what the URLs serve (ninja clones each mounted router's operations).
    for router in ninja_api._get_bound_routers():
        for path, view in router.path_operations.items():
            for operation in view.operations:
                bodies = [
                    m
                    for m in operation.models
                    if getattr(m, "__ninja_param_source__", None) in ("body", "form")
                ]
                for model in bodies:
                    for field in model.model_fields.values():
                        loose += [
                            f"{'/'.join(operation.methods)} {path}: {name}"
                            for inner in _models_in(field.annotation)
                            for name in _loose_schemas(inner, set())
                        ]
                if not bodies and WRITE_METHODS & set(operation.methods):
                    operation.run = _no_body_fields(operation)  # type: ignore[method-assign]
    if loose:
        raise ImproperlyConfigured(
            "API input schemas must derive from core.api.StrictIn (unknown fields are refused): "
            + "; ".join(loose)
        )


strict_inputs(api)
