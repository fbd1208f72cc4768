"""Issue 43 in the browser, in English and Korean: a case saved from the tester asserts the whole
outcome (and says so), an upgraded case shows its note, and the tester's Execute asks first, naming
the tools it would call."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from accounts.services import language_set
from rules.models import RuleSet, TestCase
from tests.e2e.conftest import screenshot

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("demo")]

TEXT = {
    "en": {
        "nothing": "The case will expect that nothing fires.",
        "saved_mode": "Nothing may fire.",
        "note": "it now asserts that nothing fires",
        "ask": "Execute calls 1 tool for real.",
        "yes": "Call these tools",
    },
    "ko": {
        "nothing": "케이스는 아무 호출도 없기를 기대합니다.",
        "saved_mode": "아무 호출도 없어야 함.",
        "note": "이제 마지막 실행처럼 아무 호출도 없어야 한다고 확인합니다",
        "ask": "Execute는 도구 1개를 실제로 호출합니다.",
        "yes": "이 도구들을 호출",
    },
}


def _as(logged_in, role: str, language: str):
    page = logged_in(role)
    user = get_user_model().objects.filter(username__startswith=f"{role}-").order_by("-pk").first()
    language_set(user=user, language=language)
    return page


@pytest.mark.parametrize("language", ["en", "ko"])
def test_a_case_saved_from_the_tester_says_nothing_may_fire(page, logged_in, language) -> None:
    rule_set = RuleSet.objects.get(name="seed-rules")
    _as(logged_in, "editor", language)
    page.goto(f"/rules/{rule_set.pk}/")
    page.fill("#id_t-query", "날씨 어때?")
    expects = page.locator("#save-case-form [data-testid=case-expects]")
    expects.get_by_text(TEXT[language]["nothing"]).wait_for()
    page.fill("#save-case-form input[name=name]", f"small talk {language}")
    page.click("#save-case-form button[type=submit]")
    page.locator("#case-saved [data-case]").wait_for()
    assert TEXT[language]["saved_mode"] in page.locator("#case-saved").inner_text()
    case = TestCase.objects.get(rule_set=rule_set, name=f"small talk {language}")
    assert case.expectation["other_calls"] == "forbid" and case.expected["must_fire"] == []
    suffix = "" if language == "en" else "-ko"
    screenshot(
        page, f"case-save-whole-outcome{suffix}", element=page.locator("#tester-results").locator("..")
    )


@pytest.mark.parametrize("language", ["en", "ko"])
def test_an_upgraded_case_shows_its_note_to_the_owner(page, logged_in, language) -> None:
    rule_set = RuleSet.objects.get(name="seed-rules")
    case = TestCase.objects.create(
        rule_set=rule_set,
        name="인사",
        input={"query": "안녕하세요"},
        expected={},
        last_outcome={"records": []},
    )
    # What migration rules/0007 leaves on a stored {} whose last run called nothing.
    TestCase.objects.filter(pk=case.pk).update(
        other_calls="forbid", notice={"code": "migrated_forbid", "calls": [], "empty": True}
    )
    _as(logged_in, "viewer", language)
    page.goto(f"/rules/{rule_set.pk}/cases/")
    note = page.locator(f"tr[data-case='{case.pk}'] .case-notice")
    assert TEXT[language]["note"] in note.inner_text()
    suffix = "" if language == "en" else "-ko"
    screenshot(page, f"case-migration-note{suffix}", element=page.locator(f"tr[data-case='{case.pk}']"))


@pytest.mark.parametrize("language", ["en", "ko"])
def test_execute_names_the_tools_and_calls_them_only_when_confirmed(page, logged_in, language) -> None:
    rule_set = RuleSet.objects.get(name="seed-rules")
    _as(logged_in, "editor", language)
    page.goto(f"/rules/{rule_set.pk}/")
    page.fill("#id_t-query", "주문 조회 부탁해 A-1001")
    page.locator("#tester-table tr[data-rule='route_order_lookup'] .status-fired").wait_for()
    page.wait_for_load_state("networkidle")
    page.click("#tester-execute")
    dialog = page.locator("#execute-confirm")
    dialog.wait_for()
    assert TEXT[language]["ask"] in dialog.inner_text()
    assert "get_order" in page.locator("#execute-confirm-calls").inner_text()
    assert page.locator("#tester-outcome").get_attribute("data-mode") == "dry-run"  # nothing called yet
    suffix = "" if language == "en" else "-ko"
    screenshot(page, f"tester-execute-confirm{suffix}", element=dialog)
    assert page.locator("#execute-confirm-yes").inner_text() == TEXT[language]["yes"]
    page.click("#execute-confirm-yes")
    page.locator("#tester-outcome[data-mode='execute']").wait_for()
    assert page.locator("#execute-confirm").count() == 0
