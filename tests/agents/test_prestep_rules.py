"""The run page's rules table: every rule of the serving version with its status in this run, and why
the skipped ones were skipped (the tester's explanation, worked out from the stored request, masked)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agents import trace_view as traces
from agents.redaction import privacy_get
from rules import services as rule_services
from tests.support.recorded_runs import record_run

pytestmark = pytest.mark.django_db
EMAIL = "kim@example.com"


def test_each_rule_has_its_status_and_a_skipped_rule_names_the_operand_that_said_no(
    author, demo_servers, viewer_client
) -> None:
    privacy = privacy_get()
    privacy.mask_presets = ["email"]
    privacy.save()
    rule_set = rule_services.rule_set_create(actor=author, name="refunds")
    for name, when, stop in (
        ("urgent_refund", f'"refund" in query and "urgent" in query or "{EMAIL}" == "x"', False),
        ("any_refund", '"refund" in query', True),
        ("after_the_stop", "True", False),
    ):
        rule_services.rule_create(
            actor=author,
            rule_set=rule_set,
            name=name,
            mcp_id="order-service",
            tool_name="get_order",
            when=when,
            params='{"order_id": "A-1"}',
            stop=stop,
        )
    version = rule_services.rule_set_publish(actor=author, rule_set=rule_set)
    run = record_run(rule_set, f"refund please, I am {EMAIL}")

    table = traces.prestep_rules(run=run)

    assert [(r.name, r.status) for r in table.rows] == [
        ("urgent_refund", "skipped"),
        ("any_refund", "fired"),
        ("after_the_stop", "not_reached"),
    ]
    assert table.version_number == version.number and not table.mismatch and not table.draft_changed
    why = table.rows[0].why
    said_no = [(part.text, part.value) for _depth, part in why.lines() if part.op == "test"]
    assert ('"refund" in query', True) in said_no and ('"urgent" in query', False) in said_no
    assert table.rows[1].why is None and table.rows[2].why is None

    page = viewer_client.get(reverse("agents:run_rules", args=[run.pk])).content.decode()
    assert "urgent_refund" in page and "&quot;urgent&quot; in query" in page
    assert EMAIL not in page  # masked, even where a rule's text repeats the masked value


def test_a_big_rule_set_is_listed_as_the_tester_lists_it_and_paged(
    author, demo_servers, viewer_client
) -> None:
    """The run page's table lists through rules.engine.records_shown, as the tester does: fired and
    failed rules always, 20 others, the rest counted; "list more" pages them 500 at a time."""
    from rules.engine import QUIET_PAGE, QUIET_SHOWN
    from rules.models import Rule

    rule_set = rule_services.rule_set_create(actor=author, name="big")
    Rule.objects.bulk_create(
        Rule(
            rule_set=rule_set,
            name=f"r{i}",
            mcp_id="order-service",
            tool_name="get_order",
            when=f'"kw{i}x" in query',
            params="{}",
            position=i,
        )
        for i in range(1_200)
    )
    rule_services.rule_set_publish(actor=author, rule_set=rule_set)
    run = record_run(rule_set, "kw700x kw1100x")
    url = reverse("agents:run_rules", args=[run.pk])

    table = traces.prestep_rules(run=run)
    assert [r.name for r in table.rows if r.status == "fired"] == ["r700", "r1100"]
    assert len(table.rows) == 2 + QUIET_SHOWN and table.shown.hidden == 1_198 - QUIET_SHOWN
    page = viewer_client.get(url).content.decode()
    assert (
        page.count("<tr class=") == 2 + QUIET_SHOWN and "offset=0" in page and "List 500 more rules" in page
    )

    first = traces.prestep_rules(run=run, detail="all")
    assert len(first.rows) == 2 + QUIET_PAGE and first.shown.next_offset == QUIET_PAGE
    last = traces.prestep_rules(run=run, detail="all", offset=1_000)
    assert [r.name for r in last.rows if r.status == "skipped"][0] == "r1001"  # r700 fired before it
    assert last.shown.next_offset is None and len(last.rows) == 2 + 198
    paged = viewer_client.get(url, {"show": "all", "offset": "500"}).content.decode()
    assert paged.count("<tr class=") == 2 + QUIET_PAGE and "offset=1000" in paged

    for bad in ("-1", "x", "9" * 30):
        refused = viewer_client.get(url, {"show": "all", "offset": bad})
        assert refused.status_code == 422 and "offset" in refused.content.decode()
    korean = viewer_client.get(url, {"offset": "5"}, headers={"accept-language": "ko"})
    assert korean.status_code == 422 and "offset pages" not in korean.content.decode()  # said in Korean
