"""Flow agents: explicit LangGraph graphs whose nodes call MCP tools through ``MCPHandle``.

    from llamon_agent.flow import Flow, FlowState, START, END, graph_view, arun_flow

``Flow`` builds the graph (``.node()``, ``.edge()``, ``.edge_conditional()``, ``.compile()``),
``graph_view``/``mermaid`` export it, ``arun_flow`` runs it on one request with a trace.
Project templates for ``llamon new`` live in ``templates/``. See docs/flow.md.
"""

from __future__ import annotations

from llamon_agent.flow.builder import END, START, Flow, FlowState, merge_dicts
from llamon_agent.flow.graph_view import GRAPH_EVENT_NAME, graph_view, mermaid
from llamon_agent.flow.run import FlowResult, NodeTracer, answer_text, arun_flow

__all__ = [
    "END",
    "GRAPH_EVENT_NAME",
    "START",
    "Flow",
    "FlowResult",
    "FlowState",
    "NodeTracer",
    "answer_text",
    "arun_flow",
    "graph_view",
    "merge_dicts",
    "mermaid",
]
