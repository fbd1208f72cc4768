"""The trace of a real run in a real browser: waterfall bars, token counts and cost, the LLM chat, collapse/expand."""

from __future__ import annotations

import pytest

from agents import services
from agents.models import Agent
from llamon_agent.tools import AgentRequest
from servers.models import McpServer
from tests.e2e.conftest import screenshot

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.services,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
]

SCRIPT = [
    {
        "content": "Let me look that order up.",
        "tool_calls": [{"name": "get_order", "args": {"order_id": "A-1002"}}],
        "usage": {"input_tokens": 1200, "output_tokens": 40},
    },
    {"content": "Order A-1002 has shipped.", "usage": {"input_tokens": 1500, "output_tokens": 25}},
]


def _scripted_agent() -> Agent:
    demo = Agent.objects.get(name="seed-demo")
    agent = Agent.objects.create(
        name="traced",
        system_prompt="You are a support agent.",
        rule_set=demo.rule_set,
        rule_set_mode="latest",
        model_provider="scripted",
        model_script=SCRIPT,
    )
    agent.react_servers.set([McpServer.objects.get(mcp_id="order-service")])
    return agent


def test_the_trace_of_a_real_run_shows_where_the_time_went_tokens_cost_and_the_chat(
    page, logged_in, worker, settings
) -> None:
    # The web process renders the page, so the price table is the test's setting.
    settings.LLAMON_MODEL_PRICES = '{"scripted": {"input": 3, "output": 15}}'
    run = services.run_create(
        actor=None,
        agent=_scripted_agent(),
        request=AgentRequest(query="주문 조회 부탁해 A-1002", context={"userId": "C-1002"}),
    )
    logged_in("viewer")
    page.goto(f"/agents/runs/{run.pk}/")
    page.locator(".run-status[data-status=succeeded]").wait_for(timeout=90_000)
    page.reload()  # the waterfall as a fresh page draws it (the live one is redrawn by the final poll)

    # Every span is a bar on one axis, placed by trace.js from its data-* attributes.
    rows = page.locator("#waterfall .wf-row")
    kinds = rows.evaluate_all("els => els.map(e => e.dataset.kind)")
    assert {"guardrail", "prestep", "listing", "rule", "llm", "tool", "answer"} <= set(kinds), kinds
    bars = rows.evaluate_all(
        """els => els.map(e => {
            const bar = e.querySelector('.wf-bar'), track = e.querySelector('.wf-track').getBoundingClientRect();
            const box = bar.getBoundingClientRect();
            return {kind: e.dataset.kind, offset: +e.dataset.offsetMs, duration: +e.dataset.durationMs,
                    total: +e.parentElement.dataset.totalMs, left: (box.left - track.left) / track.width,
                    width: box.width / track.width, styled: bar.style.left !== ''};
        })"""
    )
    assert all(b["styled"] for b in bars)
    for b in bars:  # each bar's offset and width are proportional to its start and duration
        assert abs(b["left"] - b["offset"] / b["total"]) < 0.01, b
        assert b["width"] >= b["duration"] / b["total"] - 0.01, b
    lefts = [b["left"] for b in bars if b["kind"] in ("guardrail", "prestep", "llm", "answer")]
    assert lefts == sorted(lefts)  # the stages follow one another on the axis
    assert page.locator("#waterfall .wf-kind-listing .wf-label").first.inner_text().startswith("MCP tools of")

    # Tokens and cost: the scripted model's usage, priced by the table: (2700*3 + 65*15) / 1e6 = $0.009075.
    assert page.locator("#run-tokens-in").inner_text() == "2,700"
    assert page.locator("#run-tokens-out").inner_text() == "65"
    assert page.locator("#run-tokens-total").inner_text() == "2,765"
    assert page.locator("#run-cost").inner_text() == "$0.009075"
    first_llm = page.locator("#timeline li[data-kind=llm]").first
    assert first_llm.locator(".tokens-total").inner_text() == "1,240"
    assert first_llm.locator(".llm-cost").inner_text() == "$0.004200"
    assert page.locator("#tools-called").inner_text().startswith("get_order")
    assert "get_order" in page.locator("#tools-offered").inner_text()
    screenshot(page, "trace-waterfall")

    # The LLM call as a chat: system, user, then the assistant's reply with its tool call and args.
    roles = first_llm.locator(".chat-msg").evaluate_all("els => els.map(e => e.dataset.role)")
    assert roles == ["system", "user", "assistant"]
    reply = first_llm.locator(".chat-reply")
    assert "Let me look that order up." in reply.inner_text()
    assert reply.locator(".chat-call-name").inner_text() == "get_order"
    assert '"order_id": "A-1002"' in reply.locator(".chat-call-args").inner_text()
    second_llm = page.locator("#timeline li[data-kind=llm]").nth(1)
    assert "tool" in second_llm.locator(".chat-msg").evaluate_all("els => els.map(e => e.dataset.role)")
    raw_json = first_llm.locator("details:has(> summary:text('raw JSON'))")
    assert raw_json.count() == 1  # raw JSON still reachable
    screenshot(page, "trace-chat", element=first_llm)  # the one LLM call, not the whole page

    # Collapse all closes every step's details; expand all opens them again.
    details = page.locator("#timeline details")
    page.click("#collapse-all")
    assert details.evaluate_all("els => els.filter(d => d.open).length") == 0
    assert not first_llm.locator(".chat").is_visible()
    page.click("#expand-all")
    assert details.evaluate_all("els => els.every(d => d.open)")
    assert first_llm.locator(".chat").is_visible()
