"""The agent: input guardrail -> deterministic pre-step -> ReAct loop -> output guardrail -> answer.

Built on LangChain 1.x ``create_agent``; each stage is a middleware on the one agent graph:

* ``_InputGuardrailMiddleware.before_agent``: a refused query jumps to the end (no
  pre-step, no LLM).
* ``_PrestepMiddleware.before_agent`` runs :func:`run_prestep` and keeps its results in
  ``state["metadata"]["deterministic_results"]`` (the seed's key; ``AgentState`` has no
  ``metadata``, so its ``state_schema`` declares it). A pre-step error jumps to the end:
  the run fails with exactly the pre-step's message and the LLM is never called. Its
  ``wrap_model_call`` puts the ``확정 호출 결과`` block into the system message and, for
  "answer from pre-step results", takes the tools away.
* ``_TraceMiddleware.wrap_model_call`` / ``wrap_tool_call`` check for cancellation and the
  iteration limit, emit each step's start event *before* the call (a worker that dies
  mid-call leaves a running step behind) and its end event after.
* ``_OutputGuardrailMiddleware.after_agent`` checks and masks the final answer.

Why middleware rather than a hand-built StateGraph: the ReAct loop itself (model -> tools
-> model, tool-call routing, parallel tool calls, message bookkeeping) is exactly what
``create_agent`` already does; the stages only need hooks around it, and the wrap hooks are
the one place where "before the call" is reliable for both models and tools.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NotRequired

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse, hook_config
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.errors import GraphRecursionError

from llamon_agent.guardrails import InputGuardrail, OutputGuardrail, Verdict, safe_cut
from llamon_agent.models import (
    ModelConfig,
    ModelConfigError,
    make_chat_model,
    model_error_kind,
    model_error_message,
)
from llamon_agent.prestep import (
    CompiledRules,
    PrestepOutcome,
    ToolBackend,
    arun_prestep,
    compile_rules,
    inject_results,
    run_prestep,
)
from llamon_agent.tools import AgentRequest
from llamon_agent.trace import Span, TraceSink, jsonable, start_span
from llamon_agent.urlguard import UrlPolicy

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.tools import BaseTool
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.runtime import Runtime
    from langgraph.types import Command

logger = logging.getLogger("llamon_agent")

RunStatus = Literal["succeeded", "failed", "cancelled", "blocked"]
SUCCEEDED: RunStatus = "succeeded"
FAILED: RunStatus = "failed"
CANCELLED: RunStatus = "cancelled"
BLOCKED: RunStatus = "blocked"

CANCELLED_MESSAGE = "the run was cancelled"
EMPTY_ANSWER = "the model returned an empty answer"
LLM_FAILED = "LLM call failed"

MESSAGE_CHAR_LIMIT = 4000  # per message in an llm step's input (the history is re-sent each turn)
TOOL_DESCRIPTION_CHAR_LIMIT = 500
TOOL_RESULT_CHAR_LIMIT = 20000


class RunCancelled(Exception):
    """Raised inside a run when ``should_cancel()`` says stop; the run ends ``cancelled``."""


class IterationLimitExceeded(RuntimeError):
    """The model still wanted to act after ``max_iterations`` model calls."""


class ModelCallError(RuntimeError):
    """A model call failed (endpoint down, HTTP error, garbage); the message is readable. ``kind``:
    ``"rate_limit"`` when the endpoint refused it for its rate limit (HTTP 429), else ``""``."""

    def __init__(self, message: str, *, kind: str = "") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class AgentSpec:
    """What an agent is, engine-side: prompt, pre-step rules, model, guardrails, limits."""

    name: str
    system_prompt: str
    rules: Sequence[Any] | CompiledRules
    model: ModelConfig
    input_guardrail: InputGuardrail | None = None
    output_guardrail: OutputGuardrail | None = None
    react_mcp_ids: Sequence[str] = ()  # servers whose tools the ReAct loop may call
    max_iterations: int = 6  # model calls per run
    answer_from_prestep: bool = (
        False  # docs/agents.md: one LLM call with no tools when the pre-step found results
    )
    # Where the model's client may connect (None: llamon_agent.net.DEFAULT_POLICY).
    url_policy: UrlPolicy | None = None

    def __post_init__(self) -> None:
        if self.max_iterations < 1:
            raise ValueError("max_iterations must be at least 1")


@dataclass
class AgentResult:
    """How a run ended: status, the answer or the error, the pre-step outcome, counts."""

    status: RunStatus
    answer: str | None
    error: str | None
    prestep: PrestepOutcome | None
    llm_calls: int
    tool_calls: int
    usage: dict[str, int] = field(default_factory=dict)  # summed token usage, when reported
    duration_ms: float = 0.0
    # Why a failed run failed, when it is a refusal any version would get: "rate_limit" (the model
    # endpoint's HTTP 429). "" otherwise (a failure of this agent's own: pre-step, tool, model).
    error_kind: str = ""

    def to_json(self) -> dict[str, Any]:
        """The result as a JSON-ready dict (pre-step results included, records left out)."""
        return {
            "status": self.status,
            "answer": self.answer,
            "error": self.error,
            "prestep": None
            if self.prestep is None
            else {
                "ok": self.prestep.ok,
                "error": self.prestep.error,
                "calls": self.prestep.calls,
                "results": jsonable(self.prestep.results),
                "duration_ms": self.prestep.duration_ms,
            },
            "llm_calls": self.llm_calls,
            "tool_calls": self.tool_calls,
            "usage": dict(self.usage),
            "duration_ms": self.duration_ms,
        }


# --------------------------------------------------------------------------- one run


class _Run:
    """Everything one run shares between its middleware: config, sink, counters, outcome."""

    def __init__(
        self,
        spec: AgentSpec,
        request: AgentRequest,
        *,
        backend: ToolBackend,
        sink: TraceSink | None,
        should_cancel: Callable[[], bool] | None,
    ) -> None:
        self.spec = spec
        self.request = request
        self.backend = backend
        self.sink = sink
        self.should_cancel = should_cancel
        self.model_name = spec.model.display_name
        self.status: RunStatus | None = None
        self.error: str | None = None
        self.error_kind = ""
        self.answer: str | None = None
        self.answer_input: dict[str, Any] = {}  # where the answer came from (the answer step's input)
        self.prestep: PrestepOutcome | None = None
        self.answer_only = False
        self.stage = "start"
        self.llm_calls = 0
        self.tool_calls = 0
        self.usage: dict[str, int] = {}
        self.last_llm_span: str | None = None
        self.model: BaseChatModel | None = None  # this run's model and tools: the graph is shared
        self.tools: dict[str, BaseTool] = {}
        self.rules: CompiledRules = compile_rules([])
        self.started = time.perf_counter()
        # Tools of one model turn run in parallel threads: counters need the lock.
        self._lock = threading.Lock()

    # -- control

    def check_cancel(self) -> None:
        """Raise :class:`RunCancelled` when the caller asked to stop."""
        if self.should_cancel is not None and self.should_cancel():
            raise RunCancelled(CANCELLED_MESSAGE)

    def end(self, status: RunStatus, error: str | None = None) -> None:
        """Record how the run ended (the first ending wins)."""
        if self.status is None:
            self.status, self.error = status, error

    # -- input guardrail

    def input_stage(self) -> dict[str, Any] | None:
        self.stage = "input_guardrail"
        self.check_cancel()
        guard = self.spec.input_guardrail
        if guard is None:
            return None
        query = self.request.query
        s = start_span(
            self.sink,
            "guardrail",
            "input",
            input={"chars": len(query), "config": guard.to_json()},
        )
        verdict = guard.check(query)
        _finish_verdict(s, verdict)
        if verdict.allowed:
            return None
        self.end(BLOCKED, verdict.reason)
        return {"jump_to": "end"}

    # -- pre-step

    def prestep_kwargs(self) -> dict[str, Any]:
        self.stage = "prestep"
        self.check_cancel()
        return {"backend": self.backend, "sink": self.sink}

    def prestep_done(self, outcome: PrestepOutcome) -> dict[str, Any]:
        self.prestep = outcome
        update: dict[str, Any] = {"metadata": {"deterministic_results": outcome.results}}
        if not outcome.ok:
            # The error contract: exactly the pre-step's message, and no LLM call.
            self.end(FAILED, outcome.error)
            update["jump_to"] = "end"
            return update
        self.answer_only = self.spec.answer_from_prestep and bool(outcome.results)
        return update

    def shape_request(self, request: ModelRequest) -> ModelRequest:
        """The system message with the pre-step results; no tools when answering from them."""
        results = self.prestep.results if self.prestep is not None else []
        text = inject_results(self.spec.system_prompt, results)
        overrides: dict[str, Any] = {"system_message": SystemMessage(content=text) if text.strip() else None}
        overrides["model"] = self.model  # the cached graph holds the model it was built with
        if self.answer_only:
            overrides["tools"] = []
        return request.override(**overrides)

    def own_tool(self, request: ToolCallRequest) -> ToolCallRequest:
        """The call with this run's tool of that name (the cached graph holds another run's)."""
        tool = self.tools.get(request.tool_call["name"])
        return request if tool is None or tool is request.tool else request.override(tool=tool)

    # -- model calls

    def model_start(self, request: ModelRequest) -> Span:
        self.stage = "llm"
        self.check_cancel()
        limit = 1 if self.answer_only else self.spec.max_iterations
        with self._lock:
            if self.llm_calls >= limit:
                raise IterationLimitExceeded(
                    f"the agent did not finish within max_iterations={self.spec.max_iterations} "
                    f"model calls (the model kept calling tools)"
                )
            self.llm_calls += 1
            n = self.llm_calls
        messages: list[BaseMessage] = [request.system_message] if request.system_message is not None else []
        messages.extend(request.messages)
        s = start_span(
            self.sink,
            "llm",
            self.model_name,
            input={
                "messages": [_message_view(m) for m in messages],
                "tools": [_tool_view(t) for t in request.tools],
            },
            meta={
                "model": self.model_name,
                "provider": self.spec.model.provider,
                "iteration": n,
                "answer_from_prestep": self.answer_only,
            },
        )
        self.last_llm_span = s.id
        return s

    def model_failed(self, s: Span, exc: Exception) -> ModelCallError:
        reason = model_error_message(exc, self.spec.model)
        s.fail(reason)
        s.finish()
        return ModelCallError(f"{LLM_FAILED}: {reason}", kind=model_error_kind(exc))

    def model_done(self, s: Span, response: ModelResponse) -> ModelResponse:
        message = _ai_message(response)
        if message is None:
            reason = f"the model returned {type(response).__name__}, not an assistant message"
            s.fail(reason)
            s.finish()
            raise ModelCallError(f"{LLM_FAILED}: {reason}")
        if self.answer_only and message.tool_calls:
            # No tools were offered: a tool call here cannot run. Keep the text, drop the calls,
            # and say so in the trace, so the run still ends after this one call.
            s.meta["dropped_tool_calls"] = [_call_view(c) for c in message.tool_calls]
            message = AIMessage(
                content=message.content,
                id=message.id,
                usage_metadata=message.usage_metadata,
                response_metadata=message.response_metadata,
            )
            response = ModelResponse(result=[message])
        usage = message.usage_metadata
        if usage:
            s.meta["usage"] = dict(usage)
            with self._lock:
                for key in ("input_tokens", "output_tokens", "total_tokens"):
                    if isinstance(usage.get(key), int):
                        self.usage[key] = self.usage.get(key, 0) + usage[key]
        s.output = {"content": _text(message), "tool_calls": [_call_view(c) for c in message.tool_calls]}
        s.finish()
        return response

    # -- tool calls

    def tool_start(self, request: ToolCallRequest) -> Span:
        self.stage = "tool"
        self.check_cancel()
        call = request.tool_call
        with self._lock:
            self.tool_calls += 1
        return start_span(
            self.sink,
            "tool",
            str(call.get("name", "")),
            input={"args": call.get("args", {}), "tool_call_id": call.get("id")},
            parent=self.last_llm_span,
            meta={"known": request.tool is not None},
        )

    def tool_failed(self, s: Span, request: ToolCallRequest, exc: Exception) -> ToolMessage:
        # A failing tool is the model's problem to handle (ask again, apologise), as in any
        # ReAct loop: it gets the error as the tool's result and the run goes on.
        reason = " ".join(str(exc).split()) or type(exc).__name__
        s.fail(reason)
        s.finish()
        call = request.tool_call
        return ToolMessage(
            content=f"Error: {reason}",
            tool_call_id=call.get("id") or "",
            name=call.get("name"),
            status="error",
        )

    def tool_done(self, s: Span, result: ToolMessage | Command[Any]) -> ToolMessage | Command[Any]:
        if isinstance(result, ToolMessage):
            s.output = _truncate(_content_text(result.content), TOOL_RESULT_CHAR_LIMIT)
            if result.status == "error":
                s.fail(_truncate(_content_text(result.content), 500))
            artifact = result.artifact if isinstance(result.artifact, dict) else {}
            if warnings := artifact.get("schema_warnings"):  # an MCP tool's result off its output schema
                s.meta["warnings"] = [str(w) for w in warnings]
                logger.warning(
                    "tool %s: the result does not fit its output schema: %s",
                    result.name,
                    "; ".join(s.meta["warnings"]),
                )
        else:  # a Command from a tool that updates state
            s.output = jsonable(result)
        s.finish()
        return result

    # -- output guardrail and the answer

    def output_stage(self, state: dict[str, Any]) -> dict[str, Any] | None:
        if self.status is not None:  # blocked or failed before the loop: nothing to answer
            return None
        self.stage = "output_guardrail"
        self.check_cancel()
        messages = state.get("messages") or []
        last = messages[-1] if messages else None
        if not isinstance(last, AIMessage):
            self.end(FAILED, "the agent ended without an answer from the model")
            return None
        text = _text(last)
        if not text.strip():
            self.end(FAILED, EMPTY_ANSWER)
            return None
        guard = self.spec.output_guardrail
        # The answer step's input says where the answer came from, never the unmasked text itself.
        self.answer_input = {
            "from": "the model's last message",
            "answer_from_prestep": self.answer_only,  # the model answered from the results, no tools
            "chars": len(text),
            "output_guardrail": "off" if guard is None else "passed",
        }
        if guard is not None:
            s = start_span(
                self.sink, "guardrail", "output", input={"chars": len(text), "config": guard.to_json()}
            )
            verdict = guard.check(text)
            _finish_verdict(s, verdict)
            if not verdict.allowed:
                self.end(BLOCKED, verdict.reason)
                return None
            if verdict.text != text:
                text = verdict.text
                self.answer_input["output_guardrail"] = "masked"
                self.answer = text
                self.end(SUCCEEDED)
                # Same id: add_messages replaces the unmasked reply in the state.
                return {"messages": [AIMessage(content=text, id=last.id)]}
        self.answer = text
        self.end(SUCCEEDED)
        return None

    # -- endings

    def failed_with(self, exc: BaseException) -> None:
        """Map an exception that ended the graph to a status and a readable error."""
        if isinstance(exc, RunCancelled | asyncio.CancelledError):
            self.end(CANCELLED, CANCELLED_MESSAGE)
        elif isinstance(exc, IterationLimitExceeded | ModelCallError | ModelConfigError):
            if self.status is None and isinstance(exc, ModelCallError):
                self.error_kind = exc.kind
            self.end(FAILED, str(exc))
        elif isinstance(exc, GraphRecursionError):
            self.end(
                FAILED,
                f"the agent did not finish within max_iterations={self.spec.max_iterations} "
                "(graph recursion limit reached)",
            )
        else:
            logger.exception("agent %r failed in stage %s", self.spec.name, self.stage)
            self.end(FAILED, f"internal error in stage {self.stage}: {type(exc).__name__}: {exc}")

    def result(self) -> AgentResult:
        """Emit the closing trace event and freeze the outcome."""
        status = self.status or FAILED
        error = self.error
        if self.status is None:
            error = "the agent ended without a result"
        if status == SUCCEEDED:
            s = start_span(
                self.sink,
                "answer",
                "answer",
                input=self.answer_input or None,
                meta={"model": self.model_name},
            )
            s.output = self.answer
            s.finish()
        elif status in (FAILED, CANCELLED):
            s = start_span(self.sink, "error", status, meta={"stage": self.stage})
            s.fail(error or status)
            s.finish()
        return AgentResult(
            status=status,
            answer=self.answer if status == SUCCEEDED else None,
            error=error,
            prestep=self.prestep,
            llm_calls=self.llm_calls,
            tool_calls=self.tool_calls,
            usage=dict(self.usage),
            duration_ms=round((time.perf_counter() - self.started) * 1000.0, 3),
            error_kind=self.error_kind if status == FAILED else "",
        )


def run_error_kind(result: AgentResult) -> str:
    """The kind a run's end is recorded with (the worker and a served agent alike): "" for a success,
    "guardrail" for an input or output the guardrails refused, "rate_limit" for a model call the
    endpoint refused for its rate limit, else the status ("failed", "cancelled"). The first two are
    refusals any version would give the same traffic: the rollout guard leaves them out."""
    if result.status == SUCCEEDED:
        return ""
    if result.status == BLOCKED:
        return "guardrail"
    return result.error_kind or result.status


# --------------------------------------------------------------------------- middleware


class _State(AgentState[Any]):
    metadata: NotRequired[dict[str, Any]]


# The run being executed: the graph (and its middleware) is shared by every run of a spec, so
# per-run state is never held by the middleware. LangGraph runs nodes and parallel tool calls
# in copies of the invoking context, so each run (thread or task) sees its own.
_CURRENT_RUN: contextvars.ContextVar[_Run] = contextvars.ContextVar("llamon_run")


class _RunMiddleware(AgentMiddleware[Any, Any, Any]):
    @property
    def run(self) -> _Run:
        return _CURRENT_RUN.get()


class _InputGuardrailMiddleware(_RunMiddleware):
    @hook_config(can_jump_to=["end"])
    def before_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self.run.input_stage()

    @hook_config(can_jump_to=["end"])
    async def abefore_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self.run.input_stage()


class _PrestepMiddleware(_RunMiddleware):
    state_schema = _State

    @property
    def rules(self) -> CompiledRules:
        return self.run.rules

    @hook_config(can_jump_to=["end"])
    def before_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        outcome = run_prestep(self.rules, self.run.request, **self.run.prestep_kwargs())
        return self.run.prestep_done(outcome)

    @hook_config(can_jump_to=["end"])
    async def abefore_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        outcome = await arun_prestep(self.rules, self.run.request, **self.run.prestep_kwargs())
        return self.run.prestep_done(outcome)

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        return handler(self.run.shape_request(request))

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        return await handler(self.run.shape_request(request))


class _TraceMiddleware(_RunMiddleware):
    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        s = self.run.model_start(request)
        try:
            response = handler(request)
        except Exception as exc:
            raise self.run.model_failed(s, exc) from exc
        return self.run.model_done(s, response)

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        s = self.run.model_start(request)
        try:
            response = await handler(request)
        except Exception as exc:
            raise self.run.model_failed(s, exc) from exc
        return self.run.model_done(s, response)

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]]
    ) -> ToolMessage | Command[Any]:
        request = self.run.own_tool(request)
        s = self.run.tool_start(request)
        try:
            result = handler(request)
        except Exception as exc:
            return self.run.tool_failed(s, request, exc)
        return self.run.tool_done(s, result)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        request = self.run.own_tool(request)
        s = self.run.tool_start(request)
        try:
            result = await handler(request)
        except Exception as exc:
            return self.run.tool_failed(s, request, exc)
        return self.run.tool_done(s, result)


class _OutputGuardrailMiddleware(_RunMiddleware):
    def after_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self.run.output_stage(state)

    async def aafter_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self.run.output_stage(state)


# --------------------------------------------------------------------------- entry points


def run_agent(
    spec: AgentSpec,
    request: AgentRequest,
    *,
    backend: ToolBackend,
    react_tools: list[BaseTool] | None = None,
    sink: TraceSink | None = None,
    should_cancel: Callable[[], bool] | None = None,
    chat_model: BaseChatModel | None = None,
) -> AgentResult:
    """Run ``spec`` on ``request`` through all five stages; never raises for a run that fails."""
    run = _Run(spec, request, backend=backend, sink=sink, should_cancel=should_cancel)
    token = _CURRENT_RUN.set(run)
    try:
        agent = _build(spec, run, react_tools, chat_model)
        agent.invoke(_input(request), config=_config(spec))
    except Exception as exc:
        run.failed_with(exc)
    finally:
        _CURRENT_RUN.reset(token)
    return run.result()


async def arun_agent(
    spec: AgentSpec,
    request: AgentRequest,
    *,
    backend: ToolBackend,
    react_tools: list[BaseTool] | None = None,
    sink: TraceSink | None = None,
    should_cancel: Callable[[], bool] | None = None,
    chat_model: BaseChatModel | None = None,
) -> AgentResult:
    """:func:`run_agent` for async callers (the pre-step's blocking calls go to a thread)."""
    run = _Run(spec, request, backend=backend, sink=sink, should_cancel=should_cancel)
    token = _CURRENT_RUN.set(run)
    try:
        agent = _build(spec, run, react_tools, chat_model)
        await agent.ainvoke(_input(request), config=_config(spec))
    except asyncio.CancelledError as exc:
        # The task itself was cancelled: record it (the sink gets its error event), then
        # let the cancellation propagate as asyncio expects.
        run.failed_with(exc)
        run.result()
        raise
    except Exception as exc:
        run.failed_with(exc)
    finally:
        _CURRENT_RUN.reset(token)
    return run.result()


GRAPH_CACHE_SIZE = 64  # agent graphs kept per process (one per spec and tool list)
_GRAPHS: OrderedDict[str, Any] = OrderedDict()
_GRAPHS_LOCK = threading.Lock()


def graph_key(spec: AgentSpec, model: Any, tools: Sequence[Any]) -> str:
    """A hash of what the agent graph is built from: the spec's model config, prompt and
    limits, the model's class and each tool's name, description and argument schema."""

    def schema(tool: Any) -> Any:
        args = getattr(tool, "args_schema", None)
        if isinstance(args, dict) or args is None:
            return args
        return args.model_json_schema() if hasattr(args, "model_json_schema") else repr(args)

    content = {
        "name": spec.name,
        "model": repr(spec.model),
        "model_class": f"{type(model).__module__}.{type(model).__qualname__}",
        "system_prompt": spec.system_prompt,
        "max_iterations": spec.max_iterations,
        "answer_from_prestep": spec.answer_from_prestep,
        "tools": [[t.name, t.description, schema(t)] for t in tools],
    }
    text = json.dumps(content, sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _build(
    spec: AgentSpec, run: _Run, react_tools: list[BaseTool] | None, chat_model: BaseChatModel | None
) -> Any:
    run.stage = "model"
    run.check_cancel()
    model = chat_model if chat_model is not None else make_chat_model(spec.model, url_policy=spec.url_policy)
    run.model_name = str(getattr(model, "model_name", None) or spec.model.display_name)
    tools = list(react_tools or [])
    run.model, run.tools, run.rules = model, {t.name: t for t in tools}, compile_rules(spec.rules)
    # The graph is the same for every run of a spec (~8 ms to build): cached, and holding no
    # per-run state (the middleware reads the run from _CURRENT_RUN; the run's own model and
    # tools replace the ones the graph was built with on every call).
    key = graph_key(spec, model, tools)
    with _GRAPHS_LOCK:
        graph = _GRAPHS.get(key)
        if graph is not None:
            _GRAPHS.move_to_end(key)
            return graph
    graph = create_agent(
        model,
        tools=tools,
        system_prompt=None,  # _PrestepMiddleware sets it on every call (with the results block)
        middleware=[
            _InputGuardrailMiddleware(),
            _PrestepMiddleware(),
            # After the pre-step middleware, so it traces the request as the model gets it.
            _TraceMiddleware(),
            _OutputGuardrailMiddleware(),
        ],
    )
    with _GRAPHS_LOCK:
        _GRAPHS[key] = graph
        while len(_GRAPHS) > GRAPH_CACHE_SIZE:
            _GRAPHS.popitem(last=False)
    return graph


def _input(request: AgentRequest) -> dict[str, Any]:
    return {"messages": [HumanMessage(content=request.query)]}


def _config(spec: AgentSpec) -> dict[str, Any]:
    # The iteration limit is enforced per model call by _Run.model_start; the graph's own
    # recursion limit (two super-steps per iteration plus the guardrail and pre-step nodes)
    # is only a backstop.
    return {"recursion_limit": 2 * spec.max_iterations + 10}


# --------------------------------------------------------------------------- trace views


def _finish_verdict(s: Span, verdict: Verdict) -> None:
    s.output = verdict.to_json()
    if not verdict.allowed:
        s.fail(verdict.reason or "blocked")
        s.meta["verdict"] = "blocked"
    else:
        s.meta["verdict"] = "allowed"
    s.finish()


_ROLES = {"system": "system", "human": "user", "ai": "assistant", "tool": "tool"}


def _message_view(message: BaseMessage) -> dict[str, Any]:
    view: dict[str, Any] = {
        "role": _ROLES.get(message.type, message.type),
        "content": _truncate(_content_text(message.content), MESSAGE_CHAR_LIMIT),
    }
    if isinstance(message, AIMessage) and message.tool_calls:
        view["tool_calls"] = [_call_view(c) for c in message.tool_calls]
    if isinstance(message, ToolMessage):
        view["tool_call_id"] = message.tool_call_id
        view["name"] = message.name
        if message.status == "error":
            view["status"] = "error"
    return view


def _tool_view(tool: Any) -> dict[str, Any]:
    if isinstance(tool, dict):  # a provider's built-in tool, or an OpenAI-format schema
        function = tool.get("function", tool)
        name, description = function.get("name", ""), function.get("description", "")
    else:
        name, description = getattr(tool, "name", ""), getattr(tool, "description", "")
    return {"name": str(name), "description": _truncate(str(description or ""), TOOL_DESCRIPTION_CHAR_LIMIT)}


def _call_view(call: Any) -> dict[str, Any]:
    return {"id": call.get("id"), "name": call.get("name"), "args": jsonable(call.get("args", {}))}


def _ai_message(response: Any) -> AIMessage | None:
    if isinstance(response, AIMessage):
        return response
    inner = getattr(response, "model_response", None)  # ExtendedModelResponse
    if inner is not None:
        response = inner
    for message in reversed(getattr(response, "result", None) or []):
        if isinstance(message, AIMessage):
            return message
    return None


def _text(message: BaseMessage) -> str:
    return _content_text(message.content)


def _content_text(content: Any) -> str:
    """Message content as text: strings as they are, content blocks' text joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            else:
                parts.append(str(jsonable(block)))
        return "\n".join(parts)
    return str(content)


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    at = safe_cut(text, limit)  # never half a card number: the masks could no longer see it
    return f"{text[:at]}… [truncated: {len(text) - at} more characters]"
