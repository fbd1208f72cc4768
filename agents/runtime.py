"""Running one claimed run: models become engine types, the engine runs, the outcome is stored.

Called on a Celery worker by agents.services.run_execute; nothing here is a view or a task.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.utils.translation import gettext as _

from agents import rollout_runtime as rollout
from agents.checks import agent_model_problem, connection_check
from agents.errors import AgentError
from agents.models import Agent, Run
from agents.redaction import run_redactor
from agents.sink import DbStepSink
from core.content_hash import sha256
from llamon_agent.otel import otel_sink
from llamon_agent.tools import AgentRequest
from llamon_agent.trace import MultiSink
from rules import engine
from rules.models import RuleSetVersion
from servers.urlguard import configured_policy

logger = logging.getLogger(__name__)
TIMED_OUT_MESSAGE = "The run took longer than {seconds} s and was stopped."


@dataclass(frozen=True)
class RulesRef:
    """Which rules an agent runs: the snapshot and how the run records it (``version``: a
    published version's rules, kept per process; None for the draft)."""

    snapshot: list[dict[str, Any]]
    name: str
    ref: str
    content_hash: str
    version: engine.VersionRules | None = None

    def compiled(self) -> Any:
        return self.version.compiled() if self.version is not None else engine.compile_snapshot(self.snapshot)

    def mcp_ids(self) -> list[str]:
        return self.version.mcp_ids if self.version is not None else engine.snapshot_mcp_ids(self.snapshot)


def version_ref(name: str, version: RuleSetVersion) -> RulesRef:
    """A published version as a run's rules (read and compiled once per process: engine.version_rules)."""
    rules = engine.version_rules(version)
    return RulesRef(rules.snapshot, name, f"v{version.number}", version.content_hash, rules)


def agent_rules(agent: Agent) -> RulesRef:
    """The snapshot an agent runs now: its pinned version, the latest published one, or the draft."""
    return _agent_rules(agent)[0]


def _agent_rules(agent: Agent) -> tuple[RulesRef, RuleSetVersion | None]:
    """agent_rules and the published version it is (None: the draft, or no rule set).

    A version's content is read from the database only the first time this process runs it."""
    rule_set = agent.rule_set
    if rule_set is None:
        return RulesRef([], "", "", ""), None
    if agent.rule_set_mode == Agent.RuleSetMode.DRAFT:
        snapshot = engine.rule_set_snapshot(rule_set)
        return RulesRef(snapshot, rule_set.name, f"draft@{rule_set.revision}", sha256(snapshot)), None
    if agent.rule_set_mode == Agent.RuleSetMode.PINNED:
        version = agent.pinned_version
        if version is None:
            raise AgentError(
                _("The agent pins no version of rule set %(name)r: choose one or follow the latest.")
                % {"name": rule_set.name}
            )
    else:
        version = rule_set.versions.order_by("-number").defer("content").first()
        if version is None:
            raise AgentError(
                _(
                    "Rule set %(name)r has no published version yet: publish it, or let the agent use the draft."
                )
                % {"name": rule_set.name}
            )
    return version_ref(rule_set.name, version), version


@dataclass(frozen=True)
class Served:
    """The published version that serves a run (None: the draft) and whether it is the candidate."""

    version: RuleSetVersion | None
    candidate: bool


def run_versions(agent: Agent) -> None:
    """Read the versions ``agent`` pins, rolls out and shadows (those set), content deferred, in one
    query, and keep them on ``agent`` as select_related would (for an agent that uses none, no query)."""
    names = ["rollout_version", "shadow_version"]
    if agent.rule_set_mode == Agent.RuleSetMode.PINNED:
        names.append("pinned_version")
    wanted = {name: getattr(agent, f"{name}_id") for name in names}
    wanted = {name: pk for name, pk in wanted.items() if pk is not None}
    if not wanted:
        return
    found = {v.pk: v for v in RuleSetVersion.objects.filter(pk__in=set(wanted.values())).defer("content")}
    for name, pk in wanted.items():
        if pk in found:  # else (deleted since) the field reads it as before
            setattr(agent, name, found[pk])


def run_rules(agent: Agent, run: Run) -> tuple[Any, Served]:
    """The rules a run uses and what served it: the stable version, or a rollout's candidate."""
    candidate = agent.rollout_version
    if (
        candidate is not None
        and agent.rule_set is not None
        and candidate.rule_set_id == agent.rule_set_id
        and rollout.serves_candidate(agent, session_id=run.session_id, chatbot_id=run.chatbot_id)
    ):
        return version_ref(agent.rule_set.name, candidate), Served(candidate, True)
    rules, version = _agent_rules(agent)
    return rules, Served(version, False)


def agent_spec(agent: Agent, rules: RulesRef):
    """The engine's AgentSpec for a Django Agent."""
    from llamon_agent.guardrails import InputGuardrail, OutputGuardrail, mask_preset
    from llamon_agent.models import ModelConfig
    from llamon_agent.react import AgentSpec

    return AgentSpec(
        name=agent.name,
        system_prompt=agent.system_prompt,
        rules=rules.compiled(),
        model=ModelConfig(**model_settings(agent)),
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


def model_settings(agent: Agent) -> dict[str, Any]:
    """The agent's ModelConfig fields. An openai-compatible model's URL and key variable come from
    its connection only, checked here on the worker, where the key is read: whatever route saved
    the agent, the key goes nowhere an admin did not pair it with (docs/security.md)."""
    if (problem := agent_model_problem(agent)) is not None:
        raise AgentError(problem)
    settings_: dict[str, Any] = {"provider": agent.model_provider, "temperature": agent.temperature}
    if agent.model_provider == Agent.Provider.SCRIPTED:
        settings_["script"] = agent.model_script or None
    if agent.model_provider != Agent.Provider.OPENAI:
        return {**settings_, "api_key_env": None}
    connection = agent.model_connection
    assert connection is not None  # agent_model_problem said so
    return {
        **settings_,
        "model": agent.model_name,
        "base_url": connection.base_url,
        "api_key_env": connection.api_key_env or None,  # no key: local servers (vLLM, Ollama)
        "max_tokens": connection.max_tokens,
    }


class soft_limit_watch:  # noqa: N801 (a context manager used like a function)
    """Notes whether Celery's soft time limit fired during the block.

    Celery signals the soft limit with SIGUSR1 to the worker child, whose handler raises
    SoftTimeLimitExceeded wherever the code is; the engine catches it like any error of the
    stage it interrupts. This wraps that handler (main thread, a handler installed) to keep a
    note; elsewhere (tests in-process, threads) it does nothing and ``fired`` stays False.
    """

    def __init__(self) -> None:
        self.fired = False
        self._previous: Any = None

    def __enter__(self) -> soft_limit_watch:
        if threading.current_thread() is not threading.main_thread():
            return self
        previous = signal.getsignal(signal.SIGUSR1)
        if callable(previous):

            def noted(signum: int, frame: Any) -> None:
                self.fired = True
                previous(signum, frame)

            self._previous = previous
            signal.signal(signal.SIGUSR1, noted)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGUSR1, self._previous)


@dataclass(frozen=True)
class RunEnd:
    """How a run ended, for agents.services.run_finish to record (the runtime writes no outcome)."""

    status: str
    answer: str = ""
    error: str = ""
    error_kind: str = ""
    counts: dict[str, int] = field(default_factory=dict)

    def fields(self) -> dict[str, Any]:
        """The keyword arguments of run_finish."""
        return {
            "status": self.status,
            "answer": self.answer,
            "error": self.error,
            "error_kind": self.error_kind,
            **self.counts,
        }


def execute_claimed_run(*, run_id: int) -> RunEnd:
    """Execute a run already claimed by this worker and say how it ended (the caller records it)."""
    from llamon_agent.react import run_agent, run_error_kind

    # The versions the agent pins, rolls out and shadows come in a query of their own, when it
    # uses any (run_versions): joined here, they cost every run more to compile than that query.
    run = Run.objects.select_related("agent", "agent__model_connection", "agent__rule_set").get(pk=run_id)
    agent = run.agent
    if agent is None:
        return RunEnd(Run.Status.FAILED, error="The agent of this run was deleted.", error_kind="config")
    try:
        if agent.model_provider == Agent.Provider.OPENAI and agent.model_connection is not None:
            # Again at run time: what a name resolves to, and the allow-list, can change.
            connection_check(agent.model_connection)
        run_versions(agent)
        rules, served = run_rules(agent, run)  # the stable version, or a rollout's candidate
        spec = agent_spec(agent, rules)
    except (AgentError, ValueError) as exc:
        return RunEnd(Run.Status.FAILED, error=getattr(exc, "message", str(exc)), error_kind="config")
    redact = run_redactor(run)  # what the input's masks hide stays hidden where tools echo it
    # Batched: local steps are written with the next call's step, the rest when the run ends
    # (sink.flush below); a claimed run has no steps yet, and its created_at was just read. What
    # served the run is stored with its first write, before anything reaches a server or a model.
    sink = DbStepSink(
        run,
        redact=redact,
        batch=True,
        created_at=run.created_at,
        run_fields={
            "rule_set_name": rules.name,
            "rule_set_ref": rules.ref,
            "rule_set_hash": rules.content_hash,
            "rule_set_version": served.version,
            "rollout_candidate": served.candidate,
        },
    )
    # Cancel requests are read once per step: the engine asks before each stage, and asking
    # again with no step begun or ended since (the claimed run was just read; the model's set-up,
    # then the input guardrail's check) cannot change what the run does next. Nothing reaches a
    # server or a model without a step begun since the last read (the input guardrail is always
    # a step here: agent_spec gives every run one), so a cancel is seen before the next call.
    read_at, cancelled = sink.events, run.cancel_requested
    reading = threading.Lock()  # a ReAct turn's tools start in parallel threads

    def should_cancel() -> bool:
        nonlocal read_at, cancelled
        with reading:
            if not cancelled and sink.events != read_at:
                read_at = sink.events
                cancelled = Run.objects.filter(pk=run_id, cancel_requested=True).exists()
            return cancelled

    try:  # from here on, what the sink holds is written whatever happens
        # The OpenTelemetry export (None: off).
        exported = otel_sink(agent_name=agent.name, run_id=run_id, source="worker", redact=redact)
        mcp_ids = set(rules.mcp_ids()) | set(spec.react_mcp_ids)
        run_sink = MultiSink(sink, exported) if exported is not None else sink  # connect steps are spans too
        if run.replay_of_id is not None:  # a replay: the recorded outputs, no server (agents.replay)
            from agents.replay import replay_backend

            backend = replay_backend(run, mcp_ids)
            react_tools = backend.langchain_tools(spec.react_mcp_ids)
        else:
            backend = engine.live_backend(engine.servers_by_id(mcp_ids))
            connect_cold_servers(backend.pool, sorted(backend.mcp_ids), run_sink)
            react_tools = _react_tools(backend, spec.react_mcp_ids)

        request = AgentRequest(
            query=run.query, context=run.context, a2a_data=run.a2a_data, a2a_files=run.a2a_files
        )
        with soft_limit_watch() as soft_limit:
            result = run_agent(
                spec,
                request,
                backend=backend,
                react_tools=react_tools,
                sink=run_sink,
                should_cancel=should_cancel,
            )
    finally:
        sink.flush()  # the steps it holds, before the run is finished
    if exported is not None:
        exported.finish(result.status, error=result.error)
    if served.version is None or served.version.pk != agent.shadow_version_id:
        # A run the shadow version served itself says nothing of how it differs from stable.
        rollout.shadow_after_run(agent=agent, run_id=run_id, request=request, prestep=result.prestep)
    status = {"succeeded": Run.Status.SUCCEEDED, "cancelled": Run.Status.CANCELLED}.get(
        result.status, Run.Status.FAILED
    )
    error, error_kind = redact(result.error or ""), run_error_kind(result)
    if result.status == "failed" and soft_limit.fired:
        # Celery's soft limit raised inside the engine (a tool listing or call, a model call),
        # which recorded it as a failure of that stage: the run ran out of time.
        status, error_kind = Run.Status.TIMED_OUT, "timeout"
        error = f"{TIMED_OUT_MESSAGE.format(seconds=settings.LLAMON_RUN_SOFT_LIMIT_S)} ({error})"
    return RunEnd(
        status,
        answer=redact(result.answer or ""),
        error=error,
        error_kind="" if status == Run.Status.SUCCEEDED else error_kind,
        counts={
            "llm_calls": result.llm_calls,
            "tool_calls": result.tool_calls,
            "prestep_calls": result.prestep.calls if result.prestep else 0,
        },
    )


def _react_tools(backend: Any, mcp_ids: list[str]) -> list[Any]:
    """LangChain tools of the servers the ReAct loop may call (pooled sessions)."""
    tools: list[Any] = []
    for mcp_id in mcp_ids:
        found = backend.tools_for(mcp_id)
        if found:
            tools.extend(found)
    return tools


# --------------------------------------------------------------------------- warm MCP sessions

WARM_UP_BUDGET_S = 60.0  # the whole warm-up of one worker process, in the background


def connect_cold_servers(pool: Any, mcp_ids: Iterable[str], sink: Any) -> None:
    """Open the sessions a run will use before it starts; each cold one is its own "connect" step.

    A warm session (the worker's start-up warmed it, or an earlier run) costs nothing and shows
    nothing. A server that cannot be reached is a failed connect step; the run goes on and the
    pre-step reports its calls to that server as it always did.
    """
    from llamon_agent.mcp import McpError
    from llamon_agent.trace import span

    for mcp_id in pool.cold_sync(list(mcp_ids)):  # one trip to the pool's loop for all of them
        with span(
            sink, "node", f"connect {mcp_id}", input={"mcp_id": mcp_id}, meta={"mcp_id": mcp_id}
        ) as step:
            try:
                step.output = {"tools": len(pool.list_tools_sync(mcp_id))}
            except McpError as exc:
                step.fail(str(exc))


def agent_servers() -> list[Any]:
    """The enabled MCP servers any agent uses now (its rules' servers and its ReAct servers)."""
    mcp_ids: set[str] = set()
    agents = (
        Agent.objects.select_related("rule_set", "pinned_version")
        .defer("pinned_version__content")
        .prefetch_related("react_servers")
    )
    for agent in agents:
        try:
            mcp_ids |= set(agent_rules(agent).mcp_ids())
        except AgentError:
            pass  # an agent that cannot run now has nothing to warm
        mcp_ids |= {server.mcp_id for server in agent.react_servers.all()}
    return [server for server in engine.servers_by_id(mcp_ids).values() if server.enabled]


def warm_pool(budget_s: float = WARM_UP_BUDGET_S) -> list[str]:
    """Open this process's sessions to the agents' servers; returns the mcp_ids now warm.

    Bounded by ``budget_s`` overall (each connect also by the pool's own timeout); a server that
    fails is logged and skipped, so that runs connect to it themselves (a "connect" step).
    """
    from django.db import connection

    from servers.pool import pool_for_server

    deadline = time.monotonic() + budget_s
    warm: list[str] = []
    try:
        for server in agent_servers():
            if time.monotonic() >= deadline:
                logger.warning(
                    "MCP warm-up: out of time (%.0f s) before server '%s'", budget_s, server.mcp_id
                )
                break
            t0 = time.perf_counter()
            try:
                pool_for_server(server).list_tools_sync(server.mcp_id)
            except Exception as exc:  # any failure: log it, never stop the worker
                logger.warning("MCP warm-up: server '%s' failed: %s", server.mcp_id, exc)
                continue
            warm.append(server.mcp_id)
            logger.info(
                "MCP warm-up: server '%s' ready in %.0f ms", server.mcp_id, (time.perf_counter() - t0) * 1000
            )
        logger.info("MCP warm-up: done, %d server(s) warm", len(warm))
    except Exception:
        logger.exception("MCP warm-up failed")
    finally:
        connection.close()  # this thread's own connection
    return warm


def warm_pool_in_background() -> threading.Thread:
    """Start :func:`warm_pool` on a daemon thread: worker start-up never waits for it."""
    thread = threading.Thread(target=warm_pool, name="llamon-mcp-warm-up", daemon=True)
    thread.start()
    return thread
