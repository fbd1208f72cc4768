"""Privacy: the admin's redaction settings and the function that masks what runs store and show.

Read by the runtime (steps are masked as they are stored), by selectors (a run's input is masked
when shown) and by services (cases saved from runs, the preview). Imports only models.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from agents.models import PrivacySettings


def privacy_get() -> PrivacySettings:
    """The one privacy settings row (created with defaults on first use)."""
    return PrivacySettings.objects.get_or_create(pk=1)[0]


def redactor(*, patterns: list[str] | None = None, presets: list[str] | None = None) -> Callable[[Any], Any]:
    """The function applied to everything stored in steps (the privacy settings unless given)."""
    from llamon_agent.guardrails import Mask, as_masks, mask_preset, redact
    from llamon_agent.mcp.transports import STDERR_MARKER
    from servers.selectors import STDERR_HIDDEN

    if patterns is None or presets is None:
        privacy = privacy_get()
        patterns, presets = list(privacy.redaction_patterns), list(privacy.mask_presets)
    masks = as_masks(patterns) + [mask_preset(name) for name in presets]  # compiled once per run
    # Runs are shown to viewers: an MCP error's stdio stderr tail (last in the message) is not kept.
    masks.append(Mask("mcp_stderr", re.escape(STDERR_MARKER) + r"[\s\S]*", replacement=STDERR_HIDDEN))
    return lambda value: redact(value, masks)


def redactor_active() -> bool:
    """Whether the privacy settings mask anything at all."""
    privacy = privacy_get()
    return bool(privacy.redaction_patterns or privacy.mask_presets)
