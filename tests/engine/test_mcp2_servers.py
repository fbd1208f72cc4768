"""The MCP pool (its own MCP client, with mcp 1.x installed) against servers built on mcp 2.

tests/servers/mcp2_server.py is written for mcp 2 (``MCPServer``) and runs from its own virtualenv
(tests/support/side_venvs.py, built by `make install`), over stdio, over streamable HTTP with
sessions and over stateless streamable HTTP. The pool offers handshake revision 2025-11-25, which
mcp 2 servers still answer; their 2026-07-28 per-request envelope is not used.
One pool for the module; each server starts when a test first needs it. The checks of a transport
are one test, so that xdist, which deals a module's tests out to all its workers, starts each mcp 2
server (about 1.3 s of CPU) once, not once in every worker.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from llamon_agent.mcp.errors import McpTimeoutError, McpToolError
from llamon_agent.mcp.pool import McpPool
from llamon_agent.mcp.spec import McpServerSpec
from tests.engine.conftest import ROOT, HttpServer, wait_until
from tests.support.side_venvs import MCP_2

SERVER = ROOT / "tests" / "servers" / "orders_server.py"
HANDSHAKE_VERSION = "2025-11-25"  # the newest revision the pool offers


@pytest.fixture(scope="module")
def v2_pool() -> Iterator[McpPool]:
    pool = McpPool()
    try:
        yield pool
    finally:
        pool.close()


def _http_server(stateless: bool) -> Iterator[HttpServer]:
    server = HttpServer([str(MCP_2.python()), str(SERVER), *(["--stateless"] if stateless else [])])
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture(scope="module")
def v2_http() -> Iterator[HttpServer]:
    yield from _http_server(stateless=False)


@pytest.fixture(scope="module")
def v2_stateless() -> Iterator[HttpServer]:
    yield from _http_server(stateless=True)


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


def _tools_have_names_input_and_output_schemas(pool: McpPool, server: str) -> None:
    tools = {tool.name: tool for tool in pool.list_tools_sync(server)}
    assert sorted(tools) == ["count_orders", "get_order", "session_facts", "slow_answer"]
    get_order = tools["get_order"]
    assert get_order.description == "Look an order up by its id."
    assert get_order.inputSchema["required"] == ["order_id"]
    assert get_order.inputSchema["properties"]["order_id"]["type"] == "string"
    assert get_order.outputSchema is not None
    assert {name: spec["type"] for name, spec in get_order.outputSchema["properties"].items()} == {
        "order_id": "string",
        "status": "string",
        "items": "integer",
        "total": "number",
    }
    # A scalar return is wrapped by the server as {"result": ...}, and its schema says so.
    assert tools["count_orders"].outputSchema["properties"] == {
        "result": {"title": "Result", "type": "integer"}
    }


def _results_keep_their_json_types(pool: McpPool, server: str) -> None:
    assert pool.call_tool_checked_sync(server, "get_order", {"order_id": "A-1"}) == (
        {"order_id": "A-1", "status": "shipped", "items": 2, "total": 39.5},
        [],
    )
    count, warnings = pool.call_tool_checked_sync(server, "count_orders", {"status": "shipped"})
    assert (count, type(count), warnings) == (1, int, [])
    assert pool.call_tool_sync(server, "session_facts")["protocol_version"] == HANDSHAKE_VERSION


def _a_tool_error_is_an_mcp_tool_error(pool: McpPool, server: str) -> None:
    with pytest.raises(McpToolError, match=f"MCP server '{server}', tool 'get_order': .*no order Z-9"):
        pool.call_tool_sync(server, "get_order", {"order_id": "Z-9"})


def _the_pools_langchain_tools_call_the_server(pool: McpPool, server: str) -> None:
    tools = {tool.name: tool for tool in pool.langchain_tools_sync(server)}
    reply = tools["get_order"].invoke({"order_id": "B-7"})
    assert json.loads(reply[0]["text"])["status"] == "pending"


def _a_timeout_cancels_the_call_on_the_server(pool: McpPool, server: str) -> None:
    before = pool.call_tool_sync(server, "session_facts")["cancelled"]
    with pytest.raises(McpTimeoutError, match="no answer within 0.3s; the request was cancelled"):
        pool.call_tool_sync(server, "slow_answer", {"seconds": 5}, timeout=0.3)
    wait_until(
        lambda: pool.call_tool_sync(server, "session_facts")["cancelled"] == before + 1,
        timeout_s=3,
        what="the server to cancel slow_answer",
    )
    assert pool.call_tool_sync(server, "slow_answer", {"seconds": 0}) == "done"


@pytest.mark.parametrize("server", ["stdio", "http", "stateless"], indirect=True)
def test_the_pool_works_against_an_mcp2_server(v2_pool: McpPool, server: str) -> None:
    _tools_have_names_input_and_output_schemas(v2_pool, server)
    _results_keep_their_json_types(v2_pool, server)
    _a_tool_error_is_an_mcp_tool_error(v2_pool, server)
    _the_pools_langchain_tools_call_the_server(v2_pool, server)
    # A stateless server cannot match notifications/cancelled (its own POST, with no session) to the
    # request it names: the pool also closes the request's stream, which cancels the tool there.
    _a_timeout_cancels_the_call_on_the_server(v2_pool, server)
    assert v2_pool.stats_sync(server)["connects"] == 1  # one session throughout
