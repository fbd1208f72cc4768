"""Middleware of the page shell."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.template.loader import render_to_string

from accounts.services import language_of
from core.userinput import NUL_MESSAGE


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
