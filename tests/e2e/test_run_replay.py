"""Deterministic replay in a real browser: the run page's button, the replay's page, the compare."""

from __future__ import annotations

import pytest

from agents import services
from agents.models import Agent, Run
from llamon_agent.tools import AgentRequest
from servers.models import McpServer
from tests.e2e.conftest import screenshot
from tests.support.runs import wait_for_run

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.services,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
]


def test_replay_a_run_with_its_recorded_tools_and_compare_the_two(page, logged_in, worker) -> None:
    agent = Agent.objects.get(name="seed-demo")
    request = AgentRequest(query="주문 조회 부탁해 A-1002", context={"userId": "C-1002"})
    original = wait_for_run(services.run_create(actor=None, agent=agent, request=request).pk)
    assert original.status == Run.Status.SUCCEEDED, original.error
    # The demo servers are switched off: the replay must not need them.
    McpServer.objects.update(enabled=False)

    logged_in("editor")
    page.goto(f"/agents/runs/{original.pk}/")
    assert page.locator("#replay-agent option").first.inner_text() == "seed-demo, its current settings"
    page.click("#replay")
    page.wait_for_url(lambda url: url.rstrip("/").endswith(f"/runs/{original.pk + 1}"))
    page.locator(".run-status[data-status=succeeded]").wait_for(timeout=60_000)
    assert f"Replay of run {original.pk}" in page.locator("#replay-of").inner_text()
    rule = page.locator("#timeline li[data-kind=rule]").first
    assert "step-status-ok" in rule.get_attribute("class") and "A-1002" in rule.inner_text()
    assert page.locator("#run-answer").inner_text().startswith("확정 호출 결과를 바탕으로 답변합니다:")
    screenshot(page, "run-replay")

    page.click("#replay-compare")
    page.wait_for_url(f"**/agents/runs/compare?a={original.pk}&b={original.pk + 1}")
    sides = page.locator(".compare-side")
    assert sides.count() == 2 and "A-1002" in sides.nth(1).inner_text()
