"""Impact analyses in the database: replay against recorded runs, masking, filters, refusals, audit,
pages, API and the CI command. The worker itself is in test_impact_on_worker.py."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from agents.models import PrivacySettings, Run
from core.models import AuditEvent
from governance import services
from governance.errors import ImpactError
from governance.models import ImpactAnalysis
from rules import services as rule_services
from tests.support.recorded_runs import record_run

pytestmark = pytest.mark.django_db

ORDER_QUERY = "주문 조회 부탁해 A-1001"
PREMIUM = {"chatbotId": "premium-support", "userId": "C-7"}


def change_draft(rule_set, editor) -> None:
    """The draft after v1: the order rule sends one more param, the CRM rule is off, a weather rule is new."""
    rules = {r.name: r for r in rule_set.rules.all()}
    rule_services.rule_update(
        actor=editor,
        rule=rules["route_order_lookup"],
        revision=None,
        params='{"query": ctx.query, "lang": "ko"}',
    )
    rule_services.rule_update(actor=editor, rule=rules["route_by_chatbot_id"], revision=None, enabled=False)
    rule_services.rule_create(
        actor=editor,
        rule_set=rule_set,
        name="route_weather",
        mcp_id="knowledge-base",
        tool_name="search_docs",
        when='"날씨" in query',
        params='{"q": query}',
    )
    rule_set.refresh_from_db()


def analyse(rule_set, *, version="draft", **choice):
    analysis = services.impact_start(
        actor=None, enqueue=False, rule_set=rule_set, version=version, days=choice.pop("days", 7), **choice
    )
    services.impact_execute(analysis_id=analysis.pk)
    analysis.refresh_from_db()
    assert analysis.status == "succeeded", analysis.error
    return analysis


def test_the_draft_is_compared_with_what_runs_recorded_grouped_by_rule(seed_v1, editor) -> None:
    order = record_run(seed_v1, ORDER_QUERY)
    premium = record_run(seed_v1, "안녕하세요", context=PREMIUM)
    weather = record_run(seed_v1, "날씨 어때?")
    quiet = record_run(seed_v1, "고마워요")
    change_draft(seed_v1, editor)

    result = analyse(seed_v1).result
    assert (result["replayed"], result["unchanged"], result["changed"], result["skipped"]) == (4, 1, 3, 0)
    groups = {g["rule"]: g for g in result["rules"]}
    assert set(groups) == {"route_order_lookup", "route_by_chatbot_id", "route_weather"}
    assert groups["route_order_lookup"]["changed"] == 1
    assert groups["route_order_lookup"]["param_keys"] == [{"key": "lang", "runs": 1}]
    assert groups["route_by_chatbot_id"]["removed"] == 1
    assert groups["route_weather"]["added"] == 1
    sample = groups["route_order_lookup"]["samples"][0]
    assert sample["run_id"] == order.pk
    assert sample["old"] == [
        {
            "rule": "route_order_lookup",
            "mcp_id": "order-service",
            "tool_name": "get_order",
            "params": {"query": ORDER_QUERY},
        }
    ]
    assert sample["new"][0]["params"] == {"query": ORDER_QUERY, "lang": "ko"}
    assert groups["route_by_chatbot_id"]["samples"][0]["run_id"] == premium.pk
    assert groups["route_weather"]["samples"][0]["run_id"] == weather.pk
    assert quiet.pk not in {s["run_id"] for g in groups.values() for s in g["samples"]}


def test_replaying_the_version_the_runs_ran_changes_nothing(seed_v1) -> None:
    for query in (ORDER_QUERY, "날씨", "검색 해줘"):
        record_run(seed_v1, query, context=PREMIUM)
    result = analyse(seed_v1, version=1).result
    assert (result["replayed"], result["unchanged"], result["rules"]) == (3, 3, [])


def test_masked_input_stays_masked_and_masked_params_compare_equal(seed_v1) -> None:
    PrivacySettings.objects.update_or_create(pk=1, defaults={"mask_presets": ["email"]})
    secret = "kim@example.com"
    run = record_run(seed_v1, f"주문 조회 {secret}", context=PREMIUM)
    assert secret not in json.dumps(list(run.steps.values("input")))  # the sink stored it masked
    # The candidate sends the query in a second param too: a change whose sample shows both sides.
    rule = seed_v1.rules.get(name="route_order_lookup")
    rule_services.rule_update(
        actor=None, rule=rule, revision=None, params='{"query": ctx.query, "q2": ctx.query}'
    )
    result = analyse(seed_v1).result
    group = result["rules"][0]
    assert (group["rule"], group["changed"], group["param_keys"]) == (
        "route_order_lookup",
        1,
        [{"key": "q2", "runs": 1}],
    )
    assert secret not in json.dumps(result, ensure_ascii=False)
    assert "kim@" not in group["samples"][0]["query"]


def test_a_card_number_a_candidate_splits_into_params_stays_masked(seed_v1) -> None:
    PrivacySettings.objects.update_or_create(pk=1, defaults={"mask_presets": ["card_number"]})
    record_run(seed_v1, "주문 조회 4111 1111 1111 1111", context=PREMIUM)
    rule = seed_v1.rules.get(name="route_order_lookup")
    rule_services.rule_update(
        actor=None, rule=rule, revision=None, params='{"query": ctx.query, "parts": ctx.query.split()}'
    )
    result = analyse(seed_v1).result
    shown = json.dumps(result, ensure_ascii=False)
    assert result["rules"][0]["changed"] == 1 and "[카드번호]" in shown
    assert "4111111111111111" not in re.sub(r"[\s\"',\[\]{}:-]", "", shown)  # not even piece by piece


def test_a_run_without_a_completed_prestep_is_not_replayed(seed_v1) -> None:
    record_run(seed_v1, ORDER_QUERY)
    Run.objects.create(query="blocked by the guardrail", rule_set_name=seed_v1.name, status="failed")
    result = analyse(seed_v1).result
    assert (result["replayed"], result["skipped"]) == (1, 1)


def test_filters_and_the_window_choose_the_runs(seed_v1, seed_agent) -> None:
    mine = record_run(seed_v1, ORDER_QUERY, context=PREMIUM, agent=seed_agent)
    record_run(seed_v1, ORDER_QUERY, context={"chatbotId": "other", "userId": "C-8"})
    record_run(seed_v1, ORDER_QUERY, context=PREMIUM, agent=seed_agent, age=timedelta(days=3))
    other_set = Run.objects.create(query=ORDER_QUERY, rule_set_name="another", status="succeeded")
    assert other_set.pk
    assert analyse(seed_v1, days=7).result["replayed"] == 3
    assert analyse(seed_v1, days=2).result["replayed"] == 2
    for choice in ({"agent": "seed-agent"}, {"chatbot_id": "premium-support"}, {"user_id": "C-7"}):
        analysis = analyse(seed_v1, days=2, **choice)
        assert (analysis.result["replayed"], analysis.total) == (1, 1), choice
    assert mine.pk


def test_a_candidate_that_fails_is_reported_as_an_error_of_its_rule(seed_v1) -> None:
    record_run(seed_v1, ORDER_QUERY)
    rule = seed_v1.rules.get(name="route_order_lookup")
    rule_services.rule_update(
        actor=None, rule=rule, revision=None, params='{"query": ctx.context["missing"]}'
    )
    group = analyse(seed_v1).result["rules"][0]
    assert (group["rule"], group["error"], group["removed"]) == ("route_order_lookup", 1, 0)
    assert "missing" in group["errors"][0]


@pytest.mark.parametrize(
    ("choice", "field", "words"),
    [
        ({"version": 7}, "version", "has no version 7"),
        ({"version": 2**70}, "version", "has no version"),
        ({"version": "v1; drop"}, "version", "'draft' or a version number"),
        ({"days": 0}, "days", "between 1 and 90"),
        ({"days": 91}, "days", "between 1 and 90"),
        ({"days": "ten"}, "days", "whole number"),
        ({"chatbot_id": "x" * 100_000}, "chatbot_id", "at most 200"),
        ({"user_id": "C-1\x00"}, "user_id", "control characters"),
        ({"agent": "nobody"}, "agent", "no agent named 'nobody'"),
    ],
)
def test_bad_choices_are_refused_with_a_reason_and_nothing_is_kept(seed_v1, choice, field, words) -> None:
    audits = AuditEvent.objects.count()
    with pytest.raises(ImpactError) as refused:
        services.impact_start(
            actor=None, enqueue=False, rule_set=seed_v1, **{"version": "draft", "days": 7, **choice}
        )
    assert refused.value.field == field and words in refused.value.message
    assert ImpactAnalysis.objects.count() == 0 and AuditEvent.objects.count() == audits


def test_starting_an_analysis_is_audited(seed_v1, editor) -> None:
    analysis = services.impact_start(
        actor=editor, enqueue=False, rule_set=seed_v1, version=1, days=3, user_id="C-7"
    )
    event = AuditEvent.objects.get(action="impact.start")
    assert (event.actor, event.object_id) == (editor, str(analysis.pk))
    assert event.after["candidate"] == "v1" and event.after["days"] == 3 and event.after["user_id"] == "C-7"


# --- Pages ---------------------------------------------------------------------------------------------


def test_viewers_read_the_form_page_and_an_analysis_but_cannot_start_one(viewer_client, seed_v1) -> None:
    page = viewer_client.get(f"/governance/rule-sets/{seed_v1.pk}/impact/")
    assert page.status_code == 200 and b"impact-form" not in page.content
    refused = viewer_client.post(
        f"/governance/rule-sets/{seed_v1.pk}/impact/start", {"version": "draft", "days": 7}
    )
    assert refused.status_code == 403 and ImpactAnalysis.objects.count() == 0
    analysis = analyse(seed_v1)
    shown = viewer_client.get(f"/governance/impact/{analysis.pk}/")
    assert shown.status_code == 200 and b'id="impact-replayed"' in shown.content


def test_an_editor_starts_an_analysis_from_the_form(editor_client, seed_v1) -> None:
    response = editor_client.post(
        f"/governance/rule-sets/{seed_v1.pk}/impact/start",
        {"version": "1", "days": "7", "chatbot_id": "premium-support"},
    )
    analysis = ImpactAnalysis.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/governance/impact/{analysis.pk}/"
    assert (analysis.status, analysis.candidate_ref, analysis.chatbot_id) == (
        "queued",
        "v1",
        "premium-support",
    )
    page = editor_client.get(response["Location"])
    assert b'id="impact-progress"' in page.content and b"hx-get" in page.content


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"version": "9", "days": "7"}, b"Select a valid choice"),
        ({"version": "draft", "days": "365"}, b"less than or equal to 90"),
        ({"version": "draft", "days": "7", "user_id": "u" * 5000}, b"at most 200 characters"),
        ({"version": "draft", "days": "7", "agent": "ghost"}, b"Select a valid choice"),
    ],
)
def test_bad_form_input_is_a_400_that_keeps_the_input(editor_client, seed_v1, data, words) -> None:
    response = editor_client.post(f"/governance/rule-sets/{seed_v1.pk}/impact/start", data)
    assert response.status_code == 400 and words in response.content
    assert ImpactAnalysis.objects.count() == 0


def test_the_progress_partial_polls_until_the_end_then_reloads_the_page(viewer_client, seed_v1) -> None:
    analysis = services.impact_start(actor=None, enqueue=False, rule_set=seed_v1, version="draft", days=1)
    url = f"/governance/impact/{analysis.pk}/progress"
    running = viewer_client.get(url, headers={"HX-Request": "true"})
    assert b'id="impact-progress"' in running.content and b"<html" not in running.content
    assert b"every 700ms" in running.content
    services.impact_execute(analysis_id=analysis.pk)
    done = viewer_client.get(url, headers={"HX-Request": "true"})
    assert done.headers.get("HX-Refresh") == "true"


# --- API -----------------------------------------------------------------------------------------------


def test_the_api_starts_an_analysis_and_reports_it(editor_client, seed_v1) -> None:
    record_run(seed_v1, ORDER_QUERY)
    started = editor_client.post(
        f"/api/rule-sets/{seed_v1.pk}/impact", {"version": 1, "days": 7}, content_type="application/json"
    )
    assert started.status_code == 202, started.content
    body = started.json()
    assert body["status"] == "queued" and body["url"] == f"/governance/impact/{body['id']}/"
    services.impact_execute(analysis_id=body["id"])
    status = editor_client.get(f"/api/impact/{body['id']}").json()
    assert status["status"] == "succeeded" and status["result"]["replayed"] == 1 and status["done"] == 1


@pytest.mark.parametrize(
    ("payload", "status", "words"),
    [
        ({"version": 3}, 422, "has no version 3"),
        ({"version": "draft", "days": 1000}, 422, "days"),
        ({"version": "draft", "chatbot_id": "c" * 300}, 422, "chatbot_id"),
        ({"version": "draft", "user_id": "a\u0000b"}, 4, ""),
        ({"version": "draft", "agent": "nobody"}, 422, "no agent named"),
    ],
)
def test_bad_api_input_is_a_clear_4xx(editor_client, seed_v1, payload, status, words) -> None:
    response = editor_client.post(
        f"/api/rule-sets/{seed_v1.pk}/impact", payload, content_type="application/json"
    )
    assert (response.status_code // 100 == 4) if status == 4 else response.status_code == status, (
        response.content
    )
    assert words in response.json()["detail"] + str(response.json().get("field"))
    assert ImpactAnalysis.objects.count() == 0


def test_the_api_answers_404_for_an_unknown_rule_set_or_analysis(editor_client) -> None:
    assert (
        editor_client.post("/api/rule-sets/999/impact", {}, content_type="application/json").status_code
        == 404
    )
    assert editor_client.get("/api/impact/999").status_code == 404


# --- The CI command ------------------------------------------------------------------------------------


def test_the_command_prints_json_and_exits_1_on_unexpected_changes(seed_v1, editor, capsys) -> None:
    record_run(seed_v1, ORDER_QUERY)
    record_run(seed_v1, "날씨 어때?")
    change_draft(seed_v1, editor)
    with pytest.raises(CommandError) as failed:
        call_command(
            "impact", "seed", "--draft", "--days", "7", "--json", "--expect-changes", "route_weather"
        )
    assert failed.value.returncode == 1 and "route_order_lookup" in str(failed.value)
    report = json.loads(capsys.readouterr().out)
    assert report["unexpected_changes"] == ["route_order_lookup"] and report["replayed"] == 2
    call_command(
        "impact",
        "seed",
        "--draft",
        "--days",
        "7",
        "--json",
        "--expect-changes",
        "route_weather,route_order_lookup",
    )
    call_command("impact", "seed", "--draft", "--days", "7", "--allow-changes")
    assert (
        ImpactAnalysis.objects.count() == 3 and AuditEvent.objects.filter(action="impact.start").count() == 3
    )


def test_the_command_exits_0_without_changes_and_2_when_it_cannot_analyse(seed_v1, capsys) -> None:
    record_run(seed_v1, ORDER_QUERY)
    call_command("impact", "seed", "--version", "1", "--json")
    assert json.loads(capsys.readouterr().out)["unexpected_changes"] == []
    for args, words in (
        (["nope", "--draft"], "no rule set named"),
        (["seed", "--version", "4"], "has no version 4"),
        (["seed", "--draft", "--days", "0"], "between 1 and 90"),
        (["seed", "--draft", "--chatbot", "x\x00"], "control characters"),
    ):
        with pytest.raises(CommandError) as failed:
            call_command("impact", *args)
        assert failed.value.returncode == 2 and words in str(failed.value), args


def test_stored_json_texts_are_decoded_once_each_within_their_bounds() -> None:
    from governance.selectors import JsonTexts

    texts = JsonTexts(limit=2, max_chars=20, total_chars=30)
    first = texts('{"q": "a"}')
    assert texts('{"q": "a"}') is first and first == {"q": "a"}  # decoded once, shared
    long = '{"q": "' + "x" * 30 + '"}'
    assert texts(long) == {"q": "x" * 30} and texts(long) is not texts(long)  # too long to keep
    texts('{"q": "bb"}')  # 11 + 11 characters kept: the total is 22 of 30
    texts('{"q": "ccc"}')  # a third text: over the limit of 2 (and the total), decoded, not kept
    assert set(texts.known) == {'{"q": "a"}', '{"q": "bb"}'}
    assert texts(None) is None


def test_a_stored_json_text_decodes_as_json_loads_decodes_it() -> None:
    import json
    import math

    from governance.selectors import json_value

    for text in ('{"q": "주문", "n": [1, 2.5, true, null]}', ' {"a": 1} ', '"x"', "3", "[]", '{"a": 1}\n'):
        assert json_value(text) == json.loads(text), text
    assert math.isnan(json_value("NaN")) and json_value(None) is None
    for bad in ('{"a": 1} x', "", "{", '{"a": }', "  "):
        with pytest.raises(json.JSONDecodeError):
            json_value(bad)
