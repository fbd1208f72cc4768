"""The evidence chain: what a database owner changes with raw SQL, the verifier finds and names."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone

from agents import services
from agents.models import Agent, PrivacySettings, Run, RunStep
from core.audit import audit_record
from core.chain import (
    _KINDS,
    GENESIS,
    chain_anchor_check,
    chain_head,
    chain_public_key,
    chain_verify,
    link_hash,
)
from core.content_hash import sha256
from core.models import AuditEvent, ChainCheck, ChainHead, ChainRecord
from tests.conftest import ROOT, worker_env

pytestmark = pytest.mark.django_db


def _finished_run(agent: Agent, n: int) -> Run:
    """A run through the product's own end: running, with a rule call and an answer, then finished."""
    run = Run.objects.create(
        agent=agent, agent_name=agent.name, query=f"order A-{n}", status=Run.Status.RUNNING, user_id="C-1001"
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
        input={"params": {"order_id": f"A-{n}"}},
        output={"status": "shipped"},
    )
    services.run_finish(run_id=run.pk, status=Run.Status.SUCCEEDED, answer=f"A-{n} shipped")
    return run


@pytest.fixture
def history(agent) -> list[Run]:
    audit_record(actor=None, action="test.one", object_type="test", object_id="1", after={"a": 1})
    runs = [_finished_run(agent, n) for n in range(3)]
    audit_record(actor=None, action="test.two", object_type="test", object_id="2", before={"a": 1})
    assert chain_verify().ok
    return runs


def _sql(statement: str, *params: object) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def _broken(match: str) -> None:
    verdict = chain_verify()
    assert not verdict.ok
    assert match in verdict.detail, verdict.detail


def test_every_audit_event_and_finished_run_is_a_link_in_order(history) -> None:
    links = list(ChainRecord.objects.order_by("seq").values_list("seq", "kind"))
    kinds = [kind for _, kind in links]
    assert [seq for seq, _ in links] == list(range(1, len(links) + 1))
    assert kinds.count("run") == 3
    assert kinds.count("audit") == AuditEvent.objects.count()
    verdict = chain_verify()
    assert (verdict.ok, verdict.links) == (True, len(links))


def test_an_updated_audit_row_is_found(history) -> None:
    event = AuditEvent.objects.get(action="test.one")
    _sql("UPDATE rules_auditevent SET after = %s WHERE id = %s", '{"a": 2}', event.pk)
    _broken(f"audit event {event.pk}")


def test_a_deleted_run_is_found(history) -> None:
    run = history[1]
    _sql("DELETE FROM agents_runtool WHERE run_id = %s", run.pk)
    _sql("DELETE FROM agents_runstep WHERE run_id = %s", run.pk)
    _sql("DELETE FROM agents_run WHERE id = %s", run.pk)
    _broken(f"run {run.pk}")
    assert "deleted" in chain_verify().detail


def test_an_edited_step_output_is_found(history) -> None:
    run = history[2]
    _sql("UPDATE agents_runstep SET output = %s WHERE run_id = %s", '{"status": "refunded"}', run.pk)
    _broken(f"run {run.pk}")
    assert "changed" in chain_verify().detail


def test_two_records_swapped_are_found(history) -> None:
    one, two = AuditEvent.objects.get(action="test.one"), AuditEvent.objects.get(action="test.two")
    _sql("UPDATE rules_auditevent SET action = %s WHERE id = %s", "test.two", one.pk)
    _sql("UPDATE rules_auditevent SET action = %s WHERE id = %s", "test.one", two.pk)
    _broken(f"audit event {one.pk}")


def test_two_links_swapped_are_found(history) -> None:
    _sql("UPDATE core_chainrecord SET seq = 1000000 WHERE seq = 2")
    _sql("UPDATE core_chainrecord SET seq = 2 WHERE seq = 3")
    _sql("UPDATE core_chainrecord SET seq = 3 WHERE seq = 1000000")
    _broken("Link #2 does not follow link #1")


def test_an_inserted_audit_row_and_removed_last_links_are_found(history) -> None:
    _sql(
        "INSERT INTO rules_auditevent (actor_name, action, object_type, object_id, object_repr, created_at)"
        " VALUES ('mallory', 'forged', 'test', '9', '', %s)",
        timezone.now(),
    )
    _broken("in no link of the chain")
    AuditEvent.objects.filter(action="forged").delete()
    last = ChainRecord.objects.order_by("-seq").first()
    _sql("DELETE FROM core_chainrecord WHERE seq = %s", last.seq)
    _broken("links were removed from the end")


def test_retention_deletes_runs_without_breaking_the_chain(history) -> None:
    PrivacySettings.objects.update_or_create(pk=1, defaults={"retention_days": 1})
    Run.objects.filter(pk=history[0].pk).update(finished_at=timezone.now() - timedelta(days=3))
    assert services.runs_delete_expired() == 1
    verdict = chain_verify()
    assert verdict.ok, verdict.detail
    assert ChainRecord.objects.filter(kind="deletion").count() == 1


def test_verify_records_names_the_first_broken_link_and_keeps_the_check(history, capsys) -> None:
    call_command("verify_records")
    assert ChainCheck.objects.first().ok
    run = history[0]
    _sql("UPDATE agents_run SET answer = %s WHERE id = %s", "A-0 refunded", run.pk)
    with pytest.raises(CommandError, match=f"run {run.pk}"):
        call_command("verify_records")
    check = ChainCheck.objects.first()
    assert (check.ok, check.broken_seq) == (False, ChainRecord.objects.get(kind="run", ref=str(run.pk)).seq)


@pytest.mark.django_db(transaction=True)
def test_concurrent_appends_from_four_processes_leave_one_valid_chain() -> None:
    script = (
        "import django; django.setup()\n"
        "from core.audit import audit_record\n"
        "for i in range(250):\n"
        "    audit_record(actor=None, action='test.concurrent', object_type='test', object_id=str(i))\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script], cwd=ROOT, env=worker_env(None), stderr=subprocess.PIPE
        )
        for _ in range(4)
    ]
    errors = [p.communicate(timeout=240)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, errors
    verdict = chain_verify()
    assert verdict.ok, verdict.detail
    assert verdict.links == AuditEvent.objects.filter(action="test.concurrent").count() == 1000
    seqs = list(ChainRecord.objects.values_list("seq", flat=True))
    assert seqs == list(range(1, 1001))
    assert verdict.head_hash == ChainRecord.objects.get(seq=1000).record_hash


def _rewrite_chain() -> None:
    """What a database owner can do: recompute every link from the rows as they are now."""
    prev = GENESIS
    for record in ChainRecord.objects.order_by("seq"):
        if record.payload is not None:
            content = record.payload
        else:
            content = _KINDS[record.kind].current([record.ref])[record.ref]
        content_hash = sha256(content)
        record_hash = link_hash(record.seq, record.kind, record.ref, content_hash, prev)
        ChainRecord.objects.filter(pk=record.pk).update(
            content_hash=content_hash, prev_hash=prev, record_hash=record_hash
        )
        prev = record_hash
    ChainHead.objects.filter(pk=1).update(record_hash=prev)


def test_a_signed_head_printed_elsewhere_catches_a_rewritten_chain(history, settings, tmp_path) -> None:
    settings.LLAMON_CHAIN_SIGNING_KEY = bytes(range(32))
    head = chain_head()
    assert head["public_key"] == chain_public_key() and head["signature"]
    anchor = tmp_path / "head.json"
    anchor.write_text(json.dumps(head))
    call_command("verify_records", "--anchor", str(anchor))
    assert chain_anchor_check(head) is None

    event = AuditEvent.objects.get(action="test.one")
    _sql("UPDATE rules_auditevent SET after = %s WHERE id = %s", '{"a": 2}', event.pk)
    _rewrite_chain()
    assert chain_verify().ok  # an unanchored chain cannot tell (docs/evidence.md says so)
    with pytest.raises(CommandError, match="rewritten after the head was taken"):
        call_command("verify_records", "--anchor", str(anchor))
    assert not ChainCheck.objects.first().ok

    assert "does not verify" in chain_anchor_check({**head, "record_hash": "f" * 64})
    other = {**head, "public_key": "A" * 43 + "="}
    assert "does not verify" in chain_anchor_check(other, public_key=other["public_key"])
    settings.LLAMON_CHAIN_SIGNING_KEY = bytes(32)
    assert "another key" in chain_anchor_check(head)


def test_an_unsigned_head_still_anchors_and_a_bad_anchor_file_is_a_clear_error(
    history, tmp_path, settings
) -> None:
    settings.LLAMON_CHAIN_SIGNING_KEY = None  # a production without a key (development makes one)
    head = chain_head()
    assert "signature" not in head
    removed = ChainRecord.objects.order_by("-seq").first()
    assert chain_anchor_check({**head, "seq": removed.seq + 5}) is not None
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(CommandError, match="one chain head"):
        call_command("verify_records", "--anchor", str(bad))
    with pytest.raises(CommandError, match="cannot read"):
        call_command("verify_records", "--anchor", str(tmp_path / "missing.json"))
