"""The demo MCP servers in sdk/src/llamon_agent/demo_servers, driven by the plain mcp client (stdio and HTTP)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

SERVERS_DIR = Path(__file__).resolve().parents[2] / "sdk" / "src" / "llamon_agent" / "demo_servers"


def _stdio_params(script: str) -> StdioServerParameters:
    # Only PATH and HOME, like the pool gives a stdio child: the demo servers need nothing else.
    env = {key: os.environ[key] for key in ("PATH", "HOME") if key in os.environ}
    return StdioServerParameters(command=sys.executable, args=[str(SERVERS_DIR / script)], env=env)


async def _session_calls(
    params: StdioServerParameters, calls: list[tuple[str, dict[str, Any]]]
) -> tuple[set[str], list[CallToolResult]]:
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = await session.list_tools()
        results = [await session.call_tool(name, arguments) for name, arguments in calls]
    return {tool.name for tool in tools.tools}, results


def _run_stdio(script: str, calls: list[tuple[str, dict[str, Any]]]) -> tuple[set[str], list[CallToolResult]]:
    return asyncio.run(asyncio.wait_for(_session_calls(_stdio_params(script), calls), timeout=30))


def _error_text(result: CallToolResult) -> str:
    assert result.isError
    return " ".join(getattr(block, "text", "") for block in result.content)


def test_order_service_over_stdio_lists_tools_and_answers_with_structured_content() -> None:
    names, (by_query, by_id, no_id, unknown, listed) = _run_stdio(
        "order_service.py",
        [
            ("get_order", {"query": "주문 A-1001 조회 부탁해"}),
            ("get_order", {"order_id": "a-1003"}),
            ("get_order", {"query": "주문 조회 부탁해"}),
            ("get_order", {"order_id": "A-9999"}),
            ("list_orders", {"customer_id": "C-1001"}),
        ],
    )
    assert names == {"get_order", "list_orders"}
    assert not by_query.isError
    assert by_query.structuredContent["order"]["order_id"] == "A-1001"
    assert by_query.structuredContent["order"]["customer_id"] == "C-1001"
    assert by_id.structuredContent["order"]["order_id"] == "A-1003"
    assert no_id.structuredContent["found"] is False
    assert "A-9999 was not found" in _error_text(unknown)
    assert [o["order_id"] for o in listed.structuredContent["orders"]] == ["A-1001", "A-1002"]


def test_list_orders_rejects_unknown_customer_and_status() -> None:
    _, (customer, status) = _run_stdio(
        "order_service.py",
        [
            ("list_orders", {"customer_id": "C-0000"}),
            ("list_orders", {"customer_id": "C-1001", "status": "lost"}),
        ],
    )
    assert "C-0000 was not found" in _error_text(customer)
    assert "Unknown status 'lost'" in _error_text(status)


def test_customer_crm_over_stdio_returns_profile_and_refuses_unknown_id() -> None:
    names, (profile, unknown) = _run_stdio(
        "customer_crm.py",
        [
            ("get_customer_profile", {"customer_id": "C-1001"}),
            ("get_customer_profile", {"customer_id": "C-4040"}),
        ],
    )
    assert names == {"get_customer_profile"}
    assert profile.structuredContent["name"] == "김민지"
    assert profile.structuredContent["tier"] == "premium"
    assert "C-4040 was not found" in _error_text(unknown)


def test_knowledge_base_over_stdio_finds_korean_and_english_docs() -> None:
    names, (korean, english, nothing, bad_limit) = _run_stdio(
        "knowledge_base.py",
        [
            ("search_docs", {"q": "환불은 어떻게 하나요 검색"}),
            ("search_docs", {"q": "card payment dispute", "limit": 1}),
            ("search_docs", {"q": "오늘 날씨"}),
            ("search_docs", {"q": "환불", "limit": 0}),
        ],
    )
    assert names == {"search_docs"}
    assert korean.structuredContent["results"][0]["doc_id"] == "KB-001"
    assert [r["doc_id"] for r in english.structuredContent["results"]] == ["KB-004"]
    assert nothing.structuredContent == {
        "query": "오늘 날씨",
        "terms": ["오늘", "날씨"],
        "count": 0,
        "results": [],
    }
    assert "limit must be between 1 and 10" in _error_text(bad_limit)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def order_service_http() -> Iterator[str]:
    """order-service over streamable HTTP on a free loopback port; yields its /mcp URL."""
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(SERVERS_DIR / "order_service.py"),
            "--http",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 20
        while True:
            if proc.poll() is not None:
                pytest.fail(f"order_service.py --http exited early: {proc.stderr.read().decode()}")
            try:
                # Any HTTP answer means uvicorn is listening (a bare GET on /mcp is a 4xx).
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    pytest.fail("order_service.py --http did not answer within 20 s")
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()


def test_order_service_over_streamable_http_answers_with_structured_content(order_service_http: str) -> None:
    async def scenario() -> tuple[set[str], CallToolResult, CallToolResult]:
        async with (
            streamable_http_client(order_service_http) as (read, write, _),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            tools = await session.list_tools()
            found = await session.call_tool("get_order", {"order_id": "A-1002"})
            missing = await session.call_tool("get_order", {"order_id": "Z-0000"})
        return {tool.name for tool in tools.tools}, found, missing

    names, found, missing = asyncio.run(asyncio.wait_for(scenario(), timeout=30))
    assert names == {"get_order", "list_orders"}
    assert found.structuredContent["order"]["status"] == "delivered"
    assert "Z-0000 was not found" in _error_text(missing)
