"""Trace events, sinks and the span helper."""

from __future__ import annotations

import json
import logging
import math

import pytest

from llamon_agent.trace import (
    EVENT_KINDS,
    ListSink,
    LoggingSink,
    MultiSink,
    NullSink,
    TraceEvent,
    TraceSink,
    emit,
    jsonable,
    span,
    start_span,
)


class ExplodingSink:
    def emit(self, event: TraceEvent) -> None:
        raise RuntimeError("sink down")


def event(**overrides: object) -> TraceEvent:
    fields: dict[str, object] = {"id": "e1", "kind": "tool", "name": "get_order", "phase": "start"}
    fields.update(overrides)
    return TraceEvent(**fields)  # type: ignore[arg-type]


def test_event_kinds_are_the_run_step_kinds() -> None:
    assert {"guardrail", "prestep", "rule", "llm", "tool", "node", "answer", "error"} == EVENT_KINDS


def test_an_unknown_kind_or_phase_is_rejected() -> None:
    with pytest.raises(ValueError, match="kind"):
        event(kind="banana")
    with pytest.raises(ValueError, match="phase"):
        event(phase="middle")


def test_to_json_round_trips_and_is_json_serializable() -> None:
    original = event(
        parent="p1",
        phase="end",
        start=1.5,
        duration_ms=2.25,
        status="ok",
        input={"query": "주문 조회"},
        output={"order": [1, 2]},
        meta={"mcp_id": "order-service"},
    )

    data = json.loads(json.dumps(original.to_json(), ensure_ascii=False))

    assert TraceEvent.from_json(data) == original


def test_to_json_turns_unknown_objects_into_strings() -> None:
    class Opaque:
        def __str__(self) -> str:
            return "opaque!"

    data = event(output={"obj": Opaque(), "nan": math.nan, "tuple": (1, 2), "set": {3}}).to_json()

    assert json.loads(json.dumps(data))["output"] == {
        "obj": "opaque!",
        "nan": "nan",
        "tuple": [1, 2],
        "set": [3],
    }


def test_jsonable_survives_a_cycle() -> None:
    loop: list[object] = []
    loop.append(loop)

    json.dumps(jsonable(loop))


def test_span_emits_start_then_end_with_duration() -> None:
    sink = ListSink()

    with span(sink, "tool", "get_order", input={"id": 1}, parent="run") as s:
        assert [e.phase for e in sink.events] == ["start"]  # persisted before the work
        s.output = {"ok": True}

    start, end = sink.events
    assert start.id == end.id == s.id and start.parent == end.parent == "run"
    assert (start.phase, start.status, start.duration_ms, start.output) == ("start", "running", None, None)
    assert (end.phase, end.status, end.output, end.error) == ("end", "ok", {"ok": True}, None)
    assert end.duration_ms is not None and end.duration_ms >= 0
    assert start.start == end.start > 0


def test_span_records_an_exception_and_reraises() -> None:
    sink = ListSink()

    with pytest.raises(KeyError), span(sink, "node", "lookup"):
        raise KeyError("userId")

    end = sink.events[-1]
    assert (end.phase, end.status, end.error) == ("end", "error", "'userId'")


def test_span_fail_marks_an_error_without_raising() -> None:
    sink = ListSink()

    with span(sink, "rule", "r") as s:
        s.fail("tool missing")

    assert (sink.events[-1].status, sink.events[-1].error) == ("error", "tool missing")


def test_start_span_lets_the_caller_finish_later() -> None:
    sink = ListSink()

    s = start_span(sink, "llm", "turn 1")
    assert len(sink.events) == 1
    s.finish()

    assert [e.phase for e in sink.events] == ["start", "end"]


def test_a_span_without_a_sink_still_works() -> None:
    with span(None, "answer", "final") as s:
        s.output = "done"


def test_a_raising_sink_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="llamon_agent")

    with span(ExplodingSink(), "tool", "t") as s:
        s.output = 1

    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and all("trace sink" in m for m in messages)


def test_multi_sink_keeps_feeding_the_healthy_sinks(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="llamon_agent")
    first, last = ListSink(), ListSink()
    multi = MultiSink(first, ExplodingSink(), last)

    emit(multi, event())

    assert len(first.events) == len(last.events) == 1
    assert any("trace sink" in r.getMessage() for r in caplog.records)


def test_null_sink_and_none_drop_events() -> None:
    emit(NullSink(), event())
    emit(None, event())


def test_sinks_satisfy_the_protocol() -> None:
    for sink in (ListSink(), NullSink(), LoggingSink(), MultiSink()):
        assert isinstance(sink, TraceSink)


def test_logging_sink_writes_one_json_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="llamon_agent.trace")

    LoggingSink().emit(event(input={"query": "주문"}))

    (record,) = [r for r in caplog.records if r.name == "llamon_agent.trace"]
    prefix, payload = record.getMessage().split(" ", 1)
    assert prefix == "trace"
    assert json.loads(payload)["input"] == {"query": "주문"}
    assert "주문" in payload  # ensure_ascii=False: readable in the log


def test_list_sink_filters_by_kind_and_serializes() -> None:
    sink = ListSink()
    emit(sink, event(kind="rule", name="a"))
    emit(sink, event(kind="tool", name="b"))

    assert [e.name for e in sink.of_kind("rule")] == ["a"]
    assert json.dumps(sink.to_json())
