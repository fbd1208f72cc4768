"""The run page's trace: waterfall spans, token usage, cost from the price table, its system check."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from agents import trace_view as traces
from agents.models import Run, RunStep
from agents.pricing import PriceTableError, parse_prices, prices_check

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
PRICES = '{"gpt-test": {"input": 2, "output": 8.5}}'


def _step(
    run: Run, seq: int, kind: str, name: str, at_ms: float, duration_ms: float | None, **fields
) -> RunStep:
    return RunStep.objects.create(
        run=run,
        seq=seq,
        kind=kind,
        name=name,
        status=fields.pop("status", "ok"),
        started_at=T0 + timedelta(milliseconds=at_ms),
        duration_ms=duration_ms,
        **fields,
    )


def _seeded_run() -> Run:
    """A run shaped like the first seeded one: a 7.6 s pre-step whose one rule took 26 ms."""
    run = Run.objects.create(
        status=Run.Status.SUCCEEDED, query="q", started_at=T0, finished_at=T0 + timedelta(milliseconds=9000)
    )
    _step(run, 1, "guardrail", "input", 0, 0.5)
    listing = [{"mcp_id": "orders", "offset_ms": 0.2, "duration_ms": 7540.0, "tools": 3}]
    _step(
        run, 2, "prestep", "deterministic pre-step", 1, 7600.0, output={"calls": 1, "tools_listing": listing}
    )
    _step(run, 3, "rule", "route_order", 7560, 26.0, parent_seq=2, mcp_id="orders", tool_name="get_order")
    llm_input = {
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"name": "get_order"}, {"name": "refund"}],
    }
    tokens = {"input_tokens": 1000, "output_tokens": 200, "total_tokens": 1200}
    _step(run, 4, "llm", "gpt-test", 7700, 800.0, input=llm_input, tokens=tokens)
    _step(run, 5, "tool", "get_order", 8500, 100.0, parent_seq=4, mcp_id="orders")
    _step(run, 6, "llm", "gpt-test", 8610, 300.0, input=llm_input, tokens=tokens)
    _step(run, 7, "answer", "answer", 8950, 0.1)
    return run


def test_the_waterfall_places_every_span_on_one_axis_and_shows_where_the_prestep_time_went(settings) -> None:
    settings.LLAMON_MODEL_PRICES = PRICES
    trace = traces.run_trace(run=_seeded_run())

    rows = {s.label: s for s in trace.spans}
    assert [s.kind for s in trace.spans] == [
        "guardrail",
        "prestep",
        "listing",
        "rule",
        "llm",
        "tool",
        "llm",
        "answer",
    ]
    assert trace.total_ms == 9000.0
    prestep = rows["pre-step deterministic pre-step"]
    assert (prestep.offset_ms, prestep.duration_ms, prestep.depth) == (1.0, 7600.0, 0)
    # The 7.6 s: 7.54 s listing (connecting) the server's tools, 26 ms in the rule, the rest its own.
    listing = rows["MCP tools of orders (list / connect)"]
    assert (listing.offset_ms, listing.duration_ms, listing.depth, listing.detail) == (
        1.2,
        7540.0,
        1,
        "3 tools",
    )
    rule = rows["rule route_order → orders/get_order"]
    assert (rule.offset_ms, rule.duration_ms, rule.depth) == (7560.0, 26.0, 1)
    assert prestep.own_ms == 34.0
    tool = rows["tool orders/get_order"]
    assert (tool.offset_ms, tool.depth) == (8500.0, 1)


def test_token_counts_and_cost_per_call_and_per_run(settings) -> None:
    settings.LLAMON_MODEL_PRICES = PRICES
    trace = traces.run_trace(run=_seeded_run())

    # 1000 in at $2/M + 200 out at $8.5/M = $0.0037 per call; two calls.
    assert traces.llm_usage("gpt-test", {"input_tokens": 1000, "output_tokens": 200}).cost == Decimal(
        "0.0037"
    )
    usage = trace.usage
    assert (usage.model, usage.calls, usage.input_tokens, usage.output_tokens, usage.total_tokens) == (
        "gpt-test",
        2,
        2000,
        400,
        2400,
    )
    assert usage.cost == Decimal("0.0074")
    llm = [s for s in trace.spans if s.kind == "llm"]
    assert llm[0].detail == "1000 in / 200 out tokens"


def test_tools_offered_versus_called(settings) -> None:
    trace = traces.run_trace(run=_seeded_run())
    assert trace.tools_offered == ["get_order", "refund"]
    assert trace.tools_called == {"get_order": 1}
    assert trace.tools_not_called == ["refund"]
    assert trace.prestep_calls == {"orders/get_order": 1}


def test_a_model_without_a_price_has_an_unknown_cost_never_an_invented_one(settings) -> None:
    settings.LLAMON_MODEL_PRICES = '{"other-model": {"input": 1, "output": 1}}'
    trace = traces.run_trace(run=_seeded_run())
    assert trace.usage.total_tokens == 2400 and trace.usage.cost is None
    assert traces.llm_usage("gpt-test", {"input_tokens": 1, "output_tokens": 1}).cost is None
    # Priced model, no token counts (the offline model reports none): unknown too.
    settings.LLAMON_MODEL_PRICES = PRICES
    assert traces.llm_usage("gpt-test", None).cost is None
    # One unknown call makes the run's total unknown rather than a partial sum.
    calls = [
        traces.llm_usage("gpt-test", {"input_tokens": 1, "output_tokens": 1}),
        traces.llm_usage("x", None),
    ]
    assert traces.run_usage(calls).cost is None


def test_a_running_step_is_drawn_up_to_now() -> None:
    run = Run.objects.create(status=Run.Status.RUNNING, query="q", started_at=T0)
    _step(run, 1, "llm", "m", 100, None, status="running")
    trace = traces.run_trace(run=run, now=T0 + timedelta(seconds=2))
    (span,) = trace.spans
    assert (span.offset_ms, span.duration_ms) == (100.0, 1900.0)


def test_the_waterfall_reads_no_step_payloads_but_the_prestep_summary_and_llm_tools(
    django_assert_max_num_queries,
) -> None:
    run = Run.objects.create(status=Run.Status.SUCCEEDED, query="q", started_at=T0, finished_at=T0)
    RunStep.objects.bulk_create(
        RunStep(run=run, seq=i, kind="rule", name=f"r{i}", status="ok", started_at=T0, duration_ms=1.0)
        for i in range(1, 1501)
    )
    with django_assert_max_num_queries(5):
        trace = traces.run_trace(run=run)
    assert trace.span_count == 1500 and len(trace.spans) == traces.WATERFALL_LIMIT and trace.left_out == 500


def test_a_long_runs_trace_reads_only_the_drawn_steps_and_lets_the_database_sum_the_rest(settings) -> None:
    """A 3,000-step run: Python reads at most WATERFALL_LIMIT step rows; counts cover every step."""
    settings.LLAMON_MODEL_PRICES = PRICES
    run = Run.objects.create(
        status=Run.Status.SUCCEEDED, query="q", started_at=T0, finished_at=T0 + timedelta(seconds=1)
    )
    tokens = {"input_tokens": 10, "output_tokens": 2}
    RunStep.objects.bulk_create(
        RunStep(
            run=run,
            seq=i,
            kind="llm" if i % 2 else "tool",
            name="gpt-test" if i % 2 else f"tool-{i % 3}",
            status="ok",
            started_at=T0 + timedelta(milliseconds=i),
            duration_ms=1.0,
            tokens=tokens if i % 2 else None,
            input={"messages": [{"role": "user", "content": "x" * 50}]},
        )
        for i in range(1, 3001)
    )
    with CaptureQueriesContext(connection) as queries:
        trace = traces.run_trace(run=run)
    for query in queries.captured_queries:
        sql = query["sql"]
        limit = re.search(r"LIMIT (\d+)", sql)
        # Every read of step rows is bounded by the bars drawn, or is the database's own count, or
        # reads only the LLM calls' model and token counts.
        counted = "GROUP BY" in sql or re.match(
            r'SELECT "agents_runstep"."name"(?: AS "name")?, "agents_runstep"."tokens"(?: AS "tokens")? FROM',
            sql,
        )
        assert counted or (limit and int(limit.group(1)) <= traces.WATERFALL_LIMIT), sql
    assert (trace.span_count, len(trace.spans)) == (3000, traces.WATERFALL_LIMIT)
    assert (trace.usage.calls, trace.usage.input_tokens, trace.usage.output_tokens) == (1500, 15000, 3000)
    assert trace.usage.total_tokens == 18000 and trace.usage.cost == Decimal("0.0555")  # 1500 x $0.000037
    assert trace.tools_called == {"tool-2": 500, "tool-1": 500, "tool-0": 500}  # in order of first call
    # The axis reaches the last step's end (3,000 ms + 1 ms), past the drawn bars.
    assert trace.total_ms == 3001.0


TOKEN_VALUES = st.one_of(
    st.integers(min_value=-5, max_value=10**15),
    st.sampled_from([0, 1, 10**30, -1, True, False, None, 1.0, 2.5, 1e3, "7", "", [], {}]),
)
TOKENS = st.one_of(
    st.none(),
    st.sampled_from([[1, 2], "tokens", 5, True]),
    st.dictionaries(
        st.sampled_from(["input_tokens", "output_tokens", "total_tokens", "other"]), TOKEN_VALUES, max_size=4
    ),
)


@pytest.mark.django_db(transaction=False)
@given(
    calls=st.lists(st.tuples(st.sampled_from(["gpt-test", "free-model", "gpt-other"]), TOKENS), max_size=8)
)
@hypothesis_settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_the_runs_usage_is_every_calls_usage_summed_whatever_a_served_run_stored(settings, calls) -> None:
    """Whatever usage a served run stored (any JSON), the run's usage is its calls' priced one by one."""
    settings.LLAMON_MODEL_PRICES = (
        '{"gpt-test": {"input": 2, "output": 8.5}, "free-model": {"input": 0, "output": 0}}'
    )
    run = Run.objects.create(status=Run.Status.SUCCEEDED, query="q", started_at=T0, finished_at=T0)
    for seq, (model, tokens) in enumerate(calls, start=1):
        _step(run, seq, "llm", model, seq, 1.0, tokens=tokens)
    expected = traces.run_usage([traces.llm_usage(model, tokens) for model, tokens in calls])
    got = traces.run_trace(run=run).usage
    fields = ("model", "calls", "input_tokens", "output_tokens", "total_tokens", "cost")
    assert [getattr(got, f) for f in fields] == [getattr(expected, f) for f in fields]


def test_a_hostile_step_name_is_escaped_in_the_waterfall(viewer_client) -> None:
    run = Run.objects.create(status=Run.Status.SUCCEEDED, query="q", started_at=T0, finished_at=T0)
    _step(run, 1, "tool", '<img src=x onerror="alert(1)">', 0, 1.0, mcp_id="a&b", status='ok" onclick="x')
    page = viewer_client.get(reverse("agents:run_detail", args=[run.pk])).content.decode()
    waterfall = page[page.index('id="waterfall"') : page.index("</ol>", page.index('id="waterfall"'))]
    assert "<img" not in waterfall and 'onclick="x' not in waterfall
    assert "tool a&amp;b/&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in waterfall


def test_the_waterfall_speaks_the_users_language(viewer_client) -> None:
    run = _seeded_run()
    page = viewer_client.get(
        reverse("agents:run_detail", args=[run.pk]), HTTP_ACCEPT_LANGUAGE="ko"
    ).content.decode()
    assert '<span class="muted">(자체 34.0 ms)</span>' in page  # the pre-step's own time


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("{not json", "not valid JSON"),
        ('["gpt"]', "must be a JSON object"),
        ('{"gpt": 3}', 'exactly the keys "input" and "output"'),
        ('{"gpt": {"input": 1}}', 'exactly the keys "input" and "output"'),
        ('{"gpt": {"input": -1, "output": 1}}', "0 or more; it is -1"),
        ('{"gpt": {"input": "1", "output": 1}}', 'it is "1"'),
        ('{"gpt": {"input": true, "output": 1}}', "it is true"),
        ('{"gpt": {"input": NaN, "output": 1}}', "it is NaN"),
        ('{" ": {"input": 1, "output": 1}}', "empty model name"),
    ],
)
def test_a_malformed_price_table_is_refused_with_what_is_wrong(raw: str, says: str) -> None:
    with pytest.raises(PriceTableError) as error:
        parse_prices(raw)
    assert says in str(error.value)


def test_a_malformed_price_table_stops_start_up_with_a_system_check_error(settings) -> None:
    settings.LLAMON_MODEL_PRICES = '{"gpt": {"input": "cheap", "output": 1}}'
    (error,) = prices_check()
    assert error.id == "agents.E001" and "LLAMON_MODEL_PRICES['gpt']['input']" in error.msg
    with pytest.raises(SystemCheckError, match="agents.E001"):
        call_command("check")
    settings.LLAMON_MODEL_PRICES = PRICES
    assert prices_check() == []
    assert parse_prices("") == {}


def test_the_run_page_shows_the_waterfall_usage_and_the_llm_chat(settings, viewer_client) -> None:
    settings.LLAMON_MODEL_PRICES = PRICES
    run = _seeded_run()
    RunStep.objects.filter(run=run, seq=4).update(
        output={"content": "", "tool_calls": [{"id": "c1", "name": "get_order", "args": {"order_id": "A-1"}}]}
    )
    page = viewer_client.get(reverse("agents:run_detail", args=[run.pk])).content.decode()
    assert 'id="waterfall" data-total-ms="9000.000000"' in page
    assert 'data-offset-ms="1.200000" data-duration-ms="7540.000000"' in page  # the listing's bar
    assert 'style="' not in page  # the CSP forbids style attributes: trace.js places the bars
    assert (
        '<span id="run-tokens-total">2,400</span>' in page and '<span id="run-cost">$0.007400</span>' in page
    )
    assert '<li class="chat-msg chat-user" data-role="user">' in page
    assert (
        '<code class="chat-call-name">get_order</code>' in page
        and "&quot;order_id&quot;: &quot;A-1&quot;" in page
    )
    assert '<span class="llm-cost">$0.003700</span>' in page


def test_a_served_runs_malformed_trace_is_shown_without_an_error(settings, viewer_client) -> None:
    # Served runs' steps come from the ingest API: whatever shape they have, the page renders.
    settings.LLAMON_MODEL_PRICES = PRICES
    run = Run.objects.create(
        status=Run.Status.SUCCEEDED, source="served", query="q", started_at=T0, finished_at=T0
    )
    junk_listing = [{"mcp_id": "x", "offset_ms": "soon", "duration_ms": -4}, "junk", 7]
    _step(run, 1, "prestep", "deterministic pre-step", 0, 5.0, output={"tools_listing": junk_listing})
    _step(
        run,
        2,
        "llm",
        "gpt-test",
        1,
        2.0,
        input={"messages": "text", "tools": 5},
        tokens={"input_tokens": "many"},
    )
    _step(
        run,
        3,
        "llm",
        "gpt-test",
        3,
        2.0,
        input={"messages": [5, {"role": "user"}], "tools": ["a", {"name": 3}]},
    )
    # An LLM step's input that is not an object at all: its "tools" key is read in SQL.
    _step(run, 4, "llm", "gpt-test", 5, 1.0, input="just text", tokens=[1, 2])
    _step(run, 5, "llm", "gpt-test", 6, 1.0, input=[{"tools": [{"name": "x"}]}], tokens="many")
    trace = traces.run_trace(run=run)
    listing = next(s for s in trace.spans if s.kind == "listing")
    assert (listing.offset_ms, listing.duration_ms) == (0.0, None)
    assert trace.tools_offered == [] and trace.usage.cost is None and trace.usage.total_tokens is None
    response = viewer_client.get(reverse("agents:run_detail", args=[run.pk]))
    assert response.status_code == 200 and b'<span id="run-cost">unknown</span>' in response.content
    assert response.content.count(b'class="chat-msg') == 1  # the one message shaped like one
