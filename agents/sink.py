"""A trace sink that stores a run's steps as they happen.

A start event inserts the step row at once (autocommit), before the call it describes begins,
so a worker killed mid-call leaves the step behind as evidence; the end event completes it.
A tool or rule step's output over LLAMON_TOOL_RESULT_MAX_BYTES is cut (with its full size) first.
Everything stored passes through the privacy redaction, then through json_safe (a tool
result may hold NaN or Infinity, which JSON columns refuse: they are stored as the strings
"NaN", "Infinity" and "-Infinity", so the step is kept and shown).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from agents.models import Run, RunStep, RunTool
from llamon_agent.mcp.results import cap_value
from llamon_agent.trace import TraceEvent

logger = logging.getLogger(__name__)


class DbStepSink:
    """TraceSink writing RunStep rows for one run (thread-safe; seq numbers in arrival order)."""

    def __init__(self, run: Run, *, redact: Callable[[Any], Any] | None = None, resume: bool = False) -> None:
        self.run_id = run.pk
        # Tool results are cut by the pool as they arrive; a served agent's own (non-MCP) tools and
        # whatever a trace batch brings are cut here, the same way, before they are stored.
        self._max_result_bytes = settings.LLAMON_TOOL_RESULT_MAX_BYTES
        redact = redact or (lambda value: value)
        self._redact = lambda value: json_safe(redact(value))
        self._lock = threading.Lock()
        self._seq = RunStep.objects.filter(run_id=run.pk).count()
        self._rows: dict[str, tuple[int, int]] = {}  # event id -> (row pk, seq)
        if resume:
            # Trace ingest: an end event may complete a step whose start came in an earlier batch.
            self._rows = {
                event_id: (pk, seq)
                for event_id, pk, seq in RunStep.objects.filter(run_id=run.pk)
                .exclude(event_id="")
                .values_list("event_id", "pk", "seq")
            }
        self.counts = {"llm": 0, "tool": 0}
        # The stored value (not the caller's copy): the tool filter pages by it like the run list.
        self._created_at = Run.objects.filter(pk=run.pk).values_list("created_at", flat=True).get()
        self._tools: set[str] = set()  # tools this sink recorded in RunTool already

    def emit(self, event: TraceEvent) -> None:
        with self._lock:
            if event.phase == "start":
                self._start(event)
            else:
                self._end(event)

    def _start(self, event: TraceEvent) -> None:
        self._seq += 1
        parent = self._rows.get(event.parent or "")
        row = RunStep.objects.create(
            run_id=self.run_id,
            seq=self._seq,
            event_id=event.id,
            parent_seq=parent[1] if parent else None,
            kind=event.kind,
            name=event.name[:200],
            status="running",
            started_at=datetime.fromtimestamp(event.start, tz=UTC),
            input=self._redact(event.input),
            **_call_fields(event),
        )
        self._rows[event.id] = (row.pk, row.seq)
        if (
            row.tool_name
            and row.kind in (RunStep.Kind.RULE, RunStep.Kind.TOOL)
            and row.tool_name not in self._tools
        ):
            self._tools.add(row.tool_name)
            RunTool.objects.bulk_create(
                [RunTool(run_id=self.run_id, tool_name=row.tool_name, created_at=self._created_at)],
                ignore_conflicts=True,  # a resumed run may have recorded it before
            )

    def _end(self, event: TraceEvent) -> None:
        if event.kind in self.counts:
            self.counts[event.kind] += 1
        known = self._rows.get(event.id)
        fields = {
            "status": event.status,
            "duration_ms": event.duration_ms,
            "output": self._redact(
                cap_value(event.output, self._max_result_bytes)
                if event.kind in ("tool", "rule")
                else event.output
            ),
            "error": self._redact(event.error or ""),
            "tokens": (event.meta or {}).get("usage") or (event.meta or {}).get("tokens"),
            # Masked like the output: a schema problem quotes the value it is about.
            "warnings": self._redact([str(w)[:1000] for w in (event.meta or {}).get("warnings") or ()][:5]),
        }
        if known is None:  # an end without a start: store it whole
            self._start(event)
            known = self._rows[event.id]
        RunStep.objects.filter(pk=known[0]).update(**fields)


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
