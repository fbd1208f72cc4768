"""The test suite's own rules (docs/development.md): each pytest-xdist worker is a world of its own,
and test modules share helpers through tests/support/, never by importing another test module."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

_SHOW_WORLD = (
    "import json, os\n"
    "from django.conf import settings\n"
    "db = settings.DATABASES['default']\n"
    "print(json.dumps({'var': str(settings.VAR_DIR), 'name': str(db['NAME']), 'test': str(db['TEST']['NAME']),\n"
    "                  'broker': str(settings.BROKER_DIR), 'world': os.environ.get('LLAMON_TEST_WORLD')}))\n"
)


def _world(tmp_path: Path, **env: str) -> dict[str, str]:
    """The settings a process gets in the given environment (a fresh interpreter each time)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMON_", "PYTEST_XDIST"))}
    base.pop("DATABASE_URL", None)
    base["LLAMON_VAR_DIR"] = str(tmp_path / "controller")  # what the xdist controller exports
    done = subprocess.run(
        [sys.executable, "-c", _SHOW_WORLD],
        cwd=ROOT,
        env={**base, "DJANGO_SETTINGS_MODULE": "llamon_web.settings_test", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_an_xdist_worker_gets_its_own_folder_sqlite_file_and_broker(tmp_path: Path) -> None:
    gw0 = _world(tmp_path, PYTEST_XDIST_WORKER="gw0")
    gw1 = _world(tmp_path, PYTEST_XDIST_WORKER="gw1")
    controller = str(tmp_path / "controller")
    assert gw0["world"] == "gw0" and gw1["world"] == "gw1"
    assert controller not in (gw0["var"], gw1["var"]) and gw0["var"] != gw1["var"]
    for world in (gw0, gw1):
        assert world["name"] == world["test"] and world["name"].startswith(world["var"])
        assert world["broker"].startswith(world["var"])


def test_a_process_started_by_a_worker_stays_in_its_world(tmp_path: Path) -> None:
    worker = _world(tmp_path, PYTEST_XDIST_WORKER="gw3")
    # A Celery worker or CLI the test starts inherits the xdist worker's environment.
    child = _world(tmp_path, PYTEST_XDIST_WORKER="gw3", LLAMON_TEST_WORLD="gw3", LLAMON_VAR_DIR=worker["var"])
    assert child["var"] == worker["var"] and child["name"] == worker["name"]


@pytest.mark.parametrize("worker", ["", "gw2"])
def test_each_worker_has_its_own_postgresql_database(tmp_path: Path, worker: str) -> None:
    env = {"DATABASE_URL": "postgres://llamon@127.0.0.1:5432/llamon"}
    if worker:
        env["PYTEST_XDIST_WORKER"] = worker
    world = _world(tmp_path, **env)
    expected = f"test_llamon_{worker}" if worker else "test_llamon"
    assert world["name"] == world["test"] == expected


def _test_module_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [n for n in names if n.startswith("tests.") and n.rsplit(".", 1)[-1].startswith("test_")]
    return found


def test_no_test_module_imports_another_test_module() -> None:
    offenders = {
        str(path.relative_to(ROOT)): imports
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if (imports := _test_module_imports(path))
    }
    assert not offenders, f"move the shared helpers to tests/support/: {offenders}"
