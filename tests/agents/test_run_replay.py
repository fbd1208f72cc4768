"""Deterministic replay: a run re-run on a real worker with its recorded tool outputs.

The original calls the real demo MCP server (stdio) from a rule and from the ReAct loop; the
replay runs on a fresh worker after the server is disabled and its command broken, so any
attempt to reach it would fail: it still gets the same outputs and finishes. The refusals
(running run, unknown run, viewer) and the audit entry are checked through the page and the API.
"""

from __future__ import annotations

import pytest
from django.core.management import call_command

from agents import services
from agents.models import Agent, Run, RunStep
from core.models import AuditEvent
from llamon_agent.tools import AgentRequest
from servers.models import McpServer
from tests.conftest import celery_worker
from tests.support.runs import wait_for_run

SCRIPT = [
    {"tool_calls": [{"name": "get_order", "args": {"order_id": "A-1002"}, "id": "c1"}]},
    {"content": "checked"},
]


def _tool_steps(run: Run) -> list[tuple[str, str, object, str]]:
    steps = run.steps.filter(kind__in=(RunStep.Kind.RULE, RunStep.Kind.TOOL)).order_by("seq")
    return [(s.kind, s.tool_name, s.output, s.status) for s in steps]


@pytest.mark.slow  # 20 s or more in the parallel suite: scheduled first, so the workers finish together
@pytest.mark.services
@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(240)
def test_a_replay_gets_the_recorded_tool_outputs_with_the_server_gone(redis_publisher, make_user) -> None:
    call_command("load_demo", "--no-runs", verbosity=0)
    editor = make_user("editor")
    agent = Agent.objects.get(name="seed-demo")
    agent.model_provider, agent.model_script = Agent.Provider.SCRIPTED, SCRIPT
    agent.save()
    agent.react_servers.set([McpServer.objects.get(mcp_id="order-service")])
    request = AgentRequest(query="주문 조회 부탁해 A-1001", context={"userId": "C-1001"})
    with celery_worker(redis_publisher) as (_, output):
        original = wait_for_run(services.run_create(actor=editor, agent=agent, request=request).pk)
    assert original.status == Run.Status.SUCCEEDED, (original.error, output.text()[-2000:])
    recorded = _tool_steps(original)
    assert [(kind, tool, status) for kind, tool, _, status in recorded] == [
        ("rule", "get_order", "ok"),
        ("tool", "get_order", "ok"),
    ]
    assert "A-1001" in str(recorded[0][2]) and "A-1002" in str(recorded[1][2])

    # The server is stopped for good: disabled, and its command would fail if anything started it.
    McpServer.objects.filter(mcp_id="order-service").update(
        enabled=False, command="/nonexistent/order-service"
    )
    # A new model: it makes the recorded call, then one the original never made.
    agent.model_script = [
        SCRIPT[0],
        {"tool_calls": [{"name": "get_order", "args": {"order_id": "Z-9"}, "id": "c2"}]},
        {"content": "replayed"},
    ]
    agent.save()
    with celery_worker(redis_publisher) as (_, output):  # a fresh worker: no warm session to the server
        replay = wait_for_run(services.run_replay(actor=editor, run=original).pk)
    assert replay.status == Run.Status.SUCCEEDED, (replay.error, output.text()[-2000:])
    assert replay.replay_of_id == original.pk and replay.answer == "replayed"
    assert replay.query == original.query and replay.context == original.context
    steps = _tool_steps(replay)
    assert steps[:2] == recorded  # the same outputs, without the server
    assert steps[2][1:] == ("get_order", None, "error")
    unrecorded = replay.steps.filter(kind=RunStep.Kind.TOOL).order_by("seq").last()
    assert unrecorded.error == f'no recorded output for get_order({{"order_id":"Z-9"}}) in run {original.pk}'
    assert not replay.steps.filter(name__startswith="connect ").exists()  # nothing was connected to
    event = AuditEvent.objects.get(action="run.replay")
    assert event.object_id == str(replay.pk) and event.after["replay_of"] == original.pk


@pytest.mark.django_db
def test_a_run_with_no_recorded_steps_replays_and_its_tools_have_no_outputs() -> None:
    from agents.replay import recorded_calls

    run = Run.objects.create(agent_name="x", status=Run.Status.SUCCEEDED, query="q")
    assert recorded_calls(run.pk) == []


@pytest.mark.django_db(transaction=True)
def test_a_replay_whose_original_was_deleted_never_falls_back_to_the_live_server(make_user) -> None:
    """Retention may delete the original while its replay waits: the replay keeps the id and its
    calls fail with "no recorded output"; they are never sent to the (here broken) server."""
    from rules import services as rule_services

    author = make_user("editor")
    McpServer.objects.create(
        mcp_id="orders",
        transport="stdio",
        command="/nonexistent/orders",
        tools=[{"name": "get_order", "description": "", "input_schema": {}}],
    )
    rule_set = rule_services.rule_set_create(actor=author, name="replayed")
    rule_services.rule_create(
        actor=author,
        rule_set=rule_set,
        name="lookup",
        mcp_id="orders",
        tool_name="get_order",
        when="True",
        params='{"order_id": "A-1"}',
    )
    agent = Agent.objects.create(name="r", system_prompt="p", rule_set=rule_set, rule_set_mode="draft")
    original = Run.objects.create(agent=agent, agent_name="r", status=Run.Status.SUCCEEDED, query="q")
    replay = Run.objects.create(agent=agent, agent_name="r", query="q", replay_of=original)
    original_pk = original.pk
    original.delete()
    services.run_execute(run_id=replay.pk)  # in this process: nothing but the database is needed

    replay.refresh_from_db()
    assert replay.replay_of_id == original_pk and replay.status == Run.Status.FAILED
    rule = replay.steps.get(kind=RunStep.Kind.RULE)
    assert rule.error == f'no recorded output for get_order({{"order_id":"A-1"}}) in run {original_pk}'
    assert not replay.steps.filter(name__startswith="connect ").exists()
