"""Cases assert the whole outcome (issue 43): a case saved from the tester fails on any extra call,
``{}`` means "nothing fires", looser modes only when chosen, old cases migrated with a note."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.urls import reverse

from llamon_agent.tools import AgentRequest
from rules import cases, services, tester
from rules.cases import case_create, case_expected_loosen, suite_run
from rules.models import TestCase

pytestmark = pytest.mark.django_db

CATCH_ALL = {
    "name": "page_on_call",
    "description": "Pages the on-call doctor, on every request (the regression).",
    "mcp_id": "customer-crm",
    "tool_name": "get_customer_profile",
    "when": "True",
    "params": '{"customer_id": "on-call", "severity": "high"}',
}
SAMPLES = {
    "order": AgentRequest(query="주문 조회 부탁해"),
    "premium": AgentRequest(query="hello", context={"chatbotId": "premium-support"}),
    "small talk": AgentRequest(query="날씨 어때?"),
    "faq": AgentRequest(query="doc", a2a_data=[{"ticketType": "faq"}]),
}


def _save_from_tester(editor, rule_set, name: str, sample: AgentRequest) -> TestCase:
    """What "Save as test case" stores: the tester's input and its proposal, unchanged."""
    proposal = tester.tester_evaluate(rule_set=rule_set, sample=sample, execute=False).expected
    case_input = {
        k: v for k, v in sample.to_json().items() if k in ("query", "context", "a2a_data", "a2a_files")
    }
    return case_create(actor=editor, rule_set=rule_set, name=name, input=case_input, expected=proposal)


def test_a_suite_saved_from_the_tester_catches_an_added_catch_all_rule(editor, demo_rule_set) -> None:
    for name, sample in SAMPLES.items():
        _save_from_tester(editor, demo_rule_set, name, sample)
    assert TestCase.objects.get(name="small talk").expectation == {
        "must_fire": [],
        "must_not_fire": [],
        "error": None,
        "other_calls": "forbid",
    }
    before = suite_run(rule_set=demo_rule_set)
    assert (before.passed, before.total) == (4, 4)

    services.rule_create(actor=editor, rule_set=demo_rule_set, **CATCH_ALL)
    after = suite_run(rule_set=demo_rule_set)

    assert after.passed == 0, [r.result.problems for r in after.results]
    assert sorted(r.case.name for r in after.changed) == sorted(SAMPLES)
    small = next(r for r in after.results if r.case.name == "small talk")
    assert small.result.problems == [
        "get_customer_profile on customer-crm fired but the case expects no other call (rule page_on_call, "
        'params {"customer_id": "on-call", "severity": "high"})'
    ]
    # Which case, which call, and why (the rule that made it).
    assert small.summary.startswith("small talk now fails: get_customer_profile (customer-crm) now fires")
    assert "rule page_on_call" in small.summary


def test_the_rule_save_says_which_case_which_call_and_why(editor_client, editor, demo_rule_set) -> None:
    _save_from_tester(editor, demo_rule_set, "small talk", SAMPLES["small talk"])
    suite_run(rule_set=demo_rule_set)
    data = {f"rule-{k}": v for k, v in CATCH_ALL.items()} | {"rule-enabled": "on"}
    response = editor_client.post(reverse("rules:rule_create", args=[demo_rule_set.pk]), data)
    assert response.status_code == 302
    texts = [str(m) for m in get_messages(response.wsgi_request)]
    changed = next(t for t in texts if t.startswith("Test cases that changed outcome"))
    assert "small talk now fails" in changed
    assert "get_customer_profile (customer-crm) now fires (rule page_on_call" in changed
    # In Korean too.
    editor_client.post(reverse("language_set"), {"language": "ko"})
    response = editor_client.post(
        reverse("rules:rule_create", args=[demo_rule_set.pk]), data | {"rule-name": "page_again"}
    )
    texts = [str(m) for m in get_messages(response.wsgi_request)]
    assert any("small talk" in t and "page_again" in t and "Test cases" not in t for t in texts), texts


def test_an_empty_expectation_means_nothing_fires(editor, demo_rule_set) -> None:
    case = case_create(
        actor=editor, rule_set=demo_rule_set, name="quiet", input={"query": "주문 조회"}, expected={}
    )
    result = cases.case_run(case=case)
    assert not result.passed
    assert result.problems[0].startswith(
        "get_order on order-service fired but the case expects no other call"
    )


def test_looser_modes_only_when_chosen_and_shown_on_the_case(editor, demo_rule_set) -> None:
    proposal = tester.tester_evaluate(rule_set=demo_rule_set, sample=SAMPLES["order"], execute=False).expected
    loose = case_expected_loosen(proposal, allow_other_calls=True, ignore_params=True)
    assert loose["other_calls"] == "allow" and "params" not in loose["must_fire"][0]
    case = case_create(
        actor=editor,
        rule_set=demo_rule_set,
        name="loose",
        input={"query": "주문 조회 부탁해"},
        expected=loose,
    )
    services.rule_create(actor=editor, rule_set=demo_rule_set, **CATCH_ALL)
    assert cases.case_run(case=case).passed  # other calls allowed, on purpose
    assert cases.case_modes(case) == [
        "Other calls may fire too (checks only the calls listed).",
        "Params are ignored for some calls.",
    ]
    strict = case_create(
        actor=editor,
        rule_set=demo_rule_set,
        name="strict",
        input={"query": "주문 조회 부탁해"},
        expected=proposal,
    )
    assert cases.case_modes(strict) == ["No other call may fire."]
    assert not cases.case_run(case=strict).passed


def test_the_tester_form_shows_what_the_case_will_expect_and_the_looser_modes(
    editor_client, editor, demo_rule_set
) -> None:
    response = editor_client.post(
        reverse("rules:test", args=[demo_rule_set.pk]),
        {"t-query": "날씨 어때?", "t-context": "", "t-data": "", "t-files": ""},
        HTTP_HX_REQUEST="true",
    )
    page = response.content.decode()
    assert "The case will expect that nothing fires." in page
    assert 'name="allow_other_calls"' in page
    # Saved with a looser mode ticked: stored and shown as such.
    response = editor_client.post(
        reverse("rules:case_create", args=[demo_rule_set.pk]),
        {
            "name": "chat",
            "input": '{"query": "날씨 어때?"}',
            "expected": '{"must_fire": [], "must_not_fire": [], "error": null, "other_calls": "forbid"}',
            "allow_other_calls": "1",
        },
        HTTP_HX_REQUEST="true",
    )
    assert "Other calls may fire too" in response.content.decode()
    assert TestCase.objects.get(name="chat").other_calls == "allow"


def test_the_api_refuses_an_unknown_other_calls_mode(editor, demo_rule_set) -> None:
    from rules.errors import RuleError

    with pytest.raises(RuleError, match="other_calls must be 'forbid' or 'allow', not 'some'"):
        case_create(
            actor=editor,
            rule_set=demo_rule_set,
            name="x",
            input={"query": "q"},
            expected={"other_calls": "some"},
        )


# --- the migration ----------------------------------------------------------------------------------


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.mark.django_db(transaction=True)
def test_old_cases_are_migrated_as_strict_as_their_last_run_and_the_owner_sees_a_note(
    client, make_user
) -> None:
    old = _migrate([("rules", "0006_tester_recent_inputs")])
    RuleSet = old.get_model("rules", "RuleSet")
    OldCase = old.get_model("rules", "TestCase")
    rule_set = RuleSet.objects.create(name="hospital")
    fired = {"rule": "page", "mcp_id": "pager", "tool_name": "page_doctor", "params": {}, "status": "fired"}
    OldCase.objects.create(
        rule_set=rule_set, name="small talk", input={"query": "hi"}, expected={}, last_outcome={"records": []}
    )
    OldCase.objects.create(
        rule_set=rule_set,
        name="vitals",
        input={"query": "spo2"},
        expected={"must_fire": []},
        last_outcome={"error": None, "records": [fired]},
    )
    OldCase.objects.create(rule_set=rule_set, name="never ran", input={"query": "x"}, expected={})

    _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    by_name = {c.name: c for c in TestCase.objects.all()}
    assert by_name["small talk"].expectation == {"other_calls": "forbid"}
    assert by_name["small talk"].notice == {"code": "migrated_forbid", "calls": [], "empty": True}
    assert by_name["vitals"].other_calls == "allow"
    assert by_name["vitals"].notice["calls"] == ["page_doctor on pager"]
    assert by_name["never ran"].other_calls == "forbid"
    assert by_name["small talk"].expected == {}  # the column the previous release reads is untouched

    client.force_login(make_user("viewer"))
    page = client.get(reverse("rules:cases", args=[rule_set.pk])).content.decode()
    assert "it now asserts that nothing fires" in page
    assert "page_doctor on pager" in page and "Other calls may fire too" in page
    client.post(reverse("language_set"), {"language": "ko"})
    page = client.get(reverse("rules:cases", args=[rule_set.pk])).content.decode()
    assert "it now asserts that nothing fires" not in page
    assert "page_doctor on pager" in page

    # Editing the case (saving it again from the tester) means its owner read the note.
    case = cases.case_update(actor=None, case=by_name["vitals"], expected={"must_fire": []})
    assert case.notice is None and case.other_calls == "forbid"
