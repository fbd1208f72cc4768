"""A small reverse proxy on loopback, as docs/deploy.md puts one in front of gunicorn.

It does what nginx does with `proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for` and
`X-Forwarded-Proto https` (it stands for the TLS proxy): the address it saw the client connect
from is appended to whatever X-Forwarded-For the client sent; the Host header passes unchanged.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "upgrade", "proxy-connection"}


def _handler(upstream_port: int) -> type[BaseHTTPRequestHandler]:
    class Forward(BaseHTTPRequestHandler):
        def _forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            seen = self.client_address[0]
            sent = headers.pop("X-Forwarded-For", "")
            headers["X-Forwarded-For"] = f"{sent}, {seen}" if sent else seen
            headers["X-Forwarded-Proto"] = "https"
            upstream = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=30)
            try:
                upstream.request(self.command, self.path, body=body, headers=headers)
                answer = upstream.getresponse()
                data = answer.read()
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in HOP_BY_HOP and key.lower() != "content-length":
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            finally:
                upstream.close()

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _forward

        def log_message(self, *args: object) -> None:
            pass

    return Forward


@contextmanager
def reverse_proxy(upstream_port: int) -> Iterator[int]:
    """Serve on a free loopback port (all of 127.0.0.0/8), forwarding to ``upstream_port``; yields the port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(upstream_port))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
