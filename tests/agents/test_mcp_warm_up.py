"""A worker process opens its MCP sessions when it starts; a run that must connect shows it as a step."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agents import services
from agents.models import Agent, Run
from llamon_agent.tools import AgentRequest
from rules import services as rule_services
from servers.models import McpServer
from tests.conftest import ROOT, celery_worker
from tests.support.runs import wait_for_run

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]
MISBEHAVING = str(Path(ROOT) / "tests" / "servers" / "misbehaving.py")


def _echo_agent(make_user) -> Agent:
    author = make_user("editor")
    McpServer.objects.create(
        mcp_id="echoes",
        transport="stdio",
        command=sys.executable,
        args=[MISBEHAVING],
        timeout_s=10,
        tools=[{"name": "echo", "description": "", "input_schema": {}}],
    )
    rule_set = rule_services.rule_set_create(actor=author, name="echo-rules")
    rule_services.rule_create(
        actor=author,
        rule_set=rule_set,
        name="echo_rule",
        mcp_id="echoes",
        tool_name="echo",
        when='"hi" in query',
        params='{"value": query}',
    )
    return Agent.objects.create(
        name="echoer",
        system_prompt="p",
        rule_set=rule_set,
        rule_set_mode="draft",
        model_provider="scripted",
        model_script=[{"content": "done"}],
    )


def _run(agent: Agent) -> tuple[Run, list[tuple[str, str, str]]]:
    run = services.run_create(actor=None, agent=agent, request=AgentRequest(query="hi there"))
    run = wait_for_run(run.pk)
    assert run.status == Run.Status.SUCCEEDED, run.error
    return run, list(run.steps.order_by("seq").values_list("kind", "name", "status"))


def test_the_first_run_after_start_up_finds_its_server_warm(redis_publisher, make_user) -> None:
    agent = _echo_agent(make_user)  # exists before the worker starts
    with celery_worker(redis_publisher) as (_, output):
        output.wait_for("MCP warm-up: server 'echoes' ready", timeout_s=60)
        _, steps = _run(agent)
    assert not [s for s in steps if s[1].startswith("connect ")], steps
    assert ("rule", "echo_rule", "ok") in steps


def test_a_cold_server_is_a_connect_step_of_the_run_and_only_the_first(redis_publisher, make_user) -> None:
    with celery_worker(redis_publisher) as (_, output):
        output.wait_for("MCP warm-up: done, 0 server(s) warm", timeout_s=60)
        agent = _echo_agent(make_user)  # made after the warm-up: its server is cold
        _, first = _run(agent)
        _, second = _run(agent)
    names = [name for _, name, _ in first]
    assert ("node", "connect echoes", "ok") in first
    assert names.index("connect echoes") < names.index("echo_rule")  # before the pre-step's call
    assert ("rule", "echo_rule", "ok") in first
    assert not [s for s in second if s[1].startswith("connect ")], second
