"""The pre-step's error contract (docs/architecture.md, "The seed's contract"): one test per row.

Each test checks the exact message (byte for byte), that the LLM is never called, and the
log on ``llamon_agent``: the error at ERROR and no ``완료`` line.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from llamon_agent import expr
from llamon_agent.mcp.errors import McpTimeoutError
from llamon_agent.prestep import (
    LOG_DONE,
    MCP_NOT_LOADED,
    PRESTEP_FAILED,
    PrestepOutcome,
    RuleStatus,
    StaticToolBackend,
    run_prestep,
)
from llamon_agent.tools import AgentRequest, DeterministicContext, deterministic_tool

SERVERS = {"order-service": ["get_order"], "customer-crm": ["get_customer_profile"]}
REQUEST = AgentRequest(query="주문 조회 부탁해", context={"userId": "u-1"})


class Harness:
    """The agent's control flow around the pre-step: the LLM runs only when the pre-step is ok."""

    def __init__(self) -> None:
        self.llm_calls = 0

    def llm(self) -> None:
        self.llm_calls += 1

    def run(self, rules: Sequence[Any], backend: StaticToolBackend) -> PrestepOutcome:
        outcome = run_prestep(rules, REQUEST, backend=backend)
        if outcome.ok:
            self.llm()
        return outcome


@pytest.fixture
def harness() -> Harness:
    return Harness()


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger="llamon_agent")
    return caplog


def ok_call(mcp_id: str, tool_name: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True}


def returning(value: Any, *, name: str = "route_order_lookup", mcp_id: str = "order-service"):
    """A rule that returns ``value`` whatever the request."""

    def rule(ctx: DeterministicContext) -> Any:
        return value

    rule.__name__ = name
    return deterministic_tool(mcp_id=mcp_id)(rule)


def raising(exc: BaseException, *, name: str = "route_order_lookup"):
    def rule(ctx: DeterministicContext) -> Any:
        raise exc

    rule.__name__ = name
    return deterministic_tool(mcp_id="order-service")(rule)


def assert_failed(
    outcome: PrestepOutcome, harness: Harness, logs: pytest.LogCaptureFixture, message: str
) -> None:
    """The contract's common part: not ok, the exact message, no LLM, ERROR logged, no 완료."""
    assert not outcome.ok
    assert outcome.error == message
    assert outcome.error.encode("utf-8") == message.encode("utf-8")
    assert harness.llm_calls == 0
    ours = [r for r in logs.records if r.name == "llamon_agent"]
    assert [(r.levelno, r.getMessage()) for r in ours if r.levelno >= logging.ERROR] == [
        (logging.ERROR, message)
    ]
    assert not any(r.msg == LOG_DONE for r in ours)


def test_the_contract_strings_are_the_seeds_byte_for_byte() -> None:
    assert MCP_NOT_LOADED.format(mcp_id="x").encode() == "MCP 'x'의 tool이 로드되지 않음".encode()
    assert PRESTEP_FAILED.encode() == "확정 호출된 MCP 단계에서 오류가 발생했습니다".encode()
    assert LOG_DONE % 3 == "Deterministic pre-step 완료: 3건"


# --------------------------------------------------------------------------- row 1: unbound mcp_id


def test_an_unbound_mcp_id_fails_before_any_rule_runs(
    harness: Harness, logs: pytest.LogCaptureFixture
) -> None:
    ran: list[str] = []

    @deterministic_tool(mcp_id="order-service")
    def bound_first(ctx: DeterministicContext) -> dict[str, Any]:
        ran.append("bound_first")
        return {"tool_name": "get_order", "params": {}}

    rules = [
        bound_first,
        returning(None, name="ghost_rule", mcp_id="ghost"),
        returning(None, mcp_id="phantom"),
    ]
    backend = StaticToolBackend(SERVERS, call=ok_call)

    outcome = harness.run(rules, backend)

    assert_failed(outcome, harness, logs, "MCP 'ghost'의 tool이 로드되지 않음")
    assert ran == [] and backend.calls == []
    assert {r.status for r in outcome.records} == {RuleStatus.NOT_REACHED}


def test_a_backend_that_cannot_list_tools_counts_as_not_loaded(
    harness: Harness, logs: pytest.LogCaptureFixture
) -> None:
    class Broken(StaticToolBackend):
        def tools_for(self, mcp_id: str) -> Any:
            raise ConnectionError("refused")

    outcome = harness.run([returning(None)], Broken(SERVERS))

    assert_failed(outcome, harness, logs, "MCP 'order-service'의 tool이 로드되지 않음")


# --------------------------------------------------------------------------- row 2: the function raises


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (ValueError("userId가 없습니다"), "userId가 없습니다"),
        (RuntimeError(), "RuntimeError"),
        (KeyError("userId"), "KeyError: 'userId'"),
        (ZeroDivisionError("division by zero"), "division by zero"),
    ],
)
def test_a_raising_rule_fails_the_prestep(
    harness: Harness, logs: pytest.LogCaptureFixture, exc: Exception, reason: str
) -> None:
    backend = StaticToolBackend(SERVERS, call=ok_call)

    outcome = harness.run([raising(exc)], backend)

    assert_failed(
        outcome, harness, logs, f"확정 호출된 MCP 단계에서 오류가 발생했습니다: route_order_lookup: {reason}"
    )
    assert backend.calls == []


def test_a_raising_rule_stops_the_rules_after_it(harness: Harness, logs: pytest.LogCaptureFixture) -> None:
    backend = StaticToolBackend(SERVERS, call=ok_call)
    rules = [
        returning({"tool_name": "get_order", "params": {}}, name="before"),
        raising(ValueError("boom"), name="broken"),
        returning({"tool_name": "get_customer_profile", "params": {}}, name="after", mcp_id="customer-crm"),
    ]

    outcome = harness.run(rules, backend)

    assert_failed(outcome, harness, logs, "확정 호출된 MCP 단계에서 오류가 발생했습니다: broken: boom")
    assert backend.calls == [("order-service", "get_order", {})]
    assert [r.status for r in outcome.records] == [RuleStatus.FIRED, RuleStatus.ERROR, RuleStatus.NOT_REACHED]
    assert outcome.results[0]["rule"] == "before"  # kept for the audit, never injected


def test_an_expression_error_fails_the_prestep(harness: Harness, logs: pytest.LogCaptureFixture) -> None:

    # A missing key read with [] instead of .get(): an ExprError at run time.
    rule = expr.expression_rule(
        name="premium_lookup",
        mcp_id="customer-crm",
        tool_name="get_customer_profile",
        when='ctx.context["chatbotId"] == "premium-support"',
        params='{"customer_id": ctx.context.get("userId")}',
    )
    with pytest.raises(expr.ExprError) as raised:
        rule(REQUEST.to_context([]))
    reason = str(raised.value).strip() or "ExprError"

    outcome = harness.run([rule], StaticToolBackend(SERVERS, call=ok_call))

    assert_failed(
        outcome, harness, logs, f"확정 호출된 MCP 단계에서 오류가 발생했습니다: premium_lookup: {reason}"
    )


# --------------------------------------------------------------------------- row 3: malformed return


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("get_order", "returned str, expected None or {'tool_name': str, 'params': dict}"),
        (["get_order"], "returned list, expected None or {'tool_name': str, 'params': dict}"),
        (True, "returned bool, expected None or {'tool_name': str, 'params': dict}"),
        ({"params": {}}, "returned dict has no 'tool_name'"),
        ({}, "returned dict has no 'tool_name'"),
        ({"tool_name": "", "params": {}}, "'tool_name' must be a non-empty string, got ''"),
        ({"tool_name": 3, "params": {}}, "'tool_name' must be a non-empty string, got 3"),
        ({"tool_name": "get_order"}, "returned dict has no 'params' (use {} for a tool without arguments)"),
        ({"tool_name": "get_order", "params": None}, "'params' must be a dict, got NoneType"),
        ({"tool_name": "get_order", "params": [1]}, "'params' must be a dict, got list"),
        (
            {"tool_name": "get_order", "params": {}, "timeout": 5},
            "returned dict has unexpected keys 'timeout' (only 'tool_name' and 'params')",
        ),
    ],
)
def test_a_malformed_return_value_fails_the_prestep(
    harness: Harness, logs: pytest.LogCaptureFixture, value: Any, reason: str
) -> None:
    backend = StaticToolBackend(SERVERS, call=ok_call)

    outcome = harness.run([returning(value)], backend)

    assert_failed(
        outcome, harness, logs, f"확정 호출된 MCP 단계에서 오류가 발생했습니다: route_order_lookup: {reason}"
    )
    assert backend.calls == []


def test_a_tool_the_server_lacks_fails_the_prestep(harness: Harness, logs: pytest.LogCaptureFixture) -> None:
    backend = StaticToolBackend(SERVERS, call=ok_call)
    # get_customer_profile exists, but on customer-crm, not on this rule's server.
    rules = [returning({"tool_name": "get_customer_profile", "params": {}})]

    outcome = harness.run(rules, backend)

    assert_failed(
        outcome,
        harness,
        logs,
        "확정 호출된 MCP 단계에서 오류가 발생했습니다: route_order_lookup: MCP 'order-service' has no tool 'get_customer_profile'",
    )
    assert backend.calls == []
    assert outcome.records[0].tool_exists is False


# --------------------------------------------------------------------------- row 4: the call fails or times out


def _failing(exc: BaseException) -> Callable[[str, str, dict[str, Any]], Any]:
    def call(mcp_id: str, tool_name: str, params: dict[str, Any]) -> Any:
        raise exc

    return call


def test_a_failing_mcp_call_fails_the_prestep(harness: Harness, logs: pytest.LogCaptureFixture) -> None:
    backend = StaticToolBackend(SERVERS, call=_failing(ConnectionError("session closed")))

    outcome = harness.run([returning({"tool_name": "get_order", "params": {"id": 1}})], backend)

    assert_failed(
        outcome,
        harness,
        logs,
        "확정 호출된 MCP 단계에서 오류가 발생했습니다: route_order_lookup: session closed",
    )
    assert outcome.calls == 0 and outcome.results == []
    record = outcome.records[0]
    assert (record.status, record.tool_name, record.params) == (RuleStatus.ERROR, "get_order", {"id": 1})


def test_a_timed_out_mcp_call_fails_the_prestep(harness: Harness, logs: pytest.LogCaptureFixture) -> None:
    backend = StaticToolBackend(SERVERS, call=_failing(TimeoutError()))

    outcome = harness.run([returning({"tool_name": "get_order", "params": {}})], backend)

    assert_failed(
        outcome,
        harness,
        logs,
        "확정 호출된 MCP 단계에서 오류가 발생했습니다: route_order_lookup: TimeoutError",
    )


def test_an_mcp_timeout_error_fails_the_prestep_with_its_message(
    harness: Harness, logs: pytest.LogCaptureFixture
) -> None:
    error = McpTimeoutError.about("timed out after 2s", mcp_id="order-service", tool_name="get_order")
    backend = StaticToolBackend(SERVERS, call=_failing(error))

    outcome = harness.run([returning({"tool_name": "get_order", "params": {}})], backend)

    assert_failed(
        outcome,
        harness,
        logs,
        "확정 호출된 MCP 단계에서 오류가 발생했습니다: route_order_lookup: "
        "MCP server 'order-service', tool 'get_order': timed out after 2s",
    )


# --------------------------------------------------------------------------- row 5: all None


def test_all_rules_returning_none_is_no_error_and_the_llm_runs(
    harness: Harness, logs: pytest.LogCaptureFixture
) -> None:
    rules = [returning(None), returning(None, name="crm", mcp_id="customer-crm")]

    outcome = harness.run(rules, StaticToolBackend(SERVERS, call=ok_call))

    assert outcome.ok and outcome.error is None
    assert harness.llm_calls == 1
    assert outcome.system_block() == ""
    ours = [r for r in logs.records if r.name == "llamon_agent"]
    assert [r.getMessage() for r in ours if r.levelno >= logging.INFO] == ["Deterministic pre-step 완료: 0건"]
