"""A viewer's draft in the live tester is as bounded as anything else: the cost budget answers.

Before the budget, this request kept a web process busy for hours (sorted() of a
32,000-character query 196 times per item, 10,000 items). No timing is asserted:
pytest-timeout turns a hang into a failure.
"""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from llamon_agent.expr import MAX_QUERY_CHARS
from llamon_agent.prestep import PRESTEP_FAILED
from rules import services
from rules.models import Rule
from servers.models import McpServer

HX = {"HTTP_HX_REQUEST": "true"}
HOSTILE_WHEN = "any((" + " and ".join(["sorted(query)"] * 196) + ") and 0 for x in query[:10000])"


@pytest.fixture
def rule_set(make_user):
    McpServer.objects.create(
        mcp_id="order-service",
        transport="http",
        url="http://127.0.0.1:9/mcp",
        tools=[{"name": "get_order", "description": "", "input_schema": {"type": "object"}}],
        tools_refreshed_at=timezone.now(),
    )
    author = make_user("editor")
    rs = services.rule_set_create(actor=author, name="orders", description="")
    services.rule_create(
        actor=author,
        rule_set=rs,
        name="route_order_lookup",
        mcp_id="order-service",
        tool_name="get_order",
        when='"주문" in query',
        params='{"query": query}',
    )
    rs.refresh_from_db()
    return rs


def test_viewer_tester_with_a_hostile_draft_runs_the_saved_rule(viewer_client, rule_set) -> None:
    rule = rule_set.rules.get()
    data = {
        "t-query": ("주문 조회 " * 6000)[:MAX_QUERY_CHARS],
        "rule-name": "route_order_lookup",
        "rule-original": "route_order_lookup",
        "rule-mcp_id": "order-service",
        "rule-tool_name": "get_order",
        "rule-when": HOSTILE_WHEN,
        "rule-params": '{"query": query}',
        "rule-enabled": "on",
        "rule-description": "",
        "rule-revision": str(rule.revision),
    }
    response = viewer_client.post(reverse("rules:test", args=[rule_set.pk]), data, **HX)
    html = response.content.decode()
    assert response.status_code == 200
    # the hostile draft is refused as a save would refuse it (its static cost bound is far over
    # the per-rule limit): the tester runs the saved rule instead, and nothing fails on cost
    assert "has errors, so the tester uses its saved version" in html
    assert "cost budget" not in html and PRESTEP_FAILED not in html
    assert Rule.objects.get(pk=rule.pk).when == '"주문" in query'  # nothing saved
