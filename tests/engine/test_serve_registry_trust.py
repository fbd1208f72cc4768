"""A served agent distrusts its registry: what a network registry answers cannot run commands here."""

from __future__ import annotations

import asyncio
import http.server
import json
import logging
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from llamon_agent import urlguard
from llamon_agent.mcp.errors import McpError
from llamon_agent.mcp.registry import spec_from_entry
from llamon_agent.mcp.spec import McpServerSpec
from llamon_agent.serve import _bind_servers, served_pool
from llamon_agent.settings import Settings, SettingsError
from tests.support.fake_dns import fake_resolver

DEMO = Path(__file__).resolve().parents[2] / "sdk" / "src" / "llamon_agent" / "demo_servers"


@pytest.fixture
def registry(tmp_path) -> Iterator[tuple[str, dict, Path]]:
    """A loopback registry (the web's /api/registry shape) whose entries the test chooses."""
    entries: dict[str, dict] = {}
    marker = tmp_path / "ran"

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            mcp_id = self.path.rsplit("/", 1)[-1]
            body = json.dumps(entries.get(mcp_id, {})).encode()
            self.send_response(200 if mcp_id in entries else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", entries, marker
    finally:
        server.shutdown()


def test_a_stdio_command_from_a_network_registry_does_not_run(registry, caplog, monkeypatch) -> None:
    url, entries, marker = registry
    entries["evil"] = {"transport": "stdio", "command": "/bin/sh", "args": ["-c", f"touch {marker}"]}
    # The registry as another machine: a name (the tests' own DNS) that leads to the loopback stub.
    monkeypatch.setattr(urlguard, "default_resolver", fake_resolver)
    remote = url.replace("127.0.0.1", "loop.example.com")
    settings = Settings(registry_url=remote, registry_allow_http=True)
    pool = served_pool(settings)

    async def bind_then_use() -> None:
        try:
            await _bind_servers(["evil"], settings, pool)
            with pytest.raises(McpError):  # a request that reaches for it later is refused again
                await pool.list_tools("evil", refresh=True)
        finally:
            await pool.aclose()

    with caplog.at_level(logging.ERROR, logger="llamon_agent"):
        asyncio.run(bind_then_use())
    assert not marker.exists()
    assert "not in LLAMON_MCP_STDIO_ALLOW" in caplog.text


def test_the_operator_may_allow_a_command_and_a_registry_file_is_trusted(registry, tmp_path) -> None:
    url, entries, _ = registry
    entry = {"transport": "stdio", "command": sys.executable, "args": [str(DEMO / "order_service.py")]}
    entries["order-service"] = entry
    remote = "https://registry.bank.example"
    settings = Settings(registry_url=remote, mcp_stdio_allow=sys.executable)
    assert served_pool(settings).stdio_allowed(_spec("order-service", entry))
    assert not served_pool(Settings(registry_url=remote)).stdio_allowed(_spec("order-service", entry))
    # A registry the operator declares their own (their workbench) is trusted, like a file.
    assert served_pool(Settings(registry_url=remote, registry_trusted=True)).stdio_allowed(
        _spec("order-service", entry)
    )
    registry_file = tmp_path / "registry.json"
    registry_file.write_text(json.dumps({"order-service": entry}))
    assert served_pool(Settings(registry_file=registry_file)).stdio_allowed(_spec("order-service", entry))


def _spec(mcp_id: str, entry: dict) -> McpServerSpec:
    return spec_from_entry(mcp_id, entry, source="test")


def test_a_network_registry_cannot_hand_out_the_hosts_secrets_or_metadata_urls(registry) -> None:
    url, _, _ = registry
    pool = served_pool(Settings(registry_url=url))
    assert pool.env_policy.first_refusal(["SECRET_KEY"]) is not None
    assert pool.env_policy.first_refusal(["LLAMON_MCP_ORDERS"]) is None
    with pytest.raises(ValueError, match="metadata|link-local"):
        pool.http_guard("http://169.254.169.254/latest/meta-data/")


@pytest.mark.parametrize(
    ("values", "ok"),
    [
        ({"registry_url": "http://registry.example.com"}, False),
        ({"registry_url": "http://registry.example.com", "registry_allow_http": True}, True),
        ({"registry_url": "https://registry.example.com"}, True),
        ({"registry_url": "http://127.0.0.1:8000"}, True),
        ({"mcp_env_names": "DATABASE_URL"}, False),
    ],
)
def test_a_plain_http_registry_off_this_machine_needs_saying_so(values, ok) -> None:
    if ok:
        Settings(**values)
    else:
        with pytest.raises(SettingsError):
            Settings(**values)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_loopback_registry_is_not_trusted_for_being_loopback(registry, caplog, host) -> None:
    """Any local process (another user's, a compromised tool) can listen on a loopback port: its
    stdio entries do not start unless the operator says the registry is theirs."""
    url, entries, marker = registry
    entries["evil"] = {"transport": "stdio", "command": "/bin/sh", "args": ["-c", f"touch {marker}"]}
    port = url.rsplit(":", 1)[1]
    settings = Settings(registry_url=f"http://{host}:{port}")
    pool = served_pool(settings)

    async def bind() -> None:
        try:
            await _bind_servers(["evil"], settings, pool)
        finally:
            await pool.aclose()

    with caplog.at_level(logging.ERROR, logger="llamon_agent"):
        asyncio.run(bind())
    assert not marker.exists()
    assert "set LLAMON_REGISTRY_TRUSTED=1 if this registry is your own" in caplog.text
    trusted = served_pool(Settings(registry_url=f"http://{host}:{port}", registry_trusted=True))
    assert trusted.stdio_allowed(_spec("evil", entries["evil"]))  # said so: the operator's own
