"""Domain errors of the rules app: each carries a message a person can act on."""

from __future__ import annotations


class RuleError(Exception):
    """A write to rules was refused; ``field`` names the form field at fault when there is one."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class StaleEditError(RuleError):
    """Someone else saved first (optimistic revision check)."""


STALE_MESSAGE = (
    "{what} was changed by {who} while you were editing (revision {theirs}, yours was {yours}). "
    "Nothing was overwritten: reload to see their version, then apply your change again."
)
