"""Loopback HTTP stubs that answer every request with one status (and Location) and count the requests:
the stand-in for an MCP URL that redirects, or for the internal host it redirects to."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every request with ``self.server.answer`` and counts requests."""

    def _answer(self) -> None:
        self.server.hits += 1  # type: ignore[attr-defined]
        status, location = self.server.answer  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.send_response(status)
        if location:
            self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def http_stubs() -> Iterator:
    """Start loopback HTTP stubs: ``start(status, location)`` -> server with ``.url`` and ``.hits``;
    all stopped on exit (the ``http_stub`` fixture of tests/conftest.py)."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(status: int = 404, location: str | None = None) -> http.server.ThreadingHTTPServer:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
        server.hits = 0  # type: ignore[attr-defined]
        server.answer = (status, location)  # type: ignore[attr-defined]
        server.url = f"http://127.0.0.1:{server.server_address[1]}/mcp"  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
