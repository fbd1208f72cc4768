"""Evidence export: audited, then streamed (agents.evidence_rows builds the rows)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from django.db.models import Model

from agents.evidence_rows import evidence_stream, run_document
from core.audit import audit_record


def _plain(filters: dict[str, Any]) -> dict[str, Any]:
    """The filters as the audit log keeps them (ids for objects, ISO text for times)."""
    plain: dict[str, Any] = {}
    for name, value in filters.items():
        if value in (None, ""):
            continue
        if isinstance(value, Model):
            value = value.pk
        elif isinstance(value, datetime):
            value = value.isoformat()
        plain[name] = value
    return plain


def runs_export(*, actor: Any, filters: dict[str, Any], fmt: str) -> Iterator[str]:
    """Record who exported what (before the first byte leaves), then the export's text, piece by piece."""
    audit_record(
        actor=actor,
        action="runs.export",
        object_type="agents.run",
        object_repr=f"evidence export ({fmt})",
        after={"filters": _plain(filters), "format": fmt},
    )
    return evidence_stream(filters, fmt)


def run_export_document(*, actor: Any, run: Any) -> dict[str, Any]:
    """One run as a JSON document (its masked input, every step, its evidence link); audited."""
    audit_record(actor=actor, action="run.export", obj=run, after={"format": "json"})
    return run_document(run)
