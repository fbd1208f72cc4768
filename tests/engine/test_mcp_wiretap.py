"""The pool's wiretap (the JSON-RPC messages of one call) and the stdio stderr tail, on real servers."""

from __future__ import annotations

import pytest

from llamon_agent.mcp.errors import McpTimeoutError
from llamon_agent.mcp.pool import McpPool
from tests.engine.conftest import HttpServer, stdio_spec, wait_until


def _methods(wire: list[dict]) -> list[tuple[str, str]]:
    return [(m["direction"], m["message"].get("method", "reply")) for m in wire]


def test_a_traced_call_hands_back_its_request_and_reply_over_stdio(pool: McpPool) -> None:
    wire: list[dict] = []
    raw, result = pool.call_tool_traced_sync("mis", "add", {"b": 2, "a": 1}, wire=wire)
    assert raw.isError is False and not isinstance(result, Exception)
    assert _methods(wire) == [("sent", "tools/call"), ("received", "reply")]
    request, reply = wire[0]["message"], wire[1]["message"]
    assert request["jsonrpc"] == "2.0" and request["id"] == reply["id"]
    # The arguments go out in the order they were given (not sorted, not the schema's).
    assert list(request["params"]["arguments"]) == ["b", "a"]
    assert "result" in reply and reply["result"]["isError"] is False


def test_only_the_watched_call_is_recorded(pool: McpPool) -> None:
    pool.call_tool_sync("mis", "echo", {"value": "before"})
    wire: list[dict] = []
    pool.call_tool_traced_sync("mis", "echo", {"value": "watched"}, wire=wire)
    pool.call_tool_sync("mis", "echo", {"value": "after"})
    assert len(wire) == 2
    assert wire[0]["message"]["params"]["arguments"] == {"value": "watched"}


def test_a_timed_out_call_still_hands_back_its_request(pool: McpPool) -> None:
    wire: list[dict] = []
    with pytest.raises(McpTimeoutError):
        pool.call_tool_traced_sync("mis", "hang", {"seconds": 30}, timeout=0.5, wire=wire)
    assert _methods(wire)[0] == ("sent", "tools/call")


def test_a_traced_call_over_streamable_http(http_server: HttpServer) -> None:
    fresh = McpPool()
    fresh.register(http_server.spec())
    try:
        wire: list[dict] = []
        fresh.call_tool_traced_sync("mis-http", "echo", {"value": "안녕"}, wire=wire)
        assert _methods(wire) == [("sent", "tools/call"), ("received", "reply")]
        assert "안녕" in str(wire[1]["message"]["result"])
    finally:
        fresh.close()


def test_stderr_tail_is_the_newest_childs_and_never_opens_a_session() -> None:
    fresh = McpPool()
    fresh.register(stdio_spec())
    try:
        assert fresh.stderr_tail_sync("mis") is None  # nothing started: nothing to show, nothing started
        assert fresh.stats_sync("mis")["connects"] == 0
        fresh.call_tool_sync("mis", "stderr_noise", {"lines": 30})
        wait_until(lambda: any("noise line 29" in line for line in fresh.stderr_tail_sync("mis") or []))
        tail = fresh.stderr_tail_sync("mis")
        assert tail is not None and len(tail) <= 20
    finally:
        fresh.close()


def test_stderr_tail_is_none_for_http(http_server: HttpServer) -> None:
    fresh = McpPool()
    fresh.register(http_server.spec())
    try:
        fresh.list_tools_sync("mis-http")
        assert fresh.stderr_tail_sync("mis-http") is None
    finally:
        fresh.close()
