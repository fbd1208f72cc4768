"""The graph of a flow run as inline SVG, drawn on the server (no browser library).

A flow run's first trace step is kind ``node``, name ``graph``; its input holds LangGraph's
mermaid text and plain ``nodes``/``edges`` lists (llamon_agent.flow.graph_view). This module
lays the nodes out in layers (longest path from ``__start__``, back edges ignored), draws
boxes and arrows (conditional edges dashed) and colours each node by what its step did in
this run, so the path a conditional flow took is visible at a glance.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from typing import Any

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

GRAPH_STEP_NAME = "graph"
START, END = "__start__", "__end__"
ROW_H, BOX_H, GAP_X, PAD, CHAR_W, MIN_W = 78, 34, 28, 16, 7.6, 72
FILL = {"ok": "#e3f4e6", "error": "#fde2e1", "running": "#fff4d6", "unused": "#f4f4f6", "terminal": "#ffffff"}
STROKE = {
    "ok": "#2e7d32",
    "error": "#c62828",
    "running": "#b7791f",
    "unused": "#9a9aa6",
    "terminal": "#6b6b78",
}


def flow_graph(steps: Iterable[Any]) -> dict[str, Any] | None:
    """``{"svg", "mermaid"}`` for a run whose steps include the flow's graph step; None otherwise."""
    steps = list(steps)
    graph = next(
        (
            s
            for s in steps
            if s.kind == "node"
            and s.name == GRAPH_STEP_NAME
            and isinstance(s.input, dict)
            and "nodes" in s.input
        ),
        None,
    )
    if graph is None:
        return None
    statuses: dict[str, str] = {}
    for s in steps:
        # A node that ran twice (a loop) shows its worst outcome.
        if s.kind == "node" and s is not graph and statuses.get(s.name) != "error":
            statuses[s.name] = s.status
    nodes = [n for n in graph.input.get("nodes") or [] if isinstance(n, Mapping) and "id" in n]
    edges = [
        e
        for e in graph.input.get("edges") or []
        if isinstance(e, Mapping) and "source" in e and "target" in e
    ]
    return {"svg": graph_svg(nodes, edges, statuses), "mermaid": str(graph.input.get("mermaid") or "")}


def graph_svg(
    nodes: list[Mapping[str, Any]], edges: list[Mapping[str, Any]], statuses: Mapping[str, str] | None = None
) -> SafeString:
    """An ``<svg>`` of the graph; every label is escaped here, so the result is marked safe."""
    statuses = statuses or {}
    ids = [str(n["id"]) for n in nodes]
    labels = {str(n["id"]): str(n.get("label") or n["id"]) for n in nodes}
    pairs = [(str(e["source"]), str(e["target"]), bool(e.get("conditional"))) for e in edges]
    for source, target, _ in pairs:  # an edge may name a node the list left out
        for node_id in (source, target):
            if node_id not in labels:
                ids.append(node_id)
                labels[node_id] = node_id
    rank = _ranks(ids, [(s, t) for s, t, _ in pairs])
    rows: dict[int, list[str]] = defaultdict(list)
    for node_id in ids:
        rows[rank[node_id]].append(node_id)
    width = {node_id: max(MIN_W, int(len(_shown(labels[node_id])) * CHAR_W) + 24) for node_id in ids}
    row_w = {r: sum(width[n] for n in row) + GAP_X * (len(row) - 1) for r, row in rows.items()}
    total_w = max(row_w.values(), default=MIN_W) + 2 * PAD
    pos: dict[str, tuple[float, float]] = {}  # centre of each box
    for r, row in rows.items():
        x = (total_w - row_w[r]) / 2
        for node_id in row:
            pos[node_id] = (x + width[node_id] / 2, PAD + r * ROW_H + BOX_H / 2)
            x += width[node_id] + GAP_X
    total_h = PAD * 2 + (max(rows, default=0)) * ROW_H + BOX_H

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="flow-graph-svg" role="img" '
        f'aria-label="flow graph" width="{total_w:.0f}" height="{total_h:.0f}" '
        f'viewBox="0 0 {total_w:.0f} {total_h:.0f}" font-family="system-ui, sans-serif" font-size="13">',
        '<defs><marker id="flow-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#6b6b78"/></marker></defs>',
    ]
    for source, target, conditional in pairs:
        parts.append(_edge(pos[source], pos[target], conditional, rank[target] <= rank[source]))
    for node_id in ids:
        parts.append(_node(node_id, labels[node_id], pos[node_id], width[node_id], statuses.get(node_id)))
    parts.append("</svg>")
    return mark_safe("".join(parts))  # every text above went through escape()


def _ranks(ids: list[str], pairs: list[tuple[str, str]]) -> dict[str, int]:
    """Layer of each node: the longest path from the roots, after dropping the edges that close cycles."""
    successors: dict[str, list[str]] = defaultdict(list)
    for source, target in pairs:
        successors[source].append(target)
    back: set[tuple[str, str]] = set()
    state: dict[str, int] = {}  # 1 on the DFS stack, 2 done

    def visit(node: str) -> None:
        stack = [(node, iter(successors[node]))]
        state[node] = 1
        while stack:
            current, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[current] = 2
                stack.pop()
            elif state.get(child) == 1:
                back.add((current, child))
            elif child not in state:
                state[child] = 1
                stack.append((child, iter(successors[child])))

    for node in ([START] if START in ids else []) + ids:
        if node not in state:
            visit(node)
    indegree = dict.fromkeys(ids, 0)
    forward: dict[str, list[str]] = defaultdict(list)  # each node's edges once, not every edge per node
    for source, target in pairs:
        if (source, target) not in back:
            forward[source].append(target)
            indegree[target] += 1
    rank = dict.fromkeys(ids, 0)
    queue = deque(n for n in ids if indegree[n] == 0)
    while queue:
        node = queue.popleft()
        for target in forward[node]:
            rank[target] = max(rank[target], rank[node] + 1)
            indegree[target] -= 1
            if indegree[target] == 0:
                queue.append(target)
    if END in rank:  # the end sits below everything, even after a short branch
        rank[END] = max((r for n, r in rank.items() if n != END), default=0) + 1
    return rank


def _shown(label: str) -> str:
    return {START: "start", END: "end"}.get(label, label)


def _node(node_id: str, label: str, centre: tuple[float, float], width: int, status: str | None) -> str:
    x, y = centre
    terminal = node_id in (START, END)
    kind = "terminal" if terminal else (status if status in FILL else "unused")
    radius = BOX_H / 2 if terminal else 6
    title = f"{label}: {status}" if status else (label if terminal else f"{label}: not run")
    return (
        f'<g class="flow-node flow-node-{escape(kind)}" data-node="{escape(node_id)}">'
        f"<title>{escape(title)}</title>"
        f'<rect x="{x - width / 2:.1f}" y="{y - BOX_H / 2:.1f}" width="{width}" height="{BOX_H}" rx="{radius:.0f}" '
        f'fill="{FILL[kind]}" stroke="{STROKE[kind]}" stroke-width="1.5"/>'
        f'<text x="{x:.1f}" y="{y + 4.5:.1f}" text-anchor="middle" fill="#1f1f29">{escape(_shown(label))}</text></g>'
    )


def _edge(a: tuple[float, float], b: tuple[float, float], conditional: bool, backwards: bool) -> str:
    dash = ' stroke-dasharray="5 4"' if conditional else ""
    if backwards:  # a loop back up: a curve out to the right
        (x1, y1), (x2, y2) = (a[0] + 10, a[1]), (b[0] + 10, b[1])
        bend = max(x1, x2) + 60
        d = f"M{x1:.1f},{y1:.1f} C{bend:.1f},{y1:.1f} {bend:.1f},{y2:.1f} {x2 + 30:.1f},{y2:.1f}"
    else:
        x1, y1 = a[0], a[1] + BOX_H / 2
        x2, y2 = b[0], b[1] - BOX_H / 2 - 1
        mid = (y1 + y2) / 2
        d = f"M{x1:.1f},{y1:.1f} C{x1:.1f},{mid:.1f} {x2:.1f},{mid:.1f} {x2:.1f},{y2:.1f}"
    return (
        f'<path class="flow-edge" d="{d}" fill="none" stroke="#6b6b78" stroke-width="1.3"{dash} '
        f'marker-end="url(#flow-arrow)"/>'
    )
