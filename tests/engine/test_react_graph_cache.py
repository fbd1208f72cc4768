"""The agent graph is built once per spec and shared by its runs, which never see each other's
state: model, tools, pre-step rules and trace stay per run, even when two runs overlap."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from langchain_core.tools import StructuredTool

from llamon_agent import react
from llamon_agent.react import run_agent
from llamon_agent.trace import ListSink
from tests.support.react import ask, backend, calls_tool, list_orders, scripted, spec


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every graph create_agent builds (the real one, counted)."""
    react._GRAPHS.clear()
    made: list[Any] = []
    real = react.create_agent

    def counted(*args: Any, **kwargs: Any) -> Any:
        graph = real(*args, **kwargs)
        made.append(graph)
        return graph

    monkeypatch.setattr(react, "create_agent", counted)
    yield made
    react._GRAPHS.clear()


def test_runs_of_one_spec_share_the_graph_and_a_changed_spec_gets_its_own(builds: list[Any]) -> None:
    def once(the_spec: Any, tools: list[Any]) -> Any:
        model = scripted({"content": "네"})
        result = run_agent(the_spec, ask("안녕"), backend=backend(), react_tools=tools, chat_model=model)
        assert result.status == "succeeded", result.error
        return result

    same = spec()
    once(same, [list_orders])
    once(spec(), [list_orders])  # an equal spec, another object: the same graph
    assert len(builds) == 1
    once(spec(system_prompt="다른 지시"), [list_orders])
    assert len(builds) == 2
    once(same, [])  # other tools: another graph
    assert len(builds) == 3
    once(spec(max_iterations=3), [list_orders])
    assert len(builds) == 4
    once(same, [list_orders])
    assert len(builds) == 4


def _waiting_tool(tag: str, barrier: threading.Barrier) -> StructuredTool:
    def wait_here(note: str) -> str:
        """Wait for the other run, then answer."""
        barrier.wait(timeout=30)
        return f"from-{tag}"

    return StructuredTool.from_function(wait_here, name="wait_here", description="Wait for the other run.")


def test_overlapping_runs_of_one_graph_keep_their_own_model_tools_rules_and_trace(builds: list[Any]) -> None:
    barrier = threading.Barrier(2)  # both runs are inside their tool call at the same time
    runs: dict[str, Any] = {}

    def one(tag: str, request: Any) -> None:
        model = scripted(calls_tool("wait_here", note=tag), {"content": f"answer-{tag}"})
        sink = ListSink()
        result = run_agent(
            spec(),
            request,
            backend=backend(),
            react_tools=[_waiting_tool(tag, barrier)],
            sink=sink,
            chat_model=model,
        )
        runs[tag] = (result, model, sink)

    warm = run_agent(
        spec(),
        ask("안녕"),
        backend=backend(),
        react_tools=[_waiting_tool("W", barrier)],
        chat_model=scripted({"content": "네"}),
    )
    assert warm.status == "succeeded", warm.error
    threads = [
        threading.Thread(target=one, args=("A", ask("주문 조회 부탁해"))),
        threading.Thread(target=one, args=("B", ask("안녕", chatbotId="premium-support", userId="C-7"))),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(builds) == 1  # one graph ran all three
    for tag, other in (("A", "B"), ("B", "A")):
        result, model, sink = runs[tag]
        assert result.status == "succeeded", result.error
        assert result.answer == f"answer-{tag}"
        assert (result.llm_calls, result.tool_calls) == (2, 1)
        seen = " ".join(text for call in model.calls for _role, text in call["messages"])
        assert f"from-{tag}" in seen and f"from-{other}" not in seen
        trace = repr([e.to_json() if hasattr(e, "to_json") else e for e in sink.events])
        assert f"from-{tag}" in trace and f"from-{other}" not in trace
        assert f"answer-{other}" not in trace
    # Each run's pre-step ran the rule its own request fires.
    assert [c["tool_name"] for c in runs["A"][0].prestep.results] == ["get_order"]
    assert [c["tool_name"] for c in runs["B"][0].prestep.results] == ["get_customer_profile"]
