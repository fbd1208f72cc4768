"""A small graph builder on LangGraph that reads like the seed's comparison table.

    flow = Flow()                                   # FlowState, or your own TypedDict
    flow.node("parse", parse).node("lookup", lookup).node("answer", answer)
    flow.edge(START, "parse").edge("parse", "lookup").edge("lookup", "answer").edge("answer", END)
    flow.edge_conditional("parse", route, {"order": "lookup", "other": "answer"})
    graph = flow.compile()                          # a LangGraph CompiledStateGraph

It adds nothing at run time: ``compile()`` returns LangGraph's own compiled graph, so
``ainvoke``, ``get_graph().draw_mermaid()`` and every LangGraph tool work on it. Node
tracing is done by :func:`llamon_agent.flow.run.arun_flow` with callbacks, which also works
for graphs built with ``StateGraph`` directly.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Sequence
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

__all__ = ["END", "START", "Flow", "FlowState", "merge_dicts"]


def merge_dicts(left: dict[str, Any] | None, right: dict[str, Any] | None) -> dict[str, Any]:
    """Reducer for dict channels that parallel branches write to: later keys win."""
    return {**(left or {}), **(right or {})}


class FlowState(TypedDict, total=False):
    """The default state of a flow: the request, what nodes found, and the answer.

    ``results`` and ``messages`` have reducers so that parallel branches can each add to
    them in one step (LangGraph refuses two plain writes to one key in a step).
    """

    query: str
    context: dict[str, Any]
    a2a_data: list[dict[str, Any]] | None
    a2a_files: list[dict[str, Any]] | None
    results: Annotated[dict[str, Any], merge_dicts]
    messages: Annotated[list[Any], operator.add]
    output: Any
    answer: str


class Flow:
    """A LangGraph ``StateGraph`` with a short, chainable surface: node, edge, edge_conditional, compile."""

    def __init__(self, state: type = FlowState) -> None:
        self.graph: StateGraph[Any] = StateGraph(state)
        self._nodes: list[str] = []

    def node(self, name: str, func: Callable[..., Any]) -> Flow:
        """Add a node (a sync or async function ``state -> dict`` of updates)."""
        if name in (START, END):
            raise ValueError(f"{name!r} is reserved by LangGraph; pick another node name")
        self.graph.add_node(name, func)
        self._nodes.append(name)
        return self

    def edge(self, source: str | Sequence[str], target: str) -> Flow:
        """Connect ``source`` to ``target``; a list of sources waits for all of them (a join)."""
        if isinstance(source, str):
            self.graph.add_edge(source, target)
        else:
            self.graph.add_edge(list(source), target)
        return self

    def edge_conditional(
        self,
        source: str,
        route: Callable[..., Hashable | Sequence[Hashable]],
        targets: dict[Hashable, str] | Sequence[str] | None = None,
    ) -> Flow:
        """After ``source``, go where ``route(state)`` says (a key of ``targets`` or a node name)."""
        self.graph.add_conditional_edges(source, route, targets)  # type: ignore[arg-type]
        return self

    def chain(self, *names: str) -> Flow:
        """Connect nodes in a row: ``chain("a", "b", "c")`` is A -> B -> C (START and END allowed)."""
        for source, target in zip(names, names[1:], strict=False):
            self.edge(source, target)
        return self

    @property
    def nodes(self) -> list[str]:
        """The node names, in the order they were added."""
        return list(self._nodes)

    def compile(self, **kwargs: Any) -> Any:
        """The compiled LangGraph graph (``kwargs`` go to ``StateGraph.compile``)."""
        return self.graph.compile(**kwargs)
