"""GoRules zen-engine, the peer the pre-step benchmarks compare with: one decision table in a graph."""

from __future__ import annotations

from typing import Any


def zen_table_decision(table: dict[str, Any], node_id: str) -> Any:
    """A zen-engine decision for a graph Request -> decision table -> Response."""
    import zen

    content = {
        "contentType": "application/vnd.gorules.decision",
        "nodes": [
            {"id": "in", "type": "inputNode", "name": "Request", "position": {"x": 0, "y": 0}},
            {
                "id": node_id,
                "type": "decisionTableNode",
                "name": node_id,
                "position": {"x": 1, "y": 0},
                "content": table,
            },
            {"id": "out", "type": "outputNode", "name": "Response", "position": {"x": 2, "y": 0}},
        ],
        "edges": [
            {"id": "e1", "type": "edge", "sourceId": "in", "targetId": node_id},
            {"id": "e2", "type": "edge", "sourceId": node_id, "targetId": "out"},
        ],
    }
    engine = zen.ZenEngine({"loader": {"type": "static", "content": {"rules.json": content}}})
    return engine.get_decision("rules.json")
