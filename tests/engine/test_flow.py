"""Flow: the graph builder, its mermaid/graph export, traced runs, and the seed's Flow snippets as written."""

from __future__ import annotations

import asyncio
import importlib
import json
import operator
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
import yaml
from langgraph.graph import StateGraph

from llamon_agent.flow import END, GRAPH_EVENT_NAME, START, Flow, answer_text, arun_flow, graph_view, mermaid
from llamon_agent.mcp import MCPNotBoundError, UnknownToolError
from llamon_agent.project import load_project
from llamon_agent.settings import Settings
from llamon_agent.tools import AgentRequest
from llamon_agent.trace import ListSink

pytestmark = pytest.mark.timeout(120)


def forget_project(path: Path) -> None:
    """Undo load_project's sys.path entry and `app` modules (other tests may load another `app`)."""
    for name in [n for n in sys.modules if n == "app" or n.startswith("app.")]:
        del sys.modules[name]
    while str(path.resolve()) in sys.path:
        sys.path.remove(str(path.resolve()))


ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "sdk" / "src" / "llamon_agent" / "demo_servers"


def _request(query: str, **context: Any) -> AgentRequest:
    return AgentRequest(query=query, context=context)


async def _a(state: dict) -> dict:
    return {"results": {"a": state["query"].upper()}}


def _b(state: dict) -> dict:
    return {"results": {"b": state["results"]["a"] + "!"}}


async def _c(state: dict) -> dict:
    return {"answer": state["results"]["b"]}


def _sequential() -> Any:
    flow = Flow().node("a", _a).node("b", _b).node("c", _c)
    return flow.edge(START, "a").edge("a", "b").edge("b", "c").edge("c", END).compile()


# --------------------------------------------------------------------------- the builder


def test_sequential_flow_runs_a_then_b_then_c() -> None:
    state = asyncio.run(_sequential().ainvoke({"query": "hi"}))
    assert state["answer"] == "HI!"
    assert state["results"] == {"a": "HI", "b": "HI!"}


def test_parallel_branches_join_once_both_are_done() -> None:
    async def left(state: dict) -> dict:
        await asyncio.sleep(0.05)
        return {"results": {"left": 1}, "messages": ["left"]}

    async def right(state: dict) -> dict:
        return {"results": {"right": 2}, "messages": ["right"]}

    def join(state: dict) -> dict:
        return {"answer": json.dumps(state["results"], sort_keys=True)}

    flow = Flow().node("start", lambda s: {}).node("left", left).node("right", right).node("join", join)
    flow.edge(START, "start").edge("start", "left").edge("start", "right").edge(["left", "right"], "join")
    state = asyncio.run(flow.edge("join", END).compile().ainvoke({"query": "x"}))
    assert state["answer"] == '{"left": 1, "right": 2}'
    assert sorted(state["messages"]) == ["left", "right"]


def test_edge_conditional_routes_on_the_input() -> None:
    def route(state: dict) -> str:
        return "order" if "주문" in state["query"] else "other"

    flow = Flow().node("classify", lambda s: {}).node("order", lambda s: {"answer": "order"})
    flow.node("fallback", lambda s: {"answer": "fallback"})
    flow.edge(START, "classify").edge_conditional("classify", route, {"order": "order", "other": "fallback"})
    graph = flow.edge("order", END).edge("fallback", END).compile()
    assert asyncio.run(graph.ainvoke({"query": "주문 조회"}))["answer"] == "order"
    assert asyncio.run(graph.ainvoke({"query": "날씨"}))["answer"] == "fallback"


def test_chain_and_reserved_names() -> None:
    flow = Flow().node("a", _a).node("b", _b).node("c", _c).chain(START, "a", "b", "c", END)
    assert flow.nodes == ["a", "b", "c"]
    assert asyncio.run(flow.compile().ainvoke({"query": "x"}))["answer"] == "X!"
    with pytest.raises(ValueError, match="reserved"):
        Flow().node(END, _a)


def test_graph_view_has_mermaid_nodes_and_edges() -> None:
    view = graph_view(_sequential())
    assert view["mermaid"].startswith("---") and "graph TD;" in view["mermaid"]
    assert view["mermaid"] == mermaid(_sequential())
    assert [n["id"] for n in view["nodes"]] == ["__start__", "a", "b", "c", "__end__"]
    assert {(e["source"], e["target"]) for e in view["edges"]} == {
        ("__start__", "a"),
        ("a", "b"),
        ("b", "c"),
        ("c", "__end__"),
    }
    json.dumps(view)  # it travels as a trace event


# --------------------------------------------------------------------------- traced runs


def test_a_flow_run_traces_the_graph_first_then_each_node_then_the_answer() -> None:
    sink = ListSink()
    result = asyncio.run(arun_flow(_sequential(), _request("hi"), sink=sink))
    assert (result.status, result.answer, result.error) == ("succeeded", "HI!", None)
    first = sink.events[0]
    assert (first.kind, first.name, first.phase) == ("node", GRAPH_EVENT_NAME, "start")
    assert "graph TD;" in first.input["mermaid"] and first.input["nodes"] and first.input["edges"]
    nodes = [e for e in sink.events if e.kind == "node" and e.name != GRAPH_EVENT_NAME]
    assert [(e.name, e.phase) for e in nodes] == [
        ("a", "start"),
        ("a", "end"),
        ("b", "start"),
        ("b", "end"),
        ("c", "start"),
        ("c", "end"),
    ]
    assert all(e.parent == first.id for e in nodes)
    assert nodes[1].output == {"results": {"a": "HI"}} and nodes[1].status == "ok"
    assert nodes[0].input["query"] == "hi"
    assert [(e.kind, e.phase) for e in sink.events[-2:]] == [("answer", "start"), ("answer", "end")]
    assert sink.events[-1].output == "HI!"


def test_a_failing_node_fails_the_run_and_names_the_node() -> None:
    async def broken(state: dict) -> dict:
        raise RuntimeError("the upstream said no")

    graph = Flow().node("ok", _a).node("broken", broken).chain(START, "ok", "broken", END).compile()
    sink = ListSink()
    result = asyncio.run(arun_flow(graph, _request("x"), sink=sink))
    assert result.status == "failed"
    assert result.error == "node 'broken' failed: RuntimeError: the upstream said no"
    ended = {e.name: e for e in sink.events if e.kind == "node" and e.phase == "end"}
    assert ended["ok"].status == "ok" and ended["broken"].status == "error"
    assert ended[GRAPH_EVENT_NAME].status == "error"
    assert sink.events[-1].kind == "error"


def test_a_flow_without_an_answer_fails_with_a_hint() -> None:
    graph = Flow().node("a", lambda s: {}).chain(START, "a", END).compile()
    result = asyncio.run(arun_flow(graph, _request("x")))
    assert result.status == "failed" and "'answer'" in (result.error or "")


def test_graphs_built_with_stategraph_directly_are_traced_too() -> None:
    class State(TypedDict, total=False):
        query: str
        steps: Annotated[list[str], operator.add]
        output: Any

    graph = StateGraph(State)
    graph.add_node("first", lambda s: {"steps": ["first"]})
    graph.add_node("second", lambda s: {"steps": ["second"], "output": {"done": True}})
    graph.add_edge(START, "first")
    graph.add_edge("first", "second")
    graph.add_edge("second", END)
    sink = ListSink()
    result = asyncio.run(arun_flow(graph.compile(), _request("x"), sink=sink))
    assert result.answer == '{"done": true}'
    assert [e.name for e in sink.events if e.kind == "node" and e.phase == "start"] == [
        GRAPH_EVENT_NAME,
        "first",
        "second",
    ]


def test_answer_text_prefers_answer_then_output() -> None:
    assert answer_text({"answer": "a", "output": "o"}) == "a"
    assert answer_text({"output": {"k": "값"}}) == '{"k": "값"}'
    assert answer_text({"answer": "  ", "output": "o"}) == "o"
    assert answer_text({}) is None


# --------------------------------------------------------------------------- the seed's snippets, pasted


SEED_NODES = """
# app/nodes.py (Flow scaffold 기본)
from llamon_agent import MCPHandle

mcp = MCPHandle()  # 모듈 레벨 1회 선언

# app/nodes.py — 노드에서 확정 호출
from app.nodes import mcp

async def business_node(state) -> dict:
    # 노드 조건에 따라 원하는 tool을 직접 호출
    result = await mcp.call("get_order", params={"query": state["query"]})
    return {"output": result, "messages": [...]}
"""

# The page's build_graph uses resolve_env_override without importing it: the import is the one addition.
SEED_GRAPH = """
from llamon_agent import resolve_env_override

from app.nodes import mcp

async def build_graph(settings):
    # 1회만 바인딩 — 이후 노드에서 mcp.call() 사용 가능
    mcp_id = resolve_env_override("MCP_ID", "<FALLBACK>", source_file=__file__)
    await mcp.bind_registry(settings, mcp_ids=[mcp_id], mcp_id=mcp_id)
    ...
"""

# "여러 MCP를 사용하려면 handle을 분리하세요": the page's lines inside a build_graph (its awaits need one).
SEED_TWO_HANDLES = """
from llamon_agent import MCPHandle

crm_mcp = MCPHandle()
web_mcp = MCPHandle()

async def build_graph(settings, crm_id="crm", web_id="knowledge-base"):
    # build_graph에서 각각 bind_registry
    await crm_mcp.bind_registry(settings, mcp_ids=[crm_id], mcp_id=crm_id)
    await web_mcp.bind_registry(settings, mcp_ids=[web_id], mcp_id=web_id)

# 노드에서 용도에 맞게 선택
async def lookup_node(state):
    customer = await crm_mcp.call("get_customer", params={"id": state["user_id"]})
    ...
"""

# The page's CRM has a tool get_customer(id); the demo CRM's is get_customer_profile, so a tiny one.
CRM_SERVER = """
import json, sys
from mcp.server.fastmcp import FastMCP

server = FastMCP("crm", log_level="WARNING")

@server.tool()
def get_customer(id: str) -> dict:
    with open(sys.argv[1], "a", encoding="utf-8") as log:
        log.write(id + "\\n")
    return {"id": id, "name": "김민지"}

server.run(transport="stdio")
"""


@pytest.fixture
def seed_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Settings, Path]]:
    app = tmp_path / "seedflow" / "app"
    app.mkdir(parents=True)
    (app / "__init__.py").write_text("")
    (app / "nodes.py").write_text(textwrap.dedent(SEED_NODES), encoding="utf-8")
    (app / "graph.py").write_text(textwrap.dedent(SEED_GRAPH), encoding="utf-8")
    (app / "multi.py").write_text(textwrap.dedent(SEED_TWO_HANDLES), encoding="utf-8")
    crm = tmp_path / "crm_server.py"
    crm.write_text(textwrap.dedent(CRM_SERVER), encoding="utf-8")
    calls = tmp_path / "crm_calls.txt"
    registry = tmp_path / "registry.yaml"

    def stdio(script: Path, *args: str) -> dict[str, Any]:
        return {
            "transport": "stdio",
            "command": sys.executable,
            "args": [str(script), *args],
            "timeout_s": 30,
        }

    registry.write_text(
        yaml.safe_dump(
            {
                "order-service": stdio(DEMO / "order_service.py"),
                "knowledge-base": stdio(DEMO / "knowledge_base.py"),
                "crm": stdio(crm, str(calls)),
            }
        ),
        encoding="utf-8",
    )
    monkeypatch.setenv("MCP_ID", "order-service")  # what "<FALLBACK>" is overridden with
    yield tmp_path / "seedflow", Settings(registry_file=registry), calls
    forget_project(tmp_path / "seedflow")


def test_seed_flow_snippets_work_as_written(seed_project: tuple[Path, Settings, Path]) -> None:
    path, settings, _ = seed_project
    project = load_project(path)
    assert project.kind == "flow"
    nodes = project.modules["app.nodes"]

    with pytest.raises(MCPNotBoundError):  # before build_graph
        asyncio.run(nodes.business_node({"query": "주문 A-1001 조회"}))

    assert asyncio.run(project.build_graph(settings)) is None  # the page's `...`
    assert nodes.mcp.bound and nodes.mcp.mcp_id == "order-service"

    update = asyncio.run(nodes.business_node({"query": "주문 A-1001 조회"}))
    assert update["output"]["found"] is True and update["output"]["order"]["order_id"] == "A-1001"
    assert update["messages"] == [...]

    # The node in a Flow graph, traced like a served flow.
    graph = Flow().node("business", nodes.business_node).chain(START, "business", END).compile()
    sink = ListSink()
    result = asyncio.run(arun_flow(graph, _request("주문 A-1002 조회"), sink=sink))
    assert result.status == "succeeded" and '"A-1002"' in (result.answer or "")

    with pytest.raises(UnknownToolError):
        asyncio.run(nodes.mcp.call("get_ordr", params={}))


def test_seed_two_handles_side_by_side(seed_project: tuple[Path, Settings, Path]) -> None:
    path, settings, calls = seed_project
    load_project(path)
    multi = importlib.import_module("app.multi")
    asyncio.run(multi.build_graph(settings))
    assert (multi.crm_mcp.mcp_id, multi.web_mcp.mcp_id) == ("crm", "knowledge-base")

    assert asyncio.run(multi.lookup_node({"user_id": "C-1001"})) is None  # the page's `...`
    assert calls.read_text(encoding="utf-8").split() == ["C-1001"]
    docs = asyncio.run(multi.web_mcp.call("search_docs", params={"q": "환불"}))
    assert docs["count"] >= 1
    with pytest.raises(UnknownToolError):  # each handle calls its own server only
        asyncio.run(multi.web_mcp.call("get_customer", params={"id": "C-1001"}))
