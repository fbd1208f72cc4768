"""The live tester as a newcomer meets it: in place on a fresh editor, kept across saves and reloads."""

from __future__ import annotations

import pytest
from django.utils import timezone

from rules import services
from rules.models import Rule, RuleSet, TestCase
from servers.models import McpServer
from tests.e2e.conftest import screenshot

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("demo")]


def _stays_on(page, url: str) -> None:
    assert page.url == url, f"left the editor for {page.url}"


def test_a_newcomer_types_a_query_in_a_fresh_editor_and_sees_results(page, logged_in) -> None:
    rule_set = RuleSet.objects.get(name="seed-rules")
    rules_before = list(Rule.objects.values_list("pk", "revision"))
    cases_before = TestCase.objects.count()
    logged_in("editor")
    page.goto(f"/rules/{rule_set.pk}/")  # the empty "New rule" form is open
    editor_url = page.url
    page.fill("#id_t-query", "주문 조회 부탁해 A-1001")
    page.locator("#tester-table tr[data-rule='route_order_lookup'] .status-fired").wait_for()
    assert "확정 호출 결과" in page.locator("#llm-block").inner_text()

    # Dry run and Execute answer in place.
    page.click("#tester-dry-run")
    page.locator("#tester-outcome[data-mode='dry-run']").wait_for()
    _stays_on(page, editor_url)
    page.click("#tester-execute")
    page.click("#execute-confirm-yes")  # Execute names the live calls first; confirmed here
    page.locator("#tester-outcome[data-mode='execute']").wait_for()
    assert "Executed: " in page.locator("#tester-outcome").inner_text()
    _stays_on(page, editor_url)
    assert list(Rule.objects.values_list("pk", "revision")) == rules_before  # nothing was saved
    assert TestCase.objects.count() == cases_before


def test_the_inputs_survive_a_rule_save_and_a_reload(page, logged_in) -> None:
    rule_set = RuleSet.objects.get(name="seed-rules")
    rule = rule_set.rules.get(name="route_order_lookup")
    logged_in("editor")
    page.goto(f"/rules/{rule_set.pk}/?rule={rule.pk}")
    page.fill("#id_t-query", "주문 조회 A-1001")
    page.fill("#id_t-context", '{"chatbotId": "premium-support"}')
    page.fill("#id_t-data", '[{"ticketType": "faq"}]')
    page.locator("#tester-table tr[data-rule='route_by_chatbot_id'] .status-fired").wait_for()
    page.wait_for_load_state("networkidle")

    page.fill("#id_rule-description", "주문 조회 (edited)")
    page.click("text=Save rule")
    page.get_by_text("Saved rule route_order_lookup").wait_for()
    for _ in ("after the save", "after a reload"):
        assert page.input_value("#id_t-query") == "주문 조회 A-1001"
        assert page.input_value("#id_t-context") == '{"chatbotId": "premium-support"}'
        assert page.input_value("#id_t-data") == '[{"ticketType": "faq"}]'
        page.locator("#tester-table tr[data-rule='route_by_chatbot_id'] .status-fired").wait_for()
        page.reload()


def test_a_case_saved_after_a_failed_execute_expects_the_call(page, logged_in, make_user) -> None:
    # Nothing listens on port 9 of loopback: the call fails for real when executed.
    McpServer.objects.create(
        mcp_id="down-service",
        transport="http",
        url="http://127.0.0.1:9/mcp",
        tools=[{"name": "lookup", "description": "", "input_schema": {"type": "object"}}],
        tools_refreshed_at=timezone.now(),
    )
    author = make_user("editor", "author")
    rule_set = services.rule_set_create(actor=author, name="down")
    services.rule_create(
        actor=author,
        rule_set=rule_set,
        name="route_lookup",
        mcp_id="down-service",
        tool_name="lookup",
        when='"조회" in query',
        params='{"q": query}',
    )
    logged_in("editor")
    page.goto(f"/rules/{rule_set.pk}/")
    page.fill("#id_t-query", "조회해줘")
    page.locator("#tester-table tr[data-rule='route_lookup'] .status-fired").wait_for()
    page.click("#tester-execute")
    page.click("#execute-confirm-yes")
    page.locator("#tester-outcome[data-mode='execute'][data-ok='false']").wait_for()
    page.fill("#save-case-form input[name=name]", "조회 after execute")
    page.click("#save-case-form button")
    page.locator("#case-saved [data-case]").wait_for()
    case = TestCase.objects.get(rule_set=rule_set, name="조회 after execute")
    assert case.expected["error"] is None
    assert case.expected["must_fire"] == [
        {"mcp_id": "down-service", "tool_name": "lookup", "params": {"q": "조회해줘"}, "match": "exact"}
    ]
    page.click("#case-saved a")  # "See the cases"
    page.click("#run-suite")
    assert "1 of 1 pass" in page.locator("#suite-summary").inner_text()


def test_a_skipped_rule_explains_each_sub_condition(page, logged_in) -> None:
    rule_set = RuleSet.objects.get(name="seed-rules")
    logged_in("editor")
    page.goto(f"/rules/{rule_set.pk}/")  # a fresh editor: the new-rule form is empty
    page.fill("#id_t-query", "주문 취소해줘")
    page.wait_for_load_state("networkidle")  # the debounced run on the typed query has landed
    row = page.locator("#tester-table tr[data-rule='route_order_lookup']")
    row.locator("details.why li.why-true").wait_for(state="attached")
    row.locator("details.why summary").click()
    lines = [" ".join(li.inner_text().split()) for li in row.locator("details.why li").all()]
    assert lines == [
        '"주문" in ctx.query and "조회" in ctx.query → False',
        '"주문" in ctx.query → True',
        '"조회" in ctx.query → False',
    ]
    screenshot(page, "tester-why-skipped")


def test_open_a_case_in_the_tester_edit_it_and_save_it(page, logged_in, make_user) -> None:
    rule_set = RuleSet.objects.get(name="seed-rules")
    from rules.cases import case_create

    case = case_create(
        actor=make_user("editor", "c"),
        rule_set=rule_set,
        name="주문",
        input={"query": "주문 조회 A-1"},
        expected={"must_fire": []},
    )
    logged_in("editor")
    page.goto(f"/rules/{rule_set.pk}/")  # the tester's picker offers the saved cases
    page.click("#case-picker summary")
    page.click(f"#case-picker a[href*='?case={case.pk}']")
    assert page.input_value("#id_t-query") == "주문 조회 A-1"
    page.fill("#id_t-query", "주문 조회 A-2")
    page.locator("#update-case-form").wait_for()
    page.wait_for_load_state("networkidle")
    page.click("#update-case-form button")
    page.locator("#case-saved [data-case]").wait_for()
    assert page.input_value("#id_t-query") == "주문 조회 A-2"  # still in the editor, as typed
    case.refresh_from_db()
    assert case.input["query"] == "주문 조회 A-2"
    assert case.expected["must_fire"][0]["tool_name"] == "get_order"


def test_recent_inputs_are_one_click_from_the_tester_in_english_and_korean(page, logged_in) -> None:
    rule_set = RuleSet.objects.get(name="seed-rules")
    logged_in("editor")
    page.goto(f"/rules/{rule_set.pk}/")
    for query in ("주문 조회 부탁해 A-1001", "환불 정책 검색해줘"):
        page.fill("#id_t-query", query)
        # A pressed run keeps its input among the recent ones: wait for this run's own answer (the
        # outcome of the first is already on the page when the second is pressed).
        with page.expect_response(lambda r: r.request.method == "POST" and "/test" in r.url):
            page.click("#tester-dry-run")
        page.locator("#tester-outcome[data-mode='dry-run']").wait_for()
    page.reload()
    page.click("#recent-picker summary")
    picks = page.locator("#recent-picker a.pick-recent")
    assert picks.all_inner_texts() == ["환불 정책 검색해줘", "주문 조회 부탁해 A-1001"]  # newest first
    picks.nth(1).click()
    assert page.input_value("#id_t-query") == "주문 조회 부탁해 A-1001"
    page.locator("#tester-table tr[data-rule='route_order_lookup'] .status-fired").wait_for()
    page.click("#recent-picker summary")
    screenshot(page, "tester-recent-inputs", element=page.locator("#tester"))
    from django.contrib.auth import get_user_model

    from accounts.services import language_set

    language_set(user=get_user_model().objects.get(username__startswith="editor-"), language="ko")
    page.reload()
    assert page.locator("#recent-picker summary").inner_text() == "내 최근 입력 (2)"


def test_the_case_tables_fit_a_1440_px_window(page, logged_in, make_user) -> None:
    rule_set = RuleSet.objects.get(name="seed-rules")
    from rules.cases import case_create

    long_word = "주문조회" * 120 + "x" * 300
    case_create(
        actor=make_user("editor", "c"),
        rule_set=rule_set,
        name="n" * 100,
        input={"query": long_word, "context": {"k": long_word}},
        expected={"must_fire": [{"tool_name": "get_order", "params": {"query": long_word}}]},
    )
    page.set_viewport_size({"width": 1440, "height": 900})
    logged_in("editor")
    page.goto(f"/rules/{rule_set.pk}/cases/")
    page.click("#run-suite")
    page.locator("#suite-table").wait_for()
    for table in ("#suite-table", "#case-table"):
        width = page.locator(table).evaluate("t => t.getBoundingClientRect().width")
        assert width <= 1440, f"{table} is {width} px wide"
    assert page.evaluate("document.documentElement.scrollWidth") <= 1440


def test_the_run_list_shows_a_new_run_without_a_reload(page, logged_in) -> None:
    from agents.models import Agent, Run

    agent = Agent.objects.first()
    logged_in("viewer")
    page.goto("/agents/runs/")
    run = Run.objects.create(agent=agent, agent_name=agent.name, query="새 실행")
    page.locator(f"tr[data-run='{run.pk}']").wait_for()
