"""Serving a project over A2A with a2a-sdk: an agent card, ``SendMessage`` (1.0) and ``message/send`` (0.3).

``llamon run PATH`` comes here. The project is loaded, its MCP servers are bound from the
registry (a file or a llamon-web), and every A2A message goes through
:func:`llamon_agent.a2a.to_request` to a runner:

* react projects: :func:`llamon_agent.react.arun_agent` (guardrails, the deterministic
  pre-step on the pooled MCP sessions, the ReAct loop); the pre-step logs
  ``Deterministic pre-step 완료: N건`` per request on the ``llamon_agent`` logger;
* flow projects: ``build_graph(settings)`` once at start-up, then
  :func:`llamon_agent.flow.arun_flow` per request (node steps in the trace).

A blocking ``SendMessage``/``message/send`` is answered with one agent ``Message`` holding the
answer, or the error text for a failed run (the seed: a failed pre-step *answers* with its error
message); its metadata says ``{"status": ..., "error": ..., "errorKind": ...}``. A client that
streams (``SendStreamingMessage``/``message/stream``) or does not wait (``returnImmediately``;
0.3: ``blocking: false``) gets a ``Task`` instead, driven through a2a-sdk's ``TaskUpdater``:
submitted -> working (-> working "Deterministic pre-step 완료: N건") -> completed (the answer as
an artifact and as the final status message, with the same metadata), failed or canceled.
``tasks/get`` reads it from a :class:`BoundedTaskStore` while it is kept; ``tasks/cancel`` cancels
the run. With a trace URL each run is also sent to llamon-web (:mod:`llamon_agent.trace_http`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from a2a.server.context import ServerCallContext
from a2a.server.tasks import InMemoryTaskStore, TaskStore
from a2a.types import ListTasksRequest, ListTasksResponse, Task, TaskState

from llamon_agent.a2a import A2AFormatError, to_request
from llamon_agent.mcp.errors import McpError, RegistryError
from llamon_agent.otel import otel_sink, shutdown_tracer_provider
from llamon_agent.served_pool import served_pool
from llamon_agent.settings import (
    DEFAULT_A2A_TASK_BYTES_PER_CALLER,
    DEFAULT_A2A_TASK_TTL_S,
    DEFAULT_A2A_TASKS_KEPT,
)
from llamon_agent.tools import AgentRequest
from llamon_agent.trace import MultiSink, TraceEvent, TraceSink

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from llamon_agent.project import Project
    from llamon_agent.settings import Settings
    from llamon_agent.trace_http import HttpTraceExporter

logger = logging.getLogger("llamon_agent")

A2A_PROTOCOL_VERSION = "1.0"
# Also announced on the card: with a 0.3 interface a2a-sdk adds the 0.3 card fields (``url``,
# ``preferredTransport``, ``protocolVersion``) that 0.3 clients require; ``/`` answers both.
A2A_COMPAT_PROTOCOL_VERSION = "0.3"
FinishStatus = Literal["succeeded", "failed", "timed_out", "cancelled"]
# The JSON-RPC methods (1.0, 0.3) whose caller reads a stream of task events.
STREAMING_METHODS = frozenset({"SendStreamingMessage", "message/stream"})
TERMINAL_STATES = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_REJECTED,
    }
)


class ServeError(Exception):
    """The project cannot be served (registry missing or unreachable, build_graph failed); one readable line."""


@dataclass
class Outcome:
    """How one request ended, in the ingest API's terms."""

    status: FinishStatus
    answer: str
    error: str
    error_kind: str = ""
    duration_ms: float = 0.0

    @property
    def text(self) -> str:
        """What the A2A reply says: the answer, or the error for a failed run."""
        return self.answer if self.status == "succeeded" else self.error


class Runner(Protocol):
    """Answers one request (a react agent or a flow)."""

    name: str
    kind: Literal["react", "flow"]
    source: Literal["served", "flow"]
    description: str
    version: Mapping[str, str] | None

    async def answer(self, request: AgentRequest, sink: TraceSink | None) -> Outcome: ...


# --------------------------------------------------------------------------- runners


class ReactRunner:
    """A react project's agent on the process pool's MCP sessions."""

    kind: Literal["react", "flow"] = "react"
    source: Literal["served", "flow"] = "served"
    privacy_masks: Sequence[Any] = ()  # the privacy settings' masks for exported spans (privacy_masks)
    version: Mapping[str, str] | None = None  # the rule-set version served (project.served_version)

    def __init__(self, spec: Any, backend: Any, react_tools: list[Any], description: str = "") -> None:
        self.spec = spec
        self.name = spec.name
        self.backend = backend
        self.react_tools = react_tools
        self.description = description or f"{spec.name}: a llamon ReAct agent with a deterministic pre-step"

    async def answer(self, request: AgentRequest, sink: TraceSink | None) -> Outcome:
        """Run the agent (never raises for a failing run)."""
        from llamon_agent.react import arun_agent, run_error_kind

        result = await arun_agent(
            self.spec, request, backend=self.backend, react_tools=self.react_tools, sink=sink
        )
        status: FinishStatus = {"succeeded": "succeeded", "cancelled": "cancelled"}.get(
            result.status, "failed"
        )  # type: ignore[assignment]
        kind = run_error_kind(result)  # the worker's mapping too (agents/runtime.py)
        return Outcome(status, result.answer or "", result.error or "", kind, result.duration_ms)


async def privacy_masks(settings: Settings) -> list[Any]:
    """The masks of the privacy settings a served agent exports its spans with, as the worker does.

    ``LLAMON_MASK_PRESETS`` (preset names, comma-separated; ``all``; ``none``) when set, else the
    privacy settings of the llamon-web the registry is (``GET /api/privacy``: its patterns and
    presets), else none. A registry that cannot say is a ServeError: spans are not exported unmasked.
    """
    from llamon_agent.guardrails import MASK_PRESETS, as_masks, mask_preset
    from llamon_agent.mcp.registry import HttpRegistry, registry_from_settings

    names = [name.strip() for name in settings.mask_presets.split(",") if name.strip()]
    try:
        if names:
            if names == ["none"]:
                return []
            return [mask_preset(name) for name in (list(MASK_PRESETS) if names == ["all"] else names)]
        if not settings.registry_url or settings.registry_file:
            return []
        registry = registry_from_settings(settings)
        data = await registry.privacy() if isinstance(registry, HttpRegistry) else None
    except ValueError as exc:
        raise ServeError(f"LLAMON_MASK_PRESETS: {exc}") from None
    except RegistryError as exc:
        raise ServeError(f"the privacy settings could not be read from the registry: {exc}") from None
    if data is None:
        logger.warning(
            "registry %s has no privacy settings (/api/privacy): exported spans are masked only by "
            "the agent's output guardrail; set LLAMON_MASK_PRESETS",
            settings.registry_url,
        )
        return []
    patterns = [p for p in data.get("redaction_patterns") or [] if isinstance(p, str) and p]
    presets = [n for n in data.get("mask_presets") or [] if n in MASK_PRESETS]
    try:
        return as_masks(patterns) + [mask_preset(name) for name in presets]
    except ValueError as exc:
        raise ServeError(
            f"the registry's privacy settings hold a pattern that does not compile: {exc}"
        ) from None


def served_redactor(runner: Any, request: AgentRequest) -> Any:
    """The redaction of a served request's exported spans: the privacy settings (privacy_masks) and
    the agent's output masks, seeded with the request (what they hide in it stays hidden where a
    tool echoes it in pieces), as the worker's; None without masks."""
    from llamon_agent.guardrails import Redactor

    guardrail = getattr(getattr(runner, "spec", None), "output_guardrail", None)
    masks = [*getattr(runner, "privacy_masks", ()), *(getattr(guardrail, "masks", None) or [])]
    if not masks:
        return None
    redactor = Redactor(masks)
    redactor.learn([request.query, request.context, request.a2a_data, request.a2a_files])
    return redactor


class FlowRunner:
    """A flow project's compiled graph."""

    kind: Literal["react", "flow"] = "flow"
    source: Literal["served", "flow"] = "flow"
    privacy_masks: Sequence[Any] = ()  # the privacy settings' masks for exported spans (privacy_masks)
    version: Mapping[str, str] | None = None  # the rule-set version served (project.served_version)

    def __init__(self, graph: Any, name: str, description: str = "") -> None:
        from llamon_agent.flow import graph_view

        self.graph = graph
        self.name = name
        self.view = graph_view(graph)  # once: sent as the first trace event of every run
        self.description = description or f"{name}: a llamon flow (LangGraph)"

    async def answer(self, request: AgentRequest, sink: TraceSink | None) -> Outcome:
        """Invoke the graph (never raises for a failing flow)."""
        from llamon_agent.flow import arun_flow

        result = await arun_flow(self.graph, request, sink=sink, view=self.view)
        status: FinishStatus = "succeeded" if result.status == "succeeded" else "failed"
        return Outcome(
            status,
            result.answer or "",
            result.error or "",
            "" if status == "succeeded" else "flow",
            result.duration_ms,
        )


async def prepare_runner(project: Project, settings: Settings) -> ReactRunner | FlowRunner:
    """Bind the project's MCP servers and build its runner; ServeError when it cannot serve."""
    from llamon_agent.mcp.pool import set_pool
    from llamon_agent.project import served_version

    set_pool(served_pool(settings))  # flows' MCPHandle and the pre-step use the process's pool
    description = _description(project)
    if project.kind == "flow":
        assert project.build_graph is not None
        try:
            graph = await project.build_graph(settings)
        except (McpError, RegistryError) as exc:
            raise ServeError(f"build_graph could not bind its MCP servers: {exc}") from exc
        except Exception as exc:
            raise ServeError(f"build_graph failed: {type(exc).__name__}: {exc}") from exc
        if graph is None or not hasattr(graph, "ainvoke"):
            raise ServeError("build_graph must return a compiled graph (e.g. Flow(...).compile()), got None")
        flow = FlowRunner(graph, project.name, description)
        flow.privacy_masks = await privacy_masks(settings)
        flow.version = served_version(project)
        return flow

    from llamon_agent.mcp.adapters import PoolToolBackend
    from llamon_agent.mcp.pool import get_pool

    spec = project.agent_spec(settings)
    pool = get_pool()
    bound = await _bind_servers(project.mcp_ids(settings), settings, pool)
    react_tools: list[Any] = []
    for mcp_id in spec.react_mcp_ids:
        if mcp_id in bound:
            react_tools.extend(await pool.langchain_tools(mcp_id))
    react = ReactRunner(spec, PoolToolBackend(pool, bound), react_tools, description)
    react.privacy_masks = await privacy_masks(settings)
    react.version = served_version(project)
    return react


async def _bind_servers(mcp_ids: list[str], settings: Settings, pool: Any) -> list[str]:
    """The registry of the settings, and the project's servers bound in ``pool`` (bind_servers)."""
    if not mcp_ids:
        return []
    from llamon_agent.mcp.registry import bind_servers, registry_from_settings

    try:
        return await bind_servers(registry_from_settings(settings), mcp_ids, pool)
    except RegistryError as exc:
        raise ServeError(str(exc)) from exc


def _description(project: Project) -> str:
    for name in ("app.agent", "app.graph", "app.tools"):
        module = project.modules.get(name)
        doc = (getattr(module, "__doc__", None) or "").strip()
        if doc:
            return doc.splitlines()[0]
    return ""


# --------------------------------------------------------------------------- trace export


def trace_exporter(settings: Settings) -> HttpTraceExporter | None:
    """The llamon-web to send traces to: ``trace_url``, else the registry's llamon-web; None when neither.

    The token is ``trace_token`` only: ingest takes the served agent's own ingest credential, never
    the (person's) registry token."""
    from llamon_agent.trace_http import HttpTraceExporter

    url = settings.trace_url
    token = settings.trace_token
    if not url and settings.registry_url and not settings.registry_file:
        url = settings.registry_url
    if not url:
        return None
    return HttpTraceExporter(url, token.get_secret_value() if token is not None else None)


# --------------------------------------------------------------------------- A2A


def agent_card(runner: Runner, url: str) -> Any:
    """The agent card of a served project: JSON-RPC at ``url`` for A2A 1.0 and 0.3 clients.

    ``streaming``: ``SendStreamingMessage`` (1.0) and ``message/stream`` (0.3) answer with a
    stream of task events. No push notifications, no extended card.
    """
    from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill

    return AgentCard(
        name=runner.name,
        description=runner.description,
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=version)
            for version in (A2A_PROTOCOL_VERSION, A2A_COMPAT_PROTOCOL_VERSION)
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id=runner.kind,
                name=runner.name,
                description=runner.description,
                tags=["llamon", runner.kind],
            )
        ],
    )


def caller_of(context: ServerCallContext) -> str:
    """Who a request comes from, for the task store's per-caller bound: an authenticated user's
    name, else the client's address (set by :class:`CallerContextBuilder`)."""
    if context.user.is_authenticated:
        return f"user:{context.user.user_name}"
    return f"address:{context.state.get('client', '')}"


@dataclass
class _Finished:
    at: float  # when it finished
    owner: ServerCallContext  # names its owner for the inner store (not the request's state)
    caller: str
    size: int  # its serialized bytes


class BoundedTaskStore(TaskStore):
    """a2a-sdk's ``InMemoryTaskStore`` that forgets finished tasks: at most ``kept`` of them, none
    older than ``ttl_s`` seconds, and at most ``bytes_per_caller`` bytes of one caller's (oldest
    first each time), so a long-running server does not grow without bound and one caller's
    flood of large tasks pushes out only its own.

    A running task is never evicted. Eviction happens on each save and read (no timer).
    """

    def __init__(
        self,
        kept: int = DEFAULT_A2A_TASKS_KEPT,
        ttl_s: float = DEFAULT_A2A_TASK_TTL_S,
        clock: Callable[[], float] = time.monotonic,
        *,
        bytes_per_caller: int = DEFAULT_A2A_TASK_BYTES_PER_CALLER,
    ) -> None:
        self.kept = kept
        self.ttl_s = ttl_s
        self.bytes_per_caller = bytes_per_caller
        self._clock = clock
        self._store = InMemoryTaskStore()
        self._finished: OrderedDict[str, _Finished] = OrderedDict()  # oldest first
        self._bytes: dict[str, int] = {}  # caller -> bytes of its finished tasks kept

    def __len__(self) -> int:
        """How many finished tasks are kept (running ones are not counted)."""
        return len(self._finished)

    def bytes_of(self, caller: str) -> int:
        """The bytes of ``caller``'s finished tasks kept."""
        return self._bytes.get(caller, 0)

    async def save(self, task: Task, context: ServerCallContext) -> None:
        await self._store.save(task, context)
        if task.status.state in TERMINAL_STATES and task.id not in self._finished:
            caller = caller_of(context)
            owner = ServerCallContext(user=context.user, tenant=context.tenant)
            self._finished[task.id] = _Finished(self._clock(), owner, caller, task.ByteSize())
            self._bytes[caller] = self.bytes_of(caller) + task.ByteSize()
            while self.bytes_of(caller) > self.bytes_per_caller:
                oldest = next(task_id for task_id, f in self._finished.items() if f.caller == caller)
                await self._forget(oldest)
        await self._evict()

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        await self._evict()
        return await self._store.get(task_id, context)

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        await self._evict()
        return await self._store.list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        self._untrack(task_id)
        await self._store.delete(task_id, context)

    async def _evict(self) -> None:
        cutoff = self._clock() - self.ttl_s
        while self._finished:
            task_id, finished = next(iter(self._finished.items()))
            if len(self._finished) <= self.kept and finished.at > cutoff:
                break
            await self._forget(task_id)

    async def _forget(self, task_id: str) -> None:
        finished = self._untrack(task_id)
        if finished is not None:
            await self._store.delete(task_id, finished.owner)

    def _untrack(self, task_id: str) -> _Finished | None:
        finished = self._finished.pop(task_id, None)
        if finished is not None:
            left = self._bytes[finished.caller] - finished.size
            if left > 0:
                self._bytes[finished.caller] = left
            else:
                del self._bytes[finished.caller]
        return finished


def _wants_task(context: Any) -> bool:
    """A Task for a streaming caller, a caller that does not wait, or a message to an existing task."""
    configuration = context.configuration
    if configuration is not None and configuration.return_immediately:
        return True
    if context.current_task is not None:
        return True
    return context.call_context.state.get("method") in STREAMING_METHODS


class _PrestepProgress:
    """A trace sink that turns the pre-step's end into a "working" status line of the task.

    The pre-step runs on a worker thread: the line is handed to the event loop's queue.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[str | None]) -> None:
        self.loop = loop
        self.lines = lines

    def emit(self, event: TraceEvent) -> None:
        if event.kind != "prestep" or event.phase != "end" or event.error:
            return
        calls = (event.output or {}).get("calls") if isinstance(event.output, dict) else None
        if isinstance(calls, int):
            from llamon_agent.prestep import LOG_DONE

            self.loop.call_soon_threadsafe(self.lines.put_nowait, LOG_DONE % calls)


def _executor(runner: Runner, exporter: HttpTraceExporter | None) -> Any:
    from a2a.helpers import new_task, new_text_message, new_text_part
    from a2a.server.agent_execution import AgentExecutor
    from a2a.server.tasks import TaskUpdater
    from a2a.utils.errors import InvalidParamsError

    async def answer(request: AgentRequest, progress: TraceSink | None) -> Outcome:
        """Run the request with its trace sinks; never raises but for cancellation."""
        started = time.perf_counter()
        sink = (
            exporter.sink(
                source=runner.source, agent_name=runner.name, request=request, version=runner.version
            )
            if exporter is not None
            else None
        )
        # None unless configured; message content (when captured) masked like the answer.
        exported = otel_sink(
            agent_name=runner.name, source=runner.source, redact=served_redactor(runner, request)
        )
        sinks = [s for s in (sink, exported, progress) if s is not None]
        try:
            outcome = await runner.answer(
                request, MultiSink(*sinks) if len(sinks) > 1 else next(iter(sinks), None)
            )
        except asyncio.CancelledError:  # tasks/cancel: close the traced run, then let it propagate
            if sink is not None:
                sink.finish("cancelled", error="cancelled by the A2A client", error_kind="cancelled")
            if exported is not None:
                exported.finish("cancelled", error="cancelled by the A2A client")
            logger.info(
                "cancelled %s request after %.0f ms", runner.kind, (time.perf_counter() - started) * 1000.0
            )
            raise
        except Exception as exc:  # a runner bug: still answer, and close the traced run
            logger.exception("request failed inside the %s runner", runner.kind)
            outcome = Outcome("failed", "", f"internal error: {type(exc).__name__}: {exc}", "internal")
        if sink is not None:
            sink.finish(
                outcome.status, answer=outcome.answer, error=outcome.error, error_kind=outcome.error_kind
            )
        if exported is not None:
            exported.finish(outcome.status, error=outcome.error)
        logger.info(
            "answered %s request: %s in %.0f ms",
            runner.kind,
            outcome.status,
            (time.perf_counter() - started) * 1000.0,
        )
        return outcome

    def metadata(outcome: Outcome) -> dict[str, Any]:
        return {"status": outcome.status, "error": outcome.error, "errorKind": outcome.error_kind}

    class LlamonExecutor(AgentExecutor):
        """Answers a blocking message with one agent message, anything else with a Task."""

        async def execute(self, context: Any, event_queue: Any) -> None:
            try:
                request = to_request(context.message)
            except A2AFormatError as exc:
                raise InvalidParamsError(message=str(exc)) from exc
            if _wants_task(context):
                await self._run_task(context, event_queue, request)
                return
            outcome = await answer(request, None)
            # No task id: this reply is not a task, and tasks/get would not find one.
            message = new_text_message(outcome.text, context_id=context.context_id)
            message.metadata.update(metadata(outcome))
            await event_queue.enqueue_event(message)

        async def _run_task(self, context: Any, event_queue: Any, request: AgentRequest) -> None:
            if context.current_task is None:
                await event_queue.enqueue_event(
                    new_task(
                        context.task_id,
                        context.context_id,
                        TaskState.TASK_STATE_SUBMITTED,
                        history=[context.message],
                    )
                )
            updater = TaskUpdater(event_queue, context.task_id, context.context_id)
            await updater.start_work()
            lines: asyncio.Queue[str | None] = asyncio.Queue()

            async def forward() -> None:
                while (line := await lines.get()) is not None:
                    await updater.start_work(updater.new_agent_message([new_text_part(line)]))

            forwarder = asyncio.create_task(forward())
            try:
                outcome = await answer(request, _PrestepProgress(asyncio.get_running_loop(), lines))
            except BaseException:
                forwarder.cancel()
                raise
            lines.put_nowait(None)
            await forwarder
            reply = updater.new_agent_message([new_text_part(outcome.text)], metadata=metadata(outcome))
            if outcome.status == "succeeded":
                await updater.add_artifact(
                    [new_text_part(outcome.answer)], name="answer", metadata=metadata(outcome)
                )
                await updater.complete(reply)
            elif outcome.status == "cancelled":
                await updater.cancel(reply)
            else:
                await updater.failed(reply)

        async def cancel(self, context: Any, event_queue: Any) -> None:
            """tasks/cancel on a running task: mark it canceled; the handler then cancels the run."""
            updater = TaskUpdater(event_queue, context.task_id, context.context_id)
            await updater.cancel(
                updater.new_agent_message(
                    [new_text_part("cancelled by the A2A client")],
                    metadata={
                        "status": "cancelled",
                        "error": "cancelled by the A2A client",
                        "errorKind": "cancelled",
                    },
                )
            )

    return LlamonExecutor()


def build_app(
    runner: Runner,
    url: str,
    exporter: HttpTraceExporter | None = None,
    *,
    tasks_kept: int = DEFAULT_A2A_TASKS_KEPT,
    task_ttl_s: float = DEFAULT_A2A_TASK_TTL_S,
    task_bytes_per_caller: int = DEFAULT_A2A_TASK_BYTES_PER_CALLER,
    task_store: BoundedTaskStore | None = None,
) -> Starlette:
    """The Starlette app: the agent card, and JSON-RPC at ``/`` for A2A 1.0 and 0.3 clients.

    Tasks live in a :class:`BoundedTaskStore` (``task_store``, else one keeping ``tasks_kept``
    finished tasks for ``task_ttl_s`` seconds, ``task_bytes_per_caller`` bytes of one caller's).
    """
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
    from a2a.server.routes.common import DefaultServerCallContextBuilder
    from a2a.utils.errors import UnsupportedOperationError
    from starlette.applications import Starlette

    class Handler(DefaultRequestHandler):
        """a2a-sdk's handler without ListTasks: the server has no callers' identities, so a list
        would show every caller's requests and answers to anyone; a task is read by its id."""

        async def on_list_tasks(
            self, params: ListTasksRequest, context: ServerCallContext
        ) -> ListTasksResponse:
            raise UnsupportedOperationError(
                message="ListTasks is not served: read a task by its id (GetTask / tasks/get)"
            )

    card = agent_card(runner, url)

    class CallerContextBuilder(DefaultServerCallContextBuilder):
        """a2a-sdk's context, with the client's address (who the caller is when unauthenticated)."""

        def build(self, request: Any) -> ServerCallContext:
            context = super().build(request)
            context.state["client"] = request.client.host if request.client is not None else ""
            return context

    store = (
        task_store
        if task_store is not None
        else BoundedTaskStore(tasks_kept, task_ttl_s, bytes_per_caller=task_bytes_per_caller)
    )
    handler = Handler(
        agent_executor=_executor(runner, exporter),
        task_store=store,
        agent_card=card,
    )
    routes = [
        *create_agent_card_routes(card),
        *create_jsonrpc_routes(
            handler, rpc_url="/", context_builder=CallerContextBuilder(), enable_v0_3_compat=True
        ),
    ]
    return Starlette(routes=routes)


async def serve(
    project: Project, *, host: str = "127.0.0.1", port: int = 8001, settings: Settings | None = None
) -> None:
    """Bind, build and serve ``project`` until interrupted (uvicorn on this event loop)."""
    import uvicorn

    settings = settings or project.settings()
    runner = await prepare_runner(project, settings)
    exporter = trace_exporter(settings)
    url = f"http://{host}:{port}/"
    app = build_app(
        runner,
        url,
        exporter,
        tasks_kept=settings.a2a_tasks_kept,
        task_ttl_s=settings.a2a_task_ttl_s,
        task_bytes_per_caller=settings.a2a_task_bytes_per_caller,
    )
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off"))

    async def announce() -> None:
        while not server.started and not server.should_exit:
            await asyncio.sleep(0.05)
        if server.started:
            traced = f"; traces to {exporter.url}" if exporter is not None else ""
            logger.info(
                "serving %s (%s) over A2A at %s (card: %s.well-known/agent-card.json)%s",
                runner.name,
                runner.kind,
                url,
                url,
                traced,
            )

    announcer = asyncio.create_task(announce())
    try:
        await server.serve()
    finally:
        announcer.cancel()
        if exporter is not None:
            await asyncio.to_thread(exporter.close, 10.0)
        await asyncio.to_thread(shutdown_tracer_provider)
