"""Shared by the pre-step benchmarks: how a sample is timed, and GoRules zen-engine (the peer) as one decision table."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any


def measure(func: Callable[[Any], Any], items: Sequence[Any], repeat: int = 1) -> tuple[float, float]:
    """p50 and p99 in microseconds of ``func(item)`` over ``items`` x ``repeat`` (a tenth first as warm-up)."""
    for item in items[: max(1, len(items) // 10)]:
        func(item)
    samples: list[float] = []
    gc.collect()
    gc.disable()  # a collection inside one sample says nothing about the executor
    try:
        for _ in range(repeat):
            for item in items:
                t0 = time.perf_counter_ns()
                func(item)
                samples.append((time.perf_counter_ns() - t0) / 1000.0)
    finally:
        gc.enable()
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return cuts[49], cuts[98]


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
