"""One writer, by construction: every audit row and every run's end goes through the one function that
also appends its evidence link, whatever the route; `verify_records` holds after any sequence of
ordinary operations, and no module writes an audit row, a link or a run's end any other way."""

from __future__ import annotations

import ast
import random
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

from agents import services
from agents.models import Agent, Run, RunStep
from core.audit import audit_record
from core.chain import chain_verify
from core.models import AuditEvent, ChainRecord
from llamon_agent.tools import AgentRequest
from llamon_web.demo import SEED_RULES
from rules.exporting import rule_set_content_replace, rule_set_export_json, rule_set_import_json
from rules.services import rule_set_create
from tests.conftest import ROOT
from tests.support.rule_sets import build_rule_set

# --- Any sequence of ordinary operations keeps the chain whole ---------------------------------------


def _running(agent: Agent, n: int, **fields) -> Run:
    run = Run.objects.create(
        agent=agent, agent_name=agent.name, query=f"order A-{n}", status=Run.Status.RUNNING, **fields
    )
    RunStep.objects.create(
        run=run,
        seq=1,
        kind=RunStep.Kind.RULE,
        name="order_lookup",
        status="running",
        mcp_id="order-service",
        tool_name="get_order",
        started_at=timezone.now(),
        input={"params": {"order_id": f"A-{n}"}},
    )
    return run


class Operations:
    """The ordinary operations, each through the route a user or a process takes."""

    def __init__(self, editor, admin, agent: Agent, document: dict, rng: random.Random) -> None:
        self.editor, self.admin, self.agent, self.document, self.rng = editor, admin, agent, document, rng
        self.n = 0
        self.credential = None
        self.pushed = rule_set_create(actor=editor, name="pushed", description="")

    def _next(self) -> int:
        self.n += 1
        return self.n

    def json_import(self) -> None:
        rule_set_import_json(actor=self.editor, data={**self.document, "name": f"imported-{self._next()}"})

    def rules_push(self) -> None:
        self.pushed.refresh_from_db()
        rule_set_content_replace(
            actor=self.editor, rule_set=self.pushed, data=self.document, revision=self.pushed.revision
        )

    def audit_event(self) -> None:
        audit_record(actor=self.admin, action="test.event", object_type="test", after={"n": self._next()})

    def management_command(self) -> None:
        call_command("users", "add", f"user{self._next()}", "--role", "viewer", stdout=None)

    def worker_run(self) -> None:
        run = _running(self.agent, self._next(), user_id="C-1")
        services.run_finish(run_id=run.pk, status=self.rng.choice(["succeeded", "failed"]), answer="ok")

    def cancel(self) -> None:
        run = Run.objects.create(
            agent=self.agent, agent_name=self.agent.name, query="q", status=Run.Status.QUEUED
        )
        services.run_cancel(actor=self.editor, run=run)

    def reap(self) -> None:
        run = _running(self.agent, self._next())
        Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(hours=2))
        services.runs_reap(stale_after_s=60)

    def ingest(self) -> None:
        if self.credential is None:
            self.credential, _secret = services.ingest_credential_issue(
                actor=self.admin, agent_name="served-bot"
            )
        services.run_ingest(
            credential=self.credential,
            run=None,
            events=[],
            agent_name="served-bot",
            request=AgentRequest(query=f"q{self._next()}"),
            finish={"status": "succeeded", "answer": "a"},
        )

    def retention(self) -> None:
        services.runs_delete_expired(now=timezone.now() + timedelta(days=400))


OPERATIONS = [name for name in vars(Operations) if not name.startswith("_")]


@pytest.mark.django_db
@pytest.mark.parametrize("seed", [1, 2])
def test_verify_records_holds_after_any_sequence_of_ordinary_operations(
    seed, editor, admin, agent, demo_servers
) -> None:
    rng = random.Random(seed)
    document = rule_set_export_json(build_rule_set(editor, "source", SEED_RULES[:3]))
    ops = Operations(editor, admin, agent, document, rng)
    done = []
    for _ in range(14):
        name = rng.choice(OPERATIONS)
        getattr(ops, name)()
        done.append(name)
        verdict = chain_verify()
        assert verdict.ok, f"after {done}: {verdict.detail}"
    for name in OPERATIONS:  # and each at least once
        getattr(ops, name)()
        verdict = chain_verify()
        assert verdict.ok, f"after {name}: {verdict.detail}"
    assert AuditEvent.objects.count() == ChainRecord.objects.filter(kind="audit").count()


# --- Nothing else writes an audit row, a link or a run's end ------------------------------------------

CHAINED = {"AuditEvent", "ChainRecord", "ChainHead"}
WRITES = {"create", "bulk_create", "update", "bulk_update", "delete", "get_or_create", "update_or_create"}
# Where writing them is the point.
WRITERS = {
    "AuditEvent": {"core/audit.py"},
    "ChainRecord": {"core/chain.py"},
    "ChainHead": {"core/chain.py"},
}
RUN_END_WRITER = "agents/evidence.py"
# A data migration from before the chain (core's 0002_evidence_chain): installs ran it before any link.
BEFORE_THE_CHAIN = {"accounts/migrations/0002_labels_moved.py"}
ENDED = {"SUCCEEDED", "FAILED", "TIMED_OUT", "CANCELLED"}
SOURCES = ["accounts", "agents", "core", "governance", "rules", "servers", "llamon_web"]


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def offences(path: Path, relative: str) -> list[str]:
    found = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value.lower()
            if any(t in text for t in ("rules_auditevent", "core_chainrecord", "core_chainhead")) and any(
                verb in text for verb in ("insert", "update", "delete")
            ):
                found.append(f"{relative}:{node.lineno}: raw SQL on the chain's tables")
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        names = _names(func)
        method = func.attr if isinstance(func, ast.Attribute) else ""
        for model in CHAINED & names:
            if method in WRITES and relative not in WRITERS[model]:
                found.append(f"{relative}:{node.lineno}: {model}.{method}")
        for arg in node.args:
            registered = method == "register"  # the admin lists it (read only, tested below)
            if (
                isinstance(arg, ast.Name)
                and arg.id in CHAINED
                and relative not in WRITERS[arg.id]
                and not registered
            ):
                found.append(f"{relative}:{node.lineno}: {arg.id} handed to {ast.unparse(func)}")
        if relative != RUN_END_WRITER and method in ("update", "create", "bulk_create"):
            keywords = {k.arg: k.value for k in node.keywords}
            status = keywords.get("status")
            ended = (
                isinstance(status, ast.Attribute)
                and status.attr in ENDED
                and "Run" in _names(status)
                and "ImpactAnalysis" not in _names(status)
            )
            if ended or ("finished_at" in keywords and "Run" in names | _names(node)):
                found.append(f"{relative}:{node.lineno}: a run ended outside run_end ({ast.unparse(func)})")
    return found


def test_no_module_writes_an_audit_row_a_link_or_a_runs_end_any_other_way() -> None:
    found = []
    for source in SOURCES:
        for path in sorted((ROOT / source).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative not in BEFORE_THE_CHAIN:
                found += offences(path, relative)
    assert found == []


def test_the_scan_finds_each_kind_of_other_write(tmp_path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "AuditEvent.objects.create(action='x')\n"
        "AuditEvent.objects.filter(pk=1).update(action='y')\n"
        "insert_many(AuditEvent, rows)\n"
        "ChainRecord.objects.bulk_create(links)\n"
        "cursor.execute('INSERT INTO rules_auditevent (id) VALUES (0)')\n"
        "Run.objects.filter(pk=1).update(status=Run.Status.FAILED)\n"
        "Run.objects.filter(pk=1).update(finished_at=now)\n",
        encoding="utf-8",
    )
    assert len(offences(bad, "agents/bad.py")) == 7


def test_the_admin_site_cannot_add_change_or_delete_an_audit_row(rf, admin) -> None:
    from django.contrib.admin.sites import site

    request = rf.get("/")
    request.user = admin
    model_admin = site._registry[AuditEvent]
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request) and not model_admin.has_delete_permission(request)
