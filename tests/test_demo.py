from __future__ import annotations

import pytest
from django.core.management import call_command

from rules.models import AuditEvent, McpServer

pytestmark = pytest.mark.django_db


def test_load_demo_registers_the_demo_servers_idempotently() -> None:
    call_command("load_demo", verbosity=0)
    first = {s.mcp_id: (s.transport, s.command, tuple(s.args), s.url) for s in McpServer.objects.all()}
    events = AuditEvent.objects.count()
    call_command("load_demo", verbosity=0)
    second = {s.mcp_id: (s.transport, s.command, tuple(s.args), s.url) for s in McpServer.objects.all()}
    assert first == second
    assert set(first) == {"order-service", "customer-crm", "knowledge-base", "order-service-http"}
    assert first["order-service-http"][0] == "http"
    assert AuditEvent.objects.count() == events  # nothing changed, nothing audited


def test_load_demo_keeps_an_edited_server_in_line_and_audits_the_change() -> None:
    call_command("load_demo", verbosity=0)
    McpServer.objects.filter(mcp_id="customer-crm").update(timeout_s=5)
    call_command("load_demo", verbosity=0)
    assert McpServer.objects.get(mcp_id="customer-crm").timeout_s == 30
    event = AuditEvent.objects.filter(action="mcp_server.update").get()
    assert event.before["timeout_s"] == 5 and event.after["timeout_s"] == 30
