"""``{{ rec|expr_error }}``: a tester record's or an explained operand's error in the user's language."""

from __future__ import annotations

from typing import Any

from django import template

from rules.expr_messages import engine_text, expr_text

register = template.Library()


@register.filter
def expr_error(item: Any) -> str:
    """The error of a RuleRecord or an explanation Part in the user's language: by its message id, or
    (no id) the engine's known English (an invalid regular expression, an unknown tool)."""
    exc = getattr(item, "error_expr", None)
    if exc is not None:
        return expr_text(exc)
    return engine_text(str(getattr(item, "error", "") or ""))


@register.filter
def outcome_error(outcome: Any) -> str:
    """The pre-step's error as the tester shows it: the seed's contract text as it is, the failed rule's
    reason in the user's language (the LLM still receives the engine's text)."""
    error = str(getattr(outcome, "error", "") or "")
    for record in getattr(outcome, "records", ()):
        if record.error and record.error in error:
            shown = expr_error(record)
            if shown != record.error:
                return error.replace(record.error, shown, 1)
    return error


@register.filter
def engine_error(text: Any) -> str:
    """An error the engine wrote as text (no message id kept), in the user's language where known."""
    return engine_text(str(text or ""))
