"""The base of every app's domain errors: a message a person can act on, and the form field at fault."""

from __future__ import annotations

from django.utils.translation import gettext_lazy


class DomainError(Exception):
    """A write or action was refused; ``field`` names the form field at fault when there is one."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


# What every route answers (503) while the database cannot be reached: the pages, the API, the
# MCP endpoint. A transaction it broke was rolled back, so nothing was half-written.
DATABASE_UNAVAILABLE = gettext_lazy(
    "The database is not answering (stopped, restarting or overloaded). Nothing was changed; "
    "try again in a moment."
)
