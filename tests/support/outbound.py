"""Listeners on 127.0.0.1 and resolvers for the outbound-HTTP tests (redirects, DNS rebinding).

``Listener`` is a real HTTP server that counts every TCP connection it accepts (not only the
requests it reads), so "the refused target never received a connection" is observed, not assumed.
Host names go through the resolvers below, never real DNS.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# (method, path, Host header) -> (status, headers, body); body dicts are sent as JSON.
Reply = tuple[int, dict[str, str], Any]


class _CountingServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.connections = 0

    def get_request(self) -> Any:
        accepted = super().get_request()
        self.connections += 1
        return accepted


class Listener:
    """An HTTP server on 127.0.0.1 answering with ``reply``; records requests and counts connections."""

    def __init__(self, reply: Callable[[str, str, str], Reply] | None = None) -> None:
        self.reply = reply or (lambda method, path, host: (200, {}, {"ok": True}))
        self.requests: list[tuple[str, str, str]] = []
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                host = self.headers.get("Host", "")
                listener.requests.append((self.command, self.path, host))
                status, headers, body = listener.reply(self.command, self.path, host)
                data = json.dumps(body).encode() if not isinstance(body, bytes) else body
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _answer  # noqa: N815 - the stdlib's names

            def log_message(self, *args: object) -> None:
                pass

        self.server = _CountingServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def connections(self) -> int:
        return self.server.connections

    def __enter__(self) -> Listener:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def redirecting_to(location: str, status: int = 302) -> Callable[[str, str, str], Reply]:
    """A ``reply`` that answers every request with a redirect to ``location``."""
    return lambda method, path, host: (status, {"Location": location}, {"moved": location})


class FlippingResolver:
    """A resolver whose answer changes after the first look-up (DNS rebinding); records each call."""

    def __init__(self, first: list[str], then: list[str]) -> None:
        self.first, self.then = first, then
        self.calls: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        return self.first if len(self.calls) == 1 else self.then
