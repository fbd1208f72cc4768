"""A cached virtualenv holding a2a-sdk 0.3.x, for testing that 0.3 clients can talk to ``llamon run``.

The project itself runs a2a-sdk 1.x, so the 0.3 client cannot be imported next to it. The
virtualenv is made once under ``var/venvs/`` (named after the requirement, so changing the
pin makes a new one) and reused by every later test session; a lock file keeps two sessions
that start at once from building it twice. ``python -m tests.a2a_venv`` builds it ahead.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENT = "a2a-sdk[http-server]==0.3.*"
VENV = ROOT / "var" / "venvs" / "a2a-sdk-0.3"
_READY = "llamon-ready"  # written last: a venv without it is half-built and made again


def a2a_v03_python(timeout_s: float = 600.0) -> Path:
    """The python of the 0.3 virtualenv, building it first when it is missing or stale."""
    python = VENV / "bin" / "python"
    marker = VENV / _READY
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with (VENV.parent / f"{VENV.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists() and marker.read_text() == REQUIREMENT and python.exists():
            return python
        shutil.rmtree(VENV, ignore_errors=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
        result = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", REQUIREMENT],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        if result.returncode != 0:
            raise RuntimeError(f"pip install {REQUIREMENT!r} failed:\n{result.stdout}\n{result.stderr}")
        marker.write_text(REQUIREMENT)
        return python


if __name__ == "__main__":
    print(a2a_v03_python())
    sys.exit(0)
