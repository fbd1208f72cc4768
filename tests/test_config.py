"""Bad configuration gives one line naming the variable, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from llamon_web.config import ConfigError, database_config, env_bool, env_int, redis_url
from tests.conftest import ROOT, free_port


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    full_env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DJANGO_SETTINGS_MODULE", "REDIS_URL", "DATABASE_URL"}
    }
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("DATABASE_URL", "not a url", "DATABASE_URL must look like"),
        ("DATABASE_URL", "mysqlx://h/db", "DATABASE_URL is not a valid database URL"),
        ("DATABASE_URL", "postgres://h:port/db", "DATABASE_URL is not a valid database URL"),
        ("REDIS_URL", "http://127.0.0.1:6379", "REDIS_URL must start with redis://"),
        ("REDIS_URL", "redis://127.0.0.1:notaport/0", "REDIS_URL is not a valid Redis URL"),
        ("REDIS_URL", "redis:///0", "REDIS_URL names no host"),
        ("LLAMON_ENV", "staging", "LLAMON_ENV must be one of dev, prod"),
        ("DEBUG", "maybe", "DEBUG must be true or false"),
    ],
)
def test_malformed_variable_gives_one_line_naming_it(variable: str, value: str, expected: str) -> None:
    result = _manage("check", **{"LLAMON_ENV": "dev", variable: value})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("configuration error: ")
    assert expected in lines[0]
    assert "Traceback" not in result.stderr


def test_prod_without_secret_key_refuses_to_start() -> None:
    result = _manage("check", LLAMON_ENV="prod", SECRET_KEY="")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "configuration error: SECRET_KEY is required when LLAMON_ENV=prod "
        "(set it, or use LLAMON_ENV=dev for development)"
    )


def test_unreachable_redis_gives_one_line_naming_the_variable(tmp_path) -> None:
    port = free_port()  # nothing listens there
    result = _manage(
        "check_services",
        LLAMON_ENV="dev",
        LLAMON_VAR_DIR=str(tmp_path),
        REDIS_URL=f"redis://127.0.0.1:{port}/0",
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"configuration error: REDIS_URL: cannot reach Redis at 127.0.0.1:{port}")


def test_reachable_redis_passes_the_service_check(tmp_path, redis_url) -> None:
    result = _manage("check_services", LLAMON_ENV="dev", LLAMON_VAR_DIR=str(tmp_path), REDIS_URL=redis_url)
    assert result.returncode == 0, result.stderr
    assert "database and broker: ok" in result.stdout


def test_passwords_are_not_echoed_in_errors(monkeypatch) -> None:
    monkeypatch.setenv("REDIS_URL", "http://user:hunter2@h")
    with pytest.raises(ConfigError) as info:
        redis_url()
    assert "hunter2" not in str(info.value)


def test_helpers_reject_bad_values(monkeypatch) -> None:
    monkeypatch.setenv("X_FLAG", "perhaps")
    with pytest.raises(ConfigError, match="X_FLAG must be true or false"):
        env_bool("X_FLAG", False)
    monkeypatch.setenv("X_NUM", "ten")
    with pytest.raises(ConfigError, match="X_NUM must be a whole number"):
        env_int("X_NUM", 1)
    monkeypatch.setenv("X_NUM", "-1")
    with pytest.raises(ConfigError, match="X_NUM must be at least 0"):
        env_int("X_NUM", 1, minimum=0)


def test_sqlite_default_uses_wal_immediate_and_busy_timeout(tmp_path) -> None:
    config = database_config(None, sqlite_default=tmp_path / "db.sqlite3")
    assert config["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    assert config["OPTIONS"]["timeout"] >= 5
    assert "journal_mode=WAL" in config["OPTIONS"]["init_command"]
