"""The MCP pool with either major of the mcp SDK: against servers built on mcp 2, and running with
mcp 2 installed.

tests/servers/orders_server.py runs on mcp 2 (``MCPServer``, from var/venvs/mcp-2:
tests/support/side_venvs.py) and on mcp 1.x (``FastMCP``, the project's python). The pool speaks
MCP itself (llamon_agent.mcp.session: its own JSON-RPC session, request ids and streamable-HTTP
client), so it imports no part of the mcp library and offers the 2025-11-25 handshake revision,
which both majors answer (mcp 2's 2026-07-28 per-request envelope is not used).

* In this process (mcp 1.x installed): the pool against the mcp 2 server over stdio, streamable
  HTTP with sessions and stateless streamable HTTP.
* In var/venvs/mcp-2 (mcp 2 installed, ``sdk/src`` on PYTHONPATH): tests/servers/pool_probe.py runs
  the pool against the mcp 2 and the mcp 1.x server, each over stdio and streamable HTTP.

Both are held to the same facts (pool_probe.probe). The checks of a transport are one test, so that
xdist, which deals a module's tests out to all its workers, starts each server once, not once in
every worker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from llamon_agent.mcp.pool import McpPool
from llamon_agent.mcp.spec import McpServerSpec
from tests.engine.conftest import ROOT, HttpServer
from tests.servers.pool_probe import probe
from tests.support.side_venvs import MCP_2

SERVER = ROOT / "tests" / "servers" / "orders_server.py"
PROBE = ROOT / "tests" / "servers" / "pool_probe.py"

EXPECTED: dict[str, Any] = {
    "tools": ["count_orders", "get_order", "session_facts", "slow_answer"],
    "get_order": {
        "description": "Look an order up by its id.",
        "required": ["order_id"],
        "input": {"order_id": "string"},
        "output": {"order_id": "string", "status": "string", "items": "integer", "total": "number"},
    },
    "count_orders_output": {"result": {"title": "Result", "type": "integer"}},
    # Structured results keep their JSON types; a scalar is unwrapped from {"result": ...}.
    "get_order_result": [{"order_id": "A-1", "status": "shipped", "items": 2, "total": 39.5}, []],
    "count_orders_result": [1, "int", []],
    "protocol_version": "2025-11-25",  # the newest handshake revision the pool offers
    "tool_error": ["McpToolError", True],
    "langchain": "pending",
    "timeout": [
        "McpTimeoutError",
        "MCP server '{server}', tool 'slow_answer': no answer within 0.3s; the request was cancelled",
    ],
    # A stateless server cannot match notifications/cancelled (its own POST, with no session) to the
    # request it names: the pool also closes the request's stream, which cancels the tool there too.
    "cancelled_on_server": 1,
    "after_timeout": "done",
    "connects": 1,
}


def expected(server: str) -> dict[str, Any]:
    facts = json.loads(json.dumps(EXPECTED))
    facts["timeout"][1] = facts["timeout"][1].format(server=server)
    return facts


@pytest.fixture(scope="module")
def v2_pool() -> Iterator[McpPool]:
    pool = McpPool()
    try:
        yield pool
    finally:
        pool.close()


def _http_server(python: str, stateless: bool = False) -> Iterator[HttpServer]:
    server = HttpServer([python, str(SERVER), *(["--stateless"] if stateless else [])])
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture(scope="module")
def v2_http() -> Iterator[HttpServer]:
    yield from _http_server(str(MCP_2.python()))


@pytest.fixture(scope="module")
def v2_stateless() -> Iterator[HttpServer]:
    yield from _http_server(str(MCP_2.python()), stateless=True)


@pytest.fixture
def server(request: pytest.FixtureRequest, v2_pool: McpPool) -> str:
    """The mcp_id of the mcp 2 server over this transport, registered in the module's pool."""
    mcp_id = f"v2-{request.param}"
    if request.param == "stdio":
        fields = {"transport": "stdio", "command": str(MCP_2.python()), "args": [str(SERVER)]}
    else:
        http: HttpServer = request.getfixturevalue(f"v2_{request.param}")
        fields = {"transport": "http", "url": http.url}
    v2_pool.register(McpServerSpec.model_validate({"mcp_id": mcp_id, "timeout_s": 20, **fields}))
    return mcp_id


@pytest.mark.parametrize("server", ["stdio", "http", "stateless"], indirect=True)
def test_the_pool_works_against_an_mcp2_server(v2_pool: McpPool, server: str) -> None:
    assert probe(v2_pool, server) == expected(server)


def test_the_pool_works_with_mcp2_installed_against_servers_on_both_majors(
    v2_http: HttpServer, subtests: pytest.Subtests
) -> None:
    python = str(MCP_2.python())
    v1_http = _http_server(sys.executable)
    v1_http_server = next(v1_http)
    try:
        specs = [
            {"mcp_id": "v2-stdio", "transport": "stdio", "command": python, "args": [str(SERVER)]},
            {"mcp_id": "v2-http", "transport": "http", "url": v2_http.url},
            {"mcp_id": "v1-stdio", "transport": "stdio", "command": sys.executable, "args": [str(SERVER)]},
            {"mcp_id": "v1-http", "transport": "http", "url": v1_http_server.url},
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT / "sdk" / "src")}  # the SDK from source, no install
        run = subprocess.run(
            [python, str(PROBE), json.dumps([{**spec, "timeout_s": 20} for spec in specs])],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=False,
        )
    finally:
        v1_http.close()
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    assert report["mcp"].startswith("2.")  # the pool ran beside mcp 2
    for spec in specs:
        with subtests.test(server=spec["mcp_id"]):
            assert report["servers"][spec["mcp_id"]] == expected(spec["mcp_id"])
