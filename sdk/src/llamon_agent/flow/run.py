"""Running a flow graph on one request, with its trace: the graph, one step per node, the answer.

Node steps come from LangChain callbacks (a node run is a chain run tagged
``graph:step:N`` whose name is its ``langgraph_node``), so any compiled LangGraph graph is
traced, whether it was built with :class:`~llamon_agent.flow.builder.Flow` or with
``StateGraph`` directly.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler

from llamon_agent.flow.graph_view import GRAPH_EVENT_NAME, graph_view
from llamon_agent.tools import AgentRequest
from llamon_agent.trace import Span, TraceSink, jsonable, start_span, traced

FlowStatus = Literal["succeeded", "failed", "cancelled"]
NO_ANSWER = "the flow ended without an answer: a node should set 'answer' (text) or 'output' in the state"
RECURSION_LIMIT = 50


@dataclass
class FlowResult:
    """How a flow run ended: status, the answer or the error, the final state."""

    status: FlowStatus
    answer: str | None
    error: str | None
    state: dict[str, Any] = field(default_factory=dict)
    duration_ms: float = 0.0


class NodeTracer(BaseCallbackHandler):
    """Turns LangGraph node runs into ``node`` trace steps (start before the node, end after)."""

    # Inline: the start event must be emitted before the node's own work begins.
    run_inline = True

    def __init__(self, sink: TraceSink | None, parent: str | None = None) -> None:
        self.sink = sink
        self.parent = parent
        self.failed_node: str | None = None
        self._spans: dict[UUID, Span] = {}
        self._lock = threading.Lock()

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Start a node step when the chain run is a graph node."""
        name = kwargs.get("name")
        node = (metadata or {}).get("langgraph_node")
        if not name or name != node or not any(t.startswith("graph:step:") for t in tags or ()):
            return  # the graph itself, a router, a sub-runnable inside a node
        step = (metadata or {}).get("langgraph_step")
        s = start_span(
            self.sink, "node", str(name), input=jsonable(inputs), parent=self.parent, meta={"step": step}
        )
        with self._lock:
            self._spans[run_id] = s

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """End the node step with the node's update."""
        with self._lock:
            s = self._spans.pop(run_id, None)
        if s is not None:
            s.output = jsonable(outputs)
            s.finish()

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """End the node step as failed."""
        with self._lock:
            s = self._spans.pop(run_id, None)
        if s is not None:
            self.failed_node = s.name
            s.fail(_reason(error))
            s.finish()


async def arun_flow(
    graph: Any,
    request: AgentRequest,
    *,
    sink: TraceSink | None = None,
    view: dict[str, Any] | None = None,
    recursion_limit: int = RECURSION_LIMIT,
) -> FlowResult:
    """Invoke a compiled graph on ``request``; never raises for a failing flow (the result says why)."""
    started = time.perf_counter()
    graph_span = start_span(
        sink, "node", GRAPH_EVENT_NAME, input=view if view is not None else graph_view(graph)
    )
    tracer = NodeTracer(sink, parent=graph_span.id)
    state: dict[str, Any] = {}
    try:
        # MCPHandle.call inside the nodes (tasks inherit this context) records its calls as tool steps.
        with traced(sink, graph_span.id):
            final = await graph.ainvoke(
                request.to_json(), config={"callbacks": [tracer], "recursion_limit": recursion_limit}
            )
        state = dict(final) if isinstance(final, dict) else {"output": final}
        answer = answer_text(state)
        status: FlowStatus = "succeeded" if answer is not None else "failed"
        error = None if answer is not None else NO_ANSWER
    except Exception as exc:
        answer, status = None, "failed"
        where = f"node {tracer.failed_node!r} failed: " if tracer.failed_node else ""
        error = f"{where}{_reason(exc)}"
    graph_span.output = {"status": status, "state": jsonable(state)}
    if error is not None:
        graph_span.fail(error)
    graph_span.finish()
    if answer is not None:
        s = start_span(sink, "answer", "answer")
        s.output = answer
        s.finish()
    else:
        s = start_span(sink, "error", status, meta={"stage": "flow"})
        s.fail(error or status)
        s.finish()
    return FlowResult(
        status=status,
        answer=answer,
        error=error,
        state=state,
        duration_ms=round((time.perf_counter() - started) * 1000.0, 3),
    )


def answer_text(state: dict[str, Any]) -> str | None:
    """The flow's answer: ``state["answer"]``, else ``state["output"]`` (JSON for data); None if neither."""
    answer = state.get("answer")
    if isinstance(answer, str) and answer.strip():
        return answer
    output = state.get("output")
    if output is None or output == "":
        return None
    if isinstance(output, str):
        return output
    return json.dumps(jsonable(output), ensure_ascii=False)


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
