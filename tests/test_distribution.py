"""The two distributions, built from the checkout and installed outside it.

- llamon-web (the root) with the SDK wheel beside it, in a fresh virtualenv: `django check` and
  `migrate` pass there (docs/deploy.md installs them so).
- llamon-agent (sdk/) alone, in a virtualenv that can import only the SDK's own dependencies (no
  Django, no Celery): `llamon new`, `check` and `run` work, and the seed page's own tests pass.

Offline: the wheels are built without build isolation (setuptools comes with `make install`) and
installed without their dependencies, which the new virtualenvs read from this one's site-packages
(all of it for the web; only the SDK's dependency closure, linked one distribution at a time, for
the SDK).
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import tomllib
import venv
import zipfile
from pathlib import Path

import httpx
import pytest
from packaging.requirements import Requirement

from llamon_agent.flow.scaffold import TEMPLATES
from tests.conftest import ROOT
from tests.support.side_venvs import MCP_2

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

APPS = ("llamon_web", "core", "accounts", "servers", "rules", "agents", "governance")
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


def _build(source: Path, out: Path) -> None:
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


def _sdk_wheel(out: Path) -> Path:
    """The SDK's wheel, built from a copy of sdk/ (small; for the same reason as the web's)."""
    source = out.parent / "llamon-agent"
    shutil.copytree(ROOT / "sdk", source, ignore=shutil.ignore_patterns(*COPY_IGNORE))
    _build(source, out)
    (sdk,) = out.glob("llamon_agent-*.whl")
    return sdk


def _web_wheel(source_root: Path, out: Path) -> Path:
    """The web's wheel, built from a copy of the checkout: setuptools builds in the source folder, and
    a build/ folder left from an earlier build would add files the checkout no longer has."""
    source = source_root / "llamon-web"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*COPY_IGNORE))
    _build(source, out)
    (web,) = out.glob("llamon_web-*.whl")
    return web


def _venv(target: Path) -> tuple[Path, Path]:
    """A fresh virtualenv without pip: its python and its site-packages."""
    venv.EnvBuilder(with_pip=False).create(target)
    python = target / "bin" / "python"
    site = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    )
    return python, site


def _install(python: Path, *wheel_files: Path) -> None:
    _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index"]
        + [str(w) for w in wheel_files]
    )


def _dist(name: str, site: Path | None) -> importlib.metadata.Distribution:
    """An installed distribution: of this venv, or of the site-packages ``site``."""
    if site is None:
        return importlib.metadata.distribution(name)
    found = next(iter(importlib.metadata.distributions(name=name, path=[str(site)])), None)
    if found is None:
        raise importlib.metadata.PackageNotFoundError(name)
    return found


def _closure(roots: list[str], site: Path | None = None) -> set[str]:
    """The installed distributions these requirements need, markers and extras followed."""
    seen: set[str] = set()
    todo = [Requirement(r) for r in roots]
    while todo:
        req = todo.pop()
        name = req.name.lower().replace("_", "-")
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        key = f"{name}[{','.join(sorted(req.extras))}]"
        if key in seen:
            continue
        seen.add(key)
        for line in _dist(name, site).requires or ():
            sub = Requirement(line)
            wanted = sub.marker is None or any(
                sub.marker.evaluate({"extra": extra}) for extra in ("", *req.extras)
            )
            if wanted:
                sub.marker = None
                todo.append(sub)
    return {key.split("[")[0] for key in seen}


def _link_distributions(names: set[str], into: Path, site: Path | None = None) -> None:
    """Symlink each distribution's top-level files and its metadata folder from this venv (or from
    the site-packages ``site``) into ``into``; a name already there is kept."""
    into.mkdir(exist_ok=True)
    source_site = site or Path(sysconfig.get_paths()["purelib"])
    for name in sorted(names):
        dist = _dist(name, site)
        tops = {Path(str(f)).parts[0] for f in dist.files or () if not str(f).startswith("..")}
        for top in tops:
            source = source_site / top
            if source.exists() and not (into / top).exists() and not top.startswith("__pycache__"):
                (into / top).symlink_to(source)


def test_the_wheels_hold_every_app_and_check_and_migrate_outside_the_checkout(tmp_path: Path) -> None:
    wheels = {"web": _web_wheel(tmp_path, tmp_path / "dist"), "sdk": _sdk_wheel(tmp_path / "dist")}
    names = zipfile.ZipFile(wheels["web"]).namelist()
    tops = {name.split("/")[0] for name in names}
    assert set(APPS) <= tops and "llamon_agent" not in tops  # the SDK is its own distribution
    for app in ("llamon_web", "accounts", "servers", "rules", "agents", "governance"):
        assert any(n.startswith(f"{app}/templates/") and n.endswith(".html") for n in names), app
    for app in ("llamon_web", "core", "accounts", "servers", "rules", "agents", "governance"):
        assert any(n.startswith(f"{app}/migrations/0001") for n in names), app
    # The checkout's top-level templates/, static/ and locale/, mapped into llamon_web/ by pyproject.toml.
    assert "llamon_web/templates/base.html" in names
    assert "llamon_web/locale/ko/LC_MESSAGES/django.mo" in names
    assert "llamon_web/static/js/confirm.js" in names  # project-wide, from static/
    assert "agents/static/agents/js/trace.js" in names  # an app's own
    assert "rules/static/rules/vendor/codemirror/editor.bundle.js" in names
    sdk = zipfile.ZipFile(wheels["sdk"])
    assert {name.split("/")[0] for name in sdk.namelist()} == {"llamon_agent", "llamon_agent-0.1.0.dist-info"}
    assert "llamon_agent/flow/templates/react/app/tools.py.tmpl" in sdk.namelist()
    metadata = sdk.read("llamon_agent-0.1.0.dist-info/METADATA").decode()
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert any(r.startswith("Requires-Dist: mcp") for r in requires)
    assert not [r for r in requires if "django" in r.lower() or "celery" in r.lower()], requires

    python, site = _venv(tmp_path / "venv")
    # The dependencies: this virtualenv's site-packages as a plain path (its .pth files, such as
    # the editable installs of the checkout, are not processed from there).
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _install(python, wheels["sdk"], wheels["web"])
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
        [
            str(python),
            "-c",
            "import llamon_web, agents, llamon_agent; print(llamon_web.__file__, agents.__file__, llamon_agent.__file__)",
        ],
        cwd=work,
        env=env,
    )
    assert str(ROOT) not in where.stdout and str(site) in where.stdout, where.stdout
    _run([str(python), "-m", "django", "check"], cwd=work, env=env)
    found = _run(
        [
            str(python),
            "-c",
            "import django; django.setup()\n"
            "from django.contrib.staticfiles import finders\n"
            "from django.template.loader import get_template\n"
            "from django.utils import translation\n"
            "print(get_template('base.html').origin.name, finders.find('js/confirm.js'), finders.find('agents/js/trace.js'))\n"
            "translation.activate('ko'); print(translation.gettext('Agent'))",
        ],
        cwd=work,
        env=env,
    )
    assert str(ROOT) not in found.stdout and found.stdout.count(str(site)) == 3, found.stdout
    assert "에이전트" in found.stdout, found.stdout
    migrated = _run([str(python), "-m", "django", "migrate", "--no-input"], cwd=work, env=env)
    assert "Applying agents.0001" in migrated.stdout
    assert (tmp_path / "var" / "llamon.sqlite3").exists()


def _sdk_alone(tmp_path: Path, mcp_site: Path | None = None) -> tuple[Path, dict[str, str]]:
    """A virtualenv with the SDK's wheel and its dependencies only (no Django, no Celery), and the
    environment to run it in. With ``mcp_site`` (a side venv's site-packages) mcp and what it
    needs come from there, the rest from this venv."""
    wheels = {"sdk": _sdk_wheel(tmp_path / "dist")}
    python, site = _venv(tmp_path / "venv")
    sdk = tomllib.loads((ROOT / "sdk" / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    test_extra = sdk["optional-dependencies"]["test"]  # pytest: the seed's and the project's tests
    dependencies = [*sdk["dependencies"], *test_extra]
    if mcp_site is not None:
        _link_distributions(_closure(["mcp"], mcp_site), tmp_path / "deps", mcp_site)
        dependencies = [d for d in dependencies if Requirement(d).name != "mcp"]
    needed = _closure(dependencies)
    assert "django" not in needed and "celery" not in needed, sorted(needed)
    _link_distributions(needed, tmp_path / "deps")
    (site / "dependencies.pth").write_text(str(tmp_path / "deps") + "\n")
    _install(python, wheels["sdk"])
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LLAMON_", "DJANGO_", "PYTEST_")) and k not in ("MCP_ID", "PYTHONPATH")
    }
    env.update(PATH=f"{python.parent}:{env.get('PATH', '')}", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    where = _run([str(python), "-c", "import llamon_agent; print(llamon_agent.__file__)"], env=env)
    assert str(site) in where.stdout, where.stdout
    return python, env


def _serve(
    project: Path, python: Path, env: dict[str, str], log: Path
) -> tuple[subprocess.Popen[bytes], str]:
    """`llamon run` of ``project``, once its agent card is served; the process and its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    served = subprocess.Popen(
        [str(python.parent / "llamon"), "run", str(project), "--port", str(port)],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env=env,
    )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 60
    while True:
        assert served.poll() is None, log.read_text()
        try:
            if httpx.get(url + ".well-known/agent-card.json", timeout=1).status_code == 200:
                return served, url
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)


def _ask_orders(url: str) -> str:
    """An A2A 0.3 ``message/send`` the react template's pre-step answers with two MCP tool calls."""
    message = {
        "kind": "message",
        "role": "user",
        "messageId": "m-1",
        "parts": [{"kind": "text", "text": "주문 조회 A-1001 부탁해"}],
        "metadata": {"userId": "C-1001", "chatbotId": "premium-support"},
    }
    answer = httpx.post(
        url,
        json={"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    return str(answer.json()["result"]["parts"][0]["text"])


def test_the_sdk_alone_makes_checks_and_serves_a_project_and_passes_the_seeds_tests(tmp_path: Path) -> None:
    python, env = _sdk_alone(tmp_path)
    missing = subprocess.run([str(python), "-c", "import django"], capture_output=True, text=True, env=env)
    assert missing.returncode != 0 and "No module named 'django'" in missing.stderr

    seed = _run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT / "examples" / "seed_project",
        env=env,
    )
    assert "2 passed" in seed.stdout

    project = tmp_path / "bank-agent"
    llamon = str(python.parent / "llamon")
    _run([llamon, "new", "--template", "react", str(project)], env=env)
    _run([llamon, "check", str(project)], env=env)  # starts the demo servers the rules use
    tested = _run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=project, env=env)
    assert " passed" in tested.stdout and "failed" not in tested.stdout

    served, url = _serve(project, python, env, tmp_path / "run.log")
    try:
        assert httpx.get(url + ".well-known/agent-card.json", timeout=5).json()["name"]
        text = _ask_orders(url)
        assert "A-1001" in text and "김민지" in text, text  # order-service and customer-crm answered
    finally:
        served.terminate()
        served.wait(timeout=20)


def test_the_sdk_on_mcp_2_runs_every_template_and_its_tests(tmp_path: Path) -> None:
    """pip may pick mcp 2 for `pip install ./sdk` (it did: 2.3): the demo servers the templates
    start, the templates' own tests, `llamon check` and `llamon run` work on it too."""
    mcp_site = Path(
        _run(
            [str(MCP_2.python()), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
        ).stdout.strip()
    )
    python, env = _sdk_alone(tmp_path, mcp_site)
    major = _run([str(python), "-c", "import importlib.metadata as m; print(m.version('mcp'))"], env=env)
    assert major.stdout.startswith("2."), major.stdout
    old_api = subprocess.run(
        [str(python), "-c", "import mcp.server.fastmcp"], capture_output=True, text=True, env=env
    )
    assert old_api.returncode != 0 and "MCPServer" in old_api.stderr  # what the servers used to import

    llamon = str(python.parent / "llamon")
    for template in TEMPLATES:
        _run([llamon, "new", "--template", template, str(tmp_path / template)], env=env)
    # The react project's rules use all three demo servers: its check starts each of them.
    checked = _run([llamon, "check", str(tmp_path / "react")], env=env)
    assert "has no problems" in checked.stdout, checked.stdout + checked.stderr
    # Every project's own tests, side by side (the flows' graph tests start their servers).
    testing = {
        template: subprocess.Popen(
            [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"],
            cwd=tmp_path / template,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for template in TEMPLATES
    }
    for template, process in testing.items():
        out, _ = process.communicate(timeout=240)
        assert process.returncode == 0 and " passed" in out, f"{template}:\n{out[-3000:]}"

    served, url = _serve(tmp_path / "react", python, env, tmp_path / "run.log")
    try:
        text = _ask_orders(url)
        assert "A-1001" in text and "김민지" in text, text
    finally:
        served.terminate()
        served.wait(timeout=20)
