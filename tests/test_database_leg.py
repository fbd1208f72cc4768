"""The PostgreSQL leg (`make test-postgres`) runs every test that can reach the database, and only those."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = [
    "tests/engine/test_expr_shapes.py",  # the engine: never imports Django
    "tests/test_config.py",  # settings read in subprocesses, no database
    "tests/test_deploy.py",  # marked `database`: gunicorn connects to DATABASE_URL itself
    "tests/test_pages.py",  # django_db
    "tests/e2e/test_shell.py",  # the browser's live server
]


def _collected(**env: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", *FILES],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return {line.split("::")[0] for line in done.stdout.splitlines() if "::" in line}


def test_the_database_leg_keeps_the_tests_that_reach_the_database() -> None:
    assert _collected(LLAMON_TEST_DATABASE_ONLY="1") == {
        "tests/test_deploy.py",
        "tests/test_pages.py",
        "tests/e2e/test_shell.py",
    }
