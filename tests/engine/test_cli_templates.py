"""Issue 7 acceptance, per template: `llamon new`, the project's own tests, `llamon run` answering A2A.

Every project is made by the installed console script, tested by its own pytest process (its
own rootdir), and served once by `llamon run` for all the requests below. The demo MCP
servers run over stdio (each project's registry.yaml); the http-pipeline's external API is a
loopback server in this process. Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import pytest

from llamon_agent.flow.scaffold import TEMPLATES, new_project

pytestmark = pytest.mark.timeout(300)

VENV_LLAMON = Path(sys.executable).with_name("llamon")
LLAMON = [str(VENV_LLAMON)] if VENV_LLAMON.exists() else [sys.executable, "-m", "llamon_agent.cli"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without LLAMON_* / MCP_ID (the outer shell must not steer the projects)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMON_") and k != "MCP_ID"}
    env.update(extra)
    return env


class _CustomerLookup(BaseHTTPRequestHandler):
    """The http-pipeline's "external API": GET ?q=... -> {"customer_id": ...}."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        query = parse_qs(urlparse(self.path).query).get("q", [""])[0]
        body = json.dumps({"customer_id": "C-1002" if "John" in query else None}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@dataclass
class Served:
    template: str
    path: Path
    url: str
    process: subprocess.Popen[str]
    log: Path

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


@pytest.fixture(scope="module")
def external_api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _CustomerLookup)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/customer-lookup"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def projects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One project per template, made as `llamon new` makes them (in process: the command itself is
    run by tests/test_distribution.py, from the SDK's own wheel)."""
    root = tmp_path_factory.mktemp("projects")
    return {template: _made(template, root / template) for template in TEMPLATES}


def _made(template: str, target: Path) -> Path:
    new_project(template, target)
    return target


@pytest.fixture(scope="module")
def served(projects: dict[str, Path], external_api: str) -> Iterator[dict[str, Served]]:
    """Each project served once by `llamon run` (started together, stopped at the end)."""
    running: dict[str, Served] = {}
    try:
        for template, path in projects.items():
            port = _free_port()
            log = path.parent / f"{template}.log"
            process = subprocess.Popen(
                [*LLAMON, "run", str(path), "--port", str(port)],
                stdout=log.open("w"),
                stderr=subprocess.STDOUT,
                text=True,
                env=clean_env(EXTERNAL_API_URL=external_api),
            )
            running[template] = Served(template, path, f"http://127.0.0.1:{port}/", process, log)
        for s in running.values():
            _wait_ready(s)
        yield running
    finally:
        for s in running.values():
            s.process.terminate()
        for s in running.values():
            try:
                s.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                s.process.kill()


def _wait_ready(s: Served, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if s.process.poll() is not None:
            raise AssertionError(f"`llamon run` of {s.template} exited {s.process.returncode}:\n{s.output()}")
        try:
            if httpx.get(s.url + ".well-known/agent-card.json", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"`llamon run` of {s.template} did not serve within {timeout_s} s:\n{s.output()}")


async def _send(url: str, text: str, metadata: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """One A2A 1.0 message through a2a-sdk's client; the reply's text and metadata."""
    from a2a.client import ClientConfig, create_client
    from a2a.helpers import get_message_text, new_text_part
    from a2a.types import Message, Role, SendMessageRequest
    from google.protobuf.json_format import MessageToDict

    client = await create_client(url, client_config=ClientConfig(streaming=False))
    message = Message(role=Role.ROLE_USER, parts=[new_text_part(text)], message_id=str(uuid.uuid4()))
    if metadata:
        message.metadata.update(metadata)
    replies = [event async for event in client.send_message(SendMessageRequest(message=message))]
    assert len(replies) == 1 and replies[0].HasField("message"), replies
    reply = replies[0].message
    return get_message_text(reply), MessageToDict(reply.metadata)


def send(url: str, text: str, **metadata: Any) -> tuple[str, dict[str, Any]]:
    return asyncio.run(_send(url, text, metadata))


def send_v03(url: str, text: str, **metadata: Any) -> dict[str, Any]:
    """An A2A 0.3 JSON-RPC ``message/send``; the result object."""
    message = {
        "kind": "message",
        "role": "user",
        "messageId": uuid.uuid4().hex,
        "parts": [{"kind": "text", "text": text}],
        "metadata": metadata,
    }
    response = httpx.post(
        url,
        json={"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert "result" in body, body
    return body["result"]


# --------------------------------------------------------------------------- the projects' own tests


@pytest.mark.parametrize("template", TEMPLATES)
def test_generated_project_passes_its_own_tests(projects: dict[str, Path], template: str) -> None:
    path = projects[template]
    # Only pytest itself, as in a fresh project's venv: this venv's plugins (Django, hypothesis,
    # schemathesis, Playwright) are not the project's and cost 3 s of start-up each.
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q"],
        cwd=path,
        capture_output=True,
        text=True,
        env=clean_env(PYTEST_DISABLE_PLUGIN_AUTOLOAD="1"),
        timeout=180,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "failed" not in result.stdout


@pytest.mark.parametrize("template", TEMPLATES)
def test_generated_project_checks_clean(projects: dict[str, Path], template: str) -> None:
    result = subprocess.run(
        # Offline: the demo servers' tools are checked in test_cli_check (a second of CPU each to start).
        [*LLAMON, "check", "--offline", str(projects[template])],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "has no problems" in result.stdout


def test_layout_follows_design(projects: dict[str, Path]) -> None:
    react = projects["react"]
    assert "DETERMINISTIC_TOOLS" in (react / "app" / "tools.py").read_text()
    assert "DEFAULT_PRESTEP_INSTRUCTION" in (react / "app" / "agent.py").read_text()
    for template in TEMPLATES[1:]:
        path = projects[template]
        assert "mcp = MCPHandle()" in (path / "app" / "nodes.py").read_text()
        graph = (path / "app" / "graph.py").read_text()
        assert "async def build_graph(settings)" in graph
        assert 'resolve_env_override("MCP_ID", ' in graph
        assert "await mcp.bind_registry(settings, mcp_ids=[mcp_id], mcp_id=mcp_id)" in graph
        assert "MCP_ID=" in (path / ".env.example").read_text()
        assert "LLAMON_REGISTRY_FILE" in (path / ".env.example").read_text()
    assert "httpx" in (projects["graph-http-pipeline"] / "app" / "nodes.py").read_text()
    assert "edge_conditional" in (projects["graph-conditional"] / "app" / "graph.py").read_text()


# --------------------------------------------------------------------------- `llamon run` over A2A


@pytest.mark.slow
def test_each_served_project_answers_over_a2a(served: dict[str, Served], subtests: pytest.Subtests) -> None:
    """Every served check in one test: the five `llamon run` servers are started once (a module
    fixture is set up again on every test process that runs one of its tests)."""
    react = served["react"]
    with subtests.test("react agent answers from the pre-step"):
        text, meta = send(react.url, "주문 조회 A-1001 부탁해", userId="C-1001", chatbotId="premium-support")
        assert meta["status"] == "succeeded"
        assert "확정 호출 결과" in text and "A-1001" in text and "김민지" in text
        # The seed's integration check: one log line per request, N = calls made.
        _wait_for(lambda: "Deterministic pre-step 완료: 2건" in react.output(), react)
    with subtests.test("react agent answers an A2A 0.3 message/send"):
        result = send_v03(react.url, "환불 규정 검색해줘")
        assert result["kind"] == "message" and result["role"] == "agent"
        assert "search_docs" in result["parts"][0]["text"]
        _wait_for(lambda: "Deterministic pre-step 완료: 1건" in react.output(), react)
    with subtests.test("react agent without a match logs zero calls"):
        text, meta = send(react.url, "안녕하세요")
        assert meta["status"] == "succeeded"  # the offline model says politely it has nothing to go on
        assert "오프라인" in text
        _wait_for(lambda: "Deterministic pre-step 완료: 0건" in react.output(), react)
    with subtests.test("the agent card is served"):
        card = httpx.get(served["graph-sequential"].url + ".well-known/agent-card.json", timeout=10).json()
        assert card["name"] == "graph-sequential"
        assert card["supportedInterfaces"][0]["url"] == served["graph-sequential"].url
        assert card["supportedInterfaces"][0]["protocolVersion"] == "1.0"
    with subtests.test("the sequential flow answers"):
        text, meta = send(served["graph-sequential"].url, "주문 A-1002 상태 알려줘")
        assert meta["status"] == "succeeded"
        assert "A-1002" in text and "delivered" in text
    with subtests.test("the parallel flow answers from both servers"):
        text, _ = send(served["graph-parallel"].url, "환불 규정", userId="C-1003")
        assert "A-1004" in text and "관련 도움말" in text
    with subtests.test("the conditional flow takes the branch the input asks for"):
        url = served["graph-conditional"].url
        assert "processing" in send(url, "A-1003 언제 와요?")[0]
        assert "A-1001" in send(url, "내 주문 보여줘", userId="C-1001")[0]
        assert "주문번호" in send_v03(url, "안녕하세요")["parts"][0]["text"]
    with subtests.test("the http pipeline calls the external API, then MCP"):
        text, meta = send(served["graph-http-pipeline"].url, "John Park 고객 주문")
        assert meta["status"] == "succeeded"
        assert "C-1002" in text and "A-1003" in text


def _wait_for(predicate: Any, s: Served, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"not seen within {timeout_s} s; output of {s.template}:\n{s.output()}")
