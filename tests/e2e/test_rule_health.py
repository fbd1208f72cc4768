"""Coverage and health per rule in a real browser: from the rule set's page to the table, then fewer days."""

from __future__ import annotations

from datetime import timedelta

import pytest

from llamon_web.demo import SEED_RULES
from rules import services as rule_services
from rules.cases import case_create
from tests.e2e.conftest import screenshot
from tests.support.recorded_runs import record_run
from tests.support.rule_sets import build_rule_set

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


@pytest.mark.usefixtures("demo_servers")
def test_read_fires_errors_latency_and_coverage_per_rule(page, logged_in, make_user) -> None:
    logged_in("viewer")
    seed_v1 = build_rule_set(make_user("editor"), "seed", SEED_RULES)
    rule_services.rule_set_publish(actor=None, rule_set=seed_v1, message="v1")
    for days_ago in (0, 0, 1, 3, 3, 3, 6, 9):
        record_run(seed_v1, "주문 조회 부탁해 A-1001", age=timedelta(days=days_ago, minutes=5))
    for days_ago in (2, 5):
        record_run(
            seed_v1,
            "안녕하세요",
            context={"userId": "C-7", "chatbotId": "premium-support"},
            age=timedelta(days=days_ago, minutes=5),
        )
    case_create(
        actor=None,
        rule_set=seed_v1,
        name="order lookup",
        input={"query": "주문 조회 A-1"},
        expected={"must_fire": [{"tool_name": "get_order"}]},
    )

    page.goto(f"/rules/{seed_v1.pk}/")
    page.click("#health-link")
    page.wait_for_url(f"**/governance/rule-sets/{seed_v1.pk}/health/")
    order = page.locator("tr[data-rule=route_order_lookup]")
    assert order.locator(".health-fires").inner_text() == "8"
    assert order.locator("rect.spark-bar").count() >= 5  # one bar per day with fires
    assert "covered" in order.locator(".health-cases").inner_text()
    never = page.locator("tr[data-rule=route_by_available_tool]")
    assert "never fired in 14 days" in never.inner_text()
    assert "33.3%" in page.locator("#health-coverage").inner_text()
    screenshot(page, "rule-health")

    page.fill("#health-days", "2")
    page.click("#health-form button")
    page.wait_for_url("**/health/?days=2")
    assert page.locator("tr[data-rule=route_order_lookup] .health-fires").inner_text() in {"2", "3"}
    assert "never fired in 2 days" in page.locator("tr[data-rule=route_by_available_tool]").inner_text()
