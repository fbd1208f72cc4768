"""Runs in the browser: pick two and compare them, new runs appear live, and a run opens in its tester."""

from __future__ import annotations

import pytest
from django.utils import timezone

from agents.models import Agent, Run, RunStep
from agents.redaction import privacy_get
from rules import services
from servers.models import McpServer
from tests.e2e.conftest import screenshot

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
EMAIL = "kim@example.com"
ORDER = {"order_id": "A-1001", "status": "배송 중"}


@pytest.fixture
def agent(make_user) -> Agent:
    # Port 9 on loopback: nothing listens, so only a pinned call can succeed.
    McpServer.objects.create(
        mcp_id="order-service",
        transport="http",
        url="http://127.0.0.1:9/mcp",
        tools=[
            {"name": "get_order", "input_schema": {"type": "object"}},
            {"name": "search_docs", "input_schema": {"type": "object"}},
        ],
        tools_refreshed_at=timezone.now(),
    )
    author = make_user("editor", "author")
    rule_set = services.rule_set_create(actor=author, name="orders")
    services.rule_create(
        actor=author,
        rule_set=rule_set,
        name="route_order",
        mcp_id="order-service",
        tool_name="get_order",
        when='"주문" in query',
        params='{"query": query, "user": context.get("userId", "")}',
    )
    return Agent.objects.create(name="support", system_prompt="p", rule_set=rule_set)


def _run(agent: Agent, query: str, steps: list[tuple], **fields) -> Run:
    run = Run.objects.create(
        agent=agent,
        agent_name=agent.name,
        query=query,
        status=Run.Status.SUCCEEDED,
        started_at=timezone.now(),
        finished_at=timezone.now(),
        **fields,
    )
    for seq, (kind, name, tool, params, output, ms) in enumerate(steps, start=1):
        RunStep.objects.create(
            run=run,
            seq=seq,
            kind=kind,
            name=name,
            tool_name=tool,
            mcp_id="order-service" if tool else "",
            status="ok",
            input={"params": params} if tool else None,
            output=output,
            started_at=timezone.now(),
            duration_ms=ms,
        )
    return run


def test_tick_two_runs_compare_them_and_see_a_new_run_arrive(page, logged_in, agent) -> None:
    a = _run(
        agent,
        "주문 A-1001",
        [
            ("guardrail", "input", "", None, None, 0.2),
            ("rule", "route_order", "get_order", {"query": "주문 A-1001"}, ORDER, 26.0),
            ("llm", "scripted", "", None, "답변", 40.0),
            ("answer", "answer", "", None, "배송 중입니다", 0.1),
        ],
        answer="배송 중입니다",
    )
    b = _run(
        agent,
        "주문 A-1002 환불",
        [
            ("guardrail", "input", "", None, None, 0.3),
            ("rule", "route_order", "get_order", {"query": "주문 A-1002 환불"}, {"order_id": "A-1002"}, 31.0),
            ("rule", "route_faq", "search_docs", {"q": "환불"}, [{"title": "환불 규정"}], 12.0),
            ("llm", "scripted", "", None, "답변", 55.0),
            ("answer", "answer", "", None, "환불 규정을 확인하세요", 0.1),
        ],
        answer="환불 규정을 확인하세요",
    )
    logged_in("viewer")
    page.goto("/agents/runs/")
    assert page.locator("#compare-button").is_disabled()
    page.check(f"#pick-{a.pk}")
    page.check(f"#pick-{b.pk}")
    # A run started now shows up without a reload, and the ticks survive the poll.
    new = _run(agent, "방금 들어온 주문", [])
    page.locator(f"#run-row-{new.pk}").wait_for()
    assert page.is_checked(f"#pick-{a.pk}") and page.is_checked(f"#pick-{b.pk}")
    page.click("#compare-button")
    page.wait_for_url("**/runs/compare?**")
    steps = page.locator("#compare-steps")
    steps.locator("tr[data-op='changed'][data-key='rule:route_order'] [data-change='params']").wait_for()
    steps.locator("tr[data-op='added'][data-key='rule:route_faq']").wait_for()
    assert steps.locator("tr[data-op='same'][data-key='guardrail:input']").count() == 1
    assert page.locator("#compare-fields tr.cmp-differs[data-field='query']").count() == 1
    page.locator("tr.cmp-detail details summary").first.click()
    screenshot(page, "run-compare")
    page.check("#cmp-only-diff")
    assert not steps.locator("tr[data-op='same']").first.is_visible()


def test_open_a_run_in_the_tester_with_its_outputs_pinned(page, logged_in, agent) -> None:
    privacy = privacy_get()
    privacy.mask_presets = ["email"]
    privacy.save()
    run = _run(
        agent,
        "주문 A-1001 어디쯤?",
        [("rule", "route_order", "get_order", {"query": "주문 A-1001 어디쯤?", "user": "C-1"}, ORDER, 20.0)],
        context={"userId": EMAIL, "chatbotId": "premium"},
        user_id=EMAIL,
    )
    logged_in("editor")
    page.goto(f"/agents/runs/{run.pk}/")
    page.check("#open-with-outputs")
    page.click("#open-in-tester")
    page.wait_for_url(f"**/rules/{agent.rule_set.pk}/")
    assert page.input_value("#id_t-query") == "주문 A-1001 어디쯤?"
    assert EMAIL not in page.input_value("#id_t-context") and "[이메일]" in page.input_value("#id_t-context")
    assert '"order_id": "A-1001"' in page.input_value("#id_t-pinned")
    page.locator("#tester-masked").wait_for()  # the live dry run names the masked value
    page.click("#tester-execute")
    page.get_by_text("Execute would send masked values to real tools").wait_for()
    # Replace the masked userId with the value the recorded call used: Execute answers from the pin.
    page.fill("#id_t-context", '{"userId": "C-1", "chatbotId": "premium"}')
    page.wait_for_load_state("networkidle")
    page.click("#tester-execute")
    page.locator("#tester-outcome[data-mode='execute'][data-ok='true']").wait_for()
    page.locator("#tester-table tr[data-rule='route_order'] [data-source='pinned']").wait_for()
    assert "(1 pinned, 0 live)" in page.locator("#tester-outcome").inner_text()
    screenshot(page, "open-in-tester")
