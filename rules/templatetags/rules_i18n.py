"""``{{ rec|expr_error }}``: a tester record's or an explained operand's error in the user's language."""

from __future__ import annotations

from typing import Any

from django import template

from rules.expr_messages import expr_text

register = template.Library()


@register.filter
def expr_error(item: Any) -> str:
    """The error of a RuleRecord or an explanation Part: translated when the engine gave it an id."""
    exc = getattr(item, "error_expr", None)
    if exc is not None and getattr(exc, "msg_id", None):
        return expr_text(exc)
    return str(getattr(item, "error", "") or "")


@register.filter
def outcome_error(outcome: Any) -> str:
    """The pre-step's error as the tester shows it: the seed's contract text as it is, the failed rule's
    reason in the user's language (the LLM still receives the engine's text)."""
    error = str(getattr(outcome, "error", "") or "")
    for record in getattr(outcome, "records", ()):
        if record.error and getattr(record, "error_expr", None) is not None and record.error in error:
            return error.replace(record.error, expr_error(record), 1)
    return error
