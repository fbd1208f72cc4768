"""Coverage and health per rule: fires per day, never-fired rules, errors, latency percentiles and case
coverage, from runs recorded through the product's step sink (tests/governance/conftest.py); the page and API."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import Run
from agents.sink import DbStepSink
from governance import rule_health as health
from governance.errors import HealthError
from llamon_agent.trace import TraceEvent
from rules import services as rule_services
from rules.cases import case_create, suite_run
from tests.support.recorded_runs import record_run

pytestmark = pytest.mark.django_db

ORDER_QUERY = "주문 조회 부탁해 A-1001"
PREMIUM = {"chatbotId": "premium-support", "userId": "C-7"}


def by_name(report) -> dict:
    return {r.name: r for r in report.rules}


def day_slot(report, run: Run) -> int:
    run.refresh_from_db(fields=["created_at"])  # record_run backdates it in the database
    return report.day_labels.index(timezone.localdate(run.created_at))


def test_fires_are_counted_per_rule_and_day_and_rules_that_never_fired_are_flagged(seed_v1) -> None:
    today = [record_run(seed_v1, ORDER_QUERY, age=timedelta(minutes=1)) for _ in range(2)]
    three_days = record_run(seed_v1, ORDER_QUERY, context=PREMIUM, age=timedelta(days=3))
    record_run(seed_v1, ORDER_QUERY, age=timedelta(days=20))  # outside a 14-day window
    other = Run.objects.create(query=ORDER_QUERY, rule_set_name="another", status="succeeded")
    DbStepSink(other).emit(
        TraceEvent(id="x", kind="rule", name="route_order_lookup", phase="end", status="ok")
    )

    report = health.rule_set_health(rule_set=seed_v1, days=14)
    rows = by_name(report)
    assert [r.name for r in report.rules] == [
        "route_order_lookup",
        "route_by_chatbot_id",
        "route_by_available_tool",
    ]
    assert [r.position for r in report.rules] == [1, 2, 3]
    order = rows["route_order_lookup"]
    assert (order.fires, order.errors, sum(order.per_day), len(order.per_day)) == (3, 0, 3, 14)
    expected = [0] * 14
    for run in [*today, three_days]:
        expected[day_slot(report, run)] += 1
    assert order.per_day == expected
    assert rows["route_by_chatbot_id"].per_day[day_slot(report, three_days)] == 1
    assert rows["route_by_chatbot_id"].fires == 1
    assert report.runs == 3
    assert report.never_fired == ["route_by_available_tool"]
    assert rows["route_by_available_tool"].never_fired
    # One day back, only today's runs count; the three-day-old run is outside the window.
    short = by_name(health.rule_set_health(rule_set=seed_v1, days=1))
    assert short["route_order_lookup"].fires == sum(1 for r in today if day_slot(report, r) == 13)
    assert short["route_by_chatbot_id"].never_fired


def test_errors_are_counted_apart_from_fires_and_rules_gone_from_the_draft_still_show(
    seed_v1, editor
) -> None:
    record_run(seed_v1, ORDER_QUERY)
    rule = seed_v1.rules.get(name="route_order_lookup")
    rule_services.rule_update(
        actor=editor, rule=rule, revision=None, params='{"query": ctx.context["missing"]}'
    )
    failing = [dict(r) for r in seed_v1.versions.get(number=1).content]
    failing[0]["params"] = '{"query": ctx.context["missing"]}'
    record_run(seed_v1, ORDER_QUERY, snapshot=failing)
    record_run(seed_v1, ORDER_QUERY, snapshot=failing)
    rule_services.rule_delete(actor=editor, rule=seed_v1.rules.get(name="route_by_chatbot_id"))
    record_run(seed_v1, "안녕하세요", context=PREMIUM)  # recorded by v1, which still has the CRM rule

    rows = by_name(health.rule_set_health(rule_set=seed_v1, days=7))
    assert (rows["route_order_lookup"].fires, rows["route_order_lookup"].errors) == (1, 2)
    assert rows["route_order_lookup"].errors == 2
    gone = rows["route_by_chatbot_id"]
    assert (gone.in_draft, gone.position, gone.fires) == (False, None, 1)
    assert list(rows)[-1] == "route_by_chatbot_id"  # after the draft's rules


def emit_durations(rule_set, name: str, durations: list[float]) -> None:
    """One run per duration whose rule step is stored by the step sink with that duration."""
    for i, duration in enumerate(durations):
        run = Run.objects.create(query="q", rule_set_name=rule_set.name, status="succeeded")
        DbStepSink(run).emit(
            TraceEvent(
                id=f"r{i}",
                kind="rule",
                name=name,
                phase="end",
                status="ok",
                duration_ms=duration,
                input={"mcp_id": "order-service", "tool_name": "get_order"},
            )
        )


def test_latency_percentiles_are_p50_and_p95_of_the_rule_steps(seed_v1) -> None:
    emit_durations(seed_v1, "route_order_lookup", [float(d) for d in range(1, 11)])
    emit_durations(seed_v1, "route_by_chatbot_id", [7.25])
    rows = by_name(health.rule_set_health(rule_set=seed_v1, days=1))
    order = rows["route_order_lookup"]
    # Linear interpolation between the closest ranks (as percentile_cont): 5.5 and 9.55.
    assert (order.p50_ms, order.p95_ms, order.duration_samples) == (5.5, 9.55, 10)
    assert (rows["route_by_chatbot_id"].p50_ms, rows["route_by_chatbot_id"].p95_ms) == (7.25, 7.25)
    assert rows["route_by_available_tool"].p50_ms is None


def test_percentiles_use_only_the_newest_bounded_sample_per_rule(seed_v1, monkeypatch) -> None:
    emit_durations(seed_v1, "route_order_lookup", [1000.0, 1000.0, 1.0, 2.0, 3.0])
    emit_durations(seed_v1, "route_by_chatbot_id", [50.0, 10.0, 20.0, 30.0])
    monkeypatch.setattr(health, "SAMPLE_PER_RULE", 3)
    rows = by_name(health.rule_set_health(rule_set=seed_v1, days=1))
    assert (rows["route_order_lookup"].p50_ms, rows["route_order_lookup"].duration_samples) == (2.0, 3)
    assert (rows["route_by_chatbot_id"].p50_ms, rows["route_by_chatbot_id"].p95_ms) == (20.0, 29.0)
    assert rows["route_order_lookup"].fires == 5  # the counts are not sampled


def add_cases(rule_set, editor) -> None:
    case_create(
        actor=editor,
        rule_set=rule_set,
        name="order",
        input={"query": ORDER_QUERY},
        expected={"must_fire": [{"tool_name": "get_order"}]},
    )
    case_create(
        actor=editor,
        rule_set=rule_set,
        name="premium hello",
        input={"query": "hi", "context": PREMIUM},
        expected={
            "must_fire": [{"mcp_id": "customer-crm", "tool_name": "get_customer_profile"}],
            "must_not_fire": [{"tool_name": "get_order"}],
        },
    )


def test_case_coverage_names_the_cases_and_gives_a_percentage(seed_v1, editor) -> None:
    add_cases(seed_v1, editor)
    report = health.rule_set_health(rule_set=seed_v1, days=14)
    rows = by_name(report)
    assert (report.cases, report.cases_evaluated, report.cases_stored) == (
        2,
        2,
        0,
    )  # never run: evaluated now
    order, crm, search = (
        rows["route_order_lookup"],
        rows["route_by_chatbot_id"],
        rows["route_by_available_tool"],
    )
    assert (order.expect_fire, order.expect_not_fire, order.fired_in) == (
        ["order"],
        ["premium hello"],
        ["order"],
    )
    assert (crm.expect_fire, crm.fired_in, crm.covered) == (["premium hello"], ["premium hello"], True)
    assert (search.fired_in, search.covered) == ([], False)
    assert report.coverage == {"covered": 2, "rules": 3, "percent": 66.7}

    suite_run(rule_set=seed_v1)
    stored = health.rule_set_health(rule_set=seed_v1, days=14)
    assert (stored.cases_stored, stored.cases_evaluated) == (2, 0)
    assert stored.coverage["covered"] == 2


def test_a_stale_suite_outcome_is_not_trusted_after_the_draft_changes(seed_v1, editor) -> None:
    add_cases(seed_v1, editor)
    suite_run(rule_set=seed_v1)
    rule = seed_v1.rules.get(name="route_order_lookup")
    rule_services.rule_update(actor=editor, rule=rule, revision=None, when='"없는 말" in ctx.query')
    seed_v1.refresh_from_db()
    report = health.rule_set_health(rule_set=seed_v1, days=14)
    assert (report.cases_stored, report.cases_evaluated) == (0, 2)
    assert by_name(report)["route_order_lookup"].fired_in == []
    assert report.coverage["percent"] == 33.3


def test_disabled_rules_are_outside_the_coverage_and_the_never_fired_list(seed_v1, editor) -> None:
    rule = seed_v1.rules.get(name="route_by_available_tool")
    rule_services.rule_update(actor=editor, rule=rule, revision=None, enabled=False)
    seed_v1.refresh_from_db()
    report = health.rule_set_health(rule_set=seed_v1, days=14)
    assert report.coverage["rules"] == 2
    assert "route_by_available_tool" not in report.never_fired


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (0, "between 1 and 90"),
        (91, "between 1 and 90"),
        ("-3", "between 1 and 90"),
        (10**30, "between 1 and 90"),
        ("9" * 5000, "whole number"),
        ("ten", "whole number"),
        ("1\x00", "whole number"),
        ("", "whole number"),
        (1.5, "whole number"),
        (None, "whole number"),
    ],
)
def test_bad_days_are_refused_with_a_reason(seed_v1, value, words) -> None:
    with pytest.raises(HealthError) as refused:
        health.rule_set_health(rule_set=seed_v1, days=value)
    assert words in refused.value.message and refused.value.field == "days"


def test_the_page_shows_the_table_and_the_editor_links_to_it(viewer_client, seed_v1) -> None:
    record_run(seed_v1, ORDER_QUERY)
    editor_page = viewer_client.get(f"/rules/{seed_v1.pk}/").content.decode()
    url = f"/governance/rule-sets/{seed_v1.pk}/health/"
    assert f'href="{url}"' in editor_page
    page = viewer_client.get(url + "?days=30")
    body = page.content.decode()
    assert page.status_code == 200
    assert 'data-rule="route_order_lookup"' in body and "never fired in 30 days" in body
    assert 'class="spark-bar"' in body and "style=" not in body.split('id="health-rules"')[1]


@pytest.mark.parametrize("days", ["0", "91", "abc", "9" * 40])
def test_bad_days_on_the_page_are_a_400_with_the_reason(viewer_client, seed_v1, days) -> None:
    page = viewer_client.get(f"/governance/rule-sets/{seed_v1.pk}/health/?days={days}")
    assert page.status_code == 400
    assert 'id="health-error"' in page.content.decode() and "days must be" in page.content.decode()


def test_a_nul_in_the_days_is_refused_before_the_page_and_the_api(viewer_client, seed_v1) -> None:
    # The project's input middleware answers every NUL in a parameter with a 400 naming it.
    page = viewer_client.get(f"/governance/rule-sets/{seed_v1.pk}/health/?days=1%00")
    api = viewer_client.get(f"/api/rule-sets/{seed_v1.pk}/health?days=1%00")
    assert (page.status_code, api.status_code) == (400, 400)
    assert "days: Null characters are not allowed." in page.content.decode()
    assert "Null characters" in api.content.decode()


def test_the_api_reports_health_per_rule(viewer_client, seed_v1, editor) -> None:
    record_run(seed_v1, ORDER_QUERY)
    add_cases(seed_v1, editor)
    body = viewer_client.get(f"/api/rule-sets/{seed_v1.pk}/health?days=7").json()
    assert (body["days"], body["runs"], len(body["day_labels"])) == (7, 1, 7)
    first = body["rules"][0]
    assert (first["name"], first["fires"], first["fires_per_day"][-1] + first["fires_per_day"][-2]) == (
        "route_order_lookup",
        1,
        1,
    )
    assert first["cases"]["fired"] == ["order"] and first["p50_ms"] is not None
    assert body["coverage"]["percent"] == 66.7 and body["never_fired"] == [
        "route_by_chatbot_id",
        "route_by_available_tool",
    ]
    assert viewer_client.get("/api/rule-sets/999/health").status_code == 404


@pytest.mark.parametrize(
    ("days", "words"),
    [("0", "between 1 and 90"), ("91", "between 1 and 90"), ("abc", "days"), ("9" * 40, "between 1 and 90")],
)
def test_bad_days_in_the_api_are_a_422(viewer_client, seed_v1, days, words) -> None:
    response = viewer_client.get(f"/api/rule-sets/{seed_v1.pk}/health?days={days}")
    assert response.status_code == 422
    assert words in response.json()["detail"]


def test_the_page_over_many_cases_compiles_one_request_budget_of_regexes_at_most(seed_v1, editor) -> None:
    # 2,000 rules whose patterns are built at run time, large or failing, and 10 stale cases:
    # counted in what RE2 builds in full, not timed.
    from llamon_agent.expr import REGEX_COMPILE_ALLOWANCE, helpers, regex_size
    from rules.models import Rule

    Rule.objects.bulk_create(
        Rule(
            rule_set=seed_v1,
            name=f"re_{i}",
            mcp_id="order-service",
            tool_name="get_order",
            when=f're_search("h{i}\\\\pL{{2" + "0}}", query)'
            if i % 2
            else f're_search("h{i}\\\\pL{{10" + "00}}", query)',
            position=10 + i,
        )
        for i in range(2_000)
    )
    for n in range(10):
        case_create(actor=editor, rule_set=seed_v1, name=f"c{n}", input={"query": f"질문 {n}"}, expected={})
    built: list[str] = []
    real = helpers.re2.compile

    def counting(pattern, options=None):  # type: ignore[no-untyped-def]
        if options is not helpers._CHECK_OPTIONS:
            built.append(pattern)
        return real(pattern, options)

    helpers.re2.compile = counting
    try:
        report = health.rule_set_health(rule_set=seed_v1, days=14)
    finally:
        helpers.re2.compile = real
    assert report.cases_evaluated == 10
    assert built and sum(regex_size(p) for p in built) <= REGEX_COMPILE_ALLOWANCE
    assert not any("pL{1000}" in p for p in built)
