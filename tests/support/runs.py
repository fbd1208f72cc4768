"""Helpers for tests that run agents on real workers: wait for a run, the misbehaving MCP server."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from agents.models import Agent, Run
from rules import services as rule_services
from servers.models import McpServer

ROOT = Path(__file__).resolve().parents[2]
# An MCP server whose tools misbehave on request (hang, fail, answer slowly).
MISBEHAVING = str(ROOT / "tests" / "servers" / "misbehaving.py")


def wait_for_run(run_id: int, *, timeout_s: float = 60, until=lambda run: run.finished) -> Run:
    """The run once ``until(run)`` holds (by default: it finished); fails after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = Run.objects.get(pk=run_id)
        if until(run):
            return run
        time.sleep(0.1)
    raise AssertionError(
        f"run {run_id} did not reach the expected state; it is {Run.objects.get(pk=run_id).status}"
    )


def misbehaving_agent(
    author: Any,
    *,
    tool: str,
    when: str,
    params: str,
    timeout_s: int,
    name: str,
    rule_set_name: str,
    rule_name: str = "slow_rule",
    **agent_fields: Any,
) -> Agent:
    """A draft-mode agent ``name`` whose rule set's one rule calls ``tool`` of the misbehaving
    stdio server when ``when`` holds."""
    McpServer.objects.create(
        mcp_id="misbehaving",
        transport="stdio",
        command=sys.executable,
        args=[MISBEHAVING],
        timeout_s=timeout_s,
        tools=[{"name": tool, "description": "", "input_schema": {}}],
    )
    rule_set = rule_services.rule_set_create(actor=author, name=rule_set_name)
    rule_services.rule_create(
        actor=author,
        rule_set=rule_set,
        name=rule_name,
        mcp_id="misbehaving",
        tool_name=tool,
        when=when,
        params=params,
    )
    fields = {"system_prompt": "p", "rule_set_mode": "draft", **agent_fields}
    return Agent.objects.create(name=name, rule_set=rule_set, **fields)
