"""Middleware of the page shell."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.core.signals import got_request_exception
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.template.loader import render_to_string
from django.utils.html import escape

from accounts.services import language_of
from core.errors import DATABASE_UNAVAILABLE, database_unavailable
from core.userinput import NUL_MESSAGE

logger = logging.getLogger(__name__)


class HtmxMessagesMiddleware:
    """Flash messages reach the page on htmx swaps too.

    An htmx response replaces one region, so messages added while handling it (a refused move,
    a stale edit) would otherwise wait for the next full page. They are appended to the response
    and swapped out of band into the ``#messages`` list that base.html always renders.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if not getattr(request, "htmx", False) or response.streaming or "HX-Redirect" in response:
            return response
        if not 200 <= response.status_code < 300 and response.status_code not in (409, 422):
            return response
        if not response.get("Content-Type", "").startswith("text/html"):
            return response
        storage = messages.get_messages(request)
        if storage.used:  # the response's own template showed them already
            return response
        pending = list(storage)
        if pending:
            response.content += render_to_string(
                "_messages.html", {"messages": pending, "oob": True}
            ).encode()
        return response


class RefuseNulMiddleware:
    """A page request whose query string or form holds a NUL character is refused (400) before any view.

    Forms refuse NUL field by field (Django's ProhibitNullCharactersValidator), but a view that
    reads ``request.POST`` itself would hand it to the database, and PostgreSQL refuses NUL in
    text: a 500. This closes the class for every page. The API has its own check with its JSON
    error shape (core.userinput.StrictParser), so ``/api/`` is left to it.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if "\x00" in request.path:  # a %00 in the URL: every route, the API's included
            if request.path.startswith("/api/"):
                return JsonResponse({"detail": f"The URL: {NUL_MESSAGE}", "field": None}, status=400)
            return HttpResponseBadRequest(f"URL: {NUL_MESSAGE}", content_type="text/plain; charset=utf-8")
        if not request.path.startswith("/api/"):
            sources = [request.GET] + ([request.POST] if request.method == "POST" else [])
            for data in sources:
                for key, values in data.lists():
                    if "\x00" in key or any(isinstance(v, str) and "\x00" in v for v in values):
                        return HttpResponseBadRequest(
                            f"{key.replace(chr(0), '')}: {NUL_MESSAGE}",
                            content_type="text/plain; charset=utf-8",
                        )
        return self.get_response(request)


def _note_database_error(sender: Any, request: HttpRequest | None = None, **kwargs: Any) -> None:
    """Django turns an exception into a 500 inside whichever middleware it passes through; note on
    the request that the database was the cause, for the outermost middleware to answer 503."""
    exc = sys.exc_info()[1]
    if request is not None and exc is not None and database_unavailable(exc):
        request.database_unavailable = True  # type: ignore[attr-defined]


class DatabaseUnavailableMiddleware:
    """A request that needed the database while it was down answers 503 saying so: never a 500 or
    a traceback (not even with DEBUG on), wherever the database was first touched (the session,
    the user's language, the view). The API and the MCP endpoint answer the same sentence in their
    own shapes (llamon_web.api, llamon_web.mcp_endpoint). First in MIDDLEWARE."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        got_request_exception.connect(_note_database_error, dispatch_uid="llamon-database-unavailable")

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code != 500 or not getattr(request, "database_unavailable", False):
            return response
        logger.error("database unavailable: %s %s answered 503", request.method, request.path)
        if request.path.startswith("/api/"):
            response = JsonResponse({"detail": str(DATABASE_UNAVAILABLE)}, status=503)
        else:
            # No template: rendering base.html reads the session and the user, from the database.
            response = HttpResponse(
                f"<!doctype html><title>503</title><h1>503</h1><p>{escape(str(DATABASE_UNAVAILABLE))}</p>",
                status=503,
                content_type="text/html; charset=utf-8",
            )
        response["Retry-After"] = "5"
        return response


class UserLanguageMiddleware:
    """A logged-in user's own language choice wins over the browser's (LocaleMiddleware ran first)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        from django.utils import translation

        chosen = language_of(getattr(request, "user", None))
        if not chosen:
            return self.get_response(request)
        request.LANGUAGE_CODE = chosen
        with translation.override(chosen):  # the thread's language is put back after the response
            response = self.get_response(request)
        response.headers["Content-Language"] = chosen  # LocaleMiddleware only sets it when unset
        return response
