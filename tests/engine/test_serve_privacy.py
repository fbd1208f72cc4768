"""A served agent's own privacy config (LLAMON_MASK_PRESETS) for its exported spans (issue #45, point 4)."""

from __future__ import annotations

import asyncio

import pytest

from llamon_agent.guardrails import MASK_PRESETS
from llamon_agent.serve import ServeError, privacy_masks
from llamon_agent.settings import Settings


def test_own_presets_all_none_or_named() -> None:
    assert [m.name for m in asyncio.run(privacy_masks(Settings(mask_presets="all")))] == list(MASK_PRESETS)
    assert asyncio.run(privacy_masks(Settings(mask_presets="none"))) == []
    assert [m.name for m in asyncio.run(privacy_masks(Settings(mask_presets="email, kr_rrn")))] == [
        "email",
        "kr_rrn",
    ]
    assert asyncio.run(privacy_masks(Settings())) == []  # no registry, no presets: nothing to mask by


def test_an_unknown_preset_is_refused_with_its_name() -> None:
    with pytest.raises(ServeError, match="kr_ssn"):
        asyncio.run(privacy_masks(Settings(mask_presets="email,kr_ssn")))
