"""Domain errors of the rules app: each carries a message a person can act on."""

from __future__ import annotations

from core.errors import DomainError


class RuleError(DomainError):
    """A write to rules was refused; ``field`` names the form field at fault when there is one."""


class StaleEditError(RuleError):
    """Someone else saved first (optimistic revision check)."""


STALE_MESSAGE = (
    "{what} was changed by {who} while you were editing (revision {theirs}, yours was {yours}). "
    "Nothing was overwritten: reload to see their version, then apply your change again."
)


def json_type_name(value: object) -> str:
    """How an error message names a JSON value's type ("a list", "a number", "null" ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a text"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
