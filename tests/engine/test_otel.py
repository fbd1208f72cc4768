"""OpenTelemetry export: a run becomes one trace of GenAI-convention spans at a real OTLP/HTTP receiver.

The spans are sent by the real SDK exporter over HTTP to tests/support/otlp_receiver.py on 127.0.0.1 and
read back decoded from protobuf. Only the LLM is scripted.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from llamon_agent import otel
from llamon_agent.guardrails import InputGuardrail, OutputGuardrail
from llamon_agent.react import run_agent
from llamon_agent.trace import ListSink, MultiSink
from tests.support.otlp_receiver import Receiver, start_receiver
from tests.support.react import ask, backend, calls_tool, list_orders, scripted, spec
from tests.support.serve import a2a_v03_send, post_a2a, react_runner, route_order

OTEL_VARS = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch) -> Iterator[None]:
    for name in OTEL_VARS:
        monkeypatch.delenv(name, raising=False)
    otel.shutdown_tracer_provider()
    yield
    otel.shutdown_tracer_provider()


@pytest.fixture
def receiver(monkeypatch) -> Iterator[Receiver]:
    found, server = start_receiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", found.url)
    try:
        yield found
    finally:
        server.shutdown()
        server.server_close()


def run_exported(**sink_args: Any) -> tuple[Any, ListSink]:
    """The full loop (guardrails, pre-step with two rules, two LLM calls, one tool call), exported."""
    exported = otel.otel_sink(agent_name="support", run_id=42, **sink_args)
    assert exported is not None
    events = ListSink()
    result = run_agent(
        spec(input_guardrail=InputGuardrail(max_chars=1000), output_guardrail=OutputGuardrail()),
        ask("주문 조회 부탁해", chatbotId="premium-support", userId="C-1001"),
        backend=backend(),
        react_tools=[list_orders],
        sink=MultiSink(events, exported),
        chat_model=scripted(
            {
                **calls_tool("list_orders", customer_id="C-1001"),
                "usage": {"input_tokens": 11, "output_tokens": 5},
            },
            {"content": "주문 A-1001은 배송 중입니다.", "usage": {"input_tokens": 20, "output_tokens": 9}},
        ),
    )
    exported.finish(result.status, error=result.error)
    assert exported.provider.force_flush(10_000)
    return result, events


def test_a_run_is_one_trace_of_genai_spans_with_the_steps_real_timing(receiver, monkeypatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20collector-secret")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "support-bot")
    result, events = run_exported()
    assert result.status == "succeeded", result.error

    spans = {s.span_id: s for s in receiver.spans}
    (root,) = receiver.by_name("invoke_agent support")
    assert {s.trace_id for s in spans.values()} == {root.trace_id}
    assert root.parent_span_id == ""
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.agent.name"] == "support"
    assert root.attributes["llamon.run.id"] == "42"
    assert root.resource["service.name"] == "support-bot"
    assert receiver.headers[0]["authorization"] == "Bearer collector-secret"

    names = sorted(s.name for s in spans.values())
    assert names == sorted(
        [
            "invoke_agent support",
            "guardrail input",
            "prestep deterministic pre-step",
            "rule route_order_lookup",
            "rule route_by_chatbot_id",
            "chat scripted",
            "chat scripted",
            "execute_tool list_orders",
            "guardrail output",
            "answer",
        ]
    )
    chats = sorted(receiver.by_name("chat scripted"), key=lambda s: s.start_ns)
    assert [c.kind for c in chats] == ["SPAN_KIND_CLIENT"] * 2
    assert [c.attributes["gen_ai.operation.name"] for c in chats] == ["chat", "chat"]
    assert [c.attributes["gen_ai.request.model"] for c in chats] == ["scripted", "scripted"]
    assert [
        (c.attributes["gen_ai.usage.input_tokens"], c.attributes["gen_ai.usage.output_tokens"]) for c in chats
    ] == [
        (11, 5),
        (20, 9),
    ]
    (tool,) = receiver.by_name("execute_tool list_orders")
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "list_orders"
    assert tool.parent_span_id == chats[0].span_id  # the call the model asked for
    rules = receiver.by_name("rule route_order_lookup") + receiver.by_name("rule route_by_chatbot_id")
    (prestep,) = receiver.by_name("prestep deterministic pre-step")
    assert {r.parent_span_id for r in rules} == {prestep.span_id}
    assert prestep.parent_span_id == root.span_id
    assert {r.attributes["gen_ai.tool.name"] for r in rules} == {"get_order", "get_customer_profile"}
    # No message or tool content leaves the process unless asked for.
    assert not any("llamon.input" in s.attributes or "llamon.output" in s.attributes for s in spans.values())

    # Each span starts when its step started and ends when it ended (the trace events' own times).
    ends = {e.id: e for e in events.events if e.phase == "end"}
    by_step = {s.attributes["llamon.step.id"]: s for s in spans.values() if "llamon.step.id" in s.attributes}
    assert set(by_step) == set(ends)
    for step_id, event in ends.items():
        span = by_step[step_id]
        assert span.start_ns == int(event.start * 1e9)
        assert span.end_ns == int(event.start * 1e9) + int(event.duration_ms * 1e6)
        assert root.start_ns <= span.start_ns <= span.end_ns <= root.end_ns


def test_a_failed_step_and_a_blocked_run_are_error_spans(receiver) -> None:
    exported = otel.otel_sink(agent_name="support")
    result = run_agent(
        spec(input_guardrail=InputGuardrail(max_chars=5)),
        ask("이 질문은 너무 깁니다"),
        backend=backend(),
        sink=exported,
        chat_model=scripted(),
    )
    assert result.status == "blocked"
    exported.finish(result.status, error=result.error)
    exported.provider.force_flush(10_000)
    (guard,) = receiver.by_name("guardrail input")
    assert guard.status_code == 2 and guard.attributes["error.type"] == "blocked"  # STATUS_CODE_ERROR
    (root,) = receiver.by_name("invoke_agent support")
    assert root.status_code == 2 and root.attributes["llamon.run.status"] == "blocked"


def test_content_is_exported_only_when_asked_and_then_redacted(receiver, monkeypatch) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    run_exported(redact=lambda value: str(value).replace("C-1001", "[customer]"))
    (tool,) = receiver.by_name("execute_tool list_orders")
    assert "[customer]" in tool.attributes["llamon.input"] and "C-1001" not in tool.attributes["llamon.input"]


def test_export_is_off_unless_an_endpoint_is_configured(monkeypatch) -> None:
    assert otel.otel_sink(agent_name="a") is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:9/v1/traces")
    assert otel.otel_configured()
    for name, value in (("OTEL_SDK_DISABLED", "true"), ("OTEL_TRACES_EXPORTER", "none")):
        monkeypatch.setenv(name, value)
        assert otel.otel_sink(agent_name="a") is None
        monkeypatch.delenv(name)


@pytest.mark.parametrize("protocol", ["http/json", "carrier-pigeon"])
def test_an_unsupported_protocol_is_logged_and_the_run_goes_on_unexported(
    monkeypatch, caplog, protocol
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    monkeypatch.setattr(otel, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="llamon_agent.otel"):
        assert otel.otel_sink(agent_name="a") is None
    assert f"OTLP protocol {protocol!r} is not supported" in caplog.text


def test_without_the_sdk_a_configured_endpoint_is_logged_and_ignored(monkeypatch, caplog) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # as if not installed
    monkeypatch.setattr(otel, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="llamon_agent.otel"):
        assert otel.otel_sink(agent_name="a") is None
    assert "opentelemetry-sdk is not installed" in caplog.text


@pytest.mark.parametrize("failure", ["nothing listens", "the collector answers 500"])
def test_a_collector_that_fails_never_fails_the_run_and_is_logged(
    receiver, monkeypatch, caplog, failure
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2")
    if failure == "nothing listens":
        from tests.engine.conftest import _free_port

        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{_free_port()}")
    else:
        receiver.fail_with = 500
    with caplog.at_level(logging.WARNING):
        result, _ = run_exported_tolerant()
    assert result.status == "succeeded", result.error
    assert receiver.spans == []
    assert "Failed to export spans batch" in caplog.text  # the exporter's own log line


def run_exported_tolerant() -> tuple[Any, Any]:
    exported = otel.otel_sink(agent_name="support")
    result = run_agent(
        spec(),
        ask("주문 조회 부탁해"),
        backend=backend(),
        sink=exported,
        chat_model=scripted({"content": "ok"}),
    )
    exported.finish(result.status)
    exported.provider.force_flush(10_000)  # the export fails on the processor's thread; nothing is raised
    return result, exported


def test_a_request_served_by_llamon_run_is_exported_too(receiver) -> None:
    from llamon_agent.serve import build_app

    body = post_a2a(
        build_app(react_runner([route_order]), "http://127.0.0.1:8001/"), a2a_v03_send("주문 조회 A-1001")
    )
    assert body["result"]["metadata"]["status"] == "succeeded"
    otel.shutdown_tracer_provider()  # what `llamon run` does when it stops: send what is queued
    (root,) = receiver.by_name("invoke_agent demo")
    assert root.attributes["llamon.run.source"] == "served"
    (rule,) = [s for s in receiver.spans if s.name.startswith("rule ")]
    assert rule.trace_id == root.trace_id and rule.attributes["gen_ai.tool.name"] == "get_order"
