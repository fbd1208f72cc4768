"""Test cases: the expected-outcome format, the comparison, the services and the suite's changed-outcome report."""

from __future__ import annotations

from typing import Any

import pytest

from core.models import AuditEvent
from llamon_agent.tools import AgentRequest
from rules import engine, services
from rules.cases import (
    EXPECTED_SCHEMA,
    _DryRunner,
    case_compare,
    case_create,
    case_delete,
    case_expected_clean,
    case_expected_from_outcome,
    case_input_clean,
    case_run,
    case_update,
    suite_run,
)
from rules.errors import RuleError
from rules.models import Rule, TestCase

pytestmark = pytest.mark.django_db

ORDER_QUERY = "주문 조회 부탁해"


def _outcome(rule_set, query: str, **request: Any) -> dict[str, Any]:
    return engine.evaluate(engine.rule_set_snapshot(rule_set), AgentRequest(query=query, **request)).to_json()


# --- comparison -------------------------------------------------------------------------------------


def test_exact_params_pass_when_equal(demo_rule_set) -> None:
    expected = {"must_fire": [{"tool_name": "get_order", "params": {"query": ORDER_QUERY}, "match": "exact"}]}
    result = case_compare(expected, _outcome(demo_rule_set, ORDER_QUERY))
    assert result.passed, result.problems
    assert result.problems == []
    assert [row["check"] for row in result.diff] == ["must_fire", "other_calls", "error"]
    assert result.diff[0]["ok"] and result.diff[0]["actual"]["rule"] == "route_order_lookup"


def test_exact_params_fail_on_a_different_missing_or_extra_key(demo_rule_set) -> None:
    outcome = _outcome(demo_rule_set, ORDER_QUERY)
    expected = {
        "must_fire": [{"tool_name": "get_order", "params": {"query": "다른 질문", "order_id": "A-1"}}]
    }

    result = case_compare(expected, outcome)

    assert not result.passed
    assert result.problems == [
        'get_order fired with params {"query": "주문 조회 부탁해"}, expected {"order_id": "A-1", "query": "다른 질문"}: '
        "'query' differs, 'order_id' is missing"
    ]
    row = result.diff[0]
    assert row["expected"]["params"] == {"query": "다른 질문", "order_id": "A-1"}
    assert row["actual"]["params"] == {"query": ORDER_QUERY}
    assert row["params_diff"] == [
        {"path": "query", "kind": "changed", "expected": "다른 질문", "actual": ORDER_QUERY},
        {"path": "order_id", "kind": "missing", "expected": "A-1", "actual": None},
    ]
    extra = case_compare({"must_fire": [{"tool_name": "get_order", "params": {}}]}, outcome)
    assert extra.problems == [
        'get_order fired with params {"query": "주문 조회 부탁해"}, expected {}: \'query\' is not expected'
    ]


def test_partial_params_are_a_recursive_subset(demo_rule_set) -> None:
    outcome = _outcome(demo_rule_set, "refund please", context={"userId": "u-9"})

    def check(params: dict[str, Any]) -> list[str]:
        expected = {"must_fire": [{"tool_name": "list_orders", "params": params, "match": "partial"}]}
        return case_compare(expected, outcome).problems

    assert check({"status": "refund"}) == []
    assert check({}) == []
    assert check({"status": "cancel"}) == [
        'list_orders fired with params {"customer_id": "u-9", "status": "refund"}, expected containing '
        '{"status": "cancel"}: \'status\' differs'
    ]
    assert check({"missing": 1}) != []


def test_partial_matching_recurses_into_nested_dicts_and_lists() -> None:
    outcome = {
        "error": None,
        "records": [
            {
                "rule": "r",
                "mcp_id": "m",
                "status": "fired",
                "tool_name": "t",
                "params": {"filter": {"status": "open", "tags": [{"id": 1, "x": 2}]}, "limit": 5},
            }
        ],
    }

    def problems(params: dict[str, Any], match: str = "partial") -> list[str]:
        return case_compare(
            {"must_fire": [{"tool_name": "t", "params": params, "match": match}]}, outcome
        ).problems

    assert problems({"filter": {"status": "open"}}) == []
    assert problems({"filter": {"tags": [{"id": 1}]}}) == []
    assert problems({"filter": {"tags": [{"id": 2}]}})[0].endswith("'filter.tags[0].id' differs")
    assert problems({"filter": {"tags": []}})[0].endswith("'filter.tags' differs")
    assert problems({"filter": {"status": "open"}}, "exact")[0].endswith(
        "'filter.tags' is not expected, 'limit' is not expected"
    )


def test_numbers_compare_as_json_numbers_but_booleans_stay_booleans() -> None:
    outcome = {
        "error": None,
        "records": [
            {"rule": "r", "mcp_id": "m", "status": "fired", "tool_name": "t", "params": {"n": 3, "b": True}}
        ],
    }
    assert case_compare({"must_fire": [{"tool_name": "t", "params": {"n": 3.0, "b": True}}]}, outcome).passed
    assert not case_compare({"must_fire": [{"tool_name": "t", "params": {"n": 3, "b": 1}}]}, outcome).passed


def test_a_call_that_did_not_fire_is_reported(demo_rule_set) -> None:
    result = case_compare({"must_fire": [{"tool_name": "get_order"}]}, _outcome(demo_rule_set, "날씨 어때?"))
    assert result.problems == ["get_order should have fired but did not"]
    assert result.diff[0]["actual"] is None


def test_the_server_is_checked_when_given(demo_rule_set) -> None:
    outcome = _outcome(demo_rule_set, ORDER_QUERY)
    assert case_compare(
        {"must_fire": [{"mcp_id": "order-service", "tool_name": "get_order"}]}, outcome
    ).passed
    result = case_compare(
        {"must_fire": [{"mcp_id": "other-orders", "tool_name": "get_order"}], "other_calls": "allow"}, outcome
    )
    assert result.problems == [
        "get_order on other-orders should have fired but did not (it fired on order-service instead)"
    ]


def test_two_expected_calls_of_one_tool_need_two_calls(demo_rule_set) -> None:
    outcome = _outcome(demo_rule_set, "검색", a2a_data=[{"ticketType": "faq"}])  # two rules call search_docs
    two = {
        "must_fire": [
            {"tool_name": "search_docs", "params": {"q": "검색"}},
            {"tool_name": "search_docs", "params": {"q": "검색", "limit": 3}},
        ]
    }
    assert case_compare(two, outcome).passed
    three = {"must_fire": [*two["must_fire"], {"tool_name": "search_docs"}]}
    assert case_compare(three, outcome).problems == ["search_docs should have fired but did not"]


def test_must_not_fire(demo_rule_set) -> None:
    outcome = _outcome(
        demo_rule_set, "주문 조회 환불", context={"userId": "u-1"}
    )  # the stop rule ends it before search
    allow = {"other_calls": "allow"}  # must_not_fire alone: the looser mode, on purpose
    assert case_compare({"must_not_fire": [{"tool_name": "search_docs"}], **allow}, outcome).passed
    result = case_compare(
        {
            "must_not_fire": [{"tool_name": "list_orders"}, {"mcp_id": "crm", "tool_name": "get_order"}],
            **allow,
        },
        outcome,
    )
    assert result.problems == [
        'list_orders should not have fired but did (rule route_refund_first, params {"customer_id": "u-1", "status": "refund"})'
    ]
    assert [row["ok"] for row in result.diff] == [False, True, True]


def test_an_expected_error_must_happen_and_contain_the_text(demo_rule_set) -> None:
    failing = _outcome(demo_rule_set, "strict please")  # context["mode"] is missing
    assert failing["error"].startswith("확정 호출된 MCP 단계에서 오류가 발생했습니다: route_strict_mode: ")

    assert case_compare({"error": "route_strict_mode"}, failing).passed
    assert case_compare({"error": "key 'mode' is missing"}, failing).passed
    wrong = case_compare({"error": "timeout"}, failing)
    assert wrong.problems == [
        f"the pre-step failed with {failing['error']!r}, expected an error containing 'timeout'"
    ]
    unexpected = case_compare({"error": None}, failing)
    assert unexpected.problems == [f"the pre-step failed: {failing['error']}"]
    missing = case_compare({"error": "route_strict_mode"}, _outcome(demo_rule_set, "fine"))
    assert missing.problems == [
        "the pre-step should have failed with an error containing 'route_strict_mode' but it succeeded"
    ]


def test_an_unbound_server_is_an_expected_error(editor, demo_servers) -> None:
    rule_set = services.rule_set_create(actor=editor, name="ghost")
    rule = services.rule_create(
        actor=editor,
        rule_set=rule_set,
        name="ghostly",
        mcp_id="order-service",
        tool_name="get_order",
        when="True",
        params="{}",
    )
    Rule.objects.filter(pk=rule.pk).update(mcp_id="ghost")  # its server was unregistered since
    outcome = _outcome(rule_set, "anything")
    assert case_compare({"error": "MCP 'ghost'의 tool이 로드되지 않음"}, outcome).passed


def test_the_proposed_expectation_is_what_fired_now_with_exact_params(demo_rule_set) -> None:
    outcome = _outcome(
        demo_rule_set, "주문 조회 검색", context={"chatbotId": "premium-support", "userId": "u-5"}
    )
    proposed = case_expected_from_outcome(outcome)
    assert proposed == {
        "must_fire": [
            {
                "mcp_id": "order-service",
                "tool_name": "get_order",
                "params": {"query": "주문 조회 검색"},
                "match": "exact",
            },
            {
                "mcp_id": "customer-crm",
                "tool_name": "get_customer_profile",
                "params": {"customer_id": "u-5"},
                "match": "exact",
            },
            {
                "mcp_id": "knowledge-base",
                "tool_name": "search_docs",
                "params": {"q": "주문 조회 검색"},
                "match": "exact",
            },
        ],
        "must_not_fire": [],
        "other_calls": "forbid",
        "error": None,
    }
    assert case_expected_clean(proposed) == proposed
    assert case_compare(proposed, outcome).passed
    failing = _outcome(demo_rule_set, "strict")
    assert case_expected_from_outcome(failing) == {
        "must_fire": [],
        "must_not_fire": [],
        "other_calls": "forbid",
        "error": failing["error"],
    }
    assert case_compare(case_expected_from_outcome(failing), failing).passed


# --- validation ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expected", "message"),
    [
        ([], "The expected outcome must be a JSON object, not a list."),
        ({"must_fire": {}}, "must_fire: {} is not a list"),
        ({"must_fire": [{}]}, "must_fire[0]: 'tool_name' is a required property"),
        (
            {"must_fire": [{"tool_name": "t", "match": "fuzzy"}]},
            "must_fire[0].match: match must be 'exact' or 'partial', not 'fuzzy'",
        ),
        ({"must_fire": [{"tool_name": "t", "params": [1]}]}, "must_fire[0].params: [1] is not a JSON object"),
        ({"must_fire": [{"tool_name": ""}]}, "must_fire[0].tool_name: '' should be non-empty"),
        (
            {"must_not_fire": [{"tool_name": "t", "params": {}}]},
            "must_not_fire[0]: Additional properties are not allowed ('params' was unexpected)",
        ),
        ({"must_fire_not": []}, "Additional properties are not allowed ('must_fire_not' was unexpected)"),
        ({"error": ""}, "error: error must be a non-empty text (the message must contain it) or null"),
        ({"error": 5}, "error: 5 is not of type 'string', 'null'"),
        (
            {"must_fire": [{"tool_name": "t"}], "must_not_fire": [{"tool_name": "t"}]},
            "The expected outcome says t must fire and must not fire; keep one.",
        ),
    ],
)
def test_malformed_expectations_are_refused_readably(expected, message) -> None:
    with pytest.raises(RuleError) as info:
        case_expected_clean(expected)
    assert message in info.value.message
    assert info.value.field == "expected"


def test_the_expected_schema_is_a_valid_json_schema() -> None:
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(EXPECTED_SCHEMA)
    assert case_expected_clean({}) == {
        "must_fire": [],
        "must_not_fire": [],
        "other_calls": "forbid",
        "error": None,
    }
    assert case_expected_clean({"must_fire": [{"tool_name": "t"}]})["must_fire"][0]["match"] == "exact"


@pytest.mark.parametrize(
    ("value", "field", "message"),
    [
        ("주문", "input", "The input must be a JSON object with a query, not a text."),
        ({}, "query", "The input's query must be a text, not null."),
        ({"query": "q", "context": []}, "context", "The input's context must be a JSON object, not a list."),
        (
            {"query": "q", "a2a_data": ["x"]},
            "a2a_data",
            "The input's a2a_data (DataParts) must be a list of JSON objects or null.",
        ),
        (
            {"query": "q", "a2a_files": {"name": "a"}},
            "a2a_files",
            "The input's a2a_files (FileParts) must be a list",
        ),
        ({"query": "q", "files": []}, "input", "The input has unknown field(s) 'files'"),
        (
            {"query": "q" * 40_000},
            "input",
            "The input is too big: the query is longer than 32,000 characters.",
        ),
    ],
)
def test_bad_inputs_are_refused_naming_the_field(value, field, message) -> None:
    with pytest.raises(RuleError) as info:
        case_input_clean(value)
    assert info.value.field == field
    assert message in info.value.message


def test_an_input_is_stored_in_the_normal_request_shape() -> None:
    assert case_input_clean({"query": "q"}) == {
        "query": "q",
        "context": {},
        "a2a_data": None,
        "a2a_files": None,
    }
    full = {"query": "q", "context": {"userId": "u"}, "a2a_data": [{"a": 1}], "a2a_files": [{"name": "f"}]}
    assert case_input_clean(full) == full


# --- services --------------------------------------------------------------------------------------


def test_case_create_validates_and_audits(editor, demo_rule_set) -> None:
    case = case_create(
        actor=editor,
        rule_set=demo_rule_set,
        name="  주문 조회  ",
        input={"query": ORDER_QUERY},
        expected={"error": None},
    )
    assert case.name == "주문 조회"
    assert case.input == {"query": ORDER_QUERY, "context": {}, "a2a_data": None, "a2a_files": None}
    assert case.expected == {"must_fire": [], "must_not_fire": [], "error": None}
    event = AuditEvent.objects.get(action="case.create")
    assert (event.actor, event.object_id, event.after["name"]) == (editor, str(case.pk), "주문 조회")

    with pytest.raises(
        RuleError, match="A test case named '주문 조회' already exists in this rule set"
    ) as info:
        case_create(actor=editor, rule_set=demo_rule_set, name="주문 조회", input={"query": "x"}, expected={})
    assert info.value.field == "name"
    with pytest.raises(RuleError, match="Give the test case a name."):
        case_create(actor=editor, rule_set=demo_rule_set, name="  ", input={"query": "x"}, expected={})
    with pytest.raises(RuleError, match="must_fire"):
        case_create(
            actor=editor, rule_set=demo_rule_set, name="bad", input={"query": "x"}, expected={"must_fire": 1}
        )
    assert TestCase.objects.count() == 1

    other = services.rule_set_create(actor=editor, name="other")
    assert case_create(actor=editor, rule_set=other, name="주문 조회", input={"query": "x"}, expected={}).pk


def test_case_update_audits_changes_and_forgets_a_stale_result(editor, demo_rule_set) -> None:
    loose = {"other_calls": "allow"}
    case = case_create(
        actor=editor, rule_set=demo_rule_set, name="c", input={"query": ORDER_QUERY}, expected=loose
    )
    case_run(case=case)
    case.refresh_from_db()
    assert case.last_passed is True

    same = case_update(actor=editor, case=case, name="c", expected=loose)
    assert same.last_passed is True
    assert not AuditEvent.objects.filter(action="case.update").exists()

    renamed = case_update(actor=editor, case=case, name="renamed")
    assert renamed.last_passed is True  # a new name does not change what the case checks
    updated = case_update(actor=editor, case=case, expected={"must_fire": [{"tool_name": "get_order"}]})
    assert updated.last_passed is None and updated.last_outcome is None
    events = list(AuditEvent.objects.filter(action="case.update").order_by("id"))
    assert [e.after["name"] for e in events] == ["renamed", "renamed"]
    assert events[1].before["expected"] == {
        "must_fire": [],
        "must_not_fire": [],
        "error": None,
        "other_calls": "allow",
    }
    assert events[1].after["expected"]["must_fire"][0]["tool_name"] == "get_order"


def test_case_delete_is_audited(editor, demo_rule_set) -> None:
    case = case_create(actor=editor, rule_set=demo_rule_set, name="gone", input={"query": "x"}, expected={})
    pk = case.pk
    case_delete(actor=editor, case=case)
    assert not TestCase.objects.filter(pk=pk).exists()
    event = AuditEvent.objects.get(action="case.delete")
    assert (event.object_id, event.before["name"], event.after) == (str(pk), "gone", None)


def test_case_run_stores_the_outcome_on_the_draft(editor, demo_rule_set) -> None:
    case = case_create(
        actor=editor,
        rule_set=demo_rule_set,
        name="order",
        input={"query": ORDER_QUERY},
        expected={"must_fire": [{"tool_name": "get_order", "params": {"query": ORDER_QUERY}}]},
    )
    result = case_run(case=case)
    assert result.passed
    case.refresh_from_db()
    assert case.last_passed is True and case.last_run_at is not None
    assert case.last_outcome["records"][0]["status"] == "fired"
    assert case.last_outcome["block"].startswith("확정 호출 결과")

    # A given snapshot (e.g. a version's content) is used instead of the draft.
    snapshot = [
        {**r, "tool_name": "list_orders"} if r["name"] == "route_order_lookup" else r
        for r in engine.rule_set_snapshot(demo_rule_set)
    ]
    result = case_run(case=case, snapshot=snapshot)
    assert not result.passed
    case.refresh_from_db()
    assert case.last_passed is False


def test_the_suite_reports_which_cases_changed_outcome_after_a_rule_edit(editor, demo_rule_set) -> None:
    def add(name: str, query: str, expected: dict[str, Any], **request: Any) -> None:
        case_create(
            actor=editor,
            rule_set=demo_rule_set,
            name=name,
            input={"query": query, **request},
            expected=expected,
        )

    add("order", ORDER_QUERY, {"must_fire": [{"tool_name": "get_order", "params": {"query": ORDER_QUERY}}]})
    add(
        "premium",
        "hi",
        {"must_fire": [{"tool_name": "get_customer_profile", "params": {"customer_id": "u-1"}}]},
        context={"chatbotId": "premium-support", "userId": "u-1"},
    )
    add("weather", "날씨 어때?", {"must_not_fire": [{"tool_name": "get_order"}]})
    add(
        "wants q",
        ORDER_QUERY,
        {"must_fire": [{"tool_name": "get_order", "params": {"q": ORDER_QUERY}, "match": "partial"}]},
    )

    first = suite_run(rule_set=demo_rule_set)
    assert (first.passed, first.failed, first.changed) == (3, 1, [])  # nothing ran before: nothing "changed"

    rule = Rule.objects.get(rule_set=demo_rule_set, name="route_order_lookup")
    services.rule_update(actor=editor, rule=rule, revision=rule.revision, params='{"q": ctx.query}')
    second = suite_run(rule_set=demo_rule_set)

    assert sorted(r.case.name for r in second.changed) == ["order", "wants q"]
    by_name = {r.case.name: r for r in second.results}
    assert (by_name["order"].previous_passed, by_name["order"].result.passed) == (True, False)
    assert (by_name["wants q"].previous_passed, by_name["wants q"].result.passed) == (False, True)
    assert by_name["order"].result.problems == [
        'get_order fired with params {"q": "주문 조회 부탁해"}, expected {"query": "주문 조회 부탁해"}: '
        "'query' is missing, 'q' is not expected"
    ]
    assert suite_run(rule_set=demo_rule_set).changed == []  # stable on a rerun


def test_a_rule_set_that_no_longer_compiles_fails_every_case_clearly(editor, demo_rule_set) -> None:
    case_create(actor=editor, rule_set=demo_rule_set, name="c", input={"query": "x"}, expected={})
    # Written behind the service's back, as an older, looser version of the language might have.
    Rule.objects.filter(rule_set=demo_rule_set, name="route_order_lookup").update(when="__import__('os')")
    suite = suite_run(rule_set=demo_rule_set)
    assert suite.failed == 1
    assert (
        suite.results[0].result.problems[0].startswith("the pre-step failed: the rule set does not compile: ")
    )


def test_the_suite_runner_gives_exactly_what_the_tester_shows(demo_rule_set, demo_servers) -> None:
    snapshot = engine.rule_set_snapshot(demo_rule_set)
    runner = _DryRunner(snapshot)
    inputs = [
        {"query": ORDER_QUERY, "context": {}, "a2a_data": None, "a2a_files": None},
        {"query": "strict", "context": {}, "a2a_data": None, "a2a_files": None},
        {
            "query": "검색",
            "context": {"chatbotId": "premium-support"},
            "a2a_data": [{"ticketType": "faq", "limit": "x"}],
            "a2a_files": [{"name": "a.pdf"}],
        },
    ]
    for case_input in inputs:
        ours = runner.evaluate(case_input)
        theirs = engine.evaluate(snapshot, AgentRequest(**case_input), servers=demo_servers).answer()
        ours.pop("duration_ms"), theirs.pop("duration_ms")
        assert ours == theirs
    # The schema check is part of it: limit "x" is not an integer for search_docs.
    assert runner.evaluate(inputs[2])["schema_errors"]["route_faq_datapart"] == [
        "limit: 'x' is not of type 'integer'"
    ]
