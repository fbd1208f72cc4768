"""Side virtualenvs: packages the project cannot install beside its own versions, for tests that
run them in a subprocess.

* ``var/venvs/a2a-sdk-0.3`` (``requirements-a2a-0.3.lock``): a2a-sdk 0.3 clients talking to
  ``llamon run`` (the project runs a2a-sdk 1.x).
* ``var/venvs/mcp-2`` (``requirements-mcp-2.lock``): MCP servers built on mcp 2, and the SDK's
  pool run from ``sdk/src`` with mcp 2 installed (the web runs mcp 1.x).

`make install` builds each from its lock file (exact versions) and writes the lock into
``llamon-ready`` last, so `make test` never reaches a package index; a test that finds one missing
or built from another lock fails with the command to run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class SideVenv:
    what: str  # what it holds, for the failure message
    folder: str  # under var/venvs
    lock: str  # the lock file it is built from, at the repository root

    def python(self) -> Path:
        """Its python; a test failure naming `make install` when it is not built from the current lock."""
        venv = ROOT / "var" / "venvs" / self.folder
        lock = ROOT / self.lock
        python, ready = venv / "bin" / "python", venv / "llamon-ready"
        if not (python.exists() and ready.exists() and ready.read_text() == lock.read_text()):
            pytest.fail(
                f"the {self.what} virtualenv ({venv}) is missing or older than {self.lock}: run `make install`",
                pytrace=False,
            )
        return python


A2A_03 = SideVenv("a2a-sdk 0.3", "a2a-sdk-0.3", "requirements-a2a-0.3.lock")
MCP_2 = SideVenv("mcp 2", "mcp-2", "requirements-mcp-2.lock")
