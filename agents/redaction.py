"""Privacy: the admin's redaction settings and the function that masks what runs store and show.

Read by the runtime (steps are masked as they are stored), by selectors (a run's input is masked
when shown) and by services (cases saved from runs, the preview). Imports only models.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from agents.models import PrivacySettings

# What a request brought in: shown masked (agents.selectors) and the seed of a run's redactor.
RUN_INPUT_FIELDS = ("query", "context", "a2a_data", "a2a_files", "user_id", "session_id", "chatbot_id")


def privacy_get() -> PrivacySettings:
    """The one privacy settings row (created with defaults on first use)."""
    return PrivacySettings.objects.get_or_create(pk=1)[0]


def redactor(
    *, patterns: list[str] | None = None, presets: list[str] | None = None, seed: Any = None
) -> Callable[[Any], Any]:
    """The function applied to everything stored in steps (the privacy settings unless given).

    ``seed`` (a run's input): what the masks hide in it is also hidden wherever it reappears in
    what the run stores, re-tokenised ("kim", "example", "com" after kim@example.com).
    """
    from llamon_agent.guardrails import Mask, Redactor, as_masks, mask_preset
    from llamon_agent.mcp.transports import STDERR_MARKER
    from servers.selectors import STDERR_HIDDEN

    if patterns is None or presets is None:
        privacy = privacy_get()
        patterns, presets = list(privacy.redaction_patterns), list(privacy.mask_presets)
    masks = as_masks(patterns) + [mask_preset(name) for name in presets]  # compiled once per run
    # Runs are shown to viewers: an MCP error's stdio stderr tail (last in the message) is not kept.
    masks.append(
        Mask("mcp_stderr", re.escape(STDERR_MARKER) + r"[\s\S]*", replacement=STDERR_HIDDEN, derive=False)
    )
    redact = Redactor(masks)
    if seed is not None:
        redact.learn(seed)
    return redact


def run_redactor(run: Any) -> Callable[[Any], Any]:
    """The redactor of everything a run stores: the privacy settings, seeded with the run's input."""
    return redactor(seed=[getattr(run, field) for field in RUN_INPUT_FIELDS])


def redactor_active() -> bool:
    """Whether the privacy settings mask anything at all."""
    privacy = privacy_get()
    return bool(privacy.redaction_patterns or privacy.mask_presets)
