from __future__ import annotations

import pytest
from django.core.management import call_command

from agents.models import Agent, Run
from core.models import AuditEvent
from rules.cases import suite_run
from rules.models import RuleSet
from servers.models import McpServer

pytestmark = pytest.mark.django_db


def test_load_demo_is_idempotent() -> None:
    call_command("load_demo", verbosity=0)
    servers = {
        s.mcp_id: (s.transport, s.command, tuple(s.args), s.url, s.tools_hash)
        for s in McpServer.objects.all()
    }
    counts = (AuditEvent.objects.count(), RuleSet.objects.count(), Agent.objects.count(), Run.objects.count())
    call_command("load_demo", verbosity=0)
    assert servers == {
        s.mcp_id: (s.transport, s.command, tuple(s.args), s.url, s.tools_hash)
        for s in McpServer.objects.all()
    }
    assert counts == (
        AuditEvent.objects.count(),
        RuleSet.objects.count(),
        Agent.objects.count(),
        Run.objects.count(),
    )
    assert set(servers) == {"order-service", "customer-crm", "knowledge-base", "order-service-http"}
    assert servers["order-service-http"][0] == "http"


def test_the_demo_lists_the_real_tools_and_every_seed_case_passes() -> None:
    call_command("load_demo", verbosity=0)
    tools = {
        s.mcp_id: sorted(t["name"] for t in s.tools) for s in McpServer.objects.exclude(transport="http")
    }
    assert tools == {
        "order-service": ["get_order", "list_orders"],
        "customer-crm": ["get_customer_profile"],
        "knowledge-base": ["search_docs"],
    }
    rule_set = RuleSet.objects.get(name="seed-rules")
    assert rule_set.versions.count() == 1
    suite = suite_run(rule_set=rule_set)
    failing = {r.case.name: r.result.problems for r in suite.results if not r.result.passed}
    assert failing == {}
    assert suite.total >= 8
    queries = [c.input["query"] for c in rule_set.cases.all()]
    assert any(any("\uac00" <= ch <= "\ud7a3" for ch in q) for q in queries)  # Korean
    assert any(q.isascii() for q in queries)  # and English


def test_the_demo_agent_and_its_runs_are_queued_once() -> None:
    call_command("load_demo", "--no-refresh", verbosity=0)
    agent = Agent.objects.get(name="seed-demo")
    assert agent.model_provider == "offline" and agent.rule_set.name == "seed-rules"
    assert agent.runs.count() == 3
    call_command("load_demo", "--no-refresh", verbosity=0)
    assert agent.runs.count() == 3


def test_load_demo_keeps_an_edited_server_in_line_and_audits_the_change() -> None:
    call_command("load_demo", "--no-refresh", "--no-runs", verbosity=0)
    McpServer.objects.filter(mcp_id="customer-crm").update(timeout_s=5)
    call_command("load_demo", "--no-refresh", "--no-runs", verbosity=0)
    assert McpServer.objects.get(mcp_id="customer-crm").timeout_s == 30
    event = AuditEvent.objects.filter(action="mcp_server.update").get()
    assert event.before["timeout_s"] == 5 and event.after["timeout_s"] == 30
