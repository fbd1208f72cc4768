"""The distribution holds the whole product: a wheel built from the checkout, installed into a fresh
virtualenv outside it, passes `django check` and `migrate` there (docs/deploy.md installs it so).

Offline: the wheel is built without build isolation (setuptools comes with `make install`) and
installed without its dependencies, which the new virtualenv reads from this one's site-packages.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

APPS = ("llamon_agent", "llamon_web", "core", "accounts", "servers", "rules", "agents", "governance")
COPY_IGNORE = (
    ".git",
    ".venv",
    "var",
    "node_modules",
    "build",
    "*.egg-info",
    "__pycache__",
    ".*_cache",
    "screenshots",
)


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=240, **kwargs)
    assert result.returncode == 0, f"{cmd}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built from a copy of the checkout: setuptools builds in the source folder, and a
    build/ folder left from an earlier build would add files the checkout no longer has."""
    source = tmp_path_factory.mktemp("source") / "llamon-web"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*COPY_IGNORE))
    out = tmp_path_factory.mktemp("dist")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--wheel-dir",
            str(out),
            str(source),
        ],
        env={**os.environ, "PIP_NO_INPUT": "1"},
    )
    (found,) = out.glob("llamon_web-*.whl")
    return found


def test_the_wheel_holds_every_app_its_templates_and_static_files(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert set(APPS) <= tops
    for app in ("llamon_web", "accounts", "servers", "rules", "agents", "governance"):
        assert any(n.startswith(f"{app}/templates/") and n.endswith(".html") for n in names), app
    for app in ("llamon_web", "core", "accounts", "servers", "rules", "agents", "governance"):
        assert any(n.startswith(f"{app}/migrations/0001") for n in names), app
    assert "llamon_web/templates/base.html" in names
    assert "llamon_web/static/js/trace.js" in names
    assert "llamon_web/static/vendor/codemirror/editor.bundle.js" in names


def test_the_installed_wheel_checks_and_migrates_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(target)
    python = target / "bin" / "python"
    site = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    )
    # The dependencies: this virtualenv's site-packages as a plain path (its .pth files, such as
    # the editable install of the checkout, are not processed from there).
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            str(wheel),
        ]
    )
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LLAMON_", "DJANGO_", "PYTEST_")) and k != "DATABASE_URL"
    }
    env.update(
        LLAMON_ENV="dev", LLAMON_VAR_DIR=str(tmp_path / "var"), DJANGO_SETTINGS_MODULE="llamon_web.settings"
    )
    where = _run(
        [str(python), "-c", "import llamon_web, agents; print(llamon_web.__file__, agents.__file__)"],
        cwd=work,
        env=env,
    )
    assert str(ROOT) not in where.stdout and str(site) in where.stdout, where.stdout
    _run([str(python), "-m", "django", "check"], cwd=work, env=env)
    migrated = _run([str(python), "-m", "django", "migrate", "--no-input"], cwd=work, env=env)
    assert "Applying agents.0001" in migrated.stdout
    assert (tmp_path / "var" / "llamon.sqlite3").exists()
