"""The rule workbench in a real browser: typo -> inline error -> fix -> live Korean match -> case -> publish -> diff."""

from __future__ import annotations

import pytest

from rules.models import Rule, RuleSet, TestCase
from tests.e2e.conftest import fill_expression, screenshot

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("demo")]


def test_write_a_rule_test_it_live_keep_a_case_publish_and_diff(page, logged_in) -> None:
    logged_in("editor")
    page.goto("/rules/")
    page.fill("#id_name", "refunds")
    page.click("text=Create")
    page.wait_for_url("**/rules/*/")
    rule_set = RuleSet.objects.get(name="refunds")

    # A rule with a typo: the error (line, column, reason) shows while typing, nothing is saved.
    page.fill("#id_rule-name", "route_refund_search")
    page.select_option("#id_rule-mcp_id", "knowledge-base")
    page.fill("#id_rule-tool_name", "search_docs")
    page.locator("#tool-info").get_by_text("search_docs").first.wait_for()
    fill_expression(page, "params", '{"q": query}')
    fill_expression(page, "when", '"환불" in qeury')
    # has_text: the check of the params edit (when still empty) may answer first.
    error = page.locator("#rule-errors li[data-field='when']", has_text="qeury")
    error.wait_for()
    assert "line 1, column" in error.inner_text() and "qeury" in error.inner_text()
    screenshot(page, "workbench-typo")
    assert not Rule.objects.filter(rule_set=rule_set).exists()

    # Fixed: it compiles, and the live tester matches a Korean query on the unsaved draft.
    fill_expression(page, "when", '"환불" in query and "검색" in query')
    page.get_by_text("The rule compiles.").wait_for()
    page.fill("#id_t-query", "환불 정책 검색해줘")
    fired = page.locator("#tester-table tr[data-rule='route_refund_search'] .status-fired")
    fired.wait_for()
    assert "확정 호출 결과" in page.locator("#llm-block").inner_text()
    assert "Includes your unsaved edit" in page.locator("#tester-outcome").inner_text()
    page.click("text=Add rule")
    page.wait_for_url(lambda url: "?rule=" in url)
    rule = Rule.objects.get(rule_set=rule_set, name="route_refund_search")

    # Keep the sample as a regression case.
    page.fill("#id_t-query", "환불 정책 검색해줘")
    page.wait_for_load_state("networkidle")  # the debounced tester refresh has landed
    page.locator("#tester-table tr[data-rule='route_refund_search'] .status-fired").wait_for()
    assert (
        "unsaved edit" not in page.locator("#tester-outcome").inner_text()
    )  # the form equals the saved rule
    screenshot(page, "workbench-live-tester")
    page.fill("#save-case-form input[name=name]", "refund search (Korean)")
    page.click("#save-case-form button")
    # Saved in place: the editor and the tester keep their state, and typing goes on.
    page.locator("#case-saved [data-case]").wait_for()
    assert "/cases/" not in page.url and page.input_value("#id_t-query") == "환불 정책 검색해줘"
    case = TestCase.objects.get(rule_set=rule_set)
    assert case.expected["must_fire"][0]["tool_name"] == "search_docs"
    page.fill("#id_t-query", "주문 조회 A-1001")
    page.locator("#tester-table tr[data-rule='route_refund_search'] .status-skipped").wait_for()
    assert "refund search (Korean)" in page.locator("#case-saved").inner_text()
    page.goto(f"/rules/{rule_set.pk}/cases/")
    page.click("#run-suite")
    assert "1 of 1 pass" in page.locator("#suite-summary").inner_text()

    # Publish v1, change the rule, publish v2, and diff the two.
    page.goto(f"/rules/{rule_set.pk}/versions/")
    page.fill("#id_message", "first refund rule")
    page.click("button:has-text('Publish')")
    page.get_by_text("Published v1").wait_for()
    page.goto(f"/rules/{rule_set.pk}/?rule={rule.pk}")
    fill_expression(page, "when", 'contains_any(query, ["환불", "refund"]) and "검색" in query')
    page.click("text=Save rule")
    page.get_by_text("Saved rule route_refund_search").wait_for()
    page.get_by_text("none changed outcome").wait_for()  # the suite ran again after the save
    page.goto(f"/rules/{rule_set.pk}/versions/")
    page.fill("#id_message", "English too")
    page.click("button:has-text('Publish')")
    page.get_by_text("Published v2").wait_for()
    page.select_option("select[name=a]", "1")
    page.select_option("select[name=b]", "2")
    page.click("text=Show diff")
    page.wait_for_url(lambda url: "/versions/diff?" in url)
    row = page.locator("section[data-rule='route_refund_search']")
    assert "changed" in row.inner_text() and "contains_any" in row.inner_text()
    screenshot(page, "version-diff")


def test_reorder_by_drag_and_drop(page, logged_in) -> None:
    rule_set = RuleSet.objects.get(name="seed-rules")
    logged_in("editor")
    page.goto(f"/rules/{rule_set.pk}/")
    first = page.locator("li.rule").nth(0)
    third = page.locator("li.rule").nth(2)
    names = [n.inner_text() for n in page.locator("li.rule .rule-name").all()]
    first.drag_to(third)
    page.wait_for_function(
        "before => [...document.querySelectorAll('li.rule .rule-name')].map(n => n.textContent.trim()).join() !== before",
        arg=",".join(names),
    )
    page.wait_for_load_state("networkidle")
    saved = list(rule_set.rules.order_by("position").values_list("name", flat=True))
    assert saved != names and sorted(saved) == sorted(names)
    assert saved == [n.inner_text() for n in page.locator("li.rule .rule-name").all()]
