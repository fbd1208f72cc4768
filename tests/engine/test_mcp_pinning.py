"""DNS rebinding: the pool connects to the addresses its URL guard checked, never to a second lookup."""

from __future__ import annotations

import asyncio
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import httpx

from llamon_agent.mcp import McpPool, McpServerSpec
from llamon_agent.mcp.pool import pin_request
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
    try:
        request = httpx.Request("GET", f"http://mcp.rebind.invalid:{port}/mcp")
        pin_request(request, {"mcp.rebind.invalid": "127.0.0.1"})
        assert request.extensions["sni_hostname"] == "mcp.rebind.invalid"

        async def send() -> httpx.Response:
            async with httpx.AsyncClient(trust_env=False) as client:
                return await client.send(request)

        response = asyncio.run(send())
    finally:
        server.shutdown()
    assert response.status_code == 200 and response.text == "pinned"
    assert seen == [f"mcp.rebind.invalid:{port}"]


def test_a_request_to_another_host_is_not_rewritten() -> None:
    request = httpx.Request("GET", "http://127.0.0.1:9/mcp")
    pin_request(request, {"mcp.example.test": "127.0.0.2"})
    assert request.url.host == "127.0.0.1" and "sni_hostname" not in request.extensions


def test_the_pool_uses_the_address_its_guard_returned(tmp_path) -> None:
    """End to end: the guard's answer (not a lookup of the name) is where the pool connects."""
    import subprocess

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "servers" / "misbehaving.py"), "--http", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
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
