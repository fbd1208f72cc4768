"""A tiny OpenAI-compatible chat server on 127.0.0.1 and the bodies it answers with: for the model
client's tests (tests/engine/test_models.py) and every test that needs an LLM endpoint to talk to."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from llamon_agent.models import ModelConfig


def completion(
    content: str | None = "안녕하세요",
    tool_calls: list[dict[str, Any]] | None = None,
    model: str = "fake-model",
) -> dict[str, Any]:
    """A chat.completion body as OpenAI-compatible servers send it, with usage."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = [
            {
                "id": call.get("id", f"call_{n}"),
                "type": "function",
                "function": {"name": call["name"], "arguments": json.dumps(call.get("args", {}))},
            }
            for n, call in enumerate(tool_calls)
        ]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


class FakeOpenAI:
    """A tiny OpenAI-compatible server on 127.0.0.1: replies in order, records each request."""

    def __init__(self) -> None:
        self.replies: list[dict[str, Any] | str] = []  # a str is sent as a text/plain 200 (garbage)
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        # Set to 429 (or another error status): every call is refused with it, as a rate-limited
        # endpoint does (retry at once: the client's own retry does not wait).
        self.status = 200
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                fake.requests.append({"path": self.path, "body": body})
                fake.headers.append({k.lower(): v for k, v in self.headers.items()})
                if fake.status != 200:
                    error = {"error": {"message": "Rate limit reached", "type": "rate_limit_error"}}
                    data = json.dumps(error).encode()
                    self.send_response(fake.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.send_header("retry-after-ms", "1")
                    self.end_headers()
                    self.wfile.write(data)
                    return
                reply = fake.replies.pop(0) if fake.replies else completion()
                if isinstance(reply, str):
                    data, kind = reply.encode(), "text/plain"
                else:
                    data, kind = json.dumps(reply).encode(), "application/json"
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def closed_port_url() -> str:
    """An http URL on 127.0.0.1 where nothing listens (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def openai_config(base_url: str, **overrides: Any) -> ModelConfig:
    """A model config for an OpenAI-compatible server at ``base_url`` (key in LLAMON_TEST_LLM_KEY)."""
    fields: dict[str, Any] = {
        "provider": "openai-compatible",
        "base_url": base_url,
        "model": "fake-model",
        "api_key_env": "LLAMON_TEST_LLM_KEY",
        "timeout_s": 5,
    }
    fields.update(overrides)
    return ModelConfig(**fields)
