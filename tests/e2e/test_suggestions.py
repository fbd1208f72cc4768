"""Savings and suggested rules in a real browser (English and Korean): read the savings, find rules,
open a suggestion, turn it into a draft with its cases, run the cases, replay it."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from accounts.services import language_set
from agents.models import Agent
from governance import services as governance_services
from governance import suggestions as service
from governance.models import ImpactAnalysis, SuggestionJob
from rules.models import RuleSet
from servers.models import McpServer
from tests.e2e.conftest import screenshot
from tests.support.intent_runs import store
from tests.support.intents import INTENTS_LIST, generate

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]


def _agent() -> Agent:
    rule_set = RuleSet.objects.create(name="bank")
    agent = Agent.objects.create(name="bank-agent", system_prompt="p", rule_set=rule_set)
    servers: dict[str, list[dict[str, object]]] = {}
    for intent in INTENTS_LIST:
        servers.setdefault(intent.mcp_id, []).append(
            {"name": intent.tool, "description": "", "input_schema": {}}
        )
    for mcp_id, tools in servers.items():
        agent.react_servers.add(
            McpServer.objects.create(
                mcp_id=mcp_id, transport="http", url="http://127.0.0.1:9/mcp", tools=tools
            )
        )
    return agent


def _drive(job: SuggestionJob) -> None:
    """The job's parts, run here as the workers would (tests/governance/test_suggestions_on_workers.py
    runs them on real workers)."""
    for stage in SuggestionJob.STAGES:
        job.refresh_from_db()
        for number in range(job.parts):
            service.suggestion_part(job_id=job.pk, stage=stage, number=number)


FEW = ("balance", "claim_status", "claim_new", "fx_rate", "refund", "premium_profile")


@pytest.mark.parametrize("language", ["en", "ko"])
def test_find_rules_open_one_draft_it_with_cases_test_and_replay_it(page, logged_in, language) -> None:
    logged_in("editor")
    language_set(user=get_user_model().objects.latest("id"), language=language)
    agent = _agent()
    observations, _truth = generate(1500, seed=3, only=FEW, noise=0.01)
    store(observations, agent)

    page.goto("/agents/")
    assert page.locator("html").get_attribute("lang") == language
    page.click(f"a.savings-link[href='/governance/agents/{agent.pk}/savings/']")
    page.wait_for_url(f"**/governance/agents/{agent.pk}/savings/")
    assert page.locator("#savings-recalled").is_visible()  # the seed's advice, byte for byte
    assert "확정 호출 결과를 우선 사용" in page.inner_text("#savings-recalled")
    page.fill("#suggest-days", "1")
    page.click("#suggestions-start")
    page.wait_for_url(f"**/governance/agents/{agent.pk}/savings/#suggestions")
    assert page.locator("#suggestions-status").get_attribute("data-status") == "queued"
    _drive(SuggestionJob.objects.get())
    # The poll sees the end and reloads the page, which then shows the suggestions.
    claim = page.locator("article.suggestion[data-tool=get_claim]")
    claim.wait_for(timeout=90_000)
    assert 're_find(r"CLM-' in claim.locator(".suggestion-params").inner_text()
    assert ("정밀도" if language == "ko" else "Precision") in claim.inner_text()
    screenshot(page, f"suggestions-{language}")

    claim.locator("button.suggestion-draft").click()
    page.wait_for_url(f"**/rules/{agent.rule_set_id}/")
    assert ("초안에 추가했습니다" if language == "ko" else "was added to the draft") in page.content()
    page.goto(f"/rules/{agent.rule_set_id}/cases/")
    page.click("#run-suite")
    summary = page.locator("#suite-summary")
    summary.wait_for()
    total = agent.rule_set.cases.count()
    assert total >= 2
    assert summary.inner_text().startswith(
        f"{total}개 중 {total}개 통과" if language == "ko" else f"{total} of {total} pass"
    ), summary.inner_text()

    page.goto(f"/rules/{agent.rule_set_id}/")
    page.click("#impact-link")
    page.select_option("#id_version", "draft")
    page.fill("#id_days", "1")
    page.click("#impact-start")
    page.wait_for_url("**/governance/impact/*/")
    governance_services.impact_execute(analysis_id=ImpactAnalysis.objects.get().pk)
    page.locator("#impact-summary").wait_for(timeout=90_000)
    assert int(page.inner_text("#impact-changed")) > 0
