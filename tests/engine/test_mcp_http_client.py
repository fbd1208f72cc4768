"""The pool's own streamable-HTTP client against a hostile server (an HTTP server in this process).

The server answers the handshake, then each tools/call as its ``kind`` argument says: a reply on
an SSE stream behind a notification, a comment and an empty priming event; a JSON batch; an HTML
page; a body that is not JSON; a JSON-RPC error; an SSE stream that ends without the reply; and a
404 (the server forgot the session). Each ends in its own clear error, and the session lives on.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from llamon_agent.mcp.errors import McpConnectionError, McpProtocolError, McpToolError
from llamon_agent.mcp.pool import McpPool
from llamon_agent.mcp.spec import McpServerSpec

TOOL = {"name": "t", "inputSchema": {"type": "object", "properties": {"kind": {"type": "string"}}}}


def _result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False}


class _Hostile(BaseHTTPRequestHandler):
    seen: list[tuple[str, str | None, str | None, str]] = []  # method, session id, revision, rpc method
    sessions = 0
    forget_once = True

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        message = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        method = message.get("method", "reply")
        session = self.headers.get("mcp-session-id")
        _Hostile.seen.append(("POST", session, self.headers.get("mcp-protocol-version"), method))
        if "id" not in message or "method" not in message:
            return self._send(202, "", b"")
        rid = message["id"]
        if method == "initialize":
            _Hostile.sessions += 1
            result = {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "serverInfo": {"name": "h", "version": "1"},
            }
            return self._json(
                {"jsonrpc": "2.0", "id": rid, "result": result}, session=f"s{_Hostile.sessions}"
            )
        if method == "tools/list":
            return self._sse(
                ": a comment\n\nid: e0\ndata:\n\n"  # a priming event: an id, no data
                'data: {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}}\n\n'
                f"event: message\ndata: {json.dumps({'jsonrpc': '2.0', 'id': rid, 'result': {'tools': [TOOL]}})}\n\n"
            )
        if method == "ping":
            return self._json({"jsonrpc": "2.0", "id": rid, "result": {}})
        kind = message["params"]["arguments"]["kind"]
        if kind == "forget" and _Hostile.forget_once:
            _Hostile.forget_once = False
            return self._send(404, "application/json", b'{"error": "unknown session"}')
        replies: dict[str, tuple[str, bytes]] = {
            "sse": (
                "text/event-stream",
                f"data: {json.dumps({'jsonrpc': '2.0', 'id': rid, 'result': _result('via sse')})}\n\n".encode(),
            ),
            "batch": (
                "application/json",
                json.dumps(
                    [
                        {
                            "jsonrpc": "2.0",
                            "method": "notifications/progress",
                            "params": {"progressToken": 1, "progress": 1},
                        },
                        {"jsonrpc": "2.0", "id": rid, "result": _result("in a batch")},
                    ]
                ).encode(),
            ),
            "forget": (
                "application/json",
                json.dumps({"jsonrpc": "2.0", "id": rid, "result": _result("new session")}).encode(),
            ),
            "html": ("text/html", b"<html>login</html>"),
            "garbage": (
                "application/json",
                b'{"jsonrpc": "2.0", "id": ' + json.dumps(rid).encode() + b', "res',
            ),
            "refused": (
                "application/json",
                json.dumps(
                    {"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": "bad kind"}}
                ).encode(),
            ),
            "no_reply": (
                "text/event-stream",
                b'data: {"jsonrpc": "2.0", "method": "notifications/message", "params": {}}\n\n',
            ),
        }
        kind_type, body = replies[kind]
        self._send(200, kind_type, body)

    def do_DELETE(self) -> None:  # noqa: N802
        _Hostile.seen.append(("DELETE", self.headers.get("mcp-session-id"), None, ""))
        self._send(200, "", b"")

    def _json(self, body: Any, session: str | None = None) -> None:
        self._send(200, "application/json", json.dumps(body).encode(), session)

    def _sse(self, text: str) -> None:
        self._send(200, "text/event-stream", text.encode())

    def _send(self, status: int, kind: str, body: bytes, session: str | None = None) -> None:
        self.send_response(status)
        if kind:
            self.send_header("Content-Type", kind)
        if session:
            self.send_header("mcp-session-id", session)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hostile() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    finally:
        server.shutdown()
        server.server_close()


def test_the_http_client_reads_sse_and_batches_and_names_what_is_wrong(hostile: str) -> None:
    pool = McpPool()
    pool.register(McpServerSpec(mcp_id="h", transport="http", url=hostile, timeout_s=20))
    call = lambda kind: pool.call_tool_sync("h", "t", {"kind": kind})  # noqa: E731
    try:
        assert [tool.name for tool in pool.list_tools_sync("h")] == ["t"]
        assert (call("sse"), call("batch")) == ("via sse", "in a batch")
        with pytest.raises(
            McpProtocolError, match="MCP server 'h', tool 't': unexpected content type 'text/html'"
        ):
            call("html")
        with pytest.raises(
            McpProtocolError, match=r"malformed JSON-RPC reply \(not JSON: .*\): '\{\"jsonrpc\""
        ):
            call("garbage")
        with pytest.raises(McpToolError, match=r"refused the call: bad kind \(JSON-RPC error -32602\)"):
            call("refused")
        assert pool.stats_sync("h")["connects"] == 1  # none of these ended the session
        # The session id and the negotiated revision went with every message after the handshake.
        after = [(sid, version) for verb, sid, version, method in _Hostile.seen if method != "initialize"]
        assert set(after) == {("s1", "2025-06-18")}
        # A 404 to a call: the server forgot the session, so the call never ran: it goes to a new one.
        assert call("forget") == "new session"
        assert pool.stats_sync("h")["connects"] == 2
        with pytest.raises(
            McpConnectionError,
            match="the session died during the call .the server ended the reply stream before answering",
        ):
            call("no_reply")
        assert call("sse") == "via sse"
    finally:
        pool.close()
    assert ("DELETE", "s3", None, "") in _Hostile.seen  # the last session was ended on close
