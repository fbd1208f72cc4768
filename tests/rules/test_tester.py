"""The live tester: in place on every editor state, its inputs kept, cases from it, big sets summarised."""

from __future__ import annotations

import html as html_lib
import json
import re

import pytest
from django.urls import reverse
from django.utils import timezone

from rules import cases, services
from rules.models import RuleSet
from rules.tester import SKIPPED_SHOWN
from servers.models import McpServer
from tests.support.tester import execute_confirmed

pytestmark = pytest.mark.django_db
HX = {"HTTP_HX_REQUEST": "true"}
TOOLS = [{"name": "get_order", "description": "", "input_schema": {"type": "object"}}]
# The empty "New rule" form of a freshly opened editor, as htmx includes it in the tester's post.
BLANK_NEW_RULE = {
    "rule-name": "",
    "rule-mcp_id": "order-service",
    "rule-tool_name": "",
    "rule-when": "",
    "rule-params": "{}",
    "rule-description": "",
    "rule-enabled": "on",
    "rule-revision": "",
    "rule-original": "",
}


@pytest.fixture
def rule_set(make_user) -> RuleSet:
    # Port 9 on loopback: nothing listens, so executing a call fails for real (connection refused).
    McpServer.objects.create(
        mcp_id="order-service",
        transport="http",
        url="http://127.0.0.1:9/mcp",
        tools=TOOLS,
        tools_refreshed_at=timezone.now(),
    )
    author = make_user("editor")
    rs = services.rule_set_create(actor=author, name="orders")
    services.rule_create(
        actor=author,
        rule_set=rs,
        name="route_refund",
        mcp_id="order-service",
        tool_name="get_order",
        when='"환불" in query and "검색" in query',
        params='{"query": query}',
    )
    services.rule_create(
        actor=author,
        rule_set=rs,
        name="route_order",
        mcp_id="order-service",
        tool_name="get_order",
        when='"주문" in query',
        params='{"query": query}',
    )
    return rs


def _test(client, rule_set, data, **extra):
    return client.post(reverse("rules:test", args=[rule_set.pk]), data, **extra)


def _text(response) -> str:
    return html_lib.unescape(response.content.decode())


def test_a_fresh_editor_with_the_blank_new_rule_form_still_answers(editor_client, rule_set) -> None:
    response = _test(editor_client, rule_set, {**BLANK_NEW_RULE, "t-query": "주문 해줘"}, **HX)
    text = _text(response)
    assert response.status_code == 200
    assert 'data-rule="route_order"' in text and "status-fired" in text
    # An empty new rule is not "a rule with errors": no warning that the edit was ignored.
    assert "has errors" not in text


def test_without_javascript_the_editor_comes_back_with_inputs_and_results(editor_client, rule_set) -> None:
    rule = rule_set.rules.get(name="route_order")
    response = _test(
        editor_client, rule_set, {"t-query": "주문 해줘", "t-context": '{"u": 1}', "rule": str(rule.pk)}
    )
    text = _text(response)
    assert response.status_code == 200
    assert 'id="rule-form"' in text and "Edit <code>route_order</code>" in text  # the editor, same rule
    assert re.search(r"<textarea[^>]*t-query[^>]*>\s*주문 해줘</textarea>", text)
    assert '{"u": 1}</textarea>' in text
    assert 'id="tester-outcome"' in text


def test_inputs_survive_a_rule_save_and_a_reload(editor_client, rule_set) -> None:
    _test(
        editor_client,
        rule_set,
        {"t-query": "환불 검색", "t-context": '{"vip": true}', "t-data": '[{"a": 1}]'},
        **HX,
    )
    rule = rule_set.rules.get(name="route_order")
    saved = editor_client.post(
        reverse("rules:rule_update", args=[rule_set.pk, rule.pk]),
        {
            "rule-name": "route_order",
            "rule-mcp_id": "order-service",
            "rule-tool_name": "get_order",
            "rule-when": '"주문" in query or "order" in query',
            "rule-params": '{"query": query}',
            "rule-enabled": "on",
            "rule-revision": rule.revision,
        },
        follow=True,
    )
    for response in (saved, editor_client.get(reverse("rules:editor", args=[rule_set.pk]))):
        text = _text(response)
        assert re.search(r"<textarea[^>]*t-query[^>]*>\s*환불 검색</textarea>", text)
        assert '{"vip": true}</textarea>' in text and '[{"a": 1}]</textarea>' in text


def test_inputs_are_per_rule_set_and_per_session(editor_client, rule_set, make_user, client) -> None:
    other = services.rule_set_create(actor=make_user("editor"), name="other")
    _test(editor_client, rule_set, {"t-query": "비밀 질의"}, **HX)
    assert "비밀 질의" not in _text(editor_client.get(reverse("rules:editor", args=[other.pk])))
    from django.test import Client

    someone = Client()
    someone.force_login(make_user("editor", "someone"))
    assert "비밀 질의" not in _text(someone.get(reverse("rules:editor", args=[rule_set.pk])))


def test_a_huge_post_is_not_remembered(editor_client, rule_set) -> None:
    _test(editor_client, rule_set, {"t-query": "작은 질의"}, **HX)
    response = _test(
        editor_client, rule_set, {"t-query": "x", "t-context": "[" + "1," * 200_000 + "1]"}, **HX
    )
    assert response.status_code == 422  # refused with a message, not a 500
    assert "작은 질의" in _text(editor_client.get(reverse("rules:editor", args=[rule_set.pk])))


def test_a_case_saved_after_a_failed_execute_expects_the_call_not_the_error(editor_client, rule_set) -> None:
    url = reverse("rules:test", args=[rule_set.pk])
    response = execute_confirmed(editor_client, url, {"t-query": "주문 해줘"}, **HX)
    text = _text(response)
    assert 'data-ok="false"' in text  # the live call really failed
    found = re.search(r'name="expected" value="([^"]*)"', response.content.decode())
    expected = json.loads(html_lib.unescape(found.group(1)))
    assert expected["error"] is None
    assert [c["tool_name"] for c in expected["must_fire"]] == ["get_order"]
    case_input = {"query": "주문 해줘", "context": {}, "a2a_data": None, "a2a_files": None}
    editor_client.post(
        reverse("rules:case_create", args=[rule_set.pk]),
        {"name": "c", "input": json.dumps(case_input), "expected": json.dumps(expected)},
    )
    result = cases.case_run(case=rule_set.cases.get(name="c"))
    assert result.passed, result.problems


def test_saving_a_case_from_the_tester_answers_in_place_and_the_picker_offers_it(
    editor_client, rule_set
) -> None:
    url = reverse("rules:case_create", args=[rule_set.pk])
    case_input = json.dumps({"query": "주문 조회"})
    saved = editor_client.post(url, {"name": "조회 케이스", "input": case_input, "expected": "{}"}, **HX)
    assert saved.status_code == 200 and "Saved test case 조회 케이스." in _text(saved)  # a line, not a page
    case = rule_set.cases.get(name="조회 케이스")
    # A name already taken: refused in place, in the user's language, nothing saved twice.
    refused = editor_client.post(
        url, {"name": "조회 케이스", "input": case_input, "expected": "{}"}, HTTP_ACCEPT_LANGUAGE="ko", **HX
    )
    assert refused.status_code == 422 and "케이스를 저장하지 않았습니다" in _text(refused)
    assert rule_set.cases.count() == 1
    editor = _text(editor_client.get(reverse("rules:editor", args=[rule_set.pk])))
    assert f"?case={case.pk}" in editor and "조회 케이스" in editor  # the tester's picker
    # Without JavaScript the form still posts: the cases page, as before.
    plain = editor_client.post(url, {"name": "other", "input": case_input, "expected": "{}"})
    assert plain.status_code == 302 and plain["Location"].endswith("/cases/")


def test_a_skipped_rule_says_the_value_of_each_sub_condition(viewer_client, rule_set) -> None:
    text = _text(_test(viewer_client, rule_set, {"t-query": "환불 해주세요"}, **HX))
    row = text[text.index('data-rule="route_refund"') :]
    row = row[: row.index("</tr>")]
    lines = [
        " ".join(re.sub(r"<[^>]+>", " ", li).split()) for li in re.findall(r"<li[^>]*>(.*?)</li>", row, re.S)
    ]
    assert lines == [
        '"환불" in query and "검색" in query → False',
        '"환불" in query → True',
        '"검색" in query → False',
    ]


def test_a_large_rule_set_lists_fired_and_failed_and_counts_the_skipped(
    editor_client, rule_set, make_user
) -> None:
    author = make_user("editor", "bulk")
    for i in range(60):
        services.rule_create(
            actor=author,
            rule_set=rule_set,
            name=f"r{i}",
            mcp_id="order-service",
            tool_name="get_order",
            when=f'"kw{i}x" in query' if i != 55 else 'context["missing"] == 1',
            params="{}",
        )
    text = _text(_test(editor_client, rule_set, {"t-query": "주문 kw50x"}, **HX))
    assert 'data-rule="route_order"' in text and 'data-rule="r50"' in text  # fired, past the first 20
    assert 'data-rule="r55"' in text and "status-error" in text  # failed, past the first 20
    skipped_rows = re.findall(r'<tr class="status-skipped"', text)
    assert len(skipped_rows) == SKIPPED_SHOWN
    # 62 rules: 2 fired, 1 failed (a dry run goes on past it), 59 skipped.
    hidden = 59 - SKIPPED_SHOWN
    assert f"{hidden} more rules not listed ({hidden} skipped)" in text
    assert 'id="tester-show-all"' in text
    everything = _text(_test(editor_client, rule_set, {"t-query": "주문 kw50x", "show": "all"}, **HX))
    assert len(re.findall(r'<tr class="status-skipped"', everything)) == 59
    assert "tester-show-all" not in everything


def test_open_a_case_in_the_tester_and_save_what_it_shows_into_it(editor_client, rule_set, make_user) -> None:
    case = cases.case_create(
        actor=make_user("editor", "c"),
        rule_set=rule_set,
        name="주문 케이스",
        input={"query": "주문 원래", "context": {"k": "v"}},
        expected={"must_fire": []},
    )
    page = _text(editor_client.get(reverse("rules:editor", args=[rule_set.pk]) + f"?case={case.pk}"))
    assert re.search(r"<textarea[^>]*t-query[^>]*>\s*주문 원래</textarea>", page)
    assert '{"k": "v"}</textarea>' in page and f'name="case" value="{case.pk}"' in page
    results = _test(
        editor_client, rule_set, {"t-query": "주문 바뀜", "case": str(case.pk)}, **HX
    ).content.decode()
    assert "Save into case 주문 케이스" in html_lib.unescape(results)

    def hidden(name: str):
        found = re.search(rf'id="update-case-form".*?name="{name}" value="([^"]*)"', results, re.S)
        return json.loads(html_lib.unescape(found.group(1)))

    expected, new_input = hidden("expected"), hidden("input")
    response = editor_client.post(
        reverse("rules:case_update", args=[rule_set.pk, case.pk]),
        {"input": json.dumps(new_input), "expected": json.dumps(expected)},
    )
    assert response.status_code == 302
    case.refresh_from_db()
    assert case.input["query"] == "주문 바뀜"
    assert [c["tool_name"] for c in case.expected["must_fire"]] == ["get_order"]


@pytest.mark.parametrize("value", ["999999", "abc", "١", "-1"])
def test_a_bad_case_or_rule_id_is_a_404(editor_client, rule_set, value) -> None:
    assert (
        editor_client.get(reverse("rules:editor", args=[rule_set.pk]) + f"?case={value}").status_code == 404
    )
    assert _test(editor_client, rule_set, {"t-query": "x", "case": value}, **HX).status_code == 404
    assert _test(editor_client, rule_set, {"t-query": "x", "rule": value}).status_code == 404


def test_a_case_of_another_rule_set_cannot_be_opened_or_updated(editor_client, rule_set, make_user) -> None:
    other = services.rule_set_create(actor=make_user("editor", "o"), name="other")
    foreign = cases.case_create(
        actor=make_user("editor", "p"), rule_set=other, name="x", input={"query": "q"}, expected={}
    )
    assert (
        editor_client.get(reverse("rules:editor", args=[rule_set.pk]) + f"?case={foreign.pk}").status_code
        == 404
    )
    response = editor_client.post(
        reverse("rules:case_update", args=[rule_set.pk, foreign.pk]),
        {"input": '{"query": "z"}', "expected": "{}"},
    )
    assert response.status_code == 404
    foreign.refresh_from_db()
    assert foreign.input["query"] == "q"


def test_a_bad_case_update_keeps_the_case(editor_client, rule_set, make_user) -> None:
    case = cases.case_create(
        actor=make_user("editor", "c"), rule_set=rule_set, name="k", input={"query": "q"}, expected={}
    )
    response = editor_client.post(
        reverse("rules:case_update", args=[rule_set.pk, case.pk]),
        {"input": '{"query": 5}', "expected": '{"must_fire": "nope"}'},
        follow=True,
    )
    assert response.status_code == 200 and "The case was not saved" in _text(response)
    case.refresh_from_db()
    assert case.input["query"] == "q"


def test_a_rule_whose_when_failed_shows_the_operand_that_failed(viewer_client, rule_set, make_user) -> None:
    services.rule_create(
        actor=make_user("editor", "e"),
        rule_set=rule_set,
        name="route_ctx",
        mcp_id="order-service",
        tool_name="get_order",
        when='"주문" in query and context["tier"] == "gold"',
        params="{}",
    )
    text = _text(_test(viewer_client, rule_set, {"t-query": "주문"}, **HX))
    row = text[text.index('data-rule="route_ctx"') :]
    row = row[: row.index("</tr>")]
    assert "why it failed" in row and "key 'tier' is missing" in row
    assert re.search(
        r'context\["tier"\] == "gold"</code>\s*<span class="why-arrow">→</span>\s*<strong>error', row
    )


def test_expression_text_in_the_explanation_is_escaped(viewer_client, rule_set, make_user) -> None:
    services.rule_create(
        actor=make_user("editor", "e"),
        rule_set=rule_set,
        name="route_html",
        mcp_id="order-service",
        tool_name="get_order",
        when='"<img src=x onerror=alert(1)>" in query and "b" in query',
        params="{}",
    )
    raw = _test(viewer_client, rule_set, {"t-query": "a"}, **HX).content.decode()
    assert "<img src=x" not in raw and "&lt;img src=x onerror=alert(1)&gt;" in raw


def test_executing_without_javascript_needs_the_editor_role_too(viewer_client, rule_set) -> None:
    response = _test(viewer_client, rule_set, {"t-query": "주문", "execute": "1"})
    assert response.status_code == 403
    text = _text(response)
    assert "it needs the editor role" in text and 'id="tester-form"' in text


@pytest.mark.parametrize("execute", [False, True])
def test_the_page_and_the_api_give_the_same_answer_for_the_same_input(
    editor_client, rule_set, make_user, execute
) -> None:
    """One tester service behind the page, the API (and the MCP endpoint, which calls the API's
    handler): the same sample, pins and mode give the same rules fired and the same proposed case."""
    from django.test import Client

    from accounts.token_services import token_create

    pins = [{"mcp_id": "order-service", "tool_name": "get_order", "output": {"order": "A-1001"}}]
    data = {"t-query": "주문 해줘", "t-context": '{"userId": "C-1"}', "t-pinned": json.dumps(pins)}
    if execute:
        data["execute"] = "1"
    page = _test(editor_client, rule_set, data, **HX).content.decode()
    page_expected = json.loads(html_lib.unescape(re.search(r'name="expected" value="([^"]*)"', page)[1]))
    page_status = {
        rule: status for status, rule in re.findall(r'<tr class="status-(\w+)" data-rule="([^"]+)"', page)
    }

    secret = token_create(actor=make_user("editor"), name="same-answer").secret
    body = {"query": "주문 해줘", "context": {"userId": "C-1"}, "pinned": pins, "execute": execute}
    answer = Client().post(
        f"/api/rule-sets/{rule_set.pk}/evaluate",
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {secret}",
    )
    assert answer.status_code == 200, answer.content
    api = answer.json()
    assert api["expected"] == page_expected
    assert page_status == {r["rule"]: r["status"] for r in api["records"]}
    assert page_status["route_order"] == "fired"
    if execute:  # the pinned output answered the call on both routes (port 9 would refuse it)
        (record,) = [r for r in api["records"] if r["rule"] == "route_order"]
        assert record["result"] == {"order": "A-1001"}
        assert 'data-source="pinned"' in page


def test_recent_inputs_are_the_users_own_capped_and_one_click_from_the_tester(
    editor_client, rule_set, make_user
) -> None:
    from django.test import Client

    from rules.models import TesterInput
    from rules.tester import RECENT_KEPT

    url = reverse("rules:editor", args=[rule_set.pk])
    # A burst of keystrokes (the live run, no button) is one recent input: the one typed last.
    for typed in ("주", "주문", "주문 A-1"):
        _test(editor_client, rule_set, {"t-query": typed}, **HX)
    assert [e.values["query"] for e in TesterInput.objects.all()] == ["주문 A-1"]
    # A press of Dry run keeps its input; RECENT_KEPT are kept, the oldest dropped.
    for n in range(RECENT_KEPT + 1):
        _test(
            editor_client,
            rule_set,
            {"t-query": f"주문 {n}", "t-context": json.dumps({"n": n}), "execute": "0"},
            **HX,
        )
    kept = TesterInput.objects.filter(rule_set=rule_set)
    queries = {entry.values["query"]: entry for entry in kept}  # (a json column: no lookups on PostgreSQL)
    assert len(queries) == RECENT_KEPT and "주문 A-1" not in queries and "주문 0" not in queries
    first = queries["주문 1"]
    page = _text(editor_client.get(url))
    assert 'id="recent-picker"' in page and f"?recent={first.pk}" in page and "주문 0" not in page
    # One click loads it back, as typed, and the live run then answers on it.
    loaded = _text(editor_client.get(f"{url}?recent={first.pk}"))
    assert (
        re.search(r"<textarea[^>]*t-query[^>]*>\s*주문 1</textarea>", loaded)
        and '{"n": 1}</textarea>' in loaded
    )
    # Another user never sees them, nor can load one by its id.
    client = Client()
    client.force_login(make_user("editor", username="someone-else"))
    assert "recent-picker" not in _text(client.get(url))
    assert client.get(f"{url}?recent={first.pk}").status_code == 404
    _test(client, rule_set, {"t-query": "남의 입력", "execute": "0"}, **HX)
    assert "남의 입력" not in _text(editor_client.get(url))


def test_an_invalid_or_oversized_input_is_not_kept_and_says_so(editor_client, rule_set, make_user) -> None:
    from rules.errors import RuleError
    from rules.models import TesterInput
    from rules.tester import MAX_REMEMBERED_CHARS, tester_recent_record

    assert _test(editor_client, rule_set, {"t-context": "{", "execute": "0"}, **HX).status_code == 422
    # Valid for the tester once its spaces are gone, but over what a recent input may weigh: refused in Korean.
    padded = "{}" + " " * MAX_REMEMBERED_CHARS
    answer = _test(
        editor_client, rule_set, {"t-context": padded, "execute": "0"}, HTTP_ACCEPT_LANGUAGE="ko", **HX
    )
    assert answer.status_code == 200 and "최근 입력" in _text(answer).split('id="recent-refused"')[1][:300]
    assert not TesterInput.objects.exists()
    user = make_user("editor", username="service-user")
    for values in ({"query": "x" * 40_000}, {"query": ["not", "text"]}):
        with pytest.raises(RuleError):
            tester_recent_record(user=user, rule_set=rule_set, values=values, typing=False)
    assert tester_recent_record(user=user, rule_set=rule_set, values={"query": "  "}, typing=False) is None
    assert not TesterInput.objects.exists()


def test_recent_inputs_older_than_the_retention_period_are_forgotten(rule_set, make_user) -> None:
    # An input typed into the tester may hold a customer's data: the runs' retention applies to it.
    from datetime import timedelta

    from django.utils import timezone

    from agents.services import runs_delete_expired
    from rules.models import TesterInput
    from rules.tester import tester_recent_record

    editor = make_user("editor", username="retention-editor")
    for query in ("카드 4111 1111 1111 1111", "주문 A-1001"):
        tester_recent_record(user=editor, rule_set=rule_set, values={"query": query}, typing=False)
    # (values is a json column: PostgreSQL has no equality on it, so the row is picked in Python)
    (old,) = [e for e in TesterInput.objects.all() if e.values["query"].startswith("카드")]
    old.used_at = timezone.now() - timedelta(days=31)  # the default period is 30 days
    old.save()
    runs_delete_expired()
    assert [e.values["query"] for e in TesterInput.objects.all()] == ["주문 A-1001"]


def test_at_2000_rules_every_route_lists_fired_and_failed_and_counts_the_rest(
    editor_client, rule_set, make_user
) -> None:
    """The API (and the MCP endpoint, which calls its handler) answers as the page lists: every rule
    that fired or failed in full, the first SKIPPED_SHOWN others, the rest counted; ``detail: "all"``
    pages the others QUIET_PAGE at a time. 2,000 rules made a 355 KB answer when each had its record."""
    from django.test import Client

    from accounts.token_services import token_create
    from rules.engine import QUIET_PAGE
    from rules.models import Rule

    fire, fail, stop = {3, 400, 999, 1500, 1800}, {10, 1234}, 1900  # rules after the stop: not reached
    Rule.objects.filter(rule_set=rule_set).delete()
    Rule.objects.bulk_create(
        Rule(
            rule_set=rule_set,
            name=f"r{i}",
            mcp_id="order-service",
            tool_name="get_order",
            when='context["missing"] == 1' if i in fail else f'"kw{i}x" in query',
            params='{"query": query}',
            stop=i == stop,
            position=i,
        )
        for i in range(2000)
    )
    query = " ".join(f"kw{i}x" for i in (*sorted(fire), stop, 1950))  # 1950: after the stop
    secret = token_create(actor=make_user("editor", "big"), name="big").secret
    api = Client(headers={"authorization": f"Bearer {secret}"})
    url = f"/api/rule-sets/{rule_set.pk}/evaluate"

    def ask(**body):
        return api.post(url, json.dumps({"query": query, **body}), content_type="application/json")

    answer = ask()
    assert answer.status_code == 200, answer.content[:500]
    assert len(answer.content) <= 30_000, len(answer.content)
    got = answer.json()
    fired = [r for r in got["records"] if r["status"] == "fired"]
    assert [r["rule"] for r in fired] == [f"r{i}" for i in (*sorted(fire), stop)]
    assert all(r["params"] == {"query": query} and r["tool_name"] == "get_order" for r in fired)
    failed = [r for r in got["records"] if r["status"] == "error"]
    assert [r["rule"] for r in failed] == ["r10", "r1234"] and all(r["error"] for r in failed)
    assert got["counts"] == {"fired": 6, "skipped": 1893, "error": 2, "not_reached": 99}
    assert got["omitted"] == {"skipped": 1893 - SKIPPED_SHOWN, "not_reached": 99, "fired": 0}
    assert (got["detail"], got["next_offset"]) == ("summary", None)
    quiet = [r["rule"] for r in got["records"] if r["status"] in ("skipped", "not_reached")]
    assert len(quiet) == SKIPPED_SHOWN
    # The page lists the same rows, and offers the first page of the rest.
    page = _text(_test(editor_client, rule_set, {"t-query": query}, **HX))
    assert re.findall(r'<tr class="status-\w+" data-rule="([^"]+)"', page) == [
        r["rule"] for r in got["records"]
    ]
    assert '"offset": "0"' in page and f"List {QUIET_PAGE} more rules (dry run)" in page

    # Opt-in: every skipped and not-reached rule, one bounded page at a time, in evaluation order.
    pages, offset, answers = [], 0, {}
    while offset is not None:
        part = answers[offset] = ask(detail="all", offset=offset).json()
        assert (
            part["counts"] == got["counts"]
            and [r for r in part["records"] if r["status"] == "fired"] == fired
        )
        pages.append([r["rule"] for r in part["records"] if r["status"] in ("skipped", "not_reached")])
        assert len(pages[-1]) <= QUIET_PAGE
        offset = part["next_offset"]
    assert [len(p) for p in pages] == [500, 500, 500, 492]
    everyone = [f"r{i}" for i in range(2000) if i not in fire | fail | {stop}]
    assert [name for p in pages for name in p] == everyone
    # The page's "list more" pages the same way.
    second = _text(_test(editor_client, rule_set, {"t-query": query, "show": "all", "offset": "500"}, **HX))
    rows = re.findall(r'<tr class="status-\w+" data-rule="([^"]+)"', second)
    assert rows == [r["rule"] for r in answers[500]["records"]]
    assert '"offset": "1000"' in second

    # Hostile: refused with a message naming the field, nothing evaluated.
    for body, field, says in [
        ({"detail": "everything"}, "detail", "'summary' or 'all'"),
        ({"detail": None}, "detail", "'summary' or 'all'"),
        ({"detail": "all", "offset": -1}, "offset", "greater than or equal to 0"),
        ({"detail": "all", "offset": "x"}, "offset", "integer"),
        ({"offset": 20}, "offset", 'send detail "all" with it'),
    ]:
        refused = ask(**body)
        assert refused.status_code == 422, (body, refused.content)
        assert refused.json()["field"].endswith(field) and says in refused.json()["detail"], refused.json()
    korean = api.post(
        url,
        json.dumps({"query": query, "offset": 20}),
        content_type="application/json",
        HTTP_ACCEPT_LANGUAGE="ko",
    )
    assert korean.status_code == 422 and "detail" in korean.json()["detail"]
    assert "send detail" not in korean.json()["detail"]  # said in Korean
    bad_page = _test(editor_client, rule_set, {"t-query": query, "show": "all", "offset": "-5"}, **HX)
    assert bad_page.status_code == 422 and "offset must be a whole number, 0 or more." in _text(bad_page)
