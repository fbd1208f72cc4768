"""A finished run as a worker leaves it: the Run row (real input, rule set name and ref) and the steps
the engine's pre-step emits through the product's own step sink (agents.sink.DbStepSink), masked by
the privacy settings in force. Tools are not contacted: the backend answers each call."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from agents.models import Agent, Run
from agents.redaction import redactor
from agents.sink import DbStepSink
from core.content_hash import sha256
from llamon_agent.prestep import StaticToolBackend, run_prestep
from llamon_agent.tools import AgentRequest, ToolInfo
from rules import engine
from rules.models import RuleSet


def record_run(
    rule_set: RuleSet,
    query: str,
    *,
    context: dict[str, Any] | None = None,
    agent: Agent | None = None,
    age: timedelta = timedelta(hours=1),
    snapshot: list[dict[str, Any]] | None = None,
    served_hash: str | None = None,
) -> Run:
    """A finished run whose pre-step (of ``snapshot``, default: the latest version) ran through the real engine.

    The run keeps the served rules' content hash as the worker does (``served_hash``: another one).
    """
    version = rule_set.versions.order_by("-number").first()
    served_version = version if snapshot is None else None
    snapshot = snapshot if snapshot is not None else list(version.content)
    context = context or {}
    run = Run.objects.create(
        agent=agent,
        agent_name=agent.name if agent else "",
        status=Run.Status.SUCCEEDED,
        query=query,
        context=context,
        user_id=str(context.get("userId", "")),
        chatbot_id=str(context.get("chatbotId", "")),
        rule_set_name=rule_set.name,
        rule_set_ref=f"v{version.number}" if served_version else "draft@1",
        rule_set_hash=sha256(snapshot) if served_hash is None else served_hash,
        rule_set_version=served_version,
    )
    Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - age)
    servers = engine.servers_by_id(engine.snapshot_mcp_ids(snapshot))
    tools = {
        mcp_id: [ToolInfo(t["name"], t.get("description", ""), t.get("input_schema", {})) for t in s.tools]
        for mcp_id, s in servers.items()
    }
    backend = StaticToolBackend(tools, call=lambda mcp_id, tool, params: {"ok": True})
    run_prestep(
        engine.compile_snapshot(snapshot),
        AgentRequest(query=query, context=context),
        backend=backend,
        sink=DbStepSink(run, redact=redactor()),
    )
    return run
