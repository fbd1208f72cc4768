"""Coverage of what is shown: a raw change to any field a page, an export or the report presents as
evidence (call times, ids, agent, version, source, the tool filter's rows, the order of steps) is
found by verify_records and named; so are audit rows written by hand with ids <= 0."""

from __future__ import annotations

import pytest
from django.db import connection
from django.utils import timezone

from agents import services
from agents.models import Agent, Run, RunStep, RunTool
from core.audit import audit_record
from core.chain import chain_verify
from core.models import ChainRecord

pytestmark = pytest.mark.django_db


@pytest.fixture
def sealed(agent: Agent) -> Run:
    audit_record(actor=None, action="test.one", object_type="test", object_id="1", after={"a": 1})
    run = Run.objects.create(
        agent=agent,
        agent_name=agent.name,
        query="order A-1",
        status=Run.Status.RUNNING,
        user_id="C-1001",
        session_id="S-1",
        chatbot_id="bot-1",
        rule_set_name="seed",
        rule_set_ref="v3",
        rule_set_hash="a" * 64,
    )
    for seq, tool in [(1, "get_order"), (2, "get_refund")]:
        RunStep.objects.create(
            run=run,
            seq=seq,
            kind=RunStep.Kind.RULE,
            name=f"rule_{seq}",
            status="ok",
            mcp_id="order-service",
            tool_name=tool,
            started_at=timezone.now(),
            input={"params": {"order_id": "A-1"}},
            output={"status": "shipped"},
        )
        RunTool.objects.create(run=run, tool_name=tool, created_at=run.created_at)
    services.run_finish(run_id=run.pk, status=Run.Status.SUCCEEDED, answer="shipped")
    audit_record(actor=None, action="test.two", object_type="test", object_id="2")
    verdict = chain_verify()
    assert verdict.ok, verdict.detail
    return run


def _sql(statement: str, *params: object) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


RUN_EDITS = {
    "backdated run time": "UPDATE agents_run SET created_at = '2020-01-01 00:00:00' WHERE id = %s",
    "end time": "UPDATE agents_run SET finished_at = '2020-01-01 00:00:00' WHERE id = %s",
    "userId": "UPDATE agents_run SET user_id = 'C-9999' WHERE id = %s",
    "sessionId": "UPDATE agents_run SET session_id = 'S-9' WHERE id = %s",
    "chatbotId": "UPDATE agents_run SET chatbot_id = 'bot-9' WHERE id = %s",
    "agent": "UPDATE agents_run SET agent_name = 'other' WHERE id = %s",
    "version name": "UPDATE agents_run SET rule_set_name = 'other' WHERE id = %s",
    "version": "UPDATE agents_run SET rule_set_ref = 'v2' WHERE id = %s",
    "content hash": "UPDATE agents_run SET rule_set_hash = 'bbbb' WHERE id = %s",
    "source": "UPDATE agents_run SET source = 'served' WHERE id = %s",
    "status": "UPDATE agents_run SET status = 'failed' WHERE id = %s",
    "answer": "UPDATE agents_run SET answer = 'refunded' WHERE id = %s",
    "backdated call time": "UPDATE agents_runstep SET started_at = '2020-01-01 00:00:00' WHERE run_id = %s",
    "a call's tool": "UPDATE agents_runstep SET tool_name = 'approve_transfer' WHERE run_id = %s AND seq = 1",
    "a call's result": 'UPDATE agents_runstep SET output = \'{"status": "refunded"}\' WHERE run_id = %s',
    "a call removed": "DELETE FROM agents_runstep WHERE run_id = %s AND seq = 2",
    "calls reordered": "UPDATE agents_runstep SET seq = 3 - seq WHERE run_id = %s",
    "a tool-filter row removed": "DELETE FROM agents_runtool WHERE run_id = %s AND tool_name = 'get_refund'",
    "a tool-filter row added": "INSERT INTO agents_runtool (run_id, tool_name, created_at) "
    "SELECT id, 'approve_transfer', created_at FROM agents_run WHERE id = %s",
    "a tool-filter row backdated": "UPDATE agents_runtool SET created_at = '2020-01-01 00:00:00' WHERE run_id = %s",
}


@pytest.mark.parametrize("edit", list(RUN_EDITS), ids=list(RUN_EDITS))
def test_a_raw_change_to_any_shown_field_of_a_run_is_found_and_named(sealed, edit) -> None:
    if edit == "calls reordered":  # two steps cannot share a seq on the way: move one aside first
        _sql("UPDATE agents_runstep SET seq = 99 WHERE run_id = %s AND seq = 1", sealed.pk)
        _sql("UPDATE agents_runstep SET seq = 1 WHERE run_id = %s AND seq = 2", sealed.pk)
        _sql("UPDATE agents_runstep SET seq = 2 WHERE run_id = %s AND seq = 99", sealed.pk)
    else:
        _sql(RUN_EDITS[edit], sealed.pk)
    verdict = chain_verify()
    assert not verdict.ok, edit
    assert f"run {sealed.pk} (link #" in verdict.detail and "changed after it was recorded" in verdict.detail


@pytest.mark.parametrize("pk", [0, -1, -5000])
def test_audit_rows_inserted_by_hand_with_ids_at_or_below_zero_are_found(sealed, pk) -> None:
    _sql(
        "INSERT INTO rules_auditevent (id, actor_name, action, object_type, object_id, object_repr, created_at)"
        " VALUES (%s, 'admin', 'rule.delete', 'rules.rule', '1', 'x', '2020-01-01 00:00:00')",
        pk,
    )
    verdict = chain_verify()
    assert not verdict.ok and f"audit event {pk} is in no link" in verdict.detail


def test_a_run_inserted_by_hand_with_an_old_time_or_a_negative_id_is_found(sealed) -> None:
    for pk, finished in [(-7, "2020-01-01 00:00:00"), (sealed.pk + 50, "2020-01-01 00:00:00")]:
        _sql(
            "INSERT INTO agents_run (id, source, status, agent_name, query, context, a2a_data, a2a_files, answer,"
            " error, error_kind, user_id, session_id, chatbot_id, rule_set_name, rule_set_ref, rule_set_hash,"
            " rollout_candidate, cancel_requested, llm_calls, tool_calls, prestep_calls, delivery_attempts, worker,"
            " created_at, finished_at) VALUES (%s, 'worker', 'succeeded', 'x', 'q', '{}', '[]', '[]', 'a', '', '',"
            " '', '', '', '', '', '', false, false, 0, 0, 0, 0, '', %s, %s)",
            pk,
            finished,
            finished,
        )
        verdict = chain_verify()
        assert not verdict.ok and f"run {pk} is in no link" in verdict.detail, verdict.detail
        _sql("DELETE FROM agents_run WHERE id = %s", pk)


def test_links_sealed_in_the_first_record_shape_still_verify(sealed) -> None:
    """Runs sealed before the record covered call times and tool rows keep verifying (as they were)."""
    from agents.evidence import decision_records, older_records
    from core.content_hash import sha256

    (old,) = older_records(decision_records([sealed.pk])[str(sealed.pk)])
    ChainRecord.objects.filter(kind="run", ref=str(sealed.pk)).update(content_hash=sha256(old))
    # Re-chain from that link on, as the old version wrote it.
    from core.chain import link_hash
    from core.models import ChainHead

    prev = None
    for link in ChainRecord.objects.order_by("seq"):
        if prev is not None:
            link.prev_hash = prev
        link.record_hash = link_hash(link.seq, link.kind, link.ref, link.content_hash, link.prev_hash)
        link.save()
        prev = link.record_hash
    ChainHead.objects.filter(pk=1).update(record_hash=prev)
    verdict = chain_verify()
    assert verdict.ok, verdict.detail
    _sql("UPDATE agents_run SET answer = 'refunded' WHERE id = %s", sealed.pk)  # what it covered still shows
    assert not chain_verify().ok
