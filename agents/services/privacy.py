"""Privacy settings: preview a redaction on a sample or the newest run, and change them (audited)."""

from __future__ import annotations

import logging
from typing import Any

from agents.models import PrivacySettings, Run
from agents.redaction import RUN_INPUT_FIELDS, privacy_get, redactor
from core.audit import audit_record

logger = logging.getLogger(__name__)


def privacy_preview(*, patterns: list[str], presets: list[str], text: str) -> str:
    """What a sample text would look like once stored, under the given settings."""

    return redactor(patterns=patterns, presets=presets)(text)


def privacy_preview_run(*, patterns: list[str], presets: list[str]) -> dict[str, Any] | None:
    """The newest run's own input as pages, the API and exports would show it under these settings."""
    run = Run.objects.order_by("-created_at", "-id").first()
    if run is None:
        return None
    redact = redactor(patterns=patterns, presets=presets)
    return {"run": run.pk, **{field: redact(getattr(run, field)) for field in RUN_INPUT_FIELDS}}


def privacy_update(
    *, actor: Any, redaction_patterns: list[str], mask_presets: list[str], retention_days: int
) -> PrivacySettings:
    """Change how stored traces are redacted and how long runs are kept (audited)."""
    current = privacy_get()
    before = {
        "redaction_patterns": current.redaction_patterns,
        "mask_presets": current.mask_presets,
        "retention_days": current.retention_days,
    }
    current.redaction_patterns, current.mask_presets, current.retention_days = (
        redaction_patterns,
        mask_presets,
        retention_days,
    )
    current.save()
    audit_record(
        actor=actor,
        action="privacy.update",
        obj=current,
        before=before,
        after={
            "redaction_patterns": redaction_patterns,
            "mask_presets": mask_presets,
            "retention_days": retention_days,
        },
    )
    return current
