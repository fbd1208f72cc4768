"""Compiling a large rule set: the objects it leaves behind are frozen out of the garbage collector."""

from __future__ import annotations

import gc

from llamon_agent.prestep import FREEZE_AFTER_RULES
from rules import engine


def _snapshot(n: int, tag: str) -> list[dict[str, object]]:
    return [
        {
            "name": f"r{tag}{i}",
            "mcp_id": "s",
            "tool_name": "t",
            "when": f'"{tag}{i}" in query',
            "params": "{}",
            "stop": False,
            "enabled": True,
        }
        for i in range(n)
    ]


def test_a_large_rule_set_is_frozen_after_compiling() -> None:
    before = gc.get_freeze_count()
    try:
        engine.compile_snapshot(_snapshot(FREEZE_AFTER_RULES, "large"))
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()


def test_a_small_rule_set_is_not_frozen() -> None:
    gc.unfreeze()
    engine.compile_snapshot(_snapshot(10, "small"))
    assert gc.get_freeze_count() == 0
