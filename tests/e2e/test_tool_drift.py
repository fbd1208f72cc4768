"""Tool drift as an author meets it: the server changed, and the editor says which rules it broke."""

from __future__ import annotations

import pytest

from rules.models import RuleSet
from servers.models import McpServer
from tests.e2e.conftest import screenshot

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("demo")]


def test_a_renamed_parameter_and_a_vanished_tool_are_flagged_on_the_rules_that_use_them(
    page, logged_in
) -> None:
    rule_set = RuleSet.objects.get(name="seed-rules")
    logged_in("editor")
    page.goto(f"/rules/{rule_set.pk}/")
    assert page.locator(".problem[data-code='params_mismatch']").count() == 0

    # The order service renamed get_order's parameter (as a refresh or the periodic check stores it).
    server = McpServer.objects.get(mcp_id="order-service")
    tool = next(t for t in server.tools if t["name"] == "get_order")
    tool["input_schema"] = {
        "type": "object",
        "properties": {"order_ref": {"type": "string"}},
        "required": ["order_ref"],
        "additionalProperties": False,
    }
    server.save()
    page.reload()
    drifted = page.locator("li:has(.problem[data-code='params_mismatch'])")
    drifted.first.wait_for()
    text = page.locator(".problem[data-code='params_mismatch']").first.inner_text()
    assert "The params no longer fit the input schema of 'get_order'" in text
    assert "'order_ref' is required but the params do not set it" in text
    assert "problem" in page.locator("h2", has_text="Rules").inner_text()
    screenshot(page, "tool-drift")
