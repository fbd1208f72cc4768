"""The auditor's report (issue 40, point 8): for each version in the period who requested and who
approved it and when, and its rules as of that version; per call the masked input and the result;
the rules skipped and why; the signed head and the command that checks the exported file."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from accounts.roles import approver_set
from agents import services
from agents.errors import ChangeRequested
from agents.models import Agent, ChangeRequest, Run, RunStep
from core.chain import chain_public_key
from rules import services as rule_services

pytestmark = pytest.mark.django_db

EMAIL = "kim.minji@example.com"


def _served_run(agent: Agent, version) -> Run:
    run = Run.objects.create(
        agent=agent,
        agent_name=agent.name,
        query=f"주문 A-1001 조회 {EMAIL}",
        context={"userId": "C-1001", "email": EMAIL},
        a2a_data=[{"patientId": "P-2002", "contact": EMAIL}],
        status=Run.Status.RUNNING,
        user_id="C-1001",
        rule_set_name=version.rule_set.name,
        rule_set_ref=f"v{version.number}",
        rule_set_hash=version.content_hash,
        rule_set_version=version,
    )
    RunStep.objects.create(
        run=run,
        seq=1,
        kind=RunStep.Kind.PRESTEP,
        name="prestep",
        status="ok",
        started_at=timezone.now(),
        output={"calls": 1, "fired": ["order_by_user"], "skipped": ["route_refund"], "skipped_count": 1},
    )
    RunStep.objects.create(
        run=run,
        seq=2,
        kind=RunStep.Kind.RULE,
        name="order_by_user",
        status="ok",
        mcp_id="order-service",
        tool_name="get_order",
        started_at=timezone.now(),
        input={"params": {"query": "C-1001"}},
        output={"order_id": "A-1001", "status": "배송 중"},
    )
    services.run_finish(run_id=run.pk, status=Run.Status.SUCCEEDED, answer="배송 중")
    return run


def test_the_report_names_approvals_rules_inputs_results_skips_and_how_to_verify(
    versions, author, make_user, viewer_client
) -> None:
    services.privacy_update(actor=None, redaction_patterns=[], mask_presets=["email"], retention_days=30)
    v1, v2 = versions
    rule_set = v1.rule_set
    agent = Agent.objects.create(name="bank", system_prompt="p", rule_set=rule_set, rule_set_mode="latest")
    services.agent_protect(actor=make_user("admin"), agent=agent, protected=True, approvals_required=1)
    rule_services.rule_update(
        actor=author, rule=rule_set.rules.get(name="order_by_user"), revision=None, when="True"
    )
    with pytest.raises(ChangeRequested) as asked:
        rule_services.rule_set_publish(actor=author, rule_set=rule_set, message="v3", reason="every order")
    change = ChangeRequest.objects.get(pk=asked.value.change_request_id)
    approver = make_user("viewer", "auditor-approver")
    approver_set(user=approver, approver=True)
    services.change_request_review(
        actor=approver, change_request=change, decision="approve", comment="looks right"
    )
    v3 = rule_set.versions.get(number=3)
    _served_run(agent, v3)
    _served_run(agent, v2)  # published directly, before the agent followed the set

    page = viewer_client.get(reverse("agents:run_evidence") + "?period=7d").content.decode()
    versions_part = page[page.index('id="report-versions"') : page.index('id="report-verify"')]
    v3_part = versions_part[versions_part.index(" v3 ") :]
    assert f"Requested by {author.get_username()}" in v3_part and "every order" in v3_part
    assert "Approved by auditor-approver" in v3_part and "looks right" in v3_part
    assert "<code>True</code>" in v3_part  # the rule text as of v3, not the draft's
    v2_part = versions_part[versions_part.index(" v2 ") : versions_part.index(" v3 ")]
    assert "without a change request" in v2_part and "<code>True</code>" not in v2_part
    # Per call: the input as every page masks it (query, context, DataParts) and the result.
    assert EMAIL not in page and "[이메일]" in page and "P-2002" in page and "A-1001" in page
    assert "배송 중" in page
    skipped = page[page.index('id="report-skipped"') : page.index('id="report-versions"')]
    assert "route_refund" in skipped
    verify = page[page.index('id="report-verify"') :]
    assert f"tools/verify_evidence.py --public-key {chain_public_key()}" in verify


def test_the_report_speaks_korean(versions, viewer_client) -> None:
    page = viewer_client.get(reverse("agents:run_evidence"), HTTP_ACCEPT_LANGUAGE="ko").content.decode()
    assert "건너뛴 규칙" in page and "내보낸 파일을 확인하는 방법" in page


@pytest.mark.parametrize(
    ("query", "label"),
    [
        ("agent=999999", "Agent"),
        ("agent=x", "Agent"),
        ("status=bogus", "Status"),
        ("version=v1;drop", "Served by version"),
        ("candidate=maybe", "Rollout side"),
        ("period=99y", "Period"),
        ("since=yesterday", "Since"),
        ("until=2026-13-40", "Until"),
    ],
)
def test_every_invalid_filter_is_refused_naming_its_field_and_lists_no_run(
    viewer_client, agent, query, label
) -> None:
    from tests.support.evidence import finished_run

    finished_run(agent, "C-1001", "A-1001")
    response = viewer_client.get(reverse("agents:run_evidence") + "?" + query)
    page = response.content.decode()
    assert response.status_code == 400 and "filter-errors" in page
    errors = page[page.index("filter-errors") :]
    assert label in errors[:2000], errors[:2000]
    assert "evidence-table" not in page and "order-service.get_order" not in page
