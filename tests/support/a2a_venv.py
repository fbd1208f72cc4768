"""The virtualenv holding a2a-sdk 0.3.x, for testing that 0.3 clients can talk to ``llamon run``.

The project itself runs a2a-sdk 1.x, so the 0.3 client cannot be imported next to it. `make install`
builds the virtualenv under ``var/venvs/a2a-sdk-0.3`` from ``requirements-a2a-0.3.lock`` (exact
versions), so `make test` never reaches a package index; a test that finds it missing or built from
another lock fails with the command to run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements-a2a-0.3.lock"
VENV = ROOT / "var" / "venvs" / "a2a-sdk-0.3"
READY = VENV / "llamon-ready"  # written by `make install` last, holding the lock it installed


def a2a_v03_python() -> Path:
    """The python of the 0.3 virtualenv; a test failure naming `make install` when it is not built."""
    python = VENV / "bin" / "python"
    if not (python.exists() and READY.exists() and READY.read_text() == LOCK.read_text()):
        pytest.fail(
            f"the a2a-sdk 0.3 virtualenv ({VENV}) is missing or older than {LOCK.name}: run `make install`",
            pytrace=False,
        )
    return python
