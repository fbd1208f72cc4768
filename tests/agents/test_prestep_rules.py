"""The run page's rules table: every rule of the serving version with its status in this run, and why
the skipped ones were skipped (the tester's explanation, worked out from the stored request, masked)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agents import trace as traces
from agents.privacy import privacy_get
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
