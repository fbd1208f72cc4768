"""`make run` (the README's first command) serves the product, and Ctrl-C stops every process of it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest

from tests.conftest import ROOT, OutputCollector, free_port, wait_for_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


class _Proc(NamedTuple):
    pid: int
    state: str
    ppid: int
    pgrp: int
    session: int
    cmdline: list[bytes]


def _procs() -> list[_Proc]:
    """Every live (not zombie) process, from /proc: state, parent, group, session and command line."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            found.append(
                _Proc(int(entry.name), fields[0], int(fields[1]), int(fields[2]), int(fields[3]), cmdline)
            )
    return found


def _processes_in_group(pgid: int) -> list[int]:
    return [p.pid for p in _procs() if p.pgrp == pgid]


def _devrun_env(tmp_path: Path, **extra: str) -> tuple[dict[str, str], int, int]:
    """The environment of a `make run` on its own var/ folder and free ports: (env, web port, MCP port)."""
    port, mcp_port = free_port(), free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DJANGO_SETTINGS_MODULE", "REDIS_URL", "DATABASE_URL"}
    }
    env.update(
        LLAMON_VAR_DIR=str(tmp_path),
        LLAMON_PORT=str(port),
        LLAMON_DEMO_MCP_PORT=str(mcp_port),
        LLAMON_ADMIN_PASSWORD="correct-horse-battery",
        LLAMON_RELOAD="0",  # an edit elsewhere in the tree must not restart the server mid-test
        PYTHONUNBUFFERED="1",
        **extra,
    )
    return env, port, mcp_port


def test_make_run_serves_the_home_page_restarts_a_killed_worker_and_ctrl_c_stops_everything(tmp_path) -> None:
    # One `make run` for the whole story (each start costs ~40 s of the suite): log in, see the demo,
    # kill the worker and see only it restarted, then Ctrl-C.
    env, port, mcp_port = _devrun_env(tmp_path)
    # Its own session: make and devrun form the "terminal's" foreground group we send Ctrl-C to.
    proc = subprocess.Popen(
        ["make", "--no-print-directory", "run"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    output = OutputCollector(proc)
    services_pgid = None
    try:
        output.wait_for("llamon-web is running at", timeout_s=120)
        services_pgid = int(re.search(r"process group (\d+)", output.wait_for("process group")).group(1))
        assert "login: admin / the password in LLAMON_ADMIN_PASSWORD" in output.text()
        wait_for_port(port, timeout_s=60)
        wait_for_port(mcp_port, timeout_s=60)

        with httpx.Client(base_url=f"http://127.0.0.1:{port}", follow_redirects=True, timeout=20) as web:
            login = web.get("/accounts/login/")
            token = web.cookies["csrftoken"]
            assert login.status_code == 200
            home = web.post(
                "/accounts/login/",
                data={"username": "admin", "password": "correct-horse-battery", "csrfmiddlewaretoken": token},
            )
            assert home.status_code == 200
            assert str(home.url).rstrip("/") == f"http://127.0.0.1:{port}"
            assert "Workbench" in home.text and "admin" in home.text
            assert "order-service" in home.text
            assert web.get("/healthz").json()["status"] == "ok"
            # The HTTP demo server's tools are listed once it answers, as README says: not "0 tools".
            assert "listed the tools of order-service-http: get_order" in output.text()
            servers = web.get("/mcp/").text
            row = re.search(r"<code>order-service-http</code>.*?</tr>", servers, re.S)
            assert row and re.search(r"<td>[1-9]\d*</td>", row.group(0)), servers[:2000]
            # The demo's runs, queued by load_demo, are finished by the worker `make run` started.
            deadline = time.monotonic() + 60
            while web.get("/agents/runs/", params={"status": "succeeded"}).text.count("data-run=") < 3:
                assert time.monotonic() < deadline, "the demo runs did not finish"
                time.sleep(0.5)
        assert len(_processes_in_group(services_pgid)) >= 4  # web, worker (+pool), beat, demo MCP
        _kill_the_worker_and_see_it_restarted(output, port, session=proc.pid)
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
        proc.wait(timeout=60)
    deadline = time.monotonic() + 10
    while services_pgid and _processes_in_group(services_pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert services_pgid is not None
    assert _processes_in_group(services_pgid) == [], output.text()[-3000:]
    assert _processes_in_group(proc.pid) == []
    assert "stopped." in output.text()


def _children(parent_pid: int) -> set[int]:
    """Live direct children of ``parent_pid``."""
    return {p.pid for p in _procs() if p.ppid == parent_pid}


def _celery_workers(parent_pid: int) -> list[int]:
    """Pids of `celery worker` main processes whose parent is ``parent_pid``."""
    return [
        p.pid for p in _procs() if p.ppid == parent_pid and b"celery" in p.cmdline and b"worker" in p.cmdline
    ]


def _devrun_pid(session: int) -> int:
    """The `manage.py devrun` process that `make run` started in its session."""
    found = [
        p.pid
        for p in _procs()
        if p.session == session
        and b"devrun" in p.cmdline
        and any(a.endswith(b"manage.py") for a in p.cmdline)
    ]
    assert len(found) == 1, found
    return found[0]


def _kill_the_worker_and_see_it_restarted(output: OutputCollector, port: int, session: int) -> None:
    """SIGKILL the Celery worker: devrun starts a new one; web, beat and the MCP server run on."""
    devrun = _devrun_pid(session)
    output.wait_for(" ready.", timeout_s=60)  # the worker's own start-up line
    [worker] = _celery_workers(devrun)
    others = _children(devrun) - {worker}
    commands = b" ".join((Path("/proc") / str(pid) / "cmdline").read_bytes() for pid in others)
    assert b"runserver" in commands and b"beat" in commands and b"order_service.py" in commands

    os.kill(worker, signal.SIGKILL)

    restarted = output.wait_for("worker restarted (pid", timeout_s=60)
    assert "worker exited with status -9" in output.text()
    new_pid = int(re.search(r"pid (\d+)", restarted).group(1))
    assert _celery_workers(devrun) == [new_pid] != [worker]
    deadline = time.monotonic() + 60
    while output.text().count(" ready.") < 2:  # the new worker connected to the broker
        assert time.monotonic() < deadline, output.text()[-3000:]
        time.sleep(0.2)
    assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).json()["status"] == "ok"
    assert others < _children(devrun)  # the same processes: none of them was restarted
