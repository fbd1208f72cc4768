"""A flow graph as data: LangGraph's mermaid text plus plain node and edge lists.

The web app draws the graph of a flow run from this (it travels as the first trace event of
the run, kind ``node``, name ``graph``); the mermaid text is kept for people who paste it
into a mermaid viewer.
"""

from __future__ import annotations

from typing import Any

GRAPH_EVENT_NAME = "graph"


def graph_view(graph: Any) -> dict[str, Any]:
    """``{"mermaid", "nodes": [{"id", "label"}], "edges": [{"source", "target", "conditional", "label"}]}``."""
    drawable = graph.get_graph() if hasattr(graph, "get_graph") else graph
    nodes = [
        {"id": str(node.id), "label": str(getattr(node, "name", node.id))} for node in drawable.nodes.values()
    ]
    edges = [
        {
            "source": str(edge.source),
            "target": str(edge.target),
            "conditional": bool(edge.conditional),
            "label": "" if edge.data is None else str(edge.data),
        }
        for edge in drawable.edges
    ]
    return {"mermaid": mermaid(drawable), "nodes": nodes, "edges": edges}


def mermaid(graph: Any) -> str:
    """LangGraph's mermaid text of a compiled graph (or of its ``get_graph()``)."""
    drawable = graph.get_graph() if hasattr(graph, "get_graph") else graph
    return str(drawable.draw_mermaid())
