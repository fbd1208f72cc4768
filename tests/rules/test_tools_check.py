"""The periodic tool check (tool drift) against real MCP servers, in-process and on a real worker.

A server's stored tool list is made stale the way it goes stale in life: the server changed
after its last refresh. The check lists the tools again, stores the new list, audits the change
as the system, and the rule that used a vanished tool is flagged on its rule set.
"""

from __future__ import annotations

import sys
import time

import pytest
from django.utils import timezone

from core.models import AuditEvent
from llamon_web.celery import app
from rules import services as rule_services
from rules.checks import rule_set_problems
from rules.engine import rule_set_snapshot
from servers import pool as web_pool
from servers.models import McpServer
from servers.services import mcp_servers_check_tools
from tests.conftest import celery_worker
from tests.support.celery_publish import publishing_to
from tests.support.mcp_servers import KB_SCRIPT

STALE_TOOLS = [
    {"name": "search_docs", "description": "", "input_schema": {"type": "object"}},
    {"name": "retired_tool", "description": "gone since", "input_schema": {"type": "object"}},
]


@pytest.fixture(autouse=True)
def _close_the_pool() -> object:
    yield
    web_pool.web_pool_close()


def _stale_kb(mcp_id: str = "knowledge-base", **overrides: object) -> McpServer:
    fields = {"transport": "stdio", "command": sys.executable, "args": [KB_SCRIPT], "timeout_s": 30.0}
    return McpServer.objects.create(
        mcp_id=mcp_id, tools=STALE_TOOLS, tools_refreshed_at=timezone.now(), **{**fields, **overrides}
    )


def _rule_on_retired_tool(make_user) -> object:
    author = make_user("editor")
    rule_set = rule_services.rule_set_create(actor=author, name="kb-rules")
    rule_services.rule_create(
        actor=author,
        rule_set=rule_set,
        name="old_route",
        mcp_id="knowledge-base",
        tool_name="retired_tool",
        when='"문서" in query',
        params="{}",
    )
    return rule_set


def _codes(rule_set) -> dict[str, list[str]]:
    servers = {s.mcp_id: s for s in McpServer.objects.all()}
    found = rule_set_problems(rule_set_snapshot(rule_set), servers)
    return {name: [p.code for p in problems] for name, problems in found.items()}


@pytest.mark.django_db
def test_the_check_stores_a_changed_list_audits_it_and_flags_the_rule(make_user) -> None:
    server = _stale_kb()
    McpServer.objects.create(mcp_id="off", transport="http", url="http://127.0.0.1:9/mcp", enabled=False)
    rule_set = _rule_on_retired_tool(make_user)
    assert _codes(rule_set) == {}  # the stored list still has the tool

    outcome = mcp_servers_check_tools()

    assert set(outcome) == {"knowledge-base"}  # a disabled server is not contacted
    assert outcome["knowledge-base"].startswith("changed: ")
    assert "removed retired_tool" in outcome["knowledge-base"]
    server.refresh_from_db()
    assert "retired_tool" not in {t["name"] for t in server.tools}
    event = AuditEvent.objects.get(action="mcp_server.refresh_tools", object_id=str(server.pk))
    assert event.actor is None and "retired_tool" in event.after["diff"]["removed"]
    assert _codes(rule_set) == {"old_route": ["tool_missing"]}

    # Checked again with nothing changed: no new audit entry, only the check time moves.
    assert mcp_servers_check_tools() == {"knowledge-base": "unchanged"}
    assert AuditEvent.objects.filter(action="mcp_server.refresh_tools").count() == 1


@pytest.mark.django_db
def test_an_unreachable_server_keeps_its_tools_and_is_audited_once_per_new_error() -> None:
    server = _stale_kb(mcp_id="broken", args=["/nonexistent/server.py"], timeout_s=5.0)
    first = mcp_servers_check_tools()
    second = mcp_servers_check_tools()
    assert first["broken"].startswith("error: Could not list the tools of broken")
    assert second["broken"].startswith("error: ")
    server.refresh_from_db()
    assert server.tools == STALE_TOOLS and server.last_error
    assert AuditEvent.objects.filter(action="mcp_server.refresh_tools_failed").count() == 1


@pytest.mark.services
@pytest.mark.timeout(180)
@pytest.mark.django_db(transaction=True)
def test_the_beat_task_runs_the_check_on_a_real_worker(redis_url, make_user) -> None:
    server = _stale_kb()
    rule_set = _rule_on_retired_tool(make_user)
    with publishing_to(redis_url, {"visibility_timeout": 3600}), celery_worker(redis_url) as (_, output):
        app.send_task("servers.tasks.tools_check_task")  # what the beat schedule sends
        output.wait_for("tools of knowledge-base: changed: ", timeout_s=90)
    deadline = time.monotonic() + 30
    while "retired_tool" in {t["name"] for t in server.tools} and time.monotonic() < deadline:
        time.sleep(0.2)
        server.refresh_from_db()
    assert "retired_tool" not in {t["name"] for t in server.tools}
    assert _codes(rule_set) == {"old_route": ["tool_missing"]}


def test_the_beat_schedule_sends_the_check_by_its_registered_name() -> None:
    from django.conf import settings

    from servers.tasks import tools_check_task

    assert settings.CELERY_BEAT_SCHEDULE["mcp-tools-check"]["task"] == tools_check_task.name
