"""The browser under the Content-Security-Policy, and login throttling after repeated failures."""

from __future__ import annotations

import pytest

from agents.models import Agent, Run
from servers.models import McpServer
from tests.support.rule_sets import build_rule_set

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_the_main_pages_work_under_the_policy_and_it_blocks_injected_script(
    page, logged_in, make_user, demo
) -> None:
    logged_in("admin")
    response = page.goto("/")
    policy = response.headers.get("content-security-policy", "")
    assert "script-src 'self'" in policy and "style-src 'self'" in policy

    # The rule editor's live tester (htmx swaps while typing).
    rule_set = build_rule_set(
        make_user("editor"),
        "csp",
        [
            {
                "name": "route_search",
                "mcp_id": "knowledge-base",
                "tool_name": "search_docs",
                "when": '"검색" in query',
                "params": '{"q": query}',
            }
        ],
    )
    page.goto(f"/rules/{rule_set.pk}/?rule={rule_set.rules.get().pk}")
    page.fill("#id_t-query", "환불 정책 검색해줘")
    page.locator("#tester-table tr[data-rule='route_search'] .status-fired").wait_for()

    # A run page's live timeline (htmx polling while the run is queued).
    run = Run.objects.create(agent=Agent.objects.get(name="seed-demo"), agent_name="seed-demo", query="q")
    with page.expect_response(lambda r: f"/agents/runs/{run.pk}/steps" in r.url):
        page.goto(f"/agents/runs/{run.pk}/")

    # An MCP server's page (command preview, tool call form).
    page.goto(f"/mcp/{McpServer.objects.get(mcp_id='knowledge-base').pk}/")
    page.locator("h1").wait_for()
    assert page.csp_violations == []

    # Markup that slipped through escaping could not run script: the inline handler is refused.
    page.evaluate("document.body.insertAdjacentHTML('beforeend', '<img src=x onerror=\"window.__ran=1\">')")
    page.wait_for_function("() => document.querySelector('img[src=x]').complete")
    assert page.evaluate("window.__ran === undefined")
    assert any("script-src" in v for v in page.csp_violations)
    page.csp_violations.clear()  # the one violation this test caused on purpose


def test_login_is_refused_after_five_failures_with_a_clear_message(page, make_user) -> None:
    user = make_user("viewer")
    for _ in range(5):
        page.goto("/accounts/login/")
        page.fill("#id_username", user.username)
        page.fill("#id_password", "wrong")
        page.click("button[type=submit]")
        page.locator("[role=alert]").wait_for()
    page.goto("/accounts/login/")
    page.fill("#id_username", user.username)
    page.fill("#id_password", "pw")  # the right password: still refused while the block lasts
    with page.expect_response(lambda r: r.request.method == "POST") as posted:
        page.click("button[type=submit]")
    assert posted.value.status == 429
    message = page.locator("#locked-out").inner_text()
    assert "blocked after 5 failed attempts" in message and "15 minutes" in message
    assert "/accounts/login" in page.url
