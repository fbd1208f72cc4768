"""MCP calls made inside a traced flow's nodes become tool steps, stored before each call starts."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from langgraph.graph import END, START

from llamon_agent import MCPHandle
from llamon_agent.flow import Flow
from llamon_agent.flow.run import arun_flow
from llamon_agent.mcp import McpServerSpec
from llamon_agent.tools import AgentRequest
from llamon_agent.trace import ListSink

ORDER_SERVICE = (
    Path(__file__).resolve().parents[2] / "sdk" / "src" / "llamon_agent" / "demo_servers" / "order_service.py"
)


def test_an_mcp_call_inside_a_node_is_a_tool_step_of_the_flow() -> None:
    mcp = MCPHandle()
    sink = ListSink()

    async def lookup(state: dict) -> dict:
        order = await mcp.call("get_order", params={"query": state["query"]})
        return {"answer": f"{order['order']['order_id']}: {order['order']['status']}"}

    async def main() -> object:
        spec = McpServerSpec(
            mcp_id="order-service", transport="stdio", command=sys.executable, args=[str(ORDER_SERVICE)]
        )
        await mcp.bind_specs([spec], mcp_id="order-service")
        graph = Flow().node("lookup", lookup).edge(START, "lookup").edge("lookup", END).compile()
        return await arun_flow(graph, AgentRequest(query="주문 A-1001 조회"), sink=sink)

    result = asyncio.run(main())
    assert result.status == "succeeded" and result.answer.startswith("A-1001")
    tools = sink.of_kind("tool")
    assert [(e.name, e.phase) for e in tools] == [("get_order", "start"), ("get_order", "end")]
    assert tools[0].meta["mcp_id"] == "order-service" and tools[0].input == {"query": "주문 A-1001 조회"}
    assert tools[1].output["found"] is True and tools[1].status == "ok"
    graph_span = sink.events[0]
    assert tools[0].parent == graph_span.id
    order = [(e.kind, e.name, e.phase) for e in sink.events if e.name in ("lookup", "get_order")]
    assert order == [
        ("node", "lookup", "start"),
        ("tool", "get_order", "start"),
        ("tool", "get_order", "end"),
        ("node", "lookup", "end"),
    ]


def test_an_untraced_call_emits_nothing() -> None:
    """Outside a traced flow, MCPHandle.call is a plain call (no sink, no cost)."""
    from llamon_agent.trace import current_trace

    assert current_trace() is None
