"""The base of every app's domain errors: a message a person can act on, and the form field at fault."""

from __future__ import annotations

from django.utils.translation import gettext_lazy


class DomainError(Exception):
    """A write or action was refused; ``field`` names the form field at fault when there is one."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class PendingApproval(Exception):
    """Mixin of the exception a protected change raises: it was not applied but recorded as a change
    request (``url``: its page; ``change_request_id``). Routes say so instead of showing an error:
    the pages link to the request, the API answers 202, the MCP endpoint a tool error naming it."""

    url: str = ""
    change_request_id: int | None = None


# What every route answers (503) while the database cannot be reached: the pages, the API, the
# MCP endpoint. A transaction it broke was rolled back, so nothing was half-written.
DATABASE_UNAVAILABLE = gettext_lazy(
    "The database is not answering (stopped, restarting or overloaded). Nothing was changed; "
    "try again in a moment."
)
