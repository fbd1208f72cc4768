"""Fixtures for the rules app: MCP servers behind the fake DNS, and seed-like rule sets built through services."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from llamon_web.demo import SEED_RULES
from rules.models import RuleSet
from servers import pool as rules_pool
from servers.models import McpServer
from servers.services import mcp_server_refresh_tools
from tests.conftest import free_port, wait_for_port
from tests.support.fake_dns import FAKE_RESOLVER
from tests.support.mcp_servers import ORDER_SCRIPT, kb_server
from tests.support.rule_sets import EXTRA_RULES, build_rule_set


@pytest.fixture
def fake_dns(settings) -> None:
    """Host names resolve through FAKE_DNS only (tests/support/fake_dns.py), never real DNS."""
    settings.LLAMON_URL_RESOLVER = FAKE_RESOLVER


@pytest.fixture(scope="module")
def close_web_pool_after_module() -> Iterator[None]:
    """Stops the web pool's stdio children after the module rather than at interpreter exit, after
    pytest closed its streams."""
    yield
    rules_pool.web_pool_close()


@pytest.fixture(scope="module")
def order_http() -> Iterator[str]:
    """The order-service demo over streamable HTTP on a free loopback port; its /mcp URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, ORDER_SCRIPT, "--http", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc=proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def kb(admin) -> McpServer:
    """knowledge-base over stdio, tools refreshed."""
    server = kb_server(admin)
    mcp_server_refresh_tools(actor=admin, server=server)
    return server


@pytest.fixture
def seed_rule_set(editor, demo_servers) -> RuleSet:
    """Only the seed's three examples."""
    return build_rule_set(editor, "seed", SEED_RULES, "The seed page's examples.")


@pytest.fixture
def demo_rule_set(editor, demo_servers) -> RuleSet:
    """The seed's three examples with a stop rule in between and the extra shapes after them."""
    rules = [SEED_RULES[0], SEED_RULES[1], EXTRA_RULES[0], SEED_RULES[2], *EXTRA_RULES[1:]]
    return build_rule_set(editor, "demo", rules, "Seed examples plus stop, disabled, data_get and files.")
