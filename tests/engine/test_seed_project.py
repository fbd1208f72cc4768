"""The seed page's own two tests, unchanged, pass in examples/seed_project as their own rootdir."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SEED_PROJECT = Path(__file__).resolve().parents[2] / "examples" / "seed_project"


def test_the_seed_projects_own_tests_pass_in_their_own_rootdir() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q"], cwd=SEED_PROJECT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
