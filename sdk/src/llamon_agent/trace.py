"""Trace events: what an agent run reports while it happens, and the sinks that receive them.

A step is reported twice under one ``id``: a ``start`` event before the work begins and an
``end`` event after it (with ``duration_ms``, ``status`` and ``output``/``error``). A sink
that persists steps (``agents.RunStep``) can therefore write the row *before* a slow MCP
call starts and complete it afterwards: a worker that dies mid-call leaves a ``running``
step behind instead of nothing.

Sinks must never break the run that feeds them: :func:`emit` catches and logs whatever a
sink raises.
"""

from __future__ import annotations

import json
import logging
import math
import secrets
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args, runtime_checkable

logger = logging.getLogger("llamon_agent.trace")

EventKind = Literal["guardrail", "prestep", "rule", "llm", "tool", "node", "answer", "error"]
Phase = Literal["start", "end"]
EVENT_KINDS: frozenset[str] = frozenset(get_args(EventKind))

STATUS_RUNNING = "running"
STATUS_OK = "ok"
STATUS_ERROR = "error"
STATUS_SKIPPED = "skipped"


def new_event_id() -> str:
    """A short random id shared by a step's start and end events."""
    return secrets.token_hex(8)


@dataclass(slots=True)
class TraceEvent:
    """One start or end of a step (guardrail, pre-step, rule, LLM turn, tool call, ...)."""

    id: str
    kind: EventKind
    name: str
    phase: Phase
    parent: str | None = None
    start: float = 0.0  # epoch seconds when the step started (same on start and end events)
    duration_ms: float | None = None  # None on start events
    status: str = STATUS_RUNNING
    input: Any = None
    output: Any = None
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in EVENT_KINDS:
            raise ValueError(f"unknown trace event kind {self.kind!r}")
        if self.phase not in ("start", "end"):
            raise ValueError(f"unknown trace event phase {self.phase!r}")

    def to_json(self) -> dict[str, Any]:
        """The event as a JSON-ready dict (non-JSON values become strings)."""
        return {
            "id": self.id,
            "parent": self.parent,
            "kind": self.kind,
            "name": self.name,
            "phase": self.phase,
            "start": self.start,
            "duration_ms": self.duration_ms,
            "status": self.status,
            "input": jsonable(self.input),
            "output": jsonable(self.output),
            "error": self.error,
            "meta": jsonable(self.meta),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TraceEvent:
        """Rebuild an event from :meth:`to_json` output."""
        return cls(
            id=data["id"],
            parent=data.get("parent"),
            kind=data["kind"],
            name=data["name"],
            phase=data["phase"],
            start=data.get("start", 0.0),
            duration_ms=data.get("duration_ms"),
            status=data.get("status", STATUS_RUNNING),
            input=data.get("input"),
            output=data.get("output"),
            error=data.get("error"),
            meta=dict(data.get("meta") or {}),
        )


def jsonable(value: Any, _depth: int = 0) -> Any:
    """``value`` made safe for ``json.dumps``: containers copied, unknown objects as ``str``."""
    # A depth cap because tool results are arbitrary data; a cycle must not hang a sink.
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if _depth > 32:
        return "…"
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v, _depth + 1) for v in value]
    to_json = getattr(value, "to_json", None)
    if callable(to_json):
        try:
            return jsonable(to_json(), _depth + 1)
        except Exception:
            pass
    return str(value)


@runtime_checkable
class TraceSink(Protocol):
    """Receives trace events as they happen; must be cheap and may be called from any thread."""

    def emit(self, event: TraceEvent) -> None: ...


def emit(sink: TraceSink | None, event: TraceEvent) -> None:
    """Send ``event`` to ``sink``; a failing sink is logged, never raised to the caller."""
    if sink is None:
        return
    try:
        sink.emit(event)
    except Exception:
        logger.exception("trace sink %r failed on %s %s %s", sink, event.kind, event.name, event.phase)


class NullSink:
    """Drops every event."""

    def emit(self, event: TraceEvent) -> None:
        return None


class ListSink:
    """Keeps every event in ``events`` (tests, the live tester, replays)."""

    def __init__(self) -> None:
        self.events: list[TraceEvent] = []

    def emit(self, event: TraceEvent) -> None:
        self.events.append(event)

    def of_kind(self, kind: str) -> list[TraceEvent]:
        """The events of one kind, in emission order."""
        return [e for e in self.events if e.kind == kind]

    def to_json(self) -> list[dict[str, Any]]:
        return [e.to_json() for e in self.events]


class LoggingSink:
    """Writes each event as one JSON line on a logger (``llamon_agent.trace`` by default)."""

    def __init__(self, log: logging.Logger | None = None, level: int = logging.DEBUG) -> None:
        self.log = log or logger
        self.level = level

    def emit(self, event: TraceEvent) -> None:
        if self.log.isEnabledFor(self.level):
            self.log.log(self.level, "trace %s", json.dumps(event.to_json(), ensure_ascii=False))


class MultiSink:
    """Fans each event out to several sinks; one failing sink does not starve the others."""

    def __init__(self, *sinks: TraceSink) -> None:
        self.sinks: tuple[TraceSink, ...] = sinks

    def emit(self, event: TraceEvent) -> None:
        for sink in self.sinks:
            emit(sink, event)


@dataclass(slots=True)
class Span:
    """A step in progress: set ``output``/``status``/``meta`` before the ``with`` block ends."""

    sink: TraceSink | None
    id: str
    kind: EventKind
    name: str
    parent: str | None
    start: float
    input: Any = None
    output: Any = None
    status: str = STATUS_OK
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    _t0: float = 0.0

    def fail(self, error: str) -> None:
        """Mark the step failed without raising (the caller handles the error itself)."""
        self.status = STATUS_ERROR
        self.error = error

    def begin(self) -> None:
        """Emit the start event (the step exists from now on)."""
        self._t0 = time.perf_counter()
        emit(self.sink, self._event("start", None))

    def finish(self) -> None:
        """Emit the end event with the elapsed time."""
        elapsed = round((time.perf_counter() - self._t0) * 1000.0, 3)
        emit(self.sink, self._event("end", elapsed))

    def _event(self, phase: Phase, duration_ms: float | None) -> TraceEvent:
        ending = phase == "end"
        return TraceEvent(
            id=self.id,
            parent=self.parent,
            kind=self.kind,
            name=self.name,
            phase=phase,
            start=self.start,
            duration_ms=duration_ms,
            status=self.status if ending else STATUS_RUNNING,
            input=self.input,
            output=self.output if ending else None,
            error=self.error if ending else None,
            meta=dict(self.meta),
        )


def start_span(
    sink: TraceSink | None,
    kind: EventKind,
    name: str,
    *,
    input: Any = None,
    parent: str | None = None,
    meta: dict[str, Any] | None = None,
) -> Span:
    """Begin a step by hand (emits its start event); call :meth:`Span.finish` to end it."""
    s = Span(
        sink=sink,
        id=new_event_id(),
        kind=kind,
        name=name,
        parent=parent,
        start=time.time(),
        input=input,
        meta=dict(meta or {}),
    )
    s.begin()
    return s


@contextmanager
def span(
    sink: TraceSink | None,
    kind: EventKind,
    name: str,
    *,
    input: Any = None,
    parent: str | None = None,
    meta: dict[str, Any] | None = None,
) -> Iterator[Span]:
    """Emit a start event, run the block, then an end event with its duration and any error."""
    s = start_span(sink, kind, name, input=input, parent=parent, meta=meta)
    try:
        yield s
    except BaseException as exc:
        s.fail(str(exc) or type(exc).__name__)
        raise
    finally:
        s.finish()


# --- The trace a piece of code runs under (flows: MCP calls inside nodes become tool steps) ----

_CURRENT: ContextVar[tuple[TraceSink, str | None] | None] = ContextVar("llamon_trace", default=None)


@contextmanager
def traced(sink: TraceSink | None, parent: str | None = None) -> Iterator[None]:
    """Make ``sink`` (and the parent step) the trace of the code in the block and the tasks it starts."""
    token = _CURRENT.set((sink, parent) if sink is not None else None)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current_trace() -> tuple[TraceSink, str | None] | None:
    """The (sink, parent step id) set by :func:`traced`, or None outside any."""
    return _CURRENT.get()
