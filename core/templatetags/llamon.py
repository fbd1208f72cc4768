"""Template helpers: JSON shown to people (escaped by the template engine like any text)."""

from __future__ import annotations

import json
from typing import Any

from django import template
from django.utils.translation import gettext_lazy as _

from core.chain import chain_public_key

register = template.Library()


@register.filter
def pretty_json(value: Any) -> str:
    """Indented JSON with non-ASCII text kept readable (Korean stays Korean); plain text stays text."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=False, default=str)


@register.filter
def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


# The states shown in badges (runs, steps, analyses, the tester's rules), as people read them; the
# stored values stay the same in every language (CSS classes and data-status use them).
STATUS_LABELS = {
    "queued": _("queued"),
    "running": _("running"),
    "succeeded": _("succeeded"),
    "failed": _("failed"),
    "timed_out": _("timed out"),
    "cancelled": _("cancelled"),
    "interrupted": _("interrupted"),
    "ok": _("ok"),
    "error": _("error"),
    "skipped": _("skipped"),
    "fired": _("fired"),
    "not_reached": _("not reached"),
    "not evaluated": _("not evaluated"),
    "worker": _("worker"),
    "served": _("served"),
    "flow": _("flow"),
}


@register.filter
def status_label(value: Any) -> str:
    """A status or source value in the user's language (unknown values are shown as they are)."""
    return str(STATUS_LABELS.get(str(value), value))


@register.inclusion_tag("_evidence_signing.html")
def evidence_signing() -> dict[str, Any]:
    """Whether exports are signed, and with which key (or what unsigned means)."""
    return {"public_key": chain_public_key()}


@register.filter
def percent(value: Any) -> str:
    """A share (0 to 1) as a percentage with one decimal: 0.9876 -> "98.8%"."""
    try:
        return f"{float(value) * 100:.1f}%"
    except (TypeError, ValueError):
        return ""
