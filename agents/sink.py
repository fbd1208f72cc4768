"""A trace sink that stores a run's steps as they happen.

By default a start event inserts the step row at once, before the call it describes begins,
so a worker killed mid-call leaves the step behind as evidence; the end event completes it.
With ``batch=True`` (a worker's run) the writes are grouped: a step that waits on the outside
(a rule's or a tool's call, a model call, a connect: every kind but the local ones below) is
written at its start and at its end together with everything held before it, in one
transaction; a local step (a guardrail, the pre-step's own node, the answer) waits for the next
such write, or for :meth:`DbStepSink.flush`, which the runtime calls before the run is
finished. So a worker killed during a call still leaves that call's step behind, ``running``,
and every step before it; the demo's run of six steps commits five times instead of thirteen.
A tool or rule step's output over LLAMON_TOOL_RESULT_MAX_BYTES is cut (with its full size) first.
A run stores at most LLAMON_RUN_MAX_BYTES of step inputs and outputs (JSON bytes, after masking):
past it, each further value over 1 KB is stored as ``{"llamon_cut": "run byte limit", "bytes",
"sha256"}``, the size and digest of the value as it would have been stored (see :func:`bounded`).
Everything stored passes through the privacy redaction, then through json_safe (a tool
result may hold NaN or Infinity, which JSON columns refuse: they are stored as the strings
"NaN", "Infinity" and "-Infinity", so the step is kept and shown).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import transaction

from agents.models import Run, RunStep, RunTool
from llamon_agent.mcp.results import cap_value
from llamon_agent.trace import TraceEvent

logger = logging.getLogger(__name__)


# Kinds whose work stays in this process and is bounded (no call to a server or a model): with
# batch=True their rows wait for the next write. Any other kind is written at once.
LOCAL_KINDS = frozenset({"guardrail", "prestep", "answer", "error"})


class DbStepSink:
    """TraceSink writing RunStep rows for one run (thread-safe; seq numbers in arrival order).

    ``batch``: hold the rows of local steps until the next step that waits on the outside, or
    :meth:`flush` (see the module's docstring); the caller must flush before finishing the run.
    ``created_at``: the run's stored ``created_at`` when the caller has just read the run (a
    worker's fresh claim, which has no steps yet), saving two queries.
    ``run_fields``: columns of the run stored with the first write (held or not), in its transaction.
    """

    def __init__(
        self,
        run: Run,
        *,
        redact: Callable[[Any], Any] | None = None,
        resume: bool = False,
        batch: bool = False,
        created_at: datetime | None = None,
        run_fields: dict[str, Any] | None = None,
    ) -> None:
        self.run_id = run.pk
        # Tool results are cut by the pool as they arrive; a served agent's own (non-MCP) tools and
        # whatever a trace batch brings are cut here, the same way, before they are stored.
        self._max_result_bytes = settings.LLAMON_TOOL_RESULT_MAX_BYTES
        redact = redact or (lambda value: value)
        self._redact = lambda value: json_safe(redact(value))
        self._budget = RunBytes(settings.LLAMON_RUN_MAX_BYTES)
        self._lock = threading.Lock()
        self._batch = batch
        self._seq = 0 if created_at is not None else RunStep.objects.filter(run_id=run.pk).count()
        self._rows: dict[str, int] = {}  # event id -> seq
        if resume:
            # Trace ingest: an end event may complete a step whose start came in an earlier batch.
            self._rows = dict(
                RunStep.objects.filter(run_id=run.pk).exclude(event_id="").values_list("event_id", "seq")
            )
        self.counts = {"llm": 0, "tool": 0}
        self.events = 0  # events received: how a caller tells whether a step began or ended since
        # The stored value (not the caller's copy): the tool filter pages by it like the run list.
        self._created_at = (
            created_at
            if created_at is not None
            else Run.objects.filter(pk=run.pk).values_list("created_at", flat=True).get()
        )
        self._tools: set[str] = set()  # tools this sink recorded in RunTool already
        # Held writes, in arrival order: rows to insert (by seq), ends of rows already written,
        # tools to record.
        self._new: dict[int, RunStep] = {}
        self._ended: list[tuple[int, dict[str, Any]]] = []
        self._new_tools: list[str] = []
        self._run_fields = dict(run_fields or {})

    def emit(self, event: TraceEvent) -> None:
        with self._lock:
            self.events += 1
            if event.phase == "start":
                self._start(event)
            else:
                self._end(event)
            if not self._batch or event.kind not in LOCAL_KINDS:
                self._write()

    def flush(self) -> None:
        """Write whatever is held (one transaction)."""
        with self._lock:
            self._write()

    def _start(self, event: TraceEvent) -> None:
        self._seq += 1
        parent = self._rows.get(event.parent or "")
        row = RunStep(
            run_id=self.run_id,
            seq=self._seq,
            event_id=event.id,
            parent_seq=parent,
            kind=event.kind,
            name=event.name[:200],
            status="running",
            started_at=datetime.fromtimestamp(event.start, tz=UTC),
            input=self._budget.bounded(self._redact(event.input)),
            **_call_fields(event),
        )
        self._new[row.seq] = row
        self._rows[event.id] = row.seq
        if (
            row.tool_name
            and row.kind in (RunStep.Kind.RULE, RunStep.Kind.TOOL)
            and row.tool_name not in self._tools
        ):
            self._tools.add(row.tool_name)
            self._new_tools.append(row.tool_name)

    def _end(self, event: TraceEvent) -> None:
        if event.kind in self.counts:
            self.counts[event.kind] += 1
        fields = {
            "status": event.status,
            "duration_ms": event.duration_ms,
            "output": self._budget.bounded(
                self._redact(
                    cap_value(event.output, self._max_result_bytes)
                    if event.kind in ("tool", "rule")
                    else event.output
                )
            ),
            "error": self._redact(event.error or ""),
            "tokens": (event.meta or {}).get("usage") or (event.meta or {}).get("tokens"),
            # Masked like the output: a schema problem quotes the value it is about.
            "warnings": self._redact([str(w)[:1000] for w in (event.meta or {}).get("warnings") or ()][:5]),
        }
        if event.id not in self._rows:  # an end without a start: store it whole
            self._start(event)
        seq = self._rows[event.id]
        held = self._new.get(seq)
        if held is not None:  # not written yet: written complete
            for name, value in fields.items():
                setattr(held, name, value)
        else:
            self._ended.append((seq, fields))

    def _write(self) -> None:
        if not (self._new or self._ended or self._new_tools or self._run_fields):
            return
        rows, ended, tools = list(self._new.values()), self._ended, self._new_tools
        # Dropped whether or not the write succeeds, as an unbatched sink loses the one step whose
        # write fails (trace.emit logs it): a row the database refuses must not block the next ones.
        # The run's columns are kept until a write succeeds.
        self._new, self._ended, self._new_tools = {}, [], []
        with transaction.atomic():
            if self._run_fields:
                Run.objects.filter(pk=self.run_id).update(**self._run_fields)
            if rows:
                RunStep.objects.bulk_create(rows)
            for seq, fields in ended:
                RunStep.objects.filter(run_id=self.run_id, seq=seq).update(**fields)
            if tools:
                RunTool.objects.bulk_create(
                    [RunTool(run_id=self.run_id, tool_name=t, created_at=self._created_at) for t in tools],
                    ignore_conflicts=True,  # a resumed run may have recorded it before
                )
        self._run_fields = {}


# A value this small is always stored whole, even past the run's limit (an id, a status, a short answer).
SMALL_VALUE_BYTES = 1024
CUT_KEY = "llamon_cut"


class RunBytes:
    """The bytes one run has stored of its steps' inputs and outputs, against its limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def bounded(self, value: Any) -> Any:
        """``value`` (already masked and JSON-safe), or, when storing it would take the run past its
        limit and it is over SMALL_VALUE_BYTES, a marker with its size and SHA-256 (of its JSON,
        keys sorted): the evidence still commits to what was returned, and no page carries it."""
        if value is None or value == "":
            return value
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        size = len(text.encode())
        if self.used + size > self.limit and size > SMALL_VALUE_BYTES:
            return {
                CUT_KEY: "run byte limit",
                "bytes": size,
                "sha256": hashlib.sha256(text.encode()).hexdigest(),
            }
        self.used += size
        return value


def json_safe(value: Any, _depth: int = 0) -> Any:
    """``value`` with every non-finite float replaced by its name (JSON has no NaN or Infinity)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict | list | tuple) and _depth > 64:
        return str(value)[:10_000]  # deeper than any real result: kept as text rather than lost
    if isinstance(value, dict):
        return {key: json_safe(item, _depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item, _depth + 1) for item in value]
    return value


def _call_fields(event: TraceEvent) -> dict[str, str]:
    """mcp_id and tool name of rule and tool steps, kept in columns for the run list's filters."""
    data = event.input if isinstance(event.input, dict) else {}
    meta = event.meta or {}
    if event.kind == "rule":
        return {
            "mcp_id": str(data.get("mcp_id") or meta.get("mcp_id") or "")[:64],
            "tool_name": str(data.get("tool_name") or "")[:200],
        }
    if event.kind == "tool":
        return {"mcp_id": str(meta.get("mcp_id") or "")[:64], "tool_name": event.name[:200]}
    return {}
