"""Fixtures for the MCP client tests: real servers over stdio and streamable HTTP, on 127.0.0.1.

No Django here: engine tests run with ``-p no:django``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from llamon_agent.mcp.pool import McpPool
from llamon_agent.mcp.spec import McpServerSpec

ROOT = Path(__file__).resolve().parents[2]
MISBEHAVING = ROOT / "tests" / "servers" / "misbehaving.py"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stdio_spec(mcp_id: str = "mis", **overrides: object) -> McpServerSpec:
    """A spec that runs tests/servers/misbehaving.py over stdio with this interpreter."""
    fields: dict[str, object] = {
        "mcp_id": mcp_id,
        "transport": "stdio",
        "command": sys.executable,
        "args": [str(MISBEHAVING)],
        "timeout_s": 20,
    }
    fields.update(overrides)
    return McpServerSpec.model_validate(fields)


def children_running(script: Path = MISBEHAVING) -> list[int]:
    """Pids of this process's children that run ``script`` (zombies excluded)."""
    me = str(os.getpid())
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        state, ppid = fields[0], fields[1]
        if ppid == me and state != "Z" and str(script) in cmdline:
            found.append(int(entry.name))
    return found


def wait_until(predicate: Callable[[], bool], timeout_s: float = 15.0, what: str = "condition") -> None:
    """Poll ``predicate`` until it holds; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class HttpServer:
    """A test server over streamable HTTP on a free loopback port (endpoint ``/mcp``); restartable.

    By default tests/servers/misbehaving.py run by this interpreter; ``command`` is another server's
    argument list, to which ``--http PORT`` is appended."""

    def __init__(self, command: list[str] | None = None) -> None:
        self.command = command or [sys.executable, str(MISBEHAVING)]
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [*self.command, "--http", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the HTTP test server exited with {self.process.returncode}")
            try:
                # Listening once it accepts a connection (a GET can open a stream that never ends).
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        self.kill()  # not left running behind the failure
        raise RuntimeError("the HTTP test server did not start within 20s")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def spec(self, mcp_id: str = "mis-http", **overrides: object) -> McpServerSpec:
        fields: dict[str, object] = {"mcp_id": mcp_id, "transport": "http", "url": self.url, "timeout_s": 20}
        fields.update(overrides)
        return McpServerSpec.model_validate(fields)


@pytest.fixture
def http_server() -> Iterator[HttpServer]:
    server = HttpServer()
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def pool() -> Iterator[McpPool]:
    """A fresh pool with the stdio test server registered as 'mis'; closed afterwards."""
    fresh = McpPool()
    fresh.register(stdio_spec())
    try:
        yield fresh
    finally:
        fresh.close()


@pytest.fixture(scope="module")
def shared_pool() -> Iterator[McpPool]:
    """One pool per module for tests that do not break their server."""
    fresh = McpPool()
    fresh.register(stdio_spec())
    try:
        yield fresh
    finally:
        fresh.close()


@pytest.fixture(autouse=True)
def _engine_pool_is_not_the_webs() -> Iterator[None]:
    """The engine runs without Django: its tests never use the web's guarded pool (its stdio
    allow-list refuses the engine's temporary seed projects). pytest-django runs the database tests
    first, and the first of them that opened an MCP session installed that pool process-wide."""
    from llamon_agent.mcp import pool as mcp_pool

    installed = mcp_pool.set_pool(None)
    guarded = installed is not None and installed.stdio_allowed is not None
    mcp_pool.set_pool(None if guarded else installed)
    yield
    if guarded:
        made = mcp_pool.set_pool(installed)  # the web's pool, back for the web's tests
        if made is not None and made is not installed:
            made.close(timeout=10)


@pytest.fixture
def raised_cost_limit(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """A per-rule cost limit of 10**9 units (LLAMON_EXPR_COST_BUDGET), for tests of what an
    expression does that the default limit refuses at the data cap (sorting request data)."""
    from llamon_agent import settings

    monkeypatch.setenv("LLAMON_EXPR_COST_BUDGET", str(10**9))
    settings.cost_budgets.cache_clear()
    yield 10**9
    monkeypatch.delenv("LLAMON_EXPR_COST_BUDGET")
    settings.cost_budgets.cache_clear()
