"""DNS rebinding: the pool connects to the addresses its URL guard checked, never to a second lookup."""

from __future__ import annotations

import asyncio
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import httpx
import pytest

from llamon_agent.mcp import McpPool, McpServerSpec
from llamon_agent.net import DestinationRefused, guarded_async_client
from tests.conftest import free_port, wait_for_port

ROOT = Path(__file__).resolve().parents[2]


def test_a_pinned_request_goes_to_the_checked_address_with_the_name_as_host() -> None:
    """The name below has no DNS record: only the pin can make the request arrive."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            seen.append(self.headers["Host"])
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"pinned")

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://mcp.rebind.invalid:{port}/mcp"

    async def send() -> httpx.Response:
        # What the pool builds for a session: the guard's addresses pinned, never looked up again.
        async with guarded_async_client(url, _no_lookup, pinned=["127.0.0.1"]) as client:
            return await client.get(url)

    try:
        response = asyncio.run(send())
    finally:
        server.shutdown()
    assert response.status_code == 200 and response.text == "pinned"
    assert (
        str(response.request.url) == url
    )  # the caller's request keeps the name (redirects resolve against it)
    assert seen == [f"mcp.rebind.invalid:{port}"]


def _no_lookup(url: str) -> list[str]:
    raise AssertionError(f"a pinned client looked {url} up again")


def test_a_pinned_client_refuses_a_request_to_another_host() -> None:
    async def send() -> None:
        async with guarded_async_client(
            "http://mcp.example.test/mcp", _no_lookup, pinned=["127.0.0.2"]
        ) as client:
            await client.get("http://127.0.0.1:9/mcp")

    with pytest.raises(DestinationRefused, match="may only reach http://mcp.example.test:80"):
        asyncio.run(send())


def test_the_pool_uses_the_address_its_guard_returned(tmp_path) -> None:
    """End to end: the guard's answer (not a lookup of the name) is where the pool connects."""
    import subprocess

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "servers" / "misbehaving.py"), "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    checked: list[str] = []

    def guard(url: str) -> list[str]:
        checked.append(url)
        return ["127.0.0.1"]

    pool = McpPool(http_guard=guard)
    try:
        wait_for_port(port, proc=server)
        # localhost is what the server's Host-header protection accepts; the pin decides the address.
        pool.register(
            McpServerSpec(mcp_id="pinned", transport="http", url=f"http://localhost:{port}/mcp", timeout_s=10)
        )
        assert pool.call_tool_sync("pinned", "echo", {"value": "hi"}) == "hi"
    finally:
        pool.close()
        server.terminate()
        server.wait(timeout=10)
    assert checked == [f"http://localhost:{port}/mcp"]
