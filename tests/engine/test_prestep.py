"""The deterministic pre-step: order, accumulation, stop, results, system block, log, dry run, trace."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from llamon_agent.prestep import (
    DEFAULT_PRESTEP_INSTRUCTION,
    LOG_DONE,
    RESULTS_HEADER,
    RuleStatus,
    StaticToolBackend,
    arun_prestep,
    compile_rules,
    inject_results,
    render_results_block,
    run_prestep,
)
from llamon_agent.tools import AgentRequest, DeterministicContext, ToolInfo, deterministic_tool
from llamon_agent.trace import ListSink, TraceEvent

REPO = Path(__file__).resolve().parents[2]
SEED_TOOLS = REPO / "examples" / "seed_project" / "app" / "tools.py"

DONE_PREFIX = "Deterministic pre-step 완료: "


def echo_call(mcp_id: str, tool_name: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"server": mcp_id, "tool": tool_name, "params": params}


def forbidden_call(mcp_id: str, tool_name: str, params: dict[str, Any]) -> Any:
    raise AssertionError(f"dry run called {mcp_id}/{tool_name}")


def done_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "llamon_agent" and r.getMessage().startswith(DONE_PREFIX)
    ]


def load_seed_tools() -> ModuleType:
    """The seed project's app/tools.py, unchanged, under a module name no other test uses."""
    name = f"seed_app_tools_{uuid.uuid4().hex}"
    spec = importlib.util.spec_from_file_location(name, SEED_TOOLS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def calling_rule(name: str, mcp_id: str, tool_name: str, *, stop: bool = False, when: str | None = None):
    """A @deterministic_tool that fires when ``when`` is in the query (always when None)."""

    def rule(ctx: DeterministicContext) -> dict[str, Any] | None:
        if when is not None and when not in ctx.query:
            return None
        return {"tool_name": tool_name, "params": {"rule": name}}

    rule.__name__ = name
    return deterministic_tool(mcp_id=mcp_id, stop=stop)(rule)


def skipping_rule(name: str, mcp_id: str, seen: list[str] | None = None):
    def rule(ctx: DeterministicContext) -> None:
        if seen is not None:
            seen.append(name)
        return None

    rule.__name__ = name
    return deterministic_tool(mcp_id=mcp_id)(rule)


TOOLS = {"a": ["t1", "t2"], "b": ["u1"], "c": ["v1"]}


# --------------------------------------------------------------------------- order and accumulation


def test_rules_fire_in_registration_order_and_results_accumulate() -> None:
    rules = [calling_rule("r1", "b", "u1"), calling_rule("r2", "a", "t1"), calling_rule("r3", "c", "v1")]
    backend = StaticToolBackend(TOOLS, call=echo_call)

    outcome = run_prestep(rules, AgentRequest(query="x"), backend=backend)

    assert outcome.ok and outcome.error is None
    assert [r["rule"] for r in outcome.results] == ["r1", "r2", "r3"]
    assert backend.calls == [
        ("b", "u1", {"rule": "r1"}),
        ("a", "t1", {"rule": "r2"}),
        ("c", "v1", {"rule": "r3"}),
    ]
    assert outcome.calls == 3


def test_several_rules_on_the_same_server_each_call_their_tool() -> None:
    rules = [
        calling_rule("first", "a", "t1"),
        calling_rule("second", "a", "t2"),
        calling_rule("third", "a", "t1"),
    ]
    backend = StaticToolBackend(TOOLS, call=echo_call)

    outcome = run_prestep(rules, AgentRequest(query="x"), backend=backend)

    assert [(r["mcp_id"], r["tool_name"]) for r in outcome.results] == [("a", "t1"), ("a", "t2"), ("a", "t1")]
    assert outcome.calls == 3


def test_none_is_a_skip_not_an_error() -> None:
    seen: list[str] = []
    rules = [skipping_rule("s1", "a", seen), calling_rule("r", "b", "u1"), skipping_rule("s2", "c", seen)]

    outcome = run_prestep(rules, AgentRequest(query="x"), backend=StaticToolBackend(TOOLS, call=echo_call))

    assert outcome.ok
    assert seen == ["s1", "s2"]
    assert [r.status for r in outcome.records] == [RuleStatus.SKIPPED, RuleStatus.FIRED, RuleStatus.SKIPPED]


def test_a_firing_stop_rule_ends_the_evaluation() -> None:
    seen: list[str] = []
    rules = [
        calling_rule("before", "a", "t1"),
        calling_rule("first_match", "b", "u1", stop=True),
        skipping_rule("after", "c", seen),
        calling_rule("after_call", "a", "t2"),
    ]

    outcome = run_prestep(rules, AgentRequest(query="x"), backend=StaticToolBackend(TOOLS, call=echo_call))

    assert [r["rule"] for r in outcome.results] == ["before", "first_match"]
    assert seen == []
    assert [r.status for r in outcome.records] == [
        RuleStatus.FIRED,
        RuleStatus.FIRED,
        RuleStatus.NOT_REACHED,
        RuleStatus.NOT_REACHED,
    ]


def test_a_stop_rule_that_skips_does_not_end_the_evaluation() -> None:
    rules = [calling_rule("stopper", "a", "t1", stop=True, when="never"), calling_rule("later", "b", "u1")]

    outcome = run_prestep(rules, AgentRequest(query="x"), backend=StaticToolBackend(TOOLS, call=echo_call))

    assert [r["rule"] for r in outcome.results] == ["later"]


def test_each_result_has_exactly_the_seed_keys() -> None:
    rules = [calling_rule("r", "a", "t1")]

    outcome = run_prestep(rules, AgentRequest(query="x"), backend=StaticToolBackend(TOOLS, call=echo_call))

    (result,) = outcome.results
    assert set(result) == {"rule", "mcp_id", "tool_name", "params", "result", "duration_ms"}
    assert result["rule"] == "r"
    assert result["mcp_id"] == "a"
    assert result["tool_name"] == "t1"
    assert result["params"] == {"rule": "r"}
    assert result["result"] == {"server": "a", "tool": "t1", "params": {"rule": "r"}}
    assert isinstance(result["duration_ms"], float) and result["duration_ms"] >= 0


def test_a_compiled_rule_set_is_reusable_across_requests() -> None:
    compiled = compile_rules([calling_rule("order", "a", "t1", when="주문")])
    backend = StaticToolBackend(TOOLS, call=echo_call)

    hit = run_prestep(compiled, AgentRequest(query="주문 조회"), backend=backend)
    miss = run_prestep(compiled, AgentRequest(query="날씨"), backend=backend)

    assert hit.calls == 1 and miss.calls == 0


def test_compile_rules_rejects_an_undecorated_function() -> None:
    def plain(ctx: DeterministicContext) -> None:
        return None

    with pytest.raises(TypeError, match="deterministic_tool"):
        compile_rules([plain])


def test_a_deterministic_context_is_accepted_as_the_request() -> None:
    seen: list[list[str]] = []

    @deterministic_tool(mcp_id="a")
    def look(ctx: DeterministicContext) -> None:
        seen.append([t.name for t in ctx.mcp_tools])

    stale = DeterministicContext(query="q", mcp_tools=[ToolInfo(name="stale")])
    outcome = run_prestep([look], stale, backend=StaticToolBackend(TOOLS))

    assert outcome.ok
    assert seen == [["t1", "t2"]]  # the rule's own server's tools, not the ones passed in


def test_arun_prestep_gives_the_same_outcome() -> None:
    rules = [calling_rule("r", "a", "t1")]
    backend = StaticToolBackend(TOOLS, call=echo_call)

    outcome = asyncio.run(arun_prestep(rules, AgentRequest(query="x"), backend=backend))

    assert outcome.ok and [r["rule"] for r in outcome.results] == ["r"]


def test_outcome_to_json_is_json_serializable() -> None:
    rules = [calling_rule("r", "a", "t1"), skipping_rule("s", "b")]
    outcome = run_prestep(rules, AgentRequest(query="주문"), backend=StaticToolBackend(TOOLS, call=echo_call))

    data = json.loads(json.dumps(outcome.to_json(), ensure_ascii=False))

    assert data["ok"] is True
    assert [r["status"] for r in data["records"]] == ["fired", "skipped"]


# --------------------------------------------------------------------------- per-server tools


def test_each_rule_sees_only_the_tools_of_its_own_server() -> None:
    seen: dict[str, list[str]] = {}

    def looker(name: str, mcp_id: str):
        def rule(ctx: DeterministicContext) -> None:
            seen[name] = sorted(t.name for t in ctx.mcp_tools)

        rule.__name__ = name
        return deterministic_tool(mcp_id=mcp_id)(rule)

    rules = [looker("on_a", "a"), looker("on_b", "b"), looker("on_a_again", "a")]
    run_prestep(rules, AgentRequest(query="x"), backend=StaticToolBackend(TOOLS))

    assert seen == {"on_a": ["t1", "t2"], "on_b": ["u1"], "on_a_again": ["t1", "t2"]}


def test_the_context_is_built_once_per_server_per_request() -> None:
    contexts: list[DeterministicContext] = []

    def grab(name: str, mcp_id: str):
        def rule(ctx: DeterministicContext) -> None:
            contexts.append(ctx)

        rule.__name__ = name
        return deterministic_tool(mcp_id=mcp_id)(rule)

    run_prestep(
        [grab("x", "a"), grab("y", "b"), grab("z", "a")],
        AgentRequest(query="q"),
        backend=StaticToolBackend(TOOLS),
    )

    assert contexts[0] is contexts[2]
    assert contexts[0] is not contexts[1]


def test_seed_route_by_available_tool_sees_only_its_own_servers_tools() -> None:
    seed = load_seed_tools()
    # search_docs exists, but on another server: the knowledge-base rule must not see it.
    backend = StaticToolBackend({"knowledge-base": ["list_docs"], "other": ["search_docs"]}, call=echo_call)

    outcome = run_prestep([seed.route_by_available_tool], AgentRequest(query="문서 검색"), backend=backend)

    assert outcome.ok and outcome.calls == 0


# --------------------------------------------------------------------------- the seed's three functions


SEED_SERVERS = {
    "order-service": ["get_order"],
    "customer-crm": ["get_customer_profile"],
    "knowledge-base": ["search_docs"],
}


def test_seed_rules_all_fire_and_accumulate_in_registration_order() -> None:
    seed = load_seed_tools()
    backend = StaticToolBackend(SEED_SERVERS, call=echo_call)
    request = AgentRequest(
        query="주문 조회 검색 부탁해",
        context={"chatbotId": "premium-support", "userId": "u-42"},
    )

    outcome = run_prestep(seed.DETERMINISTIC_TOOLS, request, backend=backend)

    assert outcome.ok
    assert [(r["rule"], r["mcp_id"], r["tool_name"], r["params"]) for r in outcome.results] == [
        ("route_order_lookup", "order-service", "get_order", {"query": "주문 조회 검색 부탁해"}),
        ("route_by_chatbot_id", "customer-crm", "get_customer_profile", {"customer_id": "u-42"}),
        ("route_by_available_tool", "knowledge-base", "search_docs", {"q": "주문 조회 검색 부탁해"}),
    ]


def test_seed_rules_skip_on_an_unrelated_query() -> None:
    seed = load_seed_tools()
    backend = StaticToolBackend(SEED_SERVERS, call=forbidden_call)

    outcome = run_prestep(seed.DETERMINISTIC_TOOLS, AgentRequest(query="날씨 어때?"), backend=backend)

    assert outcome.ok and outcome.results == [] and outcome.system_block() == ""


def test_seed_order_lookup_alone() -> None:
    seed = load_seed_tools()
    backend = StaticToolBackend(SEED_SERVERS, call=lambda m, t, p: {"order_id": 7, "status": "배송중"})

    outcome = run_prestep(seed.DETERMINISTIC_TOOLS, AgentRequest(query="주문 조회 부탁해"), backend=backend)

    assert backend.calls == [("order-service", "get_order", {"query": "주문 조회 부탁해"})]
    assert outcome.results[0]["result"] == {"order_id": 7, "status": "배송중"}


# --------------------------------------------------------------------------- system block


def test_system_block_text() -> None:
    results = [
        {
            "rule": "route_order_lookup",
            "mcp_id": "order-service",
            "tool_name": "get_order",
            "params": {"query": "주문 조회"},
            "result": {"order_id": 7, "status": "배송중"},
            "duration_ms": 1.5,
        },
        {
            "rule": "route_docs",
            "mcp_id": "knowledge-base",
            "tool_name": "search_docs",
            "params": {},
            "result": "첫 줄\n둘째 줄",
            "duration_ms": 2.0,
        },
    ]

    assert render_results_block(results) == (
        "확정 호출 결과\n"
        "1. route_order_lookup (order-service / get_order)\n"
        '   params: {"query": "주문 조회"}\n'
        '   result: {"order_id": 7, "status": "배송중"}\n'
        "2. route_docs (knowledge-base / search_docs)\n"
        "   params: {}\n"
        "   result: 첫 줄\n"
        "     둘째 줄"
    )


def test_system_block_is_empty_without_results_and_headed_exactly_otherwise() -> None:
    assert RESULTS_HEADER == "확정 호출 결과"
    assert render_results_block([]) == ""
    outcome = run_prestep(
        [calling_rule("r", "a", "t1")],
        AgentRequest(query="x"),
        backend=StaticToolBackend(TOOLS, call=echo_call),
    )
    assert outcome.system_block().split("\n")[0] == "확정 호출 결과"


def test_very_long_results_are_truncated_with_a_marker() -> None:
    results = [{"rule": "r", "mcp_id": "a", "tool_name": "t", "params": {}, "result": "가" * 10_000}]

    block = render_results_block(results, max_chars=100)

    assert "가" * 100 + "… [truncated: 9900 more characters]" in block
    assert "가" * 101 not in block


def test_inject_results_appends_the_block_or_nothing() -> None:
    results = [{"rule": "r", "mcp_id": "a", "tool_name": "t", "params": {}, "result": 1}]

    assert inject_results("너는 상담원이다.", []) == "너는 상담원이다."
    injected = inject_results("너는 상담원이다.\n", results)
    assert injected == "너는 상담원이다.\n\n" + render_results_block(results)
    assert inject_results("", results) == render_results_block(results)


def test_default_instruction_is_the_seed_line() -> None:
    # The seed page's system-prompt line, byte for byte (a contract string).
    assert (
        DEFAULT_PRESTEP_INSTRUCTION.encode()
        == (
            '제공된 "확정 호출 결과"가 있으면 그 내용을 우선 사용하여 답변하고,\n추가 도구 호출은 필요한 경우에만 하세요.'
        ).encode()
    )


# --------------------------------------------------------------------------- the 완료 log line


def test_done_log_line_with_zero_calls(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="llamon_agent")

    run_prestep([skipping_rule("s", "a")], AgentRequest(query="x"), backend=StaticToolBackend(TOOLS))

    assert done_lines(caplog) == ["Deterministic pre-step 완료: 0건"]


def test_done_log_line_counts_the_calls(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="llamon_agent")
    rules = [calling_rule("r1", "a", "t1"), skipping_rule("s", "b"), calling_rule("r2", "c", "v1")]

    run_prestep(rules, AgentRequest(query="x"), backend=StaticToolBackend(TOOLS, call=echo_call))

    assert done_lines(caplog) == ["Deterministic pre-step 완료: 2건"]
    (record,) = [r for r in caplog.records if r.getMessage().startswith(DONE_PREFIX)]
    assert record.levelno == logging.INFO and record.msg == LOG_DONE


def test_done_log_line_with_no_rules_at_all(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="llamon_agent")

    outcome = run_prestep([], AgentRequest(query="x"), backend=StaticToolBackend({}))

    assert outcome.ok and done_lines(caplog) == ["Deterministic pre-step 완료: 0건"]


# --------------------------------------------------------------------------- dry run


def test_dry_run_calls_nothing_and_reports_what_would_be_called(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="llamon_agent")
    backend = StaticToolBackend(TOOLS, call=forbidden_call)
    rules = [calling_rule("r1", "a", "t1"), skipping_rule("s", "b"), calling_rule("r2", "c", "v1")]

    outcome = run_prestep(rules, AgentRequest(query="x"), backend=backend, dry_run=True)

    assert backend.calls == []
    assert outcome.ok and outcome.dry_run
    assert outcome.calls == 0 and outcome.results == [] and outcome.system_block() == ""
    assert [(r.rule, r.status, r.tool_name, r.params, r.tool_exists) for r in outcome.records] == [
        ("r1", RuleStatus.FIRED, "t1", {"rule": "r1"}, True),
        ("s", RuleStatus.SKIPPED, None, None, None),
        ("r2", RuleStatus.FIRED, "v1", {"rule": "r2"}, True),
    ]
    assert [r.rule for r in outcome.fired] == ["r1", "r2"]
    assert done_lines(caplog) == []  # a preview is not a request


def test_dry_run_continues_past_errors_and_reports_the_first() -> None:
    @deterministic_tool(mcp_id="a")
    def broken(ctx: DeterministicContext) -> dict[str, Any]:
        raise ValueError("bad rule")

    rules = [
        broken,
        calling_rule("unknown_tool", "b", "nope"),
        calling_rule("fine", "c", "v1"),
    ]

    outcome = run_prestep(rules, AgentRequest(query="x"), backend=StaticToolBackend(TOOLS), dry_run=True)

    assert not outcome.ok
    assert outcome.error == "확정 호출된 MCP 단계에서 오류가 발생했습니다: broken: bad rule"
    assert [(r.status, r.error, r.tool_exists) for r in outcome.records] == [
        (RuleStatus.ERROR, "bad rule", None),
        (RuleStatus.ERROR, "MCP 'b' has no tool 'nope'", False),
        (RuleStatus.FIRED, None, True),
    ]


def test_dry_run_with_an_unbound_server_still_evaluates_the_bound_ones() -> None:
    rules = [
        calling_rule("on_a", "a", "t1"),
        calling_rule("on_ghost", "ghost", "x"),
        calling_rule("on_b", "b", "u1"),
    ]

    outcome = run_prestep(rules, AgentRequest(query="x"), backend=StaticToolBackend(TOOLS), dry_run=True)

    assert outcome.error == "MCP 'ghost'의 tool이 로드되지 않음"
    assert [(r.status, r.error) for r in outcome.records] == [
        (RuleStatus.FIRED, None),
        (RuleStatus.ERROR, "MCP 'ghost'의 tool이 로드되지 않음"),
        (RuleStatus.FIRED, None),
    ]


def test_dry_run_still_honours_stop() -> None:
    rules = [calling_rule("first", "a", "t1", stop=True), calling_rule("second", "b", "u1")]

    outcome = run_prestep(rules, AgentRequest(query="x"), backend=StaticToolBackend(TOOLS), dry_run=True)

    assert [r.status for r in outcome.records] == [RuleStatus.FIRED, RuleStatus.NOT_REACHED]


# --------------------------------------------------------------------------- trace events


class InspectingBackend(StaticToolBackend):
    """Checks, at call time, that the rule's start event already reached the sink."""

    def __init__(self, sink: ListSink) -> None:
        super().__init__(TOOLS, call=echo_call)
        self.sink = sink
        self.seen_at_call: list[list[tuple[str, str, str]]] = []

    def call_tool(self, mcp_id: str, tool_name: str, params: dict[str, Any]) -> Any:
        events = [(e.kind, e.name, e.phase) for e in self.sink.events]
        assert events[-1] == ("rule", params["rule"], "start")
        self.seen_at_call.append(events)
        return super().call_tool(mcp_id, tool_name, params)


def test_a_rule_start_event_is_emitted_before_its_call() -> None:
    sink = ListSink()
    backend = InspectingBackend(sink)
    rules = [calling_rule("r1", "a", "t1"), calling_rule("r2", "b", "u1")]

    outcome = run_prestep(rules, AgentRequest(query="x"), backend=backend, sink=sink)

    assert outcome.ok and len(backend.seen_at_call) == 2
    assert [(e.kind, e.name, e.phase) for e in sink.events] == [
        ("prestep", "deterministic pre-step", "start"),
        ("rule", "r1", "start"),
        ("rule", "r1", "end"),
        ("rule", "r2", "start"),
        ("rule", "r2", "end"),
        ("prestep", "deterministic pre-step", "end"),
    ]


def test_trace_spans_nest_and_skipped_rules_go_into_the_prestep_output() -> None:
    sink = ListSink()
    rules = [skipping_rule("s1", "a"), calling_rule("r", "b", "u1"), skipping_rule("s2", "c")]

    run_prestep(
        rules,
        AgentRequest(query="x"),
        backend=StaticToolBackend(TOOLS, call=echo_call),
        sink=sink,
        trace_parent="run-1",
    )

    prestep_start, rule_start, rule_end, prestep_end = sink.events
    assert prestep_start.parent == "run-1" and prestep_start.id == prestep_end.id
    assert rule_start.parent == prestep_start.id and rule_start.id == rule_end.id
    assert rule_start.status == "running" and rule_start.duration_ms is None
    assert rule_end.status == "ok" and rule_end.output == {
        "server": "b",
        "tool": "u1",
        "params": {"rule": "r"},
    }
    assert rule_end.input == {"mcp_id": "b", "tool_name": "u1", "params": {"rule": "r"}}
    assert prestep_end.status == "ok"
    listing = prestep_end.output.pop("tools_listing")
    assert prestep_end.output == {
        "calls": 1,
        "fired": ["r"],
        "errors": [],
        "skipped": ["s1", "s2"],
        "skipped_count": 2,
        "not_reached_count": 0,
    }
    # Listing each server's tools (which may connect it) is timed, for the trace's waterfall.
    assert [(item["mcp_id"], item["tools"]) for item in listing] == [("a", 2), ("b", 1), ("c", 1)]
    assert all(item["offset_ms"] >= 0 and item["duration_ms"] >= 0 for item in listing)
    json.dumps([e.to_json() for e in sink.events], ensure_ascii=False)


class ListingBackend(StaticToolBackend):
    """Notes which trace events were emitted when the pre-step listed a server's tools."""

    def __init__(self, sink: ListSink) -> None:
        super().__init__(TOOLS, call=echo_call)
        self.sink = sink
        self.events_at_listing: list[int] = []

    def tools_for(self, mcp_id: str) -> Any:
        self.events_at_listing.append(len(self.sink.events))
        return super().tools_for(mcp_id)


def test_the_tool_listing_is_timed_inside_the_prestep_and_before_any_rule() -> None:
    # A pre-step of 7.6 s whose one rule took 26 ms: the time went into (re)connecting the
    # server while listing its tools; the pre-step's output says when and for how long.
    sink = ListSink()
    backend = ListingBackend(sink)
    run_prestep([calling_rule("r1", "a", "t1")], AgentRequest(query="x"), backend=backend, sink=sink)
    assert backend.events_at_listing == [1]  # after the prestep's start, before the rule's
    prestep_end = [e for e in sink.of_kind("prestep") if e.phase == "end"][0]
    (listing,) = prestep_end.output["tools_listing"]
    assert (listing["mcp_id"], listing["tools"]) == ("a", 2)
    assert listing["offset_ms"] + listing["duration_ms"] <= prestep_end.duration_ms


def test_a_server_whose_tools_are_not_loaded_is_listed_with_no_tools() -> None:
    sink = ListSink()
    run_prestep(
        [calling_rule("r1", "missing", "t1")],
        AgentRequest(query="x"),
        backend=StaticToolBackend(TOOLS),
        sink=sink,
    )
    prestep_end = [e for e in sink.of_kind("prestep") if e.phase == "end"][0]
    assert [(i["mcp_id"], i["tools"]) for i in prestep_end.output["tools_listing"]] == [("missing", None)]


def test_a_failing_call_ends_its_rule_span_with_an_error() -> None:
    sink = ListSink()

    def fail(mcp_id: str, tool_name: str, params: dict[str, Any]) -> Any:
        raise ConnectionError("session closed")

    outcome = run_prestep(
        [calling_rule("r", "a", "t1")],
        AgentRequest(query="x"),
        backend=StaticToolBackend(TOOLS, call=fail),
        sink=sink,
    )

    rule_end = sink.of_kind("rule")[-1]
    assert (rule_end.phase, rule_end.status, rule_end.error) == ("end", "error", "session closed")
    prestep_end = sink.events[-1]
    assert prestep_end.status == "error" and prestep_end.error == outcome.error


def test_a_raising_rule_gets_a_rule_span() -> None:
    sink = ListSink()

    @deterministic_tool(mcp_id="a")
    def broken(ctx: DeterministicContext) -> None:
        raise RuntimeError("nope")

    run_prestep([broken], AgentRequest(query="x"), backend=StaticToolBackend(TOOLS), sink=sink)

    assert [(e.kind, e.phase, e.status) for e in sink.of_kind("rule")] == [
        ("rule", "start", "running"),
        ("rule", "end", "error"),
    ]


def test_a_raising_sink_never_breaks_the_prestep(caplog: pytest.LogCaptureFixture) -> None:
    class BrokenSink:
        def emit(self, event: TraceEvent) -> None:
            raise OSError("disk full")

    caplog.set_level(logging.INFO, logger="llamon_agent")
    outcome = run_prestep(
        [calling_rule("r", "a", "t1")],
        AgentRequest(query="x"),
        backend=StaticToolBackend(TOOLS, call=echo_call),
        sink=BrokenSink(),
    )

    assert outcome.ok and outcome.calls == 1
    assert done_lines(caplog) == ["Deterministic pre-step 완료: 1건"]
    assert any("trace sink" in r.getMessage() for r in caplog.records)


def test_compiling_a_large_rule_set_through_the_sdk_freezes_it_out_of_the_collector() -> None:
    import gc

    from llamon_agent.expr import expression_rule
    from llamon_agent.prestep import FREEZE_AFTER_RULES, compile_rules

    gc.unfreeze()
    try:
        compile_rules(
            [
                expression_rule(name=f"r{i}", mcp_id="s", tool_name="t", when=f'"w{i}" in query', params="{}")
                for i in range(10)
            ]
        )
        assert gc.get_freeze_count() == 0
        compile_rules(
            [
                expression_rule(name=f"r{i}", mcp_id="s", tool_name="t", when=f'"w{i}" in query', params="{}")
                for i in range(FREEZE_AFTER_RULES)
            ]
        )
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_a_compiled_rule_set_sees_every_change_to_a_servers_tool_list() -> None:
    # The compiled rules keep each server's tool names between requests; a list that changes,
    # in place or for another one, must be read again (in `tool_names` and in the call's check).
    from llamon_agent.expr import expression_rule

    compiled = compile_rules(
        [
            expression_rule(name="if_b", mcp_id="kb", tool_name="b", when='"b" in tool_names', params="{}"),
            expression_rule(name="always_b", mcp_id="kb", tool_name="b", when="True", params="{}"),
        ]
    )
    request = AgentRequest(query="q")

    def statuses(tools: list[Any]) -> list[tuple[str, str | None]]:
        outcome = run_prestep(compiled, request, backend=StaticToolBackend({"kb": tools}), dry_run=True)
        return [(str(r.status), r.error) for r in outcome.records]

    no_b = [("skipped", None), ("error", "MCP 'kb' has no tool 'b'")]
    has_b = [("fired", None), ("fired", None)]
    tools: list[Any] = [ToolInfo("a")]
    assert statuses(tools) == no_b
    kept = compiled.tool_names["kb"]
    assert statuses(tools) == no_b and compiled.tool_names["kb"] is kept  # the same tools: reused
    tools.append(ToolInfo("b"))  # one tool more
    assert statuses(tools) == has_b
    tools[1] = ToolInfo("c")  # the same length, another tool
    assert statuses(tools) == no_b
    assert statuses([ToolInfo("a"), ToolInfo("b")]) == has_b  # another list
    assert statuses([ToolInfo("a")]) == no_b
    # Tools that are not frozen ToolInfo can be renamed under the same object: never kept.
    named = {"name": "a"}
    assert statuses([named]) == no_b
    named["name"] = "b"
    assert statuses([named]) == has_b
