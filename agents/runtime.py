"""Running one claimed run: models become engine types, the engine runs, the outcome is stored.

Called on a Celery worker by agents.services.run_execute; nothing here is a view or a task.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agents.errors import AgentError
from agents.models import Agent, Run
from agents.services import llm_url_check, privacy_get, run_finish
from agents.sink import DbStepSink
from llamon_agent.otel import otel_sink
from llamon_agent.tools import AgentRequest
from llamon_agent.trace import MultiSink
from rules import engine
from rules.urlguard import configured_policy

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RulesRef:
    """Which rules an agent runs: the snapshot and how the run records it."""

    snapshot: list[dict[str, Any]]
    name: str
    ref: str
    content_hash: str


def agent_rules(agent: Agent) -> RulesRef:
    """The snapshot an agent runs now: its pinned version, the latest published one, or the draft."""
    rule_set = agent.rule_set
    if rule_set is None:
        return RulesRef([], "", "", "")
    if agent.rule_set_mode == Agent.RuleSetMode.DRAFT:
        snapshot = engine.rule_set_snapshot(rule_set)
        return RulesRef(snapshot, rule_set.name, f"draft@{rule_set.revision}", engine.sha256(snapshot))
    if agent.rule_set_mode == Agent.RuleSetMode.PINNED:
        version = agent.pinned_version
        if version is None:
            raise AgentError(
                f"The agent pins no version of rule set {rule_set.name!r}: choose one or follow the latest."
            )
    else:
        version = rule_set.versions.order_by("-number").first()
        if version is None:
            raise AgentError(
                f"Rule set {rule_set.name!r} has no published version yet: publish it, or let the agent use the draft."
            )
    return RulesRef(list(version.content), rule_set.name, f"v{version.number}", version.content_hash)


def agent_spec(agent: Agent, rules: RulesRef):
    """The engine's AgentSpec for a Django Agent."""
    from llamon_agent.guardrails import InputGuardrail, OutputGuardrail, mask_preset
    from llamon_agent.models import ModelConfig
    from llamon_agent.react import AgentSpec

    model = {"model": agent.model_name} if agent.model_name else {}
    return AgentSpec(
        name=agent.name,
        system_prompt=agent.system_prompt,
        rules=engine.compile_snapshot(rules.snapshot),
        model=ModelConfig(
            provider=agent.model_provider,
            **model,
            base_url=agent.model_base_url or None,
            api_key_env=agent.model_api_key_env or None,  # no key: local servers (vLLM, Ollama)
            temperature=agent.temperature,
            script=agent.model_script or None,
        ),
        input_guardrail=InputGuardrail(
            max_chars=agent.input_max_chars, blocked_patterns=list(agent.input_blocked_patterns)
        ),
        output_guardrail=OutputGuardrail(
            blocked_patterns=list(agent.output_blocked_patterns),
            masks=[mask_preset(name) for name in agent.output_masks],
        ),
        react_mcp_ids=[s.mcp_id for s in agent.react_servers.all()],
        max_iterations=agent.max_iterations,
        answer_from_prestep=agent.answer_from_prestep,
        url_policy=configured_policy(),  # the model's client connects only where this policy allows
    )


def redactor(*, patterns: list[str] | None = None, presets: list[str] | None = None) -> Callable[[Any], Any]:
    """The function applied to everything stored in steps (the privacy settings unless given)."""
    from llamon_agent.guardrails import as_masks, mask_preset, redact

    if patterns is None or presets is None:
        privacy = privacy_get()
        patterns, presets = list(privacy.redaction_patterns), list(privacy.mask_presets)
    masks = as_masks(patterns) + [mask_preset(name) for name in presets]  # compiled once per run
    return lambda value: redact(value, masks)


def execute_claimed_run(*, run_id: int) -> None:
    """Execute a run already claimed by this worker and record how it ended."""
    from llamon_agent.react import run_agent

    run = Run.objects.select_related("agent", "agent__rule_set", "agent__pinned_version").get(pk=run_id)
    agent = run.agent
    if agent is None:
        run_finish(
            run_id=run_id,
            status=Run.Status.FAILED,
            error="The agent of this run was deleted.",
            error_kind="config",
        )
        return
    try:
        if agent.model_provider == Agent.Provider.OPENAI:
            llm_url_check(agent.model_base_url)  # again at run time: what a name resolves to can change
        rules = agent_rules(agent)
        spec = agent_spec(agent, rules)
    except (AgentError, ValueError) as exc:
        run_finish(
            run_id=run_id,
            status=Run.Status.FAILED,
            error=getattr(exc, "message", str(exc)),
            error_kind="config",
        )
        return
    Run.objects.filter(pk=run_id).update(
        rule_set_name=rules.name, rule_set_ref=rules.ref, rule_set_hash=rules.content_hash
    )

    redact = redactor()
    sink = DbStepSink(run, redact=redact)
    exported = otel_sink(agent_name=agent.name, run_id=run_id, source="worker", redact=redact)  # None: off
    servers = engine.servers_by_id(set(engine.snapshot_mcp_ids(rules.snapshot)) | set(spec.react_mcp_ids))
    backend = engine.live_backend(servers)
    react_tools = _react_tools(backend, spec.react_mcp_ids)

    def should_cancel() -> bool:
        return Run.objects.filter(pk=run_id, cancel_requested=True).exists()

    request = AgentRequest(
        query=run.query, context=run.context, a2a_data=run.a2a_data, a2a_files=run.a2a_files
    )
    result = run_agent(
        spec,
        request,
        backend=backend,
        react_tools=react_tools,
        sink=MultiSink(sink, exported) if exported is not None else sink,
        should_cancel=should_cancel,
    )
    if exported is not None:
        exported.finish(result.status, error=result.error)
    status = {"succeeded": Run.Status.SUCCEEDED, "cancelled": Run.Status.CANCELLED}.get(
        result.status, Run.Status.FAILED
    )
    run_finish(
        run_id=run_id,
        status=status,
        answer=redact(result.answer or ""),
        error=redact(result.error or ""),
        error_kind=""
        if status == Run.Status.SUCCEEDED
        else ("guardrail" if result.status == "blocked" else result.status),
        llm_calls=result.llm_calls,
        tool_calls=result.tool_calls,
        prestep_calls=result.prestep.calls if result.prestep else 0,
    )


def _react_tools(backend: Any, mcp_ids: list[str]) -> list[Any]:
    """LangChain tools of the servers the ReAct loop may call (pooled sessions)."""
    tools: list[Any] = []
    for mcp_id in mcp_ids:
        found = backend.tools_for(mcp_id)
        if found:
            tools.extend(found)
    return tools
