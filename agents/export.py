"""Evidence export: one row per deterministic call of the runs a filter picks, with its proof.

Each row names the run (id, time, userId/sessionId/chatbotId, agent), the rule-set version that
served it (name, ref, content hash, candidate or not), the rule, the MCP server, the tool, its
params and result, status or error, and the run's input (masked as every page shows it) and
answer. A run in which no rule called a tool is one row with the rule columns empty. Rows carry
their run's link in the evidence chain (``chain_seq``, ``record_hash``).

JSON Lines add what an offline check needs (``tools/verify_evidence.py``, standard library
only): a ``run`` line before a run's calls holding its decision record and the whole link, each
``call`` line the step's stored input, output and error, and a last ``end`` line with the
SHA-256 of every line before it.

Streamed: runs are read BATCH at a time, so memory stays flat whatever the export's size.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from django.http import StreamingHttpResponse
from django.utils import timezone

from agents import selectors
from agents.evidence import decision_records
from agents.models import Run, RunStep
from core.chain import chain_head
from core.models import ChainRecord

FORMAT = "llamon-evidence/1"
FORMATS = ("csv", "jsonl")
BATCH = 200
COLUMNS = (
    "run",
    "time",
    "user_id",
    "session_id",
    "chatbot_id",
    "agent",
    "rule_set",
    "version",
    "rule_set_hash",
    "candidate",
    "rule",
    "mcp_id",
    "tool",
    "params",
    "result",
    "status",
    "error",
    "query",
    "answer",
    "run_status",
    "chain_seq",
    "record_hash",
)


def _ids(filters: dict[str, Any]) -> Iterator[list[int]]:
    batch: list[int] = []
    for pk in selectors.run_list(filters=filters).values_list("pk", flat=True).iterator(chunk_size=2000):
        batch.append(pk)
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)


def evidence_rows(filters: dict[str, Any]) -> Iterator[tuple[Run, dict[str, Any] | None, list[Any], Any]]:
    """(run masked for showing, its decision record, its rule steps, its chain link) per run, in list order."""
    for ids in _ids(filters):
        runs = {r.pk: r for r in selectors.runs_for_display(Run.objects.filter(pk__in=ids))}
        calls: dict[int, list[Any]] = defaultdict(list)
        for step in RunStep.objects.filter(run_id__in=ids, kind=RunStep.Kind.RULE).order_by("run_id", "seq"):
            calls[step.run_id].append(step)
        links = {int(r.ref): r for r in ChainRecord.objects.filter(kind="run", ref__in=[str(i) for i in ids])}
        records = decision_records(ids)
        for pk in ids:
            if pk in runs:
                yield runs[pk], records.get(str(pk)), calls[pk], links.get(pk)


def _row(run: Run, step: Any, link: Any) -> dict[str, Any]:
    params = (step.input or {}).get("params") if step is not None and isinstance(step.input, dict) else None
    return {
        "run": run.pk,
        "time": (step.started_at if step is not None else run.created_at).isoformat(),
        "user_id": run.user_id,
        "session_id": run.session_id,
        "chatbot_id": run.chatbot_id,
        "agent": run.agent_name,
        "rule_set": run.rule_set_name,
        "version": run.rule_set_ref,
        "rule_set_hash": run.rule_set_hash,
        "candidate": run.rollout_candidate,
        "rule": step.name if step is not None else "",
        "mcp_id": step.mcp_id if step is not None else "",
        "tool": step.tool_name if step is not None else "",
        "params": params,
        "result": step.output if step is not None else None,
        "status": step.status if step is not None else "",
        "error": step.error if step is not None else "",
        "query": run.query,
        "answer": run.answer,
        "run_status": run.status,
        "chain_seq": link.seq if link is not None else None,
        "record_hash": link.record_hash if link is not None else "",
    }


def _link(link: Any) -> dict[str, Any] | None:
    if link is None:
        return None
    return {
        "seq": link.seq,
        "kind": link.kind,
        "ref": link.ref,
        "content_hash": link.content_hash,
        "prev_hash": link.prev_hash,
        "record_hash": link.record_hash,
    }


def evidence_jsonl(filters: dict[str, Any]) -> Iterator[str]:
    """The export as JSON Lines (see the module's docstring)."""
    digest = hashlib.sha256()
    counts = {"runs": 0, "calls": 0}

    def line(value: dict[str, Any]) -> str:
        text = _json(value) + "\n"
        digest.update(text.encode("utf-8", "surrogatepass"))
        return text

    yield line(
        {
            "type": "export",
            "format": FORMAT,
            "exported_at": timezone.now().isoformat(),
            "filters": {k: v for k, v in filters.items() if v not in (None, "")},
            "chain_head": chain_head(),
        }
    )
    for run, record, steps, link in evidence_rows(filters):
        counts["runs"] += 1
        yield line({"type": "run", **_row(run, None, link), "decision": record, "link": _link(link)})
        for step in steps:
            counts["calls"] += 1
            call = _row(run, step, link)
            call.update(type="call", seq=step.seq, input=step.input, output=step.output)
            yield line(call)
    yield _json({"type": "end", **counts, "sha256": digest.hexdigest()}) + "\n"


def evidence_csv(filters: dict[str, Any]) -> Iterator[str]:
    """The export as CSV: one row per call (a run without one: one row), JSON values as JSON text."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def flush() -> str:
        text = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        return text

    buffer.write("\ufeff")  # a byte-order mark, so that spreadsheet programs read the Korean as UTF-8
    writer.writerow(COLUMNS)
    yield flush()
    for run, _record, steps, link in evidence_rows(filters):
        for step in steps or [None]:
            row = _row(run, step, link)
            writer.writerow(
                [
                    _json(row[c]) if c in ("params", "result") and row[c] is not None else _cell(row[c])
                    for c in COLUMNS
                ]
            )
        yield flush()


def _cell(value: Any) -> str:
    """A CSV cell; text a spreadsheet would run as a formula is quoted with a leading apostrophe."""
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


REPORT_ROWS = 500


def evidence_report(filters: dict[str, Any]) -> dict[str, Any]:
    """The evidence report page: the first REPORT_ROWS call rows (the files hold them all)."""
    rows: list[dict[str, Any]] = []
    runs = 0
    for run, _record, steps, link in evidence_rows(filters):
        runs += 1
        rows.extend(_row(run, step, link) for step in steps or [None])
        if len(rows) >= REPORT_ROWS:
            break
    return {"rows": rows[:REPORT_ROWS], "cut": len(rows) >= REPORT_ROWS, "runs": runs, "head": chain_head()}


def run_document(run: Run) -> dict[str, Any]:
    """One run as a JSON document: the run (input masked as shown), every step as stored, its link."""
    (shown,) = selectors.runs_for_display([Run.objects.get(pk=run.pk)])
    link = ChainRecord.objects.filter(kind="run", ref=str(run.pk)).first()
    fields = [
        "source",
        "status",
        "query",
        "context",
        "a2a_data",
        "a2a_files",
        "user_id",
        "session_id",
        "chatbot_id",
        "agent_name",
        "rule_set_name",
        "rule_set_ref",
        "rule_set_hash",
        "rollout_candidate",
        "answer",
        "error",
        "error_kind",
        "llm_calls",
        "tool_calls",
        "prestep_calls",
        "created_at",
        "started_at",
        "finished_at",
    ]
    step_fields = (
        "seq parent_seq kind name status mcp_id tool_name started_at duration_ms input output error tokens"
    )
    return {
        "format": "llamon-run/1",
        "id": shown.pk,
        **{f: getattr(shown, f) for f in fields},
        "steps": list(RunStep.objects.filter(run_id=run.pk).order_by("seq").values(*step_fields.split())),
        "decision": decision_records([run.pk]).get(str(run.pk)),
        "link": _link(link),
    }


def evidence_stream(filters: dict[str, Any], fmt: str) -> Iterator[str]:
    return evidence_csv(filters) if fmt == "csv" else evidence_jsonl(filters)


def evidence_response(stream: Iterator[str], fmt: str) -> StreamingHttpResponse:
    """A streamed download of an evidence export (the page's and the API's)."""
    content_type = "text/csv; charset=utf-8" if fmt == "csv" else "application/x-ndjson; charset=utf-8"
    response = StreamingHttpResponse(stream, content_type=content_type)
    name = f"llamon-evidence-{timezone.now():%Y%m%d-%H%M%S}.{fmt}"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    response["Cache-Control"] = "no-store"
    return response
