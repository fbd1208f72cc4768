"""Issue 18: a LangGraph app with a MultiServerMCPClient connection dict gets llamon's pre-step.

The connection dict (langchain-mcp-adapters' shape) becomes the registry
(llamon_agent.mcp.langchain_compat), and ``prestep_node`` runs the routing rules as the first
node of a plain ``StateGraph``, tracing into the sink it finds (config or the running trace).
The graph tests use the real demo MCP servers of sdk/src/llamon_agent/demo_servers: order-service over
stdio and knowledge-base over streamable HTTP; the model node is the product's offline model.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_core.messages import AIMessage, SystemMessage
from langgraph.graph import END, START, MessagesState, StateGraph

from llamon_agent.flow import Flow, FlowState, arun_flow
from llamon_agent.flow.prestep_node import PrestepFailedError, prestep_node
from llamon_agent.mcp.errors import RegistryError, UnknownServerError
from llamon_agent.mcp.langchain_compat import ConnectionsRegistry, spec_from_connection
from llamon_agent.mcp.pool import McpPool
from llamon_agent.models import OFFLINE_ANSWER_HEADER, OfflineChatModel
from llamon_agent.prestep import MCP_NOT_LOADED
from llamon_agent.tools import AgentRequest, DeterministicContext, deterministic_tool
from llamon_agent.trace import ListSink, traced
from tests.conftest import free_port

pytestmark = pytest.mark.timeout(120)
SERVERS = Path(__file__).resolve().parents[2] / "sdk" / "src" / "llamon_agent" / "demo_servers"


# --------------------------------------------------------------------------- the connection dict


def test_stdio_and_every_http_spelling_map_to_specs() -> None:
    env = {"KB_TOKEN": "s3cret", "PATH": "/usr/bin"}
    stdio = spec_from_connection(
        "kb",
        {"transport": "stdio", "command": "python", "args": ["kb.py"], "env": {"KB_TOKEN": "s3cret"}},
        environ=env,
    )
    assert (stdio.transport, stdio.command, stdio.args, stdio.env) == (
        "stdio",
        "python",
        ["kb.py"],
        ["KB_TOKEN"],
    )
    for spelling in ("streamable_http", "streamable-http", "http"):
        spec = spec_from_connection(
            "orders",
            {
                "transport": spelling,
                "url": "http://127.0.0.1:8765/mcp",
                "timeout": timedelta(seconds=5),
                "headers": {"Authorization": "Bearer ${KB_TOKEN}", "X-Tenant": "${TENANT}"},
                "sse_read_timeout": 60,
                "terminate_on_close": True,
            },
        )
        assert (spec.transport, spec.url, spec.timeout_s) == ("http", "http://127.0.0.1:8765/mcp", 5.0)
        assert spec.headers == ["KB_TOKEN", "X-Tenant=TENANT"]
        assert spec.header_pairs({"KB_TOKEN": "t", "TENANT": "acme"}) == {
            "Authorization": "Bearer t",
            "X-Tenant": "acme",
        }


@pytest.mark.parametrize(
    ("connection", "message"),
    [
        ({"transport": "sse", "url": "http://127.0.0.1:8000/sse"}, "transport 'sse' is not supported"),
        ({"transport": "websocket", "url": "ws://127.0.0.1:1/ws"}, "transport 'websocket' is not supported"),
        ({"transport": "grpc", "url": "x"}, "transport must be 'stdio'"),
        ({"url": "http://127.0.0.1:1/mcp"}, "transport must be 'stdio'"),
        ({"transport": "stdio", "args": []}, "a stdio server needs a command"),
        ({"transport": "http"}, "an http server needs a url"),
        ({"transport": "stdio", "command": "python", "args": [], "cwd": "/srv"}, "'cwd' is not supported"),
        ({"transport": "http", "url": "http://127.0.0.1:1/mcp", "auth": object()}, "'auth' is not supported"),
        (
            {"transport": "http", "url": "http://127.0.0.1:1/mcp", "session_kwargs": {"x": 1}},
            "session_kwargs",
        ),
        ({"transport": "stdio", "command": "python", "args": [], "encoding": "latin-1"}, "utf-8"),
        ({"transport": "stdio", "command": "python", "args": [], "urll": "x"}, "unknown key(s)"),
        (
            {"transport": "stdio", "command": "python", "args": [], "env": {"DEBUG": "1"}},
            "os.environ['DEBUG']",
        ),
        ({"transport": "stdio", "command": "python", "args": [], "env": {"A=B": "1"}}, "not a variable name"),
        (
            {"transport": "http", "url": "http://127.0.0.1:1/mcp", "headers": {"X-Key": "abc"}},
            "keeps header values out",
        ),
        (
            {"transport": "http", "url": "http://127.0.0.1:1/mcp", "headers": {"Bad Header": "${K}"}},
            "headers",
        ),
        ({"transport": "http", "url": "http://127.0.0.1:1/mcp", "timeout": 0}, "timeout_s"),
        ("http://127.0.0.1:1/mcp", "must be a dict"),
    ],
)
def test_what_cannot_be_mapped_is_refused_with_a_reason(connection: Any, message: str) -> None:
    with pytest.raises(RegistryError) as err:
        spec_from_connection("orders", connection, environ={})
    assert message in str(err.value) and "'orders'" in str(err.value)


def test_a_name_that_is_not_an_mcp_id_is_refused() -> None:
    with pytest.raises(RegistryError, match="mcp_id must be"):
        ConnectionsRegistry({"Orders Service": {"transport": "http", "url": "http://127.0.0.1:1/mcp"}})


def test_the_registry_answers_like_the_file_registry() -> None:
    registry = ConnectionsRegistry({"orders": {"transport": "http", "url": "http://127.0.0.1:1/mcp"}})
    assert list(asyncio.run(registry.get(["orders"]))) == ["orders"]
    with pytest.raises(UnknownServerError):
        asyncio.run(registry.get(["crm"]))


# --------------------------------------------------------------------------- a real LangGraph app


@pytest.fixture(scope="module")
def kb_url() -> Iterator[str]:
    """The demo knowledge-base over streamable HTTP on a free loopback port."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(SERVERS / "knowledge_base.py"),
            "--http",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, "knowledge_base.py --http exited early"
            try:
                httpx.get(url, timeout=1)  # any HTTP answer: listening
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "knowledge_base.py --http did not answer within 30 s"
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def pool() -> Iterator[McpPool]:
    fresh = McpPool()
    try:
        yield fresh
    finally:
        fresh.close()


def _connections(kb_url: str) -> dict[str, Any]:
    # Exactly what the user gives MultiServerMCPClient.
    return {
        "orders": {
            "transport": "stdio",
            "command": sys.executable,
            "args": [str(SERVERS / "order_service.py")],
        },
        "kb": {"transport": "streamable_http", "url": kb_url},
    }


@deterministic_tool(mcp_id="orders")
def route_order(ctx: DeterministicContext) -> dict | None:
    if "주문" in ctx.query:
        return {"tool_name": "get_order", "params": {"query": ctx.query}}
    return None


@deterministic_tool(mcp_id="kb")
def route_docs(ctx: DeterministicContext) -> dict | None:
    if "환불" in ctx.query:
        return {"tool_name": "search_docs", "params": {"q": "환불", "limit": 1}}
    return None


@deterministic_tool(mcp_id="crm")
def route_crm(ctx: DeterministicContext) -> dict | None:
    return None


class PrestepState(FlowState, total=False):
    prestep: dict


class ChatState(MessagesState):
    prestep: dict


async def agent(state: ChatState) -> dict:
    """A normal node: the model answers from the messages (the pre-step's block among them)."""
    return {"messages": [await OfflineChatModel().ainvoke(state["messages"])]}


def _chat_graph(rules: list[Any], registry: Any, pool: McpPool) -> Any:
    graph = StateGraph(ChatState)
    graph.add_node("prestep", prestep_node(rules, registry, pool=pool))
    graph.add_node("agent", agent)
    graph.add_edge(START, "prestep")
    graph.add_edge("prestep", "agent")
    graph.add_edge("agent", END)
    return graph.compile()


def _ended(sink: ListSink, kind: str) -> list[Any]:
    return [e for e in sink.events if e.kind == kind and e.phase == "end"]


def test_a_state_graph_runs_the_prestep_then_the_model_and_traces_into_the_config_sink(
    kb_url: str, pool: McpPool, caplog: pytest.LogCaptureFixture
) -> None:
    graph = _chat_graph([route_order, route_docs], _connections(kb_url), pool)
    sink = ListSink()
    with caplog.at_level(logging.INFO, logger="llamon_agent"):
        final = asyncio.run(
            graph.ainvoke(
                {"messages": [("user", "주문 A-1001 환불 가능한가요?")]},
                config={"configurable": {"llamon_trace": sink}},
            )
        )
    assert "Deterministic pre-step 완료: 2건" in caplog.text
    results = final["prestep"]["results"]
    assert [(r["mcp_id"], r["tool_name"]) for r in results] == [
        ("orders", "get_order"),
        ("kb", "search_docs"),
    ]
    assert results[0]["result"]["order"]["order_id"] == "A-1001"  # from the real order-service (stdio)
    assert results[1]["result"]["count"] == 1  # from the real knowledge-base (streamable HTTP)
    system = [m for m in final["messages"] if isinstance(m, SystemMessage)]
    assert len(system) == 1 and "확정 호출 결과" in system[0].content
    answer = final["messages"][-1]
    assert isinstance(answer, AIMessage) and answer.content.startswith(OFFLINE_ANSWER_HEADER)
    assert "get_order (orders)" in answer.content and "search_docs (kb)" in answer.content
    # The trace: the pre-step and one rule step per rule, each fired on its server.
    (prestep,) = _ended(sink, "prestep")
    assert prestep.status == "ok"
    rules = {e.name: e for e in _ended(sink, "rule")}
    assert set(rules) == {"route_order", "route_docs"}
    assert all(e.parent == prestep.id and e.status == "ok" for e in rules.values())


def test_the_node_traces_into_the_running_trace_without_being_given_it(kb_url: str, pool: McpPool) -> None:
    graph = _chat_graph([route_order], _connections(kb_url), pool)
    sink = ListSink()

    async def run() -> dict:
        with traced(sink, "outer"):  # what arun_flow and `llamon run` do around a graph
            return await graph.ainvoke({"messages": [("user", "주문 A-1002 어디쯤인가요")]})

    final = asyncio.run(run())
    assert final["prestep"]["results"][0]["result"]["order"]["order_id"] == "A-1002"
    (prestep,) = _ended(sink, "prestep")
    assert prestep.parent == "outer"
    assert [e.name for e in _ended(sink, "rule")] == ["route_order"]
    # The same compiled graph on another event loop: bound once, the pooled session reused.
    again = asyncio.run(graph.ainvoke({"messages": [("user", "주문 A-1001")]}))
    assert again["prestep"]["results"][0]["result"]["order"]["order_id"] == "A-1001"
    assert len(_ended(sink, "prestep")) == 1  # outside any trace: nothing traced


def test_a_rule_on_a_server_the_dict_lacks_fails_every_request_and_the_model_is_never_called(
    kb_url: str, pool: McpPool
) -> None:
    called: list[Any] = []

    async def model(state: ChatState) -> dict:
        called.append(state)
        return {}

    graph = StateGraph(ChatState)
    graph.add_node("prestep", prestep_node([route_order, route_crm], _connections(kb_url), pool=pool))
    graph.add_node("agent", model)
    graph.add_edge(START, "prestep")
    graph.add_edge("prestep", "agent")
    compiled = graph.compile()
    sink = ListSink()
    with pytest.raises(PrestepFailedError) as err:
        asyncio.run(
            compiled.ainvoke(
                {"messages": [("user", "안녕하세요")]}, config={"configurable": {"llamon_trace": sink}}
            )
        )
    assert str(err.value) == MCP_NOT_LOADED.format(mcp_id="crm") == "MCP 'crm'의 tool이 로드되지 않음"
    assert called == []
    assert _ended(sink, "prestep")[0].status == "error"


def test_arun_flow_traces_a_flow_with_the_prestep_node(kb_url: str, pool: McpPool) -> None:
    async def answer(state: dict) -> dict:
        return {"answer": state["prestep"]["block"]}

    graph = (
        Flow(PrestepState)
        .node("prestep", prestep_node([route_docs], _connections(kb_url), pool=pool))
        .node("answer", answer)
        .chain(START, "prestep", "answer", END)
        .compile()
    )
    sink = ListSink()
    result = asyncio.run(arun_flow(graph, AgentRequest(query="환불 규정 알려줘"), sink=sink))
    assert result.status == "succeeded" and "search_docs" in (result.answer or "")
    nodes = [e.name for e in _ended(sink, "node")]
    assert nodes == ["prestep", "answer", "graph"]
    (prestep,) = _ended(sink, "prestep")
    graph_step = next(e for e in _ended(sink, "node") if e.name == "graph")
    assert prestep.parent == graph_step.id
