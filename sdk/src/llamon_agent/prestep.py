"""The deterministic pre-step: run routing rules before the LLM sees a request.

Semantics (docs/architecture.md, "The seed's contract"):

1. Before any rule runs, every rule's ``mcp_id`` must be bound, else the pre-step fails
   with :data:`MCP_NOT_LOADED` for the first unbound id in rule order.
2. Rules run in registration order. A dict means "call that tool now and keep the result",
   ``None`` means skip; a ``stop`` rule that fires ends the evaluation.
3. Several rules may fire; calls are sequential, in rule order, results accumulate.
4. Each result is ``{"rule", "mcp_id", "tool_name", "params", "result", "duration_ms"}``.
5. Any error (the rule raises, returns a malformed value or an unknown tool, the MCP call
   fails or times out) fails the pre-step with ``f"{PRESTEP_FAILED}: {rule}: {reason}"``
   and the LLM must not be called.

Decisions beyond the seed (documented here because callers rely on them):

- A returned call must be exactly ``{"tool_name": <non-empty str>, "params": <dict>}``:
  a missing ``params`` or an extra key is an error (say ``"params": {}`` for a tool
  without arguments). A typo such as ``"param"`` would otherwise call the tool without
  its arguments, silently.
- On failure the error is logged at ERROR on ``llamon_agent`` and the
  ``Deterministic pre-step 완료: N건`` line is *not* logged: the seed checks integration by
  that line, so it must mean "the pre-step completed". Calls made before the failure stay
  in ``outcome.results`` (audit) but are never injected (the LLM is not called).
- ``dry_run=True`` (the live tester) calls nothing and continues past errors, recording
  each on its rule; ``outcome.error`` is the first one, i.e. the error a live run would
  have stopped at (a live run could also fail later, in a call). Dry runs log neither the
  완료 line nor errors at ERROR (they are previews, not requests): one DEBUG line.
- ``outcome.records`` (one per rule) is built on first access: at 10,000 rules, making
  10,000 records would cost more than the whole indexed pre-step.
- The keyword index (:meth:`CompiledRules.candidates`) is an optimisation only; the
  outcome is the same with ``use_index=False``. To keep that true when an expression
  namespace cannot be built (request over the expression caps), the namespace is built at
  the first expression rule's position even when that rule is not a candidate.
- An expression rule's cost is bounded when it is compiled (docs/expressions.md, "Cost bound"):
  a request within the caps cannot fail on cost. There is no request-wide budget; the
  per-evaluation meter (``expr_budget``, default ``LLAMON_EXPR_COST_BUDGET``) is a backstop,
  and the bound of the rules that have no static one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

# The compiled rule set and its index live in compiled_rules; importers of this module get them here.
from llamon_agent.compiled_rules import FREEZE_AFTER_RULES as FREEZE_AFTER_RULES
from llamon_agent.compiled_rules import CompiledRules as CompiledRules
from llamon_agent.compiled_rules import compile_rules as compile_rules
from llamon_agent.tools import AgentRequest, DeterministicContext, RuleInfo, ToolInfo
from llamon_agent.trace import STATUS_OK, Span, TraceSink, jsonable, start_span

logger = logging.getLogger("llamon_agent")

# The seed's strings, byte for byte (seed/000_9a17dbcadfbf3490.txt).
MCP_NOT_LOADED = "MCP '{mcp_id}'의 tool이 로드되지 않음"
PRESTEP_FAILED = "확정 호출된 MCP 단계에서 오류가 발생했습니다"
RESULTS_HEADER = "확정 호출 결과"
LOG_DONE = "Deterministic pre-step 완료: %d건"
# The seed's recommended system-prompt lines ("ReAct 혼합 패턴"), offered as a default.
DEFAULT_PRESTEP_INSTRUCTION = '제공된 "확정 호출 결과"가 있으면 그 내용을 우선 사용하여 답변하고,\n추가 도구 호출은 필요한 경우에만 하세요.'

RESULT_CHAR_LIMIT = 4000  # per rendered result / params in the system block
REASON_CHAR_LIMIT = 500  # an exception message can be a whole traceback; the UI wants one line
SKIPPED_NAMES_LIMIT = 100  # skipped rule names listed in the prestep trace span
_CALL_KEYS = frozenset({"tool_name", "params"})
_LONG_QUERY_CHARS = 2_048  # = expr.namespace.LONG_QUERY_CHARS (not imported: plain rule sets skip expr)


class RuleStatus(StrEnum):
    """What happened to one rule in one pre-step."""

    FIRED = "fired"  # returned a call (live: the call succeeded; dry run: it would be made)
    SKIPPED = "skipped"  # returned None, or the keyword index proved it could not fire
    ERROR = "error"  # raised, returned something malformed, named an unknown tool, call failed
    NOT_REACHED = "not_reached"  # after a firing stop rule or the error that ended the pre-step


class ToolBackend(Protocol):
    """Where the pre-step finds a server's tools and calls them (sync; may block)."""

    def tools_for(self, mcp_id: str) -> Sequence[Any] | None:
        """The tools of ``mcp_id``; ``None`` when that server is not bound."""
        ...

    def call_tool(self, mcp_id: str, tool_name: str, params: dict[str, Any]) -> Any:
        """Call one tool and return its result; raises on failure or timeout."""
        ...


def call_checked(
    backend: ToolBackend, mcp_id: str, tool_name: str, params: dict[str, Any]
) -> tuple[Any, Sequence[str]]:
    """One call through ``backend``: its result and the warnings about it. A backend may offer
    ``call_tool_checked`` (same arguments, returns ``(result, warnings)``: the pool's says why a result
    breaks the tool's output schema); without it, there are no warnings."""
    checked = getattr(backend, "call_tool_checked", None)
    if checked is None:
        return backend.call_tool(mcp_id, tool_name, params), ()
    result, warnings = checked(mcp_id, tool_name, params)
    return result, tuple(warnings)


class StaticToolBackend:
    """A backend over fixed tool lists, for dry runs and tests; ``call`` answers live calls."""

    def __init__(
        self,
        tools: Mapping[str, Sequence[Any]],
        call: Callable[[str, str, dict[str, Any]], Any] | None = None,
    ) -> None:
        # Plain strings are accepted as tool names so that tests stay short.
        self._tools = {
            mcp_id: [ToolInfo(name=t) if isinstance(t, str) else t for t in server_tools]
            for mcp_id, server_tools in tools.items()
        }
        self._call = call
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    def tools_for(self, mcp_id: str) -> Sequence[Any] | None:
        return self._tools.get(mcp_id)

    def call_tool(self, mcp_id: str, tool_name: str, params: dict[str, Any]) -> Any:
        self.calls.append((mcp_id, tool_name, params))
        if self._call is None:
            raise RuntimeError("StaticToolBackend has no call function (use dry_run=True or pass call=)")
        return self._call(mcp_id, tool_name, params)


# --------------------------------------------------------------------------- outcome


@dataclass(slots=True)
class RuleRecord:
    """What one rule did in one pre-step (the tester's and the audit's row)."""

    rule: str
    mcp_id: str
    status: RuleStatus
    tool_name: str | None = None
    params: dict[str, Any] | None = None
    result: Any = None
    duration_ms: float | None = None
    error: str | None = None  # the short reason; PrestepOutcome.error holds the full message
    tool_exists: bool | None = None
    # Why the tool's result breaks its declared output schema (a warning: the result was handed on).
    warnings: Sequence[str] = ()
    # The expression's error when it has a message id (an ExprError, without its traceback): what an
    # application needs to say ``error`` in its own language. Not part of to_json (runs stay as they are).
    error_expr: Any = field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON-ready dict."""
        return {
            "rule": self.rule,
            "mcp_id": self.mcp_id,
            "status": str(self.status),
            "tool_name": self.tool_name,
            "params": jsonable(self.params),
            "result": jsonable(self.result),
            "duration_ms": self.duration_ms,
            "error": self.error,
            "tool_exists": self.tool_exists,
        } | ({"warnings": list(self.warnings)} if self.warnings else {})


@dataclass
class PrestepOutcome:
    """The result of one pre-step: ok or the contract error, the calls made, one record per rule."""

    ok: bool
    error: str | None
    results: list[dict[str, Any]]
    calls: int
    duration_ms: float
    dry_run: bool = False
    _infos: Sequence[RuleInfo] = field(default=(), repr=False, compare=False)
    _evaluated: dict[int, RuleRecord] = field(default_factory=dict, repr=False, compare=False)
    _reached: int = field(default=-1, repr=False, compare=False)
    _records: list[RuleRecord] | None = field(default=None, repr=False, compare=False)

    @property
    def records(self) -> list[RuleRecord]:
        """One record per rule, in registration order (built on first access)."""
        if self._records is None:
            self._records = [self._record(i, info) for i, info in enumerate(self._infos)]
        return self._records

    @property
    def fired(self) -> list[RuleRecord]:
        """The records of the rules that fired (dry run: that would call a tool)."""
        return [rec for _, rec in sorted(self._evaluated.items()) if rec.status is RuleStatus.FIRED]

    def system_block(self) -> str:
        """The ``확정 호출 결과`` block for the LLM's system message ("" when nothing ran)."""
        return render_results_block(self.results)

    def to_json(self) -> dict[str, Any]:
        """The outcome as a JSON-ready dict (records included)."""
        return {
            "ok": self.ok,
            "error": self.error,
            "dry_run": self.dry_run,
            "calls": self.calls,
            "duration_ms": self.duration_ms,
            "results": jsonable(self.results),
            "records": [rec.to_json() for rec in self.records],
        }

    def _record(self, i: int, info: RuleInfo) -> RuleRecord:
        rec = self._evaluated.get(i)
        if rec is not None:
            return rec
        status = RuleStatus.SKIPPED if i <= self._reached else RuleStatus.NOT_REACHED
        return RuleRecord(rule=info.name, mcp_id=info.mcp_id, status=status)


# --------------------------------------------------------------------------- running


class _InvalidCall(Exception):
    """A rule's return value broke the contract; the message is the short reason."""


def run_prestep(
    rules_or_compiled: CompiledRules | Sequence[Any],
    request: AgentRequest | DeterministicContext,
    *,
    backend: ToolBackend,
    dry_run: bool = False,
    sink: TraceSink | None = None,
    use_index: bool = True,
    trace_parent: str | None = None,
    expr_budget: int | None = None,
) -> PrestepOutcome:
    """Run the rules on ``request``: bind check, evaluate in order, call tools (unless dry run).

    ``expr_budget`` is the run-time meter's budget of one evaluation, in units; ``None`` takes
    it from the settings.
    """
    started = time.perf_counter()
    compiled = compile_rules(rules_or_compiled, use_index=use_index)
    run = _PrestepRun(compiled, _as_request(request), backend, dry_run, sink, trace_parent)
    run.expr_budget = expr_budget
    run.execute(use_index=use_index)
    return run.outcome(round((time.perf_counter() - started) * 1000.0, 3))


async def arun_prestep(
    rules_or_compiled: CompiledRules | Sequence[Any],
    request: AgentRequest | DeterministicContext,
    *,
    backend: ToolBackend,
    dry_run: bool = False,
    sink: TraceSink | None = None,
    use_index: bool = True,
    trace_parent: str | None = None,
    expr_budget: int | None = None,
) -> PrestepOutcome:
    """:func:`run_prestep` on a worker thread: the backend's calls block, the event loop must not."""
    return await asyncio.to_thread(
        run_prestep,
        rules_or_compiled,
        request,
        backend=backend,
        dry_run=dry_run,
        sink=sink,
        use_index=use_index,
        trace_parent=trace_parent,
        expr_budget=expr_budget,
    )


def _as_request(request: AgentRequest | DeterministicContext) -> AgentRequest:
    if isinstance(request, AgentRequest):
        return request
    if isinstance(request, DeterministicContext):
        return AgentRequest(
            query=request.query,
            context=request.context,
            a2a_data=request.a2a_data,
            a2a_files=request.a2a_files,
        )
    raise TypeError(
        f"run_prestep needs an AgentRequest or a DeterministicContext, not {type(request).__name__}"
    )


class _PrestepRun:
    """The state of one pre-step; per-server views are built lazily, once each."""

    def __init__(
        self,
        compiled: CompiledRules,
        request: AgentRequest,
        backend: ToolBackend,
        dry_run: bool,
        sink: TraceSink | None,
        trace_parent: str | None,
    ) -> None:
        self.compiled = compiled
        self.request = request
        self.backend = backend
        self.dry_run = dry_run
        self.sink = sink
        self.trace_parent = trace_parent
        self.tools: dict[str, Sequence[Any]] = {}
        self.unbound: dict[str, str] = {}  # mcp_id -> MCP_NOT_LOADED message
        self.contexts: dict[str, DeterministicContext] = {}
        self.namespaces: dict[str, dict[str, Any]] = {}
        self.argsets: dict[str, tuple[Any, ...]] = {}  # per server: expr.namespace.server_args
        self.listed: dict[str, tuple[tuple[Any, ...], frozenset[str]]] = {}  # _server_tools, per server
        self.evaluated: dict[int, RuleRecord] = {}
        self.results: list[dict[str, Any]] = []
        self.calls = 0
        self.error: str | None = None
        self.reached = -1
        self.span: Span | None = None
        self.indexed = False
        self.namespace_failed = False
        self.expr_budget: int | None = None
        self.meter: Any = None  # the request's expression CostMeter, made with the first namespace
        self.plain: Any = None  # plain_request() of the request (or the ExprError it raised)
        self.found: Any = None  # the literals a long query holds, from the index (build_namespace)
        # Listing each server's tools may (re)connect its session: when and how long, for the
        # trace's waterfall, so a slow connect is not mistaken for slow rules.
        self.listings: list[dict[str, Any]] = []
        self.t0 = time.perf_counter()

    # -- phases

    def execute(self, *, use_index: bool) -> None:
        """Bind check, then the rules; the trace span wraps both."""
        self.t0 = time.perf_counter()
        if self.sink is not None:
            self.span = start_span(
                self.sink,
                "prestep",
                "deterministic pre-step",
                input={
                    "query": self.request.query,
                    "rules": len(self.compiled),
                    "dry_run": self.dry_run,
                },
                parent=self.trace_parent,
            )
        try:
            self._bind()
            if self.error is None or self.dry_run:
                # A dry run with unbound servers walks every rule so that each one on an
                # unbound server gets its error record, whatever the index says.
                indexed = use_index and self.compiled.has_index and not self.unbound
                self.indexed = indexed
                if indexed:
                    self._evaluate_all(self._indexed_order())
                else:
                    self._evaluate_all(self.compiled._all)
        finally:
            self._finish_span()
        # Not in `finally`: an exception escaping here (a bug, KeyboardInterrupt) must not
        # be logged as a completed pre-step.
        self._log()

    def _bind(self) -> None:
        traced = self.sink is not None  # the listings are only for the trace's span
        tools_for = self.backend.tools_for
        for mcp_id in self.compiled.mcp_ids:
            t0 = time.perf_counter() if traced else 0.0
            try:
                tools = tools_for(mcp_id)
            except Exception as exc:  # a backend that cannot list tools has not loaded them
                logger.warning("tools_for(%r) failed: %s", mcp_id, _reason(exc))
                tools = None
            if traced:
                self.listings.append(
                    {
                        "mcp_id": mcp_id,
                        "offset_ms": round((t0 - self.t0) * 1000.0, 3),
                        "duration_ms": _ms_since(t0),
                        "tools": None if tools is None else len(tools),
                    }
                )
            if tools is None:
                self.unbound[mcp_id] = MCP_NOT_LOADED.format(mcp_id=mcp_id)
                if self.error is None:
                    self.error = self.unbound[mcp_id]
                if not self.dry_run:
                    return
            else:
                self.tools[mcp_id] = tools

    def _indexed_order(self) -> Sequence[int]:
        """The candidate rules; every rule when the request cannot have an expression namespace.

        Building an expression namespace can fail on the request alone (query or data over
        the expression caps). Unindexed, that ExprError surfaces at the first expression
        rule; indexed, that rule may not be a candidate. So the parts it needs are made first
        (_namespace_parts, which every expression rule needs anyway): when they fail, the run
        goes unindexed and its records are those of evaluating every rule.
        """
        first = self.compiled.first_fast
        if first is not None:
            try:
                self._namespace_parts(self.compiled.servers[first])
            except Exception:
                self.indexed = False
                return self.compiled._all
        query = self.request.query
        found: list[Any] | None = None
        if type(query) is str and len(query) >= _LONG_QUERY_CHARS:
            found = []  # the literals it holds, for build_namespace's tables
        order = self.compiled.candidates(query, self._index_data, self.expr_budget, found)
        self.found = found[0] if found else None
        return order

    def _evaluate_all(self, order: Sequence[int]) -> None:
        """The hot loop: most rules return None, so that path stays inline and allocation-free.

        An expression rule's `when` is called here, with the request's values (argsets), after
        the same static charge as ExpressionRule.evaluate_ns makes; its ``params_for`` evaluates
        the params when it holds. Change both together.
        """
        compiled = self.compiled
        infos, rules, fast = compiled.infos, compiled.rules, compiled.fast
        whens, costs, servers = compiled.whens, compiled.costs, compiled.servers
        contexts, namespaces, unbound = self.contexts, self.namespaces, self.unbound
        argsets = self.argsets
        meter = self.meter  # the request's CostMeter, one for every server's namespace
        self.reached = len(rules) - 1
        for i in order:
            mcp_id = servers[i]
            if unbound and mcp_id in unbound:
                info = infos[i]
                self._fail(i, info, unbound[mcp_id], full=unbound[mcp_id])
                failed, fired = True, False
            else:
                try:
                    when = whens[i]
                    if when is not None:
                        args = argsets.get(mcp_id)
                        if args is None:
                            args = self._args(mcp_id)
                            meter = self.meter
                        static, reads, metered = costs[i]
                        try:
                            if metered:
                                meter.left = meter.expr_budget - static - reads * meter.rcost
                            value = when(*args)
                        except Exception as exc:
                            raise rules[i].compiled_when.failed(exc)  # noqa: B904  # failed() sets the cause
                        if not value:
                            continue
                        rule = rules[i]
                        left = meter.left if metered else meter.expr_budget - static - reads * meter.rcost
                        call = rule.tool_name, rule.params_for(args, meter, left)
                    else:
                        if (evaluate := fast[i]) is None:
                            ctx = contexts.get(mcp_id)
                            value = rules[i](ctx if ctx is not None else self._context(mcp_id))
                        else:
                            ns = namespaces.get(mcp_id)
                            value = evaluate(rules[i], ns if ns is not None else self._namespace(mcp_id))
                        if value is None:  # a skip leaves no record: PrestepOutcome.records infers it
                            continue
                        call = _checked_call(value)
                except _InvalidCall as exc:
                    info = infos[i]
                    self._fail(i, info, str(exc), traced=True)
                    failed, fired = True, False
                except Exception as exc:
                    info = infos[i]
                    self._fail(i, info, _reason(exc), traced=True, exc=exc)
                    failed, fired = True, False
                else:
                    info = infos[i]
                    fired, failed = self._handle_call(i, info, *call)
            if failed and self.dry_run and self.namespace_failed and self.indexed:
                # Unindexed, every later expression rule would fail the same way; go on
                # without the index so the records match (an error path: speed is moot).
                self.indexed = False
                self._evaluate_all(range(i + 1, len(rules)))
                return
            if (failed and not self.dry_run) or (fired and info.stop):
                self.reached = i
                return

    def _handle_call(
        self, i: int, info: RuleInfo, tool_name: str, params: dict[str, Any]
    ) -> tuple[bool, bool]:
        """Check that a rule's call names a tool of its server and, live, make it; returns (fired, failed)."""
        if tool_name not in self._tool_names(info.mcp_id):
            reason = f"MCP '{info.mcp_id}' has no tool '{tool_name}'"
            self._fail(i, info, reason, tool_name=tool_name, params=params, tool_exists=False, traced=True)
            return False, True
        if self.dry_run:
            self._fire_dry(i, info, tool_name, params)
            return True, False
        return self._fire_live(i, info, tool_name, params)

    def _fire_dry(self, i: int, info: RuleInfo, tool_name: str, params: dict[str, Any]) -> None:
        self.evaluated[i] = RuleRecord(
            rule=info.name,
            mcp_id=info.mcp_id,
            status=RuleStatus.FIRED,
            tool_name=tool_name,
            params=params,
            tool_exists=True,
        )
        if self.sink is not None:
            s = self._rule_span(i, info, tool_name, params)
            s.meta["dry_run"] = True
            s.finish()

    def _fire_live(self, i: int, info: RuleInfo, tool_name: str, params: dict[str, Any]) -> tuple[bool, bool]:
        # The start event goes out before the call: a sink persists the step first, so a
        # worker that dies mid-call leaves a "running" step behind.
        s = self._rule_span(i, info, tool_name, params) if self.sink is not None else None
        t0 = time.perf_counter()
        try:
            result, warnings = call_checked(self.backend, info.mcp_id, tool_name, params)
        except Exception as exc:
            duration = _ms_since(t0)
            reason = _reason(exc)
            self._fail(
                i, info, reason, tool_name=tool_name, params=params, tool_exists=True, duration=duration
            )
            if s is not None:
                s.fail(reason)
                s.finish()
            return False, True
        duration = _ms_since(t0)
        self.calls += 1
        self.results.append(
            {
                "rule": info.name,
                "mcp_id": info.mcp_id,
                "tool_name": tool_name,
                "params": params,
                "result": result,
                "duration_ms": duration,
            }
        )
        self.evaluated[i] = RuleRecord(
            rule=info.name,
            mcp_id=info.mcp_id,
            status=RuleStatus.FIRED,
            tool_name=tool_name,
            params=params,
            result=result,
            duration_ms=duration,
            tool_exists=True,
            warnings=warnings,
        )
        if warnings:
            logger.warning(
                "pre-step rule '%s': the result of %s/%s does not fit its output schema: %s",
                info.name,
                info.mcp_id,
                tool_name,
                "; ".join(warnings),
            )
        if s is not None:
            s.output = result
            if warnings:
                s.meta["warnings"] = list(warnings)
            s.finish()
        return True, False

    def _fail(
        self,
        i: int,
        info: RuleInfo,
        reason: str,
        *,
        full: str | None = None,
        tool_name: str | None = None,
        params: dict[str, Any] | None = None,
        tool_exists: bool | None = None,
        duration: float | None = None,
        traced: bool = False,
        exc: BaseException | None = None,
    ) -> None:
        """Record rule ``i``'s error; the first error of the pre-step becomes the outcome's."""
        self.evaluated[i] = RuleRecord(
            rule=info.name,
            mcp_id=info.mcp_id,
            status=RuleStatus.ERROR,
            tool_name=tool_name,
            params=params,
            duration_ms=duration,
            error=reason,
            tool_exists=tool_exists,
            error_expr=_expr_error_copy(exc),
        )
        if self.error is None:
            self.error = full if full is not None else f"{PRESTEP_FAILED}: {info.name}: {reason}"
        if traced and self.sink is not None:
            s = self._rule_span(i, info, tool_name, params)
            s.fail(reason)
            s.finish()

    # -- per-server views, built once per server per request

    def _context(self, mcp_id: str) -> DeterministicContext:
        ctx = self.contexts.get(mcp_id)
        if ctx is None:
            ctx = self.contexts[mcp_id] = self.request.to_context(list(self.tools[mcp_id]))
        return ctx

    def _plain(self) -> Any:
        """The request's JSON-like copies, made once and shared by every server's namespace."""
        if self.plain is None:
            try:
                self.plain = _expr().namespace.plain_request(self.request)
            except Exception as exc:
                self.plain = exc
        if isinstance(self.plain, Exception):
            raise self.plain
        return self.plain

    def _index_data(self) -> tuple[Mapping[str, Any], Any]:
        _query, context, a2a_data, _files = self._plain()
        return context, a2a_data

    def _namespace(self, mcp_id: str) -> dict[str, Any]:
        ns = self.namespaces.get(mcp_id)
        if ns is None:
            args = self.argsets.get(mcp_id)
            ns = self.namespaces[mcp_id] = _expr().namespace.namespace_of(
                args if args is not None else self._args(mcp_id)
            )
        return ns

    def _namespace_parts(self, mcp_id: str) -> tuple[Any, tuple[Any, ...], frozenset[str]]:
        """Everything building ``mcp_id``'s namespace can fail on, in that order: the request's cost
        meter, its plain copy, the server's tool names (server_args cannot fail after them).
        The index checks these first (_indexed_order), without building the namespace."""
        try:
            if self.meter is None:
                self.meter = _expr().expr.CostMeter(self.expr_budget)
            plain = self._plain()
            tools, names = self._server_tools(mcp_id)
        except Exception:
            self.namespace_failed = True
            raise
        return plain, tools, names

    def _args(self, mcp_id: str) -> tuple[Any, ...]:
        """The request's values an expression's function takes, for ``mcp_id``'s tools."""
        plain, tools, names = self._namespace_parts(mcp_id)
        args: tuple[Any, ...] = _expr().namespace.server_args(
            plain, tools, names, meter=self.meter, found=self.found
        )
        self.argsets[mcp_id] = args
        return args

    def _tool_names(self, mcp_id: str) -> frozenset[str]:
        return self._server_tools(mcp_id)[1]

    def _server_tools(self, mcp_id: str) -> tuple[tuple[Any, ...], frozenset[str]]:
        """The server's tools as listed for this request, and their names.

        The names are kept on the compiled rules per server, with the tools they came from: a
        request whose backend lists the very same tool objects reuses them; any other list (a tool
        added, removed or replaced) is read again. Only lists of frozen ToolInfo are kept, whose
        names cannot change under the same object (a dict's or a LangChain tool's could).
        """
        kept_here = self.listed.get(mcp_id)
        if kept_here is not None:  # asked again in this request (the first check, a namespace, a call)
            return kept_here
        listed = self.tools[mcp_id]
        ids = tuple(map(id, listed))
        cache = self.compiled.tool_names
        kept = cache.get(mcp_id)
        if kept is not None and kept[0] == ids:
            tools, names = kept[1], kept[2]
        else:
            tools = tuple(listed)
            names = frozenset(_tool_name(t) for t in tools)
            if all(type(t) is ToolInfo for t in tools):
                cache[mcp_id] = (ids, tools, names)  # holds the tools: their ids stay theirs
        self.listed[mcp_id] = (tools, names)
        return tools, names

    # -- reporting

    def _rule_span(
        self, i: int, info: RuleInfo, tool_name: str | None, params: dict[str, Any] | None
    ) -> Span:
        return start_span(
            self.sink,
            "rule",
            info.name,
            input={"mcp_id": info.mcp_id, "tool_name": tool_name, "params": params},
            parent=self.span.id if self.span is not None else self.trace_parent,
            meta={"index": i, "mcp_id": info.mcp_id, "stop": info.stop},
        )

    def _finish_span(self) -> None:
        if self.span is None:
            return
        self.span.output = self._summary()
        if self.error is not None:
            self.span.fail(self.error)
        else:
            self.span.status = STATUS_OK
        self.span.finish()

    def _summary(self) -> dict[str, Any]:
        """Compact per-status rule names for the prestep span (skipped ones capped)."""
        fired: list[str] = []
        errors: list[str] = []
        skipped: list[str] = []
        infos = self.compiled.infos
        for i in range(self.reached + 1):
            rec = self.evaluated.get(i)
            if rec is None or rec.status is RuleStatus.SKIPPED:
                if len(skipped) < SKIPPED_NAMES_LIMIT:
                    skipped.append(infos[i].name)
            elif rec.status is RuleStatus.FIRED:
                fired.append(rec.rule)
            else:
                errors.append(rec.rule)
        skipped_count = self.reached + 1 - len(fired) - len(errors)
        return {
            "calls": self.calls,
            "fired": fired,
            "errors": errors,
            "skipped": skipped,
            "skipped_count": skipped_count,
            "not_reached_count": len(infos) - self.reached - 1,
            "tools_listing": self.listings,
        }

    def _log(self) -> None:
        if self.dry_run:
            if not logger.isEnabledFor(logging.DEBUG):
                return
            logger.debug(
                "Deterministic pre-step dry run: %d rule(s) would call a tool, error=%s",
                sum(1 for r in self.evaluated.values() if r.status is RuleStatus.FIRED),
                self.error,
            )
        elif self.error is not None:
            logger.error("%s", self.error)
        else:
            logger.info(LOG_DONE, self.calls)

    def outcome(self, duration_ms: float) -> PrestepOutcome:
        """Freeze the run into a :class:`PrestepOutcome`."""
        return PrestepOutcome(
            ok=self.error is None,
            error=self.error,
            results=self.results,
            calls=self.calls,
            duration_ms=duration_ms,
            dry_run=self.dry_run,
            _infos=self.compiled.infos,
            _evaluated=self.evaluated,
            _reached=self.reached,
        )


class _Expr:
    """The expression modules the pre-step calls per request, imported on first use by
    :func:`_expr` (plain-function rule sets never need llamon_agent.expr): an import statement
    in the hot path costs microseconds each time it runs. Modules, not their functions, are kept:
    what the pre-step calls is looked up on them at each call, as the imports did."""

    loaded = False
    expr: Any = None  # llamon_agent.expr (CostMeter)
    namespace: Any = None  # llamon_agent.expr.namespace (plain_request, server_args, namespace_of)


def _expr() -> type[_Expr]:
    if not _Expr.loaded:
        import llamon_agent.expr
        import llamon_agent.expr.namespace

        _Expr.expr = llamon_agent.expr
        _Expr.namespace = llamon_agent.expr.namespace
        _Expr.loaded = True
    return _Expr


def _checked_call(value: Any) -> tuple[str, dict[str, Any]]:
    """``(tool_name, params)`` from a rule's non-None return value; :class:`_InvalidCall` otherwise."""
    if not isinstance(value, dict):
        raise _InvalidCall(
            f"returned {type(value).__name__}, expected None or {{'tool_name': str, 'params': dict}}"
        )
    if "tool_name" not in value:
        raise _InvalidCall("returned dict has no 'tool_name'")
    tool_name = value["tool_name"]
    if not isinstance(tool_name, str) or not tool_name:
        raise _InvalidCall(f"'tool_name' must be a non-empty string, got {tool_name!r}")
    if "params" not in value:
        raise _InvalidCall("returned dict has no 'params' (use {} for a tool without arguments)")
    params = value["params"]
    if not isinstance(params, dict):
        raise _InvalidCall(f"'params' must be a dict, got {type(params).__name__}")
    if len(value) != 2:
        extra = ", ".join(sorted(repr(k) for k in value if k not in _CALL_KEYS))
        raise _InvalidCall(f"returned dict has unexpected keys {extra} (only 'tool_name' and 'params')")
    return tool_name, params


def _tool_name(tool: Any) -> str:
    if isinstance(tool, Mapping):
        return str(tool.get("name", ""))
    return str(getattr(tool, "name", ""))


def _expr_error_copy(exc: BaseException | None) -> Any:
    """An expression error with a message id, without its traceback (None for anything else)."""
    moved = getattr(exc, "moved", None)
    return moved() if moved is not None and getattr(exc, "msg_id", None) else None


def _reason(exc: BaseException) -> str:
    """A short readable reason: the message, the type name when it is empty."""
    message = str(exc).strip()
    # A KeyError's message is only the repr of the key: "'userId'" alone reads as nothing.
    if isinstance(exc, KeyError) and message:
        message = f"KeyError: {message}"
    if not message:
        message = type(exc).__name__
    if len(message) > REASON_CHAR_LIMIT:
        message = message[: REASON_CHAR_LIMIT - 1] + "…"
    return message


def _ms_since(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000.0, 3)


# --------------------------------------------------------------------------- the system block


def render_results_block(results: Sequence[Mapping[str, Any]], *, max_chars: int = RESULT_CHAR_LIMIT) -> str:
    """The ``확정 호출 결과`` block listing each call ("" when there are none)."""
    if not results:
        return ""
    lines = [RESULTS_HEADER]
    for n, item in enumerate(results, start=1):
        lines.append(f"{n}. {item.get('rule')} ({item.get('mcp_id')} / {item.get('tool_name')})")
        lines.append(f"   params: {_indent(_render_value(item.get('params'), max_chars))}")
        lines.append(f"   result: {_indent(_render_value(item.get('result'), max_chars))}")
    return "\n".join(lines)


def inject_results(system_prompt: str, results: Sequence[Mapping[str, Any]]) -> str:
    """``system_prompt`` with the results block appended; unchanged when there are no results."""
    block = render_results_block(results)
    if not block:
        return system_prompt
    if not system_prompt.strip():
        return block
    return f"{system_prompt.rstrip()}\n\n{block}"


def _render_value(value: Any, max_chars: int) -> str:
    # Strings are shown as they are (an MCP text result is often already JSON or prose);
    # everything else as compact JSON, Korean kept readable.
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if len(text) > max_chars:
        omitted = len(text) - max_chars
        text = f"{text[:max_chars]}… [truncated: {omitted} more characters]"
    return text


def _indent(text: str) -> str:
    # Continuation lines of a multi-line result stay inside their item.
    return text.replace("\n", "\n     ")
