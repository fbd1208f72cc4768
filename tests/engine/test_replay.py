"""Deterministic replay's backend: tool calls answered from recorded outputs, never from a server.

Matching by (server, tool, params as canonical JSON), in recorded order; a call with no recorded
output fails with a clear error the trace keeps; a recorded failure fails again. The agent runs
for real (scripted LLM) over the backend.
"""

from __future__ import annotations

from typing import Any

import pytest

from llamon_agent.models import ModelConfig
from llamon_agent.prestep import PRESTEP_FAILED
from llamon_agent.react import AgentSpec, run_agent
from llamon_agent.replay import (
    PRESTEP,
    REACT,
    NoRecordedOutputError,
    RecordedCall,
    RecordedToolBackend,
    RecordedToolError,
)
from llamon_agent.tools import AgentRequest, DeterministicContext, deterministic_tool
from llamon_agent.trace import ListSink

ORDER_TOOLS = {
    "order-service": [
        {
            "name": "get_order",
            "description": "Look up an order.",
            "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        }
    ]
}


def prestep_call(params: dict[str, Any], output: Any, **kw: Any) -> RecordedCall:
    return RecordedCall(PRESTEP, "order-service", "get_order", params, output, **kw)


def test_a_call_is_answered_by_its_params_whatever_their_key_order() -> None:
    backend = RecordedToolBackend(
        [
            prestep_call({"order_id": "A-1", "verbose": True}, {"status": "shipped"}),
            prestep_call({"order_id": "A-2"}, {"status": "lost"}),
        ],
        source="run 7",
    )
    assert backend.call_tool("order-service", "get_order", {"verbose": True, "order_id": "A-1"}) == {
        "status": "shipped"
    }
    assert backend.call_tool("order-service", "get_order", {"order_id": "A-2"}) == {"status": "lost"}


def test_calls_with_the_same_key_are_answered_in_recorded_order_then_the_last_repeats() -> None:
    backend = RecordedToolBackend(
        [prestep_call({"order_id": "A-1"}, "first"), prestep_call({"order_id": "A-1"}, "second")]
    )
    answers = [backend.call_tool("order-service", "get_order", {"order_id": "A-1"}) for _ in range(3)]
    assert answers == ["first", "second", "second"]


def test_a_call_with_no_recorded_output_fails_clearly_and_is_never_sent() -> None:
    backend = RecordedToolBackend([prestep_call({"order_id": "A-1"}, "x")], source="run 12")
    with pytest.raises(NoRecordedOutputError) as err:
        backend.call_tool("order-service", "get_order", {"order_id": "B-9", "note": "주문"})
    assert str(err.value) == 'no recorded output for get_order({"note":"주문","order_id":"B-9"}) in run 12'
    # Same params on another server, or the same call from the ReAct loop: no recording either.
    with pytest.raises(NoRecordedOutputError):
        backend.call_tool("other-service", "get_order", {"order_id": "A-1"})
    with pytest.raises(NoRecordedOutputError):
        backend.answer(REACT, "order-service", "get_order", {"order_id": "A-1"})


def test_a_recorded_failure_fails_again_with_its_message() -> None:
    backend = RecordedToolBackend([prestep_call({"order_id": "A-1"}, None, error="timed out after 2 s")])
    with pytest.raises(RecordedToolError, match="timed out after 2 s"):
        backend.call_tool("order-service", "get_order", {"order_id": "A-1"})


def test_tools_come_from_the_stored_lists_and_the_recorded_calls() -> None:
    backend = RecordedToolBackend([RecordedCall(PRESTEP, "crm", "get_profile", {}, {})], tools=ORDER_TOOLS)
    assert [t.name for t in backend.tools_for("order-service")] == ["get_order"]
    assert [t.name for t in backend.tools_for("crm")] == ["get_profile"]  # the server's list is unknown
    assert backend.tools_for("nowhere") is None  # not bound, as with the live backend
    [lc_tool] = backend.langchain_tools(["order-service"])
    assert (lc_tool.name, lc_tool.description) == ("get_order", "Look up an order.")


# --------------------------------------------------------------------------- a whole agent run


@deterministic_tool(mcp_id="order-service")
def route_order(ctx: DeterministicContext) -> dict | None:
    if "주문" in ctx.query:
        return {"tool_name": "get_order", "params": {"order_id": "A-1001"}}
    return None


def _spec(script: list[dict[str, Any]]) -> AgentSpec:
    return AgentSpec(
        name="support",
        system_prompt="Answer from the facts.",
        rules=[route_order],
        model=ModelConfig(provider="scripted", script=script),
        react_mcp_ids=["order-service"],
    )


def test_an_agent_run_gets_the_recorded_outputs_and_an_unrecorded_call_is_a_traced_tool_error() -> None:
    recorded = [
        prestep_call({"order_id": "A-1001"}, {"order_id": "A-1001", "status": "shipped"}),
        RecordedCall(
            REACT, "", "get_order", {"order_id": "A-2002"}, '{"order_id": "A-2002", "status": "lost"}'
        ),
    ]
    backend = RecordedToolBackend(recorded, tools=ORDER_TOOLS, source="run 5")
    script = [
        {"tool_calls": [{"name": "get_order", "args": {"order_id": "A-2002"}, "id": "c1"}]},
        {"tool_calls": [{"name": "get_order", "args": {"order_id": "Z-0"}, "id": "c2"}]},
        {"content": "done"},
    ]
    sink = ListSink()
    result = run_agent(
        _spec(script),
        AgentRequest(query="주문 A-1001"),
        backend=backend,
        react_tools=backend.langchain_tools(["order-service"]),
        sink=sink,
    )
    assert result.status == "succeeded" and result.answer == "done"
    [rule] = [e for e in sink.of_kind("rule") if e.phase == "end"]
    assert rule.output == {"order_id": "A-1001", "status": "shipped"}
    answered, unrecorded = [e for e in sink.of_kind("tool") if e.phase == "end"]
    assert answered.status == "ok" and answered.output == '{"order_id": "A-2002", "status": "lost"}'
    assert unrecorded.status == "error"
    assert unrecorded.error == 'no recorded output for get_order({"order_id":"Z-0"}) in run 5'
    assert [c[3] for c in backend.calls] == [True, True, False]


def test_a_prestep_call_with_no_recorded_output_fails_the_prestep_as_a_failing_tool_would() -> None:
    backend = RecordedToolBackend([], tools=ORDER_TOOLS, source="run 5")
    result = run_agent(
        _spec([{"content": "unused"}]), AgentRequest(query="주문 A-1001"), backend=backend, react_tools=[]
    )
    assert result.status == "failed" and result.llm_calls == 0
    assert result.error.startswith(f"{PRESTEP_FAILED}: route_order: no recorded output for get_order(")
