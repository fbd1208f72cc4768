"""The base of every app's domain errors: a message a person can act on, and the form field at fault."""

from __future__ import annotations

import errno

from django.db import InterfaceError, OperationalError
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

# SQLite reports a query the schema cannot answer (a migration not applied, a bad statement) as an
# OperationalError too; that is a defect to fix, not an outage to wait out.
_SQLITE_QUERY_ERRORS = (
    "no such table",
    "no such column",
    "has no column",
    "syntax error",
    "no such function",
    "pattern too complex",  # LIKE or GLOB pattern too complex: the query's own limit
)


def database_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` means the database could not be reached or could not serve now (stopped,
    restarting, overloaded, locked): what every route answers 503 with DATABASE_UNAVAILABLE. A query
    error is not (PostgreSQL raises those as ProgrammingError; SQLite as OperationalError, told
    apart by its message): it stays a 500, logged with its traceback."""
    if isinstance(exc, InterfaceError):
        return True
    if not isinstance(exc, OperationalError):
        return False
    text = str(exc).lower()
    return not any(marker in text for marker in _SQLITE_QUERY_ERRORS)


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc``, or an error it was raised from or during, is a full disk or quota (ENOSPC,
    EDQUOT): then a 503 must say so, not blame the service (the embedded broker's folder, ...)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        current = current.__cause__ or current.__context__
    return False
