"""Impact analysis in a real browser: from the rule set's page, start one, watch its progress, read the report."""

from __future__ import annotations

import pytest

from governance.models import ImpactAnalysis
from llamon_web.demo import SEED_RULES
from rules import services as rule_services
from tests.conftest import celery_worker
from tests.e2e.conftest import screenshot
from tests.support.recorded_runs import record_run
from tests.support.rule_sets import build_rule_set

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.services,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(240),
]


@pytest.mark.usefixtures("demo_servers")
def test_start_an_impact_analysis_watch_its_progress_and_read_the_report(page, logged_in, make_user) -> None:
    logged_in("editor")
    seed_v1 = build_rule_set(make_user("editor"), "seed", SEED_RULES)
    rule_services.rule_set_publish(actor=None, rule_set=seed_v1, message="v1")
    order = record_run(seed_v1, "주문 조회 부탁해 A-1001", context={"userId": "C-1001"})
    record_run(seed_v1, "안녕하세요", context={"userId": "C-7", "chatbotId": "premium-support"})
    record_run(seed_v1, "날씨 어때?")
    rule = seed_v1.rules.get(name="route_order_lookup")
    rule_services.rule_update(
        actor=None, rule=rule, revision=None, params='{"query": ctx.query, "lang": "ko"}'
    )

    page.goto(f"/rules/{seed_v1.pk}/")
    page.click("#impact-link")
    page.wait_for_url(f"**/governance/rule-sets/{seed_v1.pk}/impact/")
    page.select_option("#id_version", "draft")
    page.fill("#id_days", "7")
    page.click("#impact-start")
    page.wait_for_url("**/governance/impact/*/")
    # No worker yet: the analysis waits in the queue and the page shows its progress bar, polling.
    assert page.locator("#impact-status").get_attribute("data-status") == "queued"
    assert page.locator("#impact-bar").is_visible()
    analysis = ImpactAnalysis.objects.get()
    assert analysis.candidate_ref.startswith("draft@")

    with celery_worker(None):
        # The poll sees the end and reloads the page, which then shows the report.
        page.locator("#impact-summary").wait_for(timeout=90_000)
    assert page.locator("#impact-status").get_attribute("data-status") == "succeeded"
    assert page.locator("#impact-replayed").inner_text() == "3"
    assert page.locator("#impact-changed").inner_text() == "1"
    group = page.locator("details.impact-rule[data-rule=route_order_lookup]")
    assert "1 changed" in group.locator("summary").inner_text()
    assert "lang" in group.inner_text()
    screenshot(page, "impact-analysis")
    group.locator(f"a[href='/agents/runs/{order.pk}/']").click()
    page.wait_for_url(f"**/agents/runs/{order.pk}/")
