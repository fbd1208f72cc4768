"""The expression editor in a real browser: highlighting, completion, errors in place, saved through the form."""

from __future__ import annotations

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from rules.models import Rule, RuleSet
from tests.e2e.conftest import screenshot

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("demo")]


def _editor(page, field: str):
    return page.locator(f".expr-editor-host[data-expr-field='{field}']")


def _pick(page, editor, label: str) -> None:
    """Choose a completion by its label, as a user clicks it in the list.

    The list is redrawn while the completion source answers; a click that lands during a redraw
    is lost, and a user clicks again: so does this, until the editor holds the label once more."""
    content = editor.locator(".cm-content")
    before = content.inner_text().count(label)
    option = page.locator(
        ".cm-tooltip-autocomplete li", has=page.locator(".cm-completionLabel", has_text=label)
    )
    for _ in range(3):
        option.first.wait_for()
        option.first.click()
        try:
            page.wait_for_function(
                "([el, label, before]) => el.innerText.split(label).length - 1 > before",
                arg=[content.element_handle(), label, before],
                timeout=2_000,
            )
            return
        except PlaywrightTimeoutError:
            continue
    raise AssertionError(f"the completion {label!r} was not applied after three clicks")


def test_type_complete_see_the_error_in_place_and_save(page, logged_in) -> None:
    rule_set = RuleSet.objects.get(name="seed-rules")
    logged_in("editor")
    page.goto(f"/rules/{rule_set.pk}/")
    page.fill("#id_rule-name", "route_refund_docs")
    page.select_option("#id_rule-mcp_id", "knowledge-base")
    page.fill("#id_rule-tool_name", "search_docs")
    page.locator("#tool-info").get_by_text("search_docs").first.wait_for()
    assert not page.locator("#id_rule-when").is_visible()  # the editor replaced the textarea

    # A typo: the error is marked under the misspelt name, at the column the compile check gives.
    when = _editor(page, "when")
    when.locator(".cm-content").click()
    page.keyboard.type('"환불" in qeury')
    marked = when.locator(".cm-lintRange-error")
    marked.wait_for()
    assert marked.inner_text() == "qeury"
    when.locator(".cm-lint-marker-error").wait_for()  # and in the gutter
    marked.hover()
    tooltip = when.locator(".cm-tooltip-lint")
    tooltip.wait_for()
    assert "line 1, column 9: name 'qeury' is not allowed" in tooltip.inner_text()

    # Retype with a helper chosen from the completion list; tokens are highlighted by kind.
    page.keyboard.press("Control+a")
    page.keyboard.press("Backspace")
    page.keyboard.type('"환불" in query and contains_a')
    _pick(page, when, "contains_any")
    page.keyboard.type('query, ["refund"')
    expected_when = '"환불" in query and contains_any(query, ["refund"])'
    assert when.locator(".cm-content").inner_text() == expected_when
    when.locator(".tok-function", has_text="contains_any").wait_for()
    assert when.locator(".tok-string", has_text="환불").count() == 1
    assert when.locator(".tok-keyword", has_text="and").count() == 1
    page.wait_for_function(
        "() => !document.querySelector(\".expr-editor-host[data-expr-field='when']\")"
        ".shadowRoot.querySelector('.cm-lintRange-error')"
    )
    assert page.input_value("#id_rule-when") == expected_when  # the form posts the textarea

    # Params: the key comes from search_docs' input schema.
    params = _editor(page, "params")
    params.locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.press("Backspace")
    page.keyboard.type('{"')
    _pick(page, params, "limit")  # offered with q, the schema's other key
    page.keyboard.type("3, ")
    page.keyboard.type('"')
    page.locator(".cm-tooltip-autocomplete .cm-completionLabel", has_text="limit").wait_for()
    screenshot(page, "expression-editor")  # the schema's keys offered, with their types
    _pick(page, params, "q")
    page.keyboard.type("query")
    page.keyboard.press("Escape")  # close the list of names offered for `query`
    assert params.locator(".cm-content").inner_text() == '{"limit": 3, "q": query}'
    page.get_by_text("The rule compiles.").wait_for()  # the form's own live check saw the edits

    # Tab leaves the editor as it leaves a textarea.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "id_rule-description"

    page.click("text=Add rule")
    page.wait_for_url(lambda url: "?rule=" in url)
    rule = Rule.objects.get(rule_set=rule_set, name="route_refund_docs")
    assert (rule.when, rule.params) == (expected_when, '{"limit": 3, "q": query}')
    assert when.locator(".cm-content").inner_text() == expected_when  # shown again after the save


def test_a_bad_expression_on_a_later_line_is_marked_there(page, logged_in) -> None:
    rule_set = RuleSet.objects.get(name="seed-rules")
    rule = rule_set.rules.get(name="route_order_lookup")
    logged_in("editor")
    page.goto(f"/rules/{rule_set.pk}/?rule={rule.pk}")
    params = _editor(page, "params")
    params.locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.press("Backspace")
    page.keyboard.type('{\n"q": query,\n"n": len(qurey)\n')
    marked = params.locator(".cm-lintRange-error")
    marked.wait_for()
    assert marked.inner_text() == "qurey"
    line = params.locator(".cm-line").nth(2)
    assert "qurey" in line.inner_text()
    # The live check of the whole form says the same, in words.
    error = page.locator("#rule-errors li[data-field='params']")
    error.wait_for()
    assert "line 3, column 12" in error.inner_text()  # Enter indented the line by two
    assert Rule.objects.get(pk=rule.pk).params == rule.params  # nothing saved


def test_typing_over_highlighted_tokens_breaks_no_csp_rule(page, logged_in) -> None:
    # Chromium keeps a replaced token's colour with a style attribute, which the CSP refuses: the
    # page fixture fails this test on such a report. Both a key press and a Korean IME composition.
    rule_set = RuleSet.objects.get(name="seed-rules")
    logged_in("editor")
    page.goto(f"/rules/{rule_set.pk}/")
    content = _editor(page, "when").locator(".cm-content")
    content.click()
    page.keyboard.type('"환불" in query and "검색" in query')
    page.keyboard.press("Control+a")
    page.keyboard.type("q")
    assert content.inner_text() == "q"

    page.keyboard.type('uery and "환불" in query')
    page.keyboard.press("Control+a")
    cdp = page.context.new_cdp_session(page)
    # What Chromium sends for an IME: a key press with key code 229, then the composition.
    cdp.send("Input.dispatchKeyEvent", {"type": "rawKeyDown", "windowsVirtualKeyCode": 229, "key": "Process"})
    cdp.send("Input.imeSetComposition", {"text": "ㄱ", "selectionStart": 1, "selectionEnd": 1})
    cdp.send("Input.imeSetComposition", {"text": "거", "selectionStart": 1, "selectionEnd": 1})
    cdp.send("Input.insertText", {"text": "검"})
    page.wait_for_function(
        "() => document.querySelector(\".expr-editor-host[data-expr-field='when']\")"
        ".shadowRoot.querySelector('.cm-content').innerText === '검'"
    )
    assert page.input_value("#id_rule-when") == "검"


def test_text_inserted_over_a_fresh_selection_breaks_no_csp_rule(page, logged_in) -> None:
    # Automation (and some input tools) select everything and insert text in one go, through the
    # DevTools protocol: the beforeinput event then has no target range and CodeMirror may not have
    # seen the new selection yet. The replaced range is read from the DOM, so Chromium's own editing
    # never runs over highlighted tokens (it failed within 12 rounds before that).
    rule_set = RuleSet.objects.get(name="seed-rules")
    logged_in("editor")
    page.goto(f"/rules/{rule_set.pk}/")
    content = _editor(page, "when").locator(".cm-content")
    for i in range(30):
        text = f'contains_any(query, ["환불", "refund{i}"]) and "검색" in query'
        content.fill(text)
        assert content.inner_text() == text
        assert not page.csp_violations, (i, page.csp_violations)
    page.wait_for_function("text => document.querySelector('#id_rule-when').value === text", arg=text)


def test_without_javascript_the_textarea_posts_as_before(browser, live_server, make_user) -> None:
    rule_set = RuleSet.objects.get(name="seed-rules")
    rule = rule_set.rules.get(name="route_order_lookup")
    user = make_user("editor")
    context = browser.new_context(base_url=live_server.url, java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto("/accounts/login/")
        page.fill("#id_username", user.username)
        page.fill("#id_password", "pw")
        page.click("button[type=submit]")
        page.goto(f"/rules/{rule_set.pk}/?rule={rule.pk}")
        assert page.locator("#id_rule-when").is_visible()
        assert page.locator(".expr-editor-host").count() == 0
        page.fill("#id_rule-when", '"주문" in query')
        page.click("text=Save rule")
        page.get_by_text("Saved rule route_order_lookup").wait_for()
    finally:
        context.close()
    assert Rule.objects.get(pk=rule.pk).when == '"주문" in query'
