"""Runs in a real browser: start one on the demo agent, watch its steps arrive, compare, keep it as a case."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from accounts.services import language_set
from agents.models import Run
from rules.models import TestCase
from tests.e2e.conftest import screenshot

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.services,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
]


def test_start_a_run_watch_it_live_compare_and_save_as_a_case(page, logged_in, worker) -> None:
    logged_in("editor")
    page.goto("/agents/runs/new")
    page.select_option("#id_agent", label="seed-demo")
    page.fill("#id_query", "주문 조회 부탁해 A-1002")
    page.fill("#id_context", '{"userId": "C-1002", "chatbotId": "premium-support"}')
    page.click("#run-form button[type=submit]")
    page.wait_for_url("**/agents/runs/*/")
    page.evaluate("window.__samePage = true")  # survives only if the timeline updates without a reload

    page.locator(".run-status[data-status=succeeded]").wait_for(timeout=60_000)
    assert page.evaluate("window.__samePage === true")
    # A server the worker's warm-up has not opened yet shows as a "connect ..." step first.
    kinds = page.locator("#timeline li.step").evaluate_all(
        "els => els.filter(e => !e.dataset.name.startsWith('connect ')).map(e => e.dataset.kind)"
    )
    assert kinds[0] == "guardrail" and kinds.count("rule") == 2 and "llm" in kinds
    assert page.locator("#timeline li[data-kind=rule]").first.inner_text().count("get_order") >= 1
    assert page.locator("#run-answer").inner_text().startswith("확정 호출 결과를 바탕으로 답변합니다:")
    screenshot(page, "run-detail")
    first = Run.objects.order_by("id").last()

    # The pre-step's rules, loaded when the step is opened: the skipped one says which operand said no.
    rules = page.locator("#timeline li[data-kind=prestep] details.prestep-rules-details")
    rules.locator("summary").click()
    skipped = rules.locator("tr[data-rule=route_by_available_tool]")
    assert skipped.get_attribute("data-status") == "skipped"
    assert rules.locator("tr[data-status=fired]").count() == 2
    assert '"검색" in ctx.query → False' in skipped.locator(".why-lines").inner_text()

    # Re-run, then compare the two side by side.
    page.click("#rerun")
    page.wait_for_url(lambda url: url.rstrip("/").endswith(str(first.pk + 1)))
    page.locator(".run-status[data-status=succeeded]").wait_for(timeout=60_000)
    page.fill("input[name=b]", str(first.pk))
    page.click("#compare")
    page.wait_for_url("**/agents/runs/compare?*")
    sides = page.locator(".compare-side")
    assert sides.count() == 2 and "주문 조회 부탁해 A-1002" in sides.nth(1).inner_text()

    # Keep the first run as a regression case of the demo rule set.
    page.goto(f"/agents/runs/{first.pk}/")
    page.fill(".run-actions input[name=name]", "premium order lookup from a run")
    page.click("#save-case")
    page.get_by_text("Saved test case").wait_for()
    case = TestCase.objects.get(name="premium order lookup from a run")
    assert {c["tool_name"] for c in case.expected["must_fire"]} == {"get_order", "get_customer_profile"}

    # The same table for a user who chose Korean (the docs' screenshot).
    language_set(user=get_user_model().objects.get(username__startswith="editor-"), language="ko")
    page.goto(f"/agents/runs/{first.pk}/")
    assert page.locator("html").get_attribute("lang") == "ko"
    rules.locator("summary").click()
    rules.locator("tr[data-rule=route_by_available_tool] .why-lines").wait_for()
    assert "건너뜀" in rules.inner_text()
    screenshot(page, "run-trace-rules-ko", element=page.locator("#timeline li[data-kind=prestep]"))
