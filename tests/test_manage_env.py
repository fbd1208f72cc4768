"""Which settings manage.py and gunicorn use when LLAMON_ENV is not set (README "Which environment")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from llamon_web.config import PRODUCTION_SIGNS, manage_env_default
from tests.conftest import ROOT


def _checkout(tmp_path: Path) -> Path:
    (tmp_path / ".git").write_text("gitdir: elsewhere\n")  # a worktree's .git is a file
    return tmp_path


def test_a_checkout_without_production_variables_means_dev(tmp_path: Path) -> None:
    assert manage_env_default(_checkout(tmp_path), {}) == "dev"


def test_outside_a_checkout_the_default_stays_prod(tmp_path: Path) -> None:
    assert manage_env_default(tmp_path, {}) is None


@pytest.mark.parametrize("name", PRODUCTION_SIGNS)
def test_any_production_variable_keeps_prod(tmp_path: Path, name: str) -> None:
    assert manage_env_default(_checkout(tmp_path), {name: "set"}) is None
    assert manage_env_default(_checkout(tmp_path), {name: "  "}) == "dev"  # blank counts as unset


@pytest.mark.parametrize("value", ["prod", "dev"])
def test_an_explicit_llamon_env_is_never_changed(tmp_path: Path, value: str) -> None:
    assert manage_env_default(_checkout(tmp_path), {"LLAMON_ENV": value}) is None


def _run(argv: list[str], tmp_path: Path, **extra: str) -> subprocess.CompletedProcess:
    drop = {
        "LLAMON_ENV",
        "DJANGO_SETTINGS_MODULE",
        "REDIS_URL",
        "DATABASE_URL",
        "SECRET_KEY",
        *PRODUCTION_SIGNS,
    }
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("LLAMON_TEST")}
    env.update(LLAMON_VAR_DIR=str(tmp_path), **extra)
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_manage_py_from_this_checkout_runs_as_dev_and_says_so(tmp_path: Path) -> None:
    assert (ROOT / ".git").exists(), "the tests run from a git checkout"
    assert not (ROOT / ".env").exists() or "LLAMON_ENV" not in (ROOT / ".env").read_text()
    result = _run([sys.executable, "manage.py", "check"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "LLAMON_ENV is not set: using dev settings" in result.stderr


def test_manage_py_with_a_production_variable_and_no_llamon_env_is_prod(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'prod.sqlite3'}"
    result = _run([sys.executable, "manage.py", "check"], tmp_path, DATABASE_URL=db)
    assert result.returncode == 2
    assert "SECRET_KEY is required when LLAMON_ENV=prod" in result.stderr
    assert "using dev settings" not in result.stderr


def test_gunicorn_refuses_dev_settings(tmp_path: Path) -> None:
    gunicorn = str(Path(sys.executable).parent / "gunicorn")
    result = _run(
        [gunicorn, "-c", "python:llamon_web.gunicorn_conf", "--check-config"], tmp_path, LLAMON_ENV="dev"
    )
    assert result.returncode != 0
    assert "gunicorn serves production: LLAMON_ENV must be prod, got 'dev'" in result.stderr
