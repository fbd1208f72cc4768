"""The seed page's own two tests, unchanged, pass in examples/seed_project as their own rootdir."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SEED_PROJECT = Path(__file__).resolve().parents[2] / "examples" / "seed_project"


def test_the_seed_projects_own_tests_pass_in_their_own_rootdir() -> None:
    # Only pytest itself: the seed's tests need no plugin, and this venv's (Django, hypothesis,
    # schemathesis, Playwright) cost 3 s of start-up. No cache folder is left in the checkout.
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=SEED_PROJECT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
