"""The users page and the language choice in a real browser."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from accounts.services import role_of
from core.models import AuditEvent
from tests.e2e.conftest import fill_expression, screenshot

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _urlconf_imported() -> None:
    """Import the URLconf (and every view module with it) here, not in the live server's first
    request: on a busy machine that cold import alone outlasts the browser's navigation timeout."""
    from django.urls import get_resolver

    assert get_resolver().url_patterns


def test_an_admin_adds_a_user_sets_the_role_and_deactivates_them(page, logged_in) -> None:
    logged_in("admin")
    page.click("nav >> text=Users")
    page.wait_for_url("**/users/")
    page.fill("#id_username", "mina")
    page.fill("#id_email", "mina@example.com")
    page.select_option("#id_role", "viewer")
    page.click("#user-form button[type=submit]")
    link = page.locator("#invite-link code").inner_text()
    assert "/accounts/invite/" in link
    assert page.locator("#user-role").inner_text() == "viewer"

    page.select_option("#role-form select[name=role]", "editor")
    page.click("#role-form button[type=submit]")
    page.wait_for_selector(".msg >> text=mina is now editor.")
    assert page.locator("#user-role").inner_text() == "editor"

    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#active-form button[type=submit]")
    page.wait_for_selector(".msg >> text=mina is deactivated")
    assert page.locator("#user-state").inner_text() == "deactivated"

    mina = get_user_model().objects.get(username="mina")
    assert not mina.is_active and role_of(mina) == "editor"  # has_role is False for the inactive
    actions = set(AuditEvent.objects.filter(object_repr="mina").values_list("action", flat=True))
    assert {"user.create", "user.invite", "user.set_role", "user.deactivate"} <= actions

    page.click("text=All users")
    page.wait_for_url("**/users/")
    row = page.locator('tr[data-username="mina"]')
    assert row.locator(".user-role").inner_text() == "editor"
    assert row.locator(".user-state").inner_text() == "deactivated"
    screenshot(page, "users")


def test_the_invited_person_sets_a_password_and_logs_in(page, logged_in) -> None:
    logged_in("admin")
    page.goto("/users/")
    page.fill("#id_username", "newbie")
    page.click("#user-form button[type=submit]")
    link = page.locator("#invite-link code").inner_text()
    page.click("text=Log out")
    page.wait_for_url("**/accounts/login/")
    page.goto(link)
    page.fill("#id_password1", "correct horse 42")
    page.fill("#id_password2", "correct horse 42")
    page.click("#invite-accept-form button[type=submit]")
    page.wait_for_url("**/accounts/login/")
    page.fill("#id_username", "newbie")
    page.fill("#id_password", "correct horse 42")
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login" not in url)
    assert "newbie" in page.locator(".who").inner_text()


def test_choosing_korean_turns_the_interface_korean(page, logged_in) -> None:
    logged_in("viewer")
    page.goto("/rules/")
    assert page.locator("nav.nav").get_by_text("Rule sets").is_visible()
    page.select_option("#id_language_choice", "ko")
    page.click("#language-form button[type=submit]")
    page.wait_for_url("**/rules/")
    nav = page.locator("nav.nav")
    assert nav.get_by_text("규칙 세트").is_visible() and nav.get_by_text("MCP 서버").is_visible()
    assert page.locator("html").get_attribute("lang") == "ko"
    assert page.locator(".account").get_by_text("로그아웃").is_visible()
    # The choice belongs to the user, not the page: it holds on the next page too.
    page.goto("/agents/")
    assert page.locator("nav.nav").get_by_text("에이전트").is_visible()


def test_the_rule_set_editor_in_korean_keeps_the_seed_contract_strings(page, logged_in) -> None:
    """The editor's labels, the tester's verdict and a flash message read Korean; what the LLM receives
    (the seed's contract header) reads byte for byte the same."""
    from django.core.management import call_command

    from rules.models import Rule, RuleSet
    from servers import pool as rules_pool

    call_command("load_demo", "--no-runs", verbosity=0)  # servers with their real tool lists
    try:
        rule_set = RuleSet.objects.get(name="seed-rules")
        logged_in("editor")
        page.goto("/rules/")
        page.select_option("#id_language_choice", "ko")
        page.click("#language-form button[type=submit]")
        page.wait_for_url("**/rules/")
        page.goto(f"/rules/{rule_set.pk}/")
        assert page.locator("html").get_attribute("lang") == "ko"
        shown = page.locator("main").inner_text()
        for label in ["실시간 테스터", "모의 실행", "실제 실행", "JSON 내보내기", "영향 분석", "규칙 추가"]:
            assert label in shown, label
        for english in ["Live tester", "Dry run", "Execute", "Add rule", "Export JSON", "Impact analysis"]:
            assert english not in shown, english
        assert page.locator("#tester-execute").inner_text() == "실제 실행"
        assert page.locator("#tester-execute").get_attribute("title") == "실제로 도구를 호출합니다"

        page.fill("#id_t-query", "주문 조회 부탁해 A-1001")
        page.locator("#tester-table tr[data-rule='route_order_lookup'] .status-fired").wait_for()
        assert (
            "확정 호출 결과" in page.locator("#llm-block").inner_text()
        )  # a contract string, not translated
        page.click("#tester-dry-run")
        page.locator("#tester-outcome[data-mode='dry-run']").wait_for()
        assert "모의 실행: 규칙" in page.locator("#tester-outcome").inner_text()
        screenshot(page, "korean-editor")

        # A message from Python (a flash after saving a rule) is Korean too.
        rule = Rule.objects.get(rule_set=rule_set, name="route_order_lookup")
        page.goto(f"/rules/{rule_set.pk}/?rule={rule.pk}")
        page.click("#rule-form button.primary")
        page.get_by_text("규칙 route_order_lookup을(를) 저장했습니다.").wait_for()

        # A bad expression: the editor marks it and says why in Korean, with the close name it meant.
        when = page.locator(".expr-editor-host[data-expr-field='when']")
        fill_expression(page, "when", '"주문" in ctx.qeury')
        marked = when.locator(".cm-lintRange-error")
        marked.wait_for()
        marked.hover()
        tooltip = when.locator(".cm-tooltip-lint")
        tooltip.wait_for()
        assert (
            "1행 13열: 속성 'qeury'은(는) 쓸 수 없습니다. 'query'을(를) 뜻하셨나요?" in tooltip.inner_text()
        )
        screenshot(page, "korean-expression-error")
        page.click("#rule-form button.primary")  # the form says the same, under the field
        error = page.locator("#rule-errors li[data-field='when']")
        error.wait_for()
        assert (
            "속성 'qeury'은(는) 쓸 수 없습니다" in error.inner_text()
            and "not allowed" not in error.inner_text()
        )

        page.goto("/agents/new")
        form = page.locator("main").inner_text()
        for label in ["시스템 프롬프트", "규칙 세트 모드", "모델 제공자", "최대 반복 횟수", "출력 마스킹"]:
            assert label in form, label
        screenshot(page, "korean-agent-form")
    finally:
        rules_pool.web_pool_close()
