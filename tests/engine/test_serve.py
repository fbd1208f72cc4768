"""Serving over A2A (in process, through the ASGI app) and HttpTraceSink against a loopback ingest API."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from llamon_agent.flow import START, Flow
from llamon_agent.serve import FlowRunner, build_app, trace_exporter
from llamon_agent.settings import Settings
from llamon_agent.tools import AgentRequest
from llamon_agent.trace import TraceEvent
from llamon_agent.trace_http import HttpTraceExporter
from tests.support.serve import a2a_v03_send, post_a2a, react_runner, route_missing, route_order

pytestmark = pytest.mark.timeout(60)
TOKEN = "llamon_0123abcd_test"


class FakeIngest:
    """A loopback stand-in for POST /api/runs/ingest: records bodies, answers like llamon-web."""

    def __init__(self, status: int = 201) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.status = status
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.bodies.append(body)
                fake.headers.append(dict(self.headers))
                reply = json.dumps(
                    {
                        "run_id": body.get("run_id", 7),
                        "created": "run_id" not in body,
                        "status": "running",
                        "steps": 0,
                    }
                ).encode()
                self.send_response(fake.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self) -> list[dict[str, Any]]:
        return [e for body in self.bodies for e in body["events"]]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def ingest() -> Iterator[FakeIngest]:
    fake = FakeIngest()
    yield fake
    fake.close()


def _event(n: int) -> TraceEvent:
    return TraceEvent(id=f"e{n}", kind="tool", name=f"t{n}", phase="start", start=time.time())


# --------------------------------------------------------------------------- HttpTraceSink


def test_sink_creates_the_run_then_appends_then_finishes(ingest: FakeIngest) -> None:
    exporter = HttpTraceExporter(ingest.url, TOKEN, flush_interval=0.05, batch_size=3)
    request = AgentRequest(query="주문 조회", context={"userId": "C-1001"})
    sink = exporter.sink(source="served", agent_name="demo", request=request)
    for n in range(7):
        sink.emit(_event(n))
    sink.finish("succeeded", answer="done")
    sink.join(10)
    assert sink.run_id == 7
    first, *rest = ingest.bodies
    assert first["source"] == "served" and first["agent_name"] == "demo" and "run_id" not in first
    assert first["request"] == request.to_json()
    assert all(body["run_id"] == 7 and "request" not in body for body in rest)
    assert all(len(body["events"]) <= 3 for body in ingest.bodies)
    assert [e["id"] for e in ingest.events()] == [f"e{n}" for n in range(7)]  # in order
    assert ingest.bodies[-1]["finish"] == {
        "status": "succeeded",
        "answer": "done",
        "error": "",
        "error_kind": "",
    }
    assert ingest.headers[0]["Authorization"] == f"Bearer {TOKEN}"
    exporter.close()


def test_sink_never_blocks_or_raises_when_llamon_web_is_down(caplog: pytest.LogCaptureFixture) -> None:
    exporter = HttpTraceExporter(
        "http://127.0.0.1:9", None, flush_interval=0.01, retries=2
    )  # nothing listens
    sink = exporter.sink(source="flow", agent_name="x")
    for n in range(50):  # the agent's side only queues: nothing here waits for the dead server
        sink.emit(_event(n))
    sink.finish("failed", error="boom")
    sink.join(10)
    assert sink.failed and sink.run_id is None
    assert "did not take the trace" in caplog.text
    exporter.close()


def test_a_refused_token_is_not_retried() -> None:
    fake = FakeIngest(status=403)
    try:
        exporter = HttpTraceExporter(fake.url, "bad", flush_interval=0.01)
        sink = exporter.sink(source="served", agent_name="x")
        sink.emit(_event(1))
        sink.finish("succeeded")
        sink.join(10)
        assert sink.failed and len(fake.bodies) == 1
        exporter.close()
    finally:
        fake.close()


def test_exporter_close_ends_unfinished_runs_as_cancelled(ingest: FakeIngest) -> None:
    exporter = HttpTraceExporter(ingest.url, TOKEN, flush_interval=0.05)
    sink = exporter.sink(source="served", agent_name="x")
    sink.emit(_event(1))
    exporter.close(timeout=10)
    assert ingest.bodies[-1]["finish"]["status"] == "cancelled"


def test_trace_url_defaults_to_the_registry_llamon_web() -> None:
    exporter = trace_exporter(
        Settings(
            registry_url="http://127.0.0.1:8000",
            registry_token="tok",
            trace_token="llamon_ingest_x",
            _env_file=None,
        )
    )
    assert exporter is not None and exporter.url == "http://127.0.0.1:8000/api/runs/ingest"
    # The served agent's ingest credential, never the registry's (a person's) token.
    assert exporter.client.headers["Authorization"] == "Bearer llamon_ingest_x"
    exporter.close()
    assert trace_exporter(Settings(registry_file="r.yaml", _env_file=None)) is None
    explicit = trace_exporter(
        Settings(registry_file="r.yaml", trace_url="http://127.0.0.1:8100", _env_file=None)
    )
    assert explicit is not None and explicit.url == "http://127.0.0.1:8100/api/runs/ingest"
    explicit.close()


# --------------------------------------------------------------------------- the A2A app, in process


def test_a2a_03_message_send_runs_the_prestep_and_traces_a_served_run(
    ingest: FakeIngest, caplog: pytest.LogCaptureFixture
) -> None:
    exporter = HttpTraceExporter(ingest.url, TOKEN, flush_interval=0.02)
    runner = react_runner([route_order])
    runner.version = {"rule_set": "bank", "ref": "v3", "content_hash": "ab" * 32}  # its tools.py's header
    app = build_app(runner, "http://127.0.0.1:8001/", exporter)
    with caplog.at_level("INFO", logger="llamon_agent"):
        body = post_a2a(app, a2a_v03_send("주문 조회 A-1001", userId="C-1001"))
    result = body["result"]
    assert result["role"] == "agent" and result["metadata"]["status"] == "succeeded"
    assert "확정 호출 결과" in result["parts"][0]["text"] and "shipped" in result["parts"][0]["text"]
    assert "Deterministic pre-step 완료: 1건" in caplog.text
    exporter.close(timeout=10)
    first = ingest.bodies[0]
    assert first["source"] == "served" and first["agent_name"] == "demo"
    # The run carries the version it serves, in its first batch only.
    assert first["version"] == runner.version and all("version" not in b for b in ingest.bodies[1:])
    # The request went through to_request: text, metadata context, the DataPart, the context id.
    assert first["request"]["query"] == "주문 조회 A-1001"
    assert first["request"]["context"]["userId"] == "C-1001" and "sessionId" in first["request"]["context"]
    assert first["request"]["a2a_data"] == [{"chatbotId": "premium-support"}]
    kinds = [e["kind"] for e in ingest.events() if e["phase"] == "end"]
    assert {"prestep", "rule", "llm", "answer"} <= set(kinds)
    assert ingest.bodies[-1]["finish"]["status"] == "succeeded"


def test_a2a_10_send_message_is_answered() -> None:
    app = build_app(react_runner([route_order]), "http://127.0.0.1:8001/")
    message = {
        "messageId": uuid.uuid4().hex,
        "role": "ROLE_USER",
        "parts": [{"text": "주문 조회"}],
        "metadata": {"userId": "C-1001"},
    }
    body = post_a2a(
        app,
        {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}},
        headers={"A2A-Version": "1.0"},
    )
    reply = body["result"]["message"]
    assert reply["role"] == "ROLE_AGENT" and "shipped" in reply["parts"][0]["text"]


def test_an_unbound_rule_server_answers_with_the_seed_error(ingest: FakeIngest) -> None:
    exporter = HttpTraceExporter(ingest.url, TOKEN, flush_interval=0.02)
    app = build_app(react_runner([route_order, route_missing]), "http://127.0.0.1:8001/", exporter)
    result = post_a2a(app, a2a_v03_send("주문 조회"))["result"]
    assert result["parts"][0]["text"] == "MCP 'missing-server'의 tool이 로드되지 않음"
    assert result["metadata"]["status"] == "failed"
    exporter.close(timeout=10)
    finish = ingest.bodies[-1]["finish"]
    assert finish["status"] == "failed" and finish["error"] == "MCP 'missing-server'의 tool이 로드되지 않음"
    assert not [e for e in ingest.events() if e["kind"] == "llm"]  # the LLM is never called


def test_an_unbound_rule_server_fails_also_a_request_no_rule_answers() -> None:
    # docs/cli.md: *every* request fails, not only those a rule on the missing server would answer.
    app = build_app(react_runner([route_order, route_missing]), "http://127.0.0.1:8001/")
    result = post_a2a(app, a2a_v03_send("안녕하세요"))["result"]  # neither rule would fire on this query
    assert result["parts"][0]["text"] == "MCP 'missing-server'의 tool이 로드되지 않음"
    assert result["metadata"]["status"] == "failed"


def test_a_flow_run_is_traced_with_its_graph_first(ingest: FakeIngest) -> None:
    async def lookup(state: dict) -> dict:
        return {"answer": f"looked up {state['query']}"}

    graph = Flow().node("lookup", lookup).chain(START, "lookup").compile()
    exporter = HttpTraceExporter(ingest.url, TOKEN, flush_interval=0.02)
    app = build_app(FlowRunner(graph, "flowy"), "http://127.0.0.1:8001/", exporter)
    result = post_a2a(app, a2a_v03_send("A-1001"))["result"]
    assert result["parts"][0]["text"] == "looked up A-1001"
    exporter.close(timeout=10)
    assert ingest.bodies[0]["source"] == "flow"
    events = ingest.events()
    assert (events[0]["kind"], events[0]["name"]) == ("node", "graph")
    assert {"mermaid", "nodes", "edges"} <= set(events[0]["input"])
    assert [e["name"] for e in events if e["kind"] == "node" and e["phase"] == "end"] == ["lookup", "graph"]


def test_the_agent_card(ingest: FakeIngest) -> None:
    app = build_app(react_runner([route_order]), "http://127.0.0.1:8001/")

    async def go() -> dict[str, Any]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://x") as client:
            return (await client.get("/.well-known/agent-card.json")).json()

    card = asyncio.run(go())
    assert card["name"] == "demo"
    assert card["supportedInterfaces"] == [
        {"url": "http://127.0.0.1:8001/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": "http://127.0.0.1:8001/", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
    ]
    assert card["url"] == "http://127.0.0.1:8001/"  # the 0.3 field a 0.3 client requires
    assert card["skills"][0]["id"] == "react"
    # Streams for 1.0 and 0.3 clients (tests/engine/test_serve_tasks.py); no push notifications.
    assert card["capabilities"] == {"streaming": True, "pushNotifications": False}


def test_a_served_agents_exported_spans_are_masked_like_its_answer() -> None:
    from llamon_agent.guardrails import EMAIL, OutputGuardrail
    from llamon_agent.models import ModelConfig
    from llamon_agent.react import AgentSpec
    from llamon_agent.serve import ReactRunner, served_redactor

    spec = AgentSpec(
        name="demo",
        system_prompt="p",
        rules=[],
        model=ModelConfig(provider="offline"),
        output_guardrail=OutputGuardrail(masks=[EMAIL]),
    )
    runner = ReactRunner(spec, None, [])
    redact = served_redactor(runner, AgentRequest(query="메일 Kim@Example.com 검색"))
    assert redact({"terms": ["메일", "kim", "example", "com"]}) == {"terms": ["메일", *["[이메일]"] * 3]}
    assert served_redactor(react_runner([]), AgentRequest(query="kim@example.com")) is None  # no masks
