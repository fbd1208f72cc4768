"""The base of every app's domain errors: a message a person can act on, and the form field at fault."""

from __future__ import annotations


class DomainError(Exception):
    """A write or action was refused; ``field`` names the form field at fault when there is one."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
