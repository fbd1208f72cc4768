"""MCPHandle and the registry clients, against real stdio servers and a loopback HTTP registry."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from llamon_agent import MCPHandle
from llamon_agent.mcp import (
    FileRegistry,
    HttpRegistry,
    MCPNotBoundError,
    McpPool,
    RegistryError,
    UnknownServerError,
    UnknownToolError,
    registry_from_settings,
)
from tests.engine.conftest import MISBEHAVING, stdio_spec

pytestmark = pytest.mark.timeout(120)

TOKEN = "test-registry-token"


def _entry(mcp_id: str) -> dict[str, Any]:
    return stdio_spec(mcp_id).to_registry_json()


@pytest.fixture
def registry_file(tmp_path: Path) -> Path:
    path = tmp_path / "registry.json"
    path.write_text(json.dumps({"orders": _entry("orders"), "crm": _entry("crm")}), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def handle_pool() -> Iterator[McpPool]:
    pool = McpPool()
    try:
        yield pool
    finally:
        pool.close()


# ---------------------------------------------------------------------------- MCPHandle


def test_handle_binds_from_a_registry_file_and_calls(registry_file: Path, handle_pool: McpPool) -> None:
    mcp = MCPHandle(pool=handle_pool)
    settings = SimpleNamespace(registry_file=registry_file, registry_url=None)

    async def flow() -> tuple[Any, Any]:
        await mcp.bind_registry(settings, mcp_ids=["orders"], mcp_id="orders")
        return await mcp.call("add", params={"a": 1, "b": 2}), await mcp.call("echo", params={"value": "hi"})

    assert asyncio.run(flow()) == ({"sum": 3}, "hi")
    assert mcp.bound and mcp.mcp_id == "orders" and mcp.mcp_ids == ["orders"]


def test_handle_before_binding_raises_not_bound() -> None:
    mcp = MCPHandle()
    with pytest.raises(MCPNotBoundError, match="bind_registry"):
        asyncio.run(mcp.call("add", params={}))
    with pytest.raises(MCPNotBoundError):
        mcp.call_sync("add")


def test_unknown_tool_lists_the_available_ones(handle_pool: McpPool) -> None:
    mcp = MCPHandle(pool=handle_pool)
    asyncio.run(mcp.bind_specs([stdio_spec("orders")]))
    with pytest.raises(
        UnknownToolError, match="MCP server 'orders' has no tool 'get_ordr'; available tools: .*add"
    ):
        mcp.call_sync("get_ordr", {"a": 1})


def test_two_handles_side_by_side(registry_file: Path, handle_pool: McpPool) -> None:
    orders, crm = MCPHandle(pool=handle_pool), MCPHandle(pool=handle_pool)
    settings = SimpleNamespace(registry_file=str(registry_file))

    async def flow() -> list[Any]:
        await orders.bind_registry(settings, mcp_ids=["orders"], mcp_id="orders")
        await crm.bind_registry(settings, mcp_ids=["crm"], mcp_id="crm")
        return await asyncio.gather(
            orders.call("whoami"), crm.call("whoami"), orders.call("add", {"a": 1, "b": 1})
        )

    orders_who, crm_who, added = asyncio.run(flow())
    assert added == {"sum": 2}
    assert orders_who["pid"] != crm_who["pid"]  # one session per server, not per handle


def test_handle_with_several_servers_needs_mcp_id(registry_file: Path, handle_pool: McpPool) -> None:
    settings = SimpleNamespace(registry_file=registry_file)
    mcp = MCPHandle(pool=handle_pool)
    with pytest.raises(ValueError, match="say which one call\\(\\) uses"):
        asyncio.run(mcp.bind_registry(settings, mcp_ids=["orders", "crm"]))
    asyncio.run(mcp.bind_registry(settings, mcp_ids=["orders", "crm"], mcp_id="crm"))
    assert mcp.call_sync("add", {"a": 2, "b": 2}) == {"sum": 4}
    assert mcp.call_sync("add", {"a": 2, "b": 3}, mcp_id="orders") == {"sum": 5}


def test_handle_uses_the_process_pool_by_default(registry_file: Path) -> None:
    mcp = MCPHandle()

    async def flow() -> Any:
        await mcp.bind_registry(SimpleNamespace(registry_file=registry_file), mcp_ids=["orders"])
        return await mcp.call("add", params={"a": 5, "b": 5})

    assert asyncio.run(flow()) == {"sum": 10}
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(mcp.call_sync("add", {"a": 1, "b": 1})))
    thread.start()
    thread.join(30)
    assert out == [{"sum": 2}]


def test_binding_an_unknown_id_fails_and_keeps_the_handle_unbound(registry_file: Path) -> None:
    mcp = MCPHandle()
    with pytest.raises(
        UnknownServerError, match="unknown MCP server 'nope' in registry file .*known servers: crm, orders"
    ):
        asyncio.run(mcp.bind_registry(SimpleNamespace(registry_file=registry_file), mcp_ids=["nope"]))
    assert not mcp.bound


def test_handle_binds_with_real_settings(registry_file: Path, handle_pool: McpPool) -> None:
    from llamon_agent import settings as settings_module

    settings = settings_module.Settings(registry_file=registry_file)
    mcp = MCPHandle(pool=handle_pool)
    asyncio.run(mcp.bind_registry(settings, mcp_ids=["orders"], mcp_id="orders"))
    assert mcp.call_sync("add", {"a": 1, "b": 2}) == {"sum": 3}


# ---------------------------------------------------------------------------- FileRegistry


def test_yaml_registry_file_with_ids_taken_from_keys(tmp_path: Path) -> None:
    path = tmp_path / "registry.yaml"
    entry = _entry("orders")
    del entry["mcp_id"]
    path.write_text(yaml.safe_dump({"orders": entry}), encoding="utf-8")
    specs = asyncio.run(FileRegistry(path).get(["orders"]))
    assert specs["orders"].args == [str(MISBEHAVING)]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "invalid JSON"),
        ("[1, 2]", "must hold one object mapping each mcp_id"),
        (
            '{"orders": {"transport": "stdio"}}',
            "entry for 'orders' is invalid: .*a stdio server needs a command",
        ),
        ('{"orders": {"transport": "ftp", "command": "x"}}', "entry for 'orders' is invalid: transport"),
        ('{"orders": {"mcp_id": "crm", "transport": "stdio", "command": "x"}}', "says mcp_id='crm'"),
        (
            '{"orders": {"transport": "stdio", "command": "x", "env": ["A=secret"]}}',
            "variable names, not values",
        ),
    ],
)
def test_bad_registry_file_is_a_clear_error(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "registry.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(RegistryError, match=message):
        asyncio.run(FileRegistry(path).get(["orders"]))


def test_missing_registry_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match="cannot be read"):
        asyncio.run(FileRegistry(tmp_path / "absent.yaml").get(["orders"]))


# ---------------------------------------------------------------------------- HttpRegistry


class _RegistryHandler(BaseHTTPRequestHandler):
    specs: dict[str, Any] = {"orders": _entry("orders"), "crm": _entry("crm")}

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self._send(401, {"detail": "bad token"})
        elif self.path == "/api/registry":
            self._send(200, self.specs)
        elif self.path.startswith("/api/registry/") and self.path.rsplit("/", 1)[1] in self.specs:
            self._send(200, self.specs[self.path.rsplit("/", 1)[1]])
        else:
            self._send(404, {"detail": "not found"})

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet tests
        pass


@pytest.fixture(scope="module")
def registry_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _RegistryHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_http_registry_gets_specs_with_the_bearer_token(registry_url: str) -> None:
    registry = HttpRegistry(registry_url, TOKEN)
    specs = asyncio.run(registry.get(["orders", "crm"]))
    assert sorted(specs) == ["crm", "orders"] and specs["crm"].mcp_id == "crm"
    assert sorted(asyncio.run(registry.all())) == ["crm", "orders"]


def test_http_registry_unknown_id_and_bad_token(registry_url: str) -> None:
    with pytest.raises(UnknownServerError, match="unknown MCP server 'nope' in registry http://127.0.0.1"):
        asyncio.run(HttpRegistry(registry_url, TOKEN).get(["nope"]))
    with pytest.raises(RegistryError, match="refused the token .*LLAMON_REGISTRY_TOKEN"):
        asyncio.run(HttpRegistry(registry_url, "wrong").get(["orders"]))


def test_http_registry_that_is_down_is_a_clear_error() -> None:
    with pytest.raises(RegistryError, match="could not be reached"):
        asyncio.run(HttpRegistry("http://127.0.0.1:9", TOKEN, timeout=2).get(["orders"]))


def test_handle_binds_through_an_http_registry(registry_url: str, handle_pool: McpPool) -> None:
    mcp = MCPHandle(pool=handle_pool)
    settings = SimpleNamespace(registry_file=None, registry_url=registry_url, registry_token=TOKEN)
    asyncio.run(mcp.bind_registry(settings, mcp_ids=["crm"], mcp_id="crm"))
    assert mcp.call_sync("add", {"a": 3, "b": 4}) == {"sum": 7}


# ---------------------------------------------------------------------------- registry_from_settings


def test_registry_file_beats_registry_url(tmp_path: Path) -> None:
    both = SimpleNamespace(
        registry_file=tmp_path / "r.json", registry_url="http://127.0.0.1:1", registry_token=None
    )
    assert isinstance(registry_from_settings(both), FileRegistry)
    url_only = SimpleNamespace(registry_url="http://127.0.0.1:1", registry_token=None)
    assert isinstance(registry_from_settings(url_only), HttpRegistry)


def test_no_registry_configured_names_both_variables() -> None:
    with pytest.raises(RegistryError, match="LLAMON_REGISTRY_FILE.*LLAMON_REGISTRY_URL"):
        registry_from_settings(SimpleNamespace())


# ---------------------------------------------------------------------------- demo servers


def test_seed_flow_against_the_demo_order_service(tmp_path: Path, handle_pool: McpPool) -> None:
    script = MISBEHAVING.parents[2] / "sdk" / "src" / "llamon_agent" / "demo_servers" / "order_service.py"
    assert script.exists(), script
    path = tmp_path / "registry.yaml"
    entry = {"transport": "stdio", "command": sys.executable, "args": [str(script)], "timeout_s": 20}
    path.write_text(yaml.safe_dump({"order-service": entry}), encoding="utf-8")
    mcp = MCPHandle(pool=handle_pool)

    async def build_graph_and_call() -> Any:
        await mcp.bind_registry(
            SimpleNamespace(registry_file=path), mcp_ids=["order-service"], mcp_id="order-service"
        )
        return await mcp.call("get_order", params={"query": "주문A-1001 조회"})

    result = asyncio.run(build_graph_and_call())
    assert result["found"] is True and result["order"]["order_id"] == "A-1001"
