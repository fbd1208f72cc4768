"""A compliance reviewer's path in a real browser: one customer's last 7 days, exported as evidence."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from agents import services
from agents.models import Agent, Run, RunStep
from tests.e2e.conftest import screenshot

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


def _run(agent: Agent, user: str, order: str, *, days_ago: int = 0) -> Run:
    run = Run.objects.create(
        agent=agent,
        agent_name=agent.name,
        query=f"주문 {order} 조회",
        status=Run.Status.RUNNING,
        user_id=user,
        rule_set_name="seed-rules",
        rule_set_ref="v2",
        rule_set_hash="b" * 64,
    )
    RunStep.objects.create(
        run=run,
        seq=1,
        kind=RunStep.Kind.RULE,
        name="order_lookup",
        status="ok",
        mcp_id="order-service",
        tool_name="get_order",
        started_at=timezone.now(),
        input={"params": {"order_id": order}},
        output={"order_id": order, "status": "배송 중"},
    )
    if days_ago:
        Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(days=days_ago))
    services.run_finish(run_id=run.pk, status=Run.Status.SUCCEEDED, answer=f"{order} 배송 중")
    return run


@pytest.fixture
def history() -> dict[str, Run]:
    agent = Agent.objects.create(name="bank-agent", system_prompt="p")
    return {
        "mine": _run(agent, "C-1001", "A-1001"),
        "old": _run(agent, "C-1001", "A-0900", days_ago=12),
        "other": _run(agent, "C-2002", "A-2002"),
    }


def _export(page) -> list[dict[str, str]]:
    with page.expect_download() as info:
        page.click("#export-csv")  # click 2
    text = Path(info.value.path()).read_text(encoding="utf-8-sig")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert rows.pop()["run"] == "#llamon-evidence-manifest"  # the last row: the signed manifest
    return rows


@pytest.mark.parametrize("language", ["en", "ko"])
def test_a_viewer_exports_one_customers_last_seven_days_in_two_clicks(
    page, logged_in, history, language
) -> None:
    if language == "ko":
        page.context.set_extra_http_headers({"Accept-Language": "ko-KR,ko;q=0.9"})
    logged_in("viewer")
    page.goto("/agents/runs/")
    page.fill("#id_user_id", "C-1001")
    page.select_option("#id_period", "7d")
    page.click("#run-filters button[type=submit]")  # click 1
    page.locator(f"#run-row-{history['mine'].pk}").wait_for()
    # The filter form swaps the table on each change too: let the last swap land before clicking a
    # link inside it (a swap that replaced the link mid-click lost the download under load).
    page.wait_for_load_state("networkidle")
    assert page.locator(f"#run-row-{history['old'].pk}").count() == 0
    label = page.locator("#export-csv").inner_text()
    assert label == ("CSV 내보내기" if language == "ko" else "Export CSV")
    assert "order_lookup → order-service.get_order" in page.locator("#run-table").inner_text()
    if language == "en":
        screenshot(page, "run-list-evidence-export")

    rows = _export(page)
    assert [(r["run"], r["user_id"], r["rule"], r["mcp_id"], r["tool"]) for r in rows] == [
        (str(history["mine"].pk), "C-1001", "order_lookup", "order-service", "get_order")
    ]
    row = rows[0]
    assert (row["version"], row["rule_set_hash"], row["params"]) == ("v2", "b" * 64, '{"order_id":"A-1001"}')
    assert row["chain_seq"] and len(row["record_hash"]) == 64

    page.click("#evidence-report")
    page.locator("#evidence-table").wait_for()
    assert page.locator("#evidence-table tbody tr").count() == 1
    if language == "en":
        screenshot(page, "evidence-report")


PDF_PAGE = re.compile(rb"/Type\s*/Page(?![a-z])")


@pytest.mark.parametrize("language", ["en", "ko"])
def test_the_evidence_report_prints_to_a_pdf_an_auditor_can_file(
    page, logged_in, history, language, live_server
) -> None:
    page.context.add_cookies([{"name": "django_language", "value": language, "url": live_server.url}])
    logged_in("viewer")
    page.goto("/agents/runs/evidence?user_id=C-1001&period=7d")
    page.locator("#evidence-table").wait_for()
    assert page.locator("html").get_attribute("lang") == language
    page.emulate_media(media="print")
    # Printed: no navigation or buttons; the calls, the skipped rules, the versions and how to
    # check the file are there, and the calls' table fits the page's width.
    assert not page.locator("#report-print").is_visible() and not page.locator("nav.subnav").is_visible()
    for section in ("#evidence-table", "#report-skipped", "#report-versions", "#report-verify"):
        assert page.locator(section).is_visible(), section
    assert page.evaluate(
        "() => document.querySelector('#evidence-table').getBoundingClientRect().right"
        " <= document.querySelector('main').getBoundingClientRect().right + 1"
    )
    screenshot(page, f"evidence-report-print-{language}")
    pdf = page.pdf(format="A4", landscape=True)
    pages = len(PDF_PAGE.findall(pdf))
    # One customer's week is one or two pages (a broken print runs to many, or to an empty one);
    # the text is set in an embedded font, Korean in a Korean one (not boxes).
    assert pdf.startswith(b"%PDF-") and 1 <= pages <= 2, pages
    assert b"/FontFile" in pdf
    if language == "ko":
        assert b"Nanum" in pdf or b"Noto" in pdf
