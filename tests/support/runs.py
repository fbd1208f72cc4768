"""Helpers for tests that run agents on real workers: wait for a run, the misbehaving MCP server."""

from __future__ import annotations

import time
from pathlib import Path

from agents.models import Run

ROOT = Path(__file__).resolve().parents[2]
# An MCP server whose tools misbehave on request (hang, fail, answer slowly).
MISBEHAVING = str(ROOT / "tests" / "servers" / "misbehaving.py")


def wait_for_run(run_id: int, *, timeout_s: float = 60, until=lambda run: run.finished) -> Run:
    """The run once ``until(run)`` holds (by default: it finished); fails after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = Run.objects.get(pk=run_id)
        if until(run):
            return run
        time.sleep(0.1)
    raise AssertionError(
        f"run {run_id} did not reach the expected state; it is {Run.objects.get(pk=run_id).status}"
    )
