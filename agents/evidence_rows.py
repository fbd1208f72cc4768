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
import functools
import hashlib
import io
import json
import unicodedata
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from django.http import StreamingHttpResponse
from django.utils import timezone

from agents import selectors
from agents.evidence import (
    RUN_FIELDS,
    STEP_FIELDS,
    decision_record,
    decision_records,
    run_subject_rows,
    run_tools,
)
from agents.models import ChangeRequest, ChangeReview, Run, RunStep
from agents.redaction import redactor
from core.chain import chain_head, chain_public_key, chain_sign
from core.models import ChainRecord
from rules.models import RuleSetVersion

FORMAT = "llamon-evidence/1"
FORMATS = ("csv", "jsonl")
BATCH = 500
RUN_COLUMNS = (
    "created_at",
    "source",
    "user_id",
    "session_id",
    "chatbot_id",
    "agent_name",
    "rule_set_name",
    "rule_set_ref",
    "rule_set_hash",
    "rollout_candidate",
    "query",
    "answer",
    "status",
)
COLUMNS = (
    "run",
    "time",
    "user_id",
    "session_id",
    "chatbot_id",
    "agent",
    "source",
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


STEP_COLUMNS = (
    "run_id",
    "seq",
    "name",
    "status",
    "mcp_id",
    "tool_name",
    "started_at",
    "input",
    "output",
    "error",
)
LINK_COLUMNS = ("seq", "kind", "ref", "content_hash", "prev_hash", "record_hash")


def evidence_rows(
    filters: dict[str, Any], *, records: bool = False
) -> Iterator[tuple[dict[str, Any], dict[str, Any] | None, list[dict[str, Any]], dict[str, Any] | None]]:
    """(run, its decision record if ``records``, its rule steps, its chain link) per run, in the run
    list's order; rows as dicts (no model instances: they were most of the export's time). With
    ``records``, each batch's runs and steps are read once for both the rows and the records."""
    # Once: the privacy settings as they are when the export starts. Masking a value is a pure
    # function of it, and the ids repeat (one customer's many runs, one chatbot): each distinct
    # value is masked once (with every preset on, masking was a third of a JSON Lines export).
    redact = functools.lru_cache(maxsize=8192)(redactor())
    run_fields = sorted({"id", *RUN_COLUMNS, *(RUN_FIELDS if records else ())})
    step_fields = sorted({*STEP_COLUMNS, *(STEP_FIELDS if records else ())})
    for ids in _ids(filters):
        runs = {r["id"]: r for r in Run.objects.filter(pk__in=ids).values(*run_fields)}
        steps = RunStep.objects.filter(run_id__in=ids).order_by("run_id", "seq")
        if not records:
            steps = steps.filter(kind=RunStep.Kind.RULE)
        every: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for step in steps.values(*step_fields):
            every[step["run_id"]].append(step)
        decided: dict[int, dict[str, Any]] = {}
        if records:  # from the rows as stored, before the input is masked for display
            tools, subjects = run_tools(ids), run_subject_rows(ids)
            for pk, run in runs.items():
                if run["status"] in Run.FINISHED:
                    decided[pk] = decision_record(run, every[pk], tools[pk], subjects[pk])
        for run in runs.values():  # the input masked as the pages show it: the query and the ids
            for field in ("query", "user_id", "session_id", "chatbot_id"):
                run[field] = redact(run[field])
        chained = ChainRecord.objects.filter(kind="run", ref__in=[str(i) for i in ids]).values(*LINK_COLUMNS)
        links = {int(link["ref"]): link for link in chained}
        for pk in ids:
            if pk in runs:
                calls = [s for s in every[pk] if s.get("kind", RunStep.Kind.RULE) == RunStep.Kind.RULE]
                yield runs[pk], decided.get(pk), calls, links.get(pk)


def _row(run: dict[str, Any], step: dict[str, Any], link: dict[str, Any] | None) -> dict[str, Any]:
    params = step["input"].get("params") if isinstance(step.get("input"), dict) else None
    return {
        "run": run["id"],
        "time": (step.get("started_at") or run["created_at"]).isoformat(),
        "user_id": run["user_id"],
        "session_id": run["session_id"],
        "chatbot_id": run["chatbot_id"],
        "agent": run["agent_name"],
        "source": run["source"],
        "rule_set": run["rule_set_name"],
        "version": run["rule_set_ref"],
        "rule_set_hash": run["rule_set_hash"],
        "candidate": run["rollout_candidate"],
        "rule": step.get("name", ""),
        "mcp_id": step.get("mcp_id", ""),
        "tool": step.get("tool_name", ""),
        "params": params,
        "result": step.get("output"),
        "status": step.get("status", ""),
        "error": step.get("error", ""),
        "query": run["query"],
        "answer": run["answer"],
        "run_status": run["status"],
        "chain_seq": link["seq"] if link else None,
        "record_hash": link["record_hash"] if link else "",
    }


MANIFEST_FORMAT = "llamon-evidence-manifest/1"
CSV_MANIFEST = "#llamon-evidence-manifest"
UNSIGNED = (
    "unsigned: no LLAMON_CHAIN_SIGNING_KEY is set, so anyone who can edit this file can recompute "
    "this manifest; it shows the file is whole, it proves nothing against a forger"
)


def canonical(value: Any) -> bytes:
    """The canonical JSON the manifest is signed over (what tools/verify_evidence.py recomputes)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode(
        "utf-8", "surrogatepass"
    )


class Manifest:
    """What the export's last line signs: the filter, the runs in order with their chain position and
    the digest of their lines, the counts, the digest of the file before it, the signed head."""

    def __init__(self, fmt: str, filters: dict[str, Any]) -> None:
        self.fmt = fmt
        self.filters = json.loads(
            _json(
                {
                    k: v.isoformat() if isinstance(v, datetime) else v
                    for k, v in filters.items()
                    if v not in (None, "")
                }
            )
        )
        self.file = hashlib.sha256()
        self.index: list[list[Any]] = []
        self.calls = 0

    def write(self, text: str) -> str:
        self.file.update(text.encode("utf-8", "surrogatepass"))
        return text

    def run(self, run_id: int, link: dict[str, Any] | None, digest: str, calls: int) -> None:
        self.index.append([run_id, link["seq"] if link else None, digest])
        self.calls += calls

    def signed(self) -> dict[str, Any]:
        manifest: dict[str, Any] = {
            "type": "end",
            "format": MANIFEST_FORMAT,
            "export": self.fmt,
            "exported_at": timezone.now().isoformat(),
            "filters": self.filters,
            "runs": len(self.index),
            "calls": self.calls,
            "index": self.index,
            "sha256": self.file.hexdigest(),
            "chain_head": chain_head(),
        }
        signature = chain_sign(canonical(manifest))
        if signature is None:
            manifest["unsigned"] = UNSIGNED
        else:
            manifest.update(signature)
        return manifest


def evidence_jsonl(filters: dict[str, Any]) -> Iterator[str]:
    """The export as JSON Lines (see the module's docstring); the last line is the signed manifest."""
    filters = selectors.period_absolute(filters, timezone.now())
    manifest = Manifest("jsonl", filters)
    yield manifest.write(
        _json(
            {
                "type": "export",
                "format": FORMAT,
                "exported_at": timezone.now().isoformat(),
                "filters": manifest.filters,
                "chain_head": chain_head(),
            }
        )
        + "\n"
    )
    for run, record, steps, link in evidence_rows(filters, records=True):
        lines = [_json({"type": "run", **_row(run, {}, link), "decision": record, "link": link}) + "\n"]
        for step in steps:
            call = _row(run, step, link)
            call.update(type="call", seq=step["seq"], input=step["input"], output=step["output"])
            lines.append(_json(call) + "\n")
        text = "".join(lines)
        manifest.run(
            run["id"], link, hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(), len(steps)
        )
        yield manifest.write(text)
    yield _json(manifest.signed()) + "\n"


def evidence_csv(filters: dict[str, Any]) -> Iterator[str]:
    """The export as CSV: one row per call (a run without one: one row), JSON values as JSON text;
    the last row is the signed manifest (its first cell CSV_MANIFEST, its second the JSON)."""
    filters = selectors.period_absolute(filters, timezone.now())
    manifest = Manifest("csv", filters)
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def flush() -> str:
        text = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        return text

    buffer.write("\ufeff")  # a byte-order mark, so that spreadsheet programs read the Korean as UTF-8
    writer.writerow(COLUMNS)
    yield manifest.write(flush())
    for run, _record, steps, link in evidence_rows(filters):
        cells = []
        for step in steps or [{}]:  # a run without a call: one row, its call columns empty
            row = _row(run, step, link)
            cells.append(
                [
                    _json(row[c]) if c in ("params", "result") and row[c] is not None else _cell(row[c])
                    for c in COLUMNS
                ]
            )
        writer.writerows(cells)
        manifest.run(run["id"], link, hashlib.sha256(canonical(cells)).hexdigest(), len(steps))
        yield manifest.write(flush())
    # The manifest's row written as csv.writer would (its first cell needs no quotes, the JSON is
    # quoted with its quotes doubled), without the writer's buffer and its copy: at 100,000 runs
    # the index makes it ~10 MB, and those copies were most of the export's peak memory.
    text = _json(manifest.signed())
    yield CSV_MANIFEST + ',"' + text.replace('"', '""') + '"\r\n'


# What a spreadsheet may take for the start of a formula: = + - @, their fullwidth and small forms
# (NFKC folds ＝＋－＠﹦﹢﹣﹫ to them), the minus sign, and a tab, CR or LF before anything.
FORMULA_START = frozenset("=+-@\u2212\t\r\n")


def _cell(value: Any) -> str:
    """A CSV cell; text a spreadsheet would run as a formula is quoted with a leading apostrophe."""
    text = "" if value is None else str(value)
    first = text.lstrip(" \u3000")[:1]
    if first and (text[0] in FORMULA_START or unicodedata.normalize("NFKC", first) in FORMULA_START):
        return "'" + text
    return text


REPORT_ROWS = 500


def evidence_report(filters: dict[str, Any]) -> dict[str, Any]:
    """The evidence report page: the first REPORT_ROWS call rows (the files hold them all)."""
    rows: list[dict[str, Any]] = []
    runs = 0
    filters = selectors.period_absolute(filters, timezone.now())
    for run, _record, steps, link in evidence_rows(filters):
        runs += 1
        rows.extend(_row(run, step, link) for step in steps or [{}])
        if len(rows) >= REPORT_ROWS:
            break
    rows = rows[:REPORT_ROWS]
    ids = list(dict.fromkeys(row["run"] for row in rows))
    shown = {run.pk: run for run in selectors.runs_for_display(Run.objects.filter(pk__in=ids))}
    for row in rows:  # the run's input as every page shows it: query, context and DataParts, masked
        masked = shown[row["run"]]
        row["input"] = {"query": masked.query, "context": masked.context, "a2a_data": masked.a2a_data}
    return {
        "rows": rows,
        "cut": len(rows) >= REPORT_ROWS,
        "runs": runs,
        "head": chain_head(),
        "public_key": chain_public_key(),
        "since": filters.get("since"),
        "until": filters["until"],
        "versions": report_versions(shown.values()),
        "skipped": report_skipped(ids),
    }


def report_versions(runs: Any) -> list[dict[str, Any]]:
    """Each rule-set version the report's runs were served by: who published it (the requester of
    its change request when the agent is protected), who approved it and when, and its rules as
    they were in that version (the version is immutable)."""
    pks = sorted({run.rule_set_version_id for run in runs if run.rule_set_version_id})
    versions = RuleSetVersion.objects.filter(pk__in=pks).select_related("rule_set", "author")
    out = []
    for version in versions.order_by("rule_set__name", "number"):
        content = version.content
        rules = content.get("rules", []) if isinstance(content, dict) else content
        change = _publish_request(version)
        approvals = (
            list(change.reviews.filter(decision=ChangeReview.Decision.APPROVE).order_by("created_at", "id"))
            if change is not None
            else []
        )
        out.append(
            {
                "version": version,
                "change": change,
                "approvals": approvals,
                "rules": [r for r in rules if isinstance(r, dict)],
            }
        )
    return out


PUBLISH_ACTIONS = ("rule_set.publish", "rollout.publish")


def _publish_request(version: RuleSetVersion) -> ChangeRequest | None:
    """The approved change request that published ``version`` (a protected agent's), or None when
    it was published directly. Applying a request publishes in the same transaction as its last
    approval, as the requester: the latest such request for the rule set decided at or before the
    version was made, and after the version before it."""
    previous = (
        RuleSetVersion.objects.filter(rule_set_id=version.rule_set_id, number__lt=version.number)
        .order_by("-number")
        .values_list("created_at", flat=True)
        .first()
    )
    found = ChangeRequest.objects.filter(
        action__in=PUBLISH_ACTIONS,
        state=ChangeRequest.State.APPLIED,
        requested_by_id=version.author_id,
        decided_at__lte=version.created_at,
    )
    if previous is not None:
        found = found.filter(decided_at__gt=previous)
    # The payload is compared here: PostgreSQL stores it as json (ordered), which has no equality.
    request = next(
        (r for r in found.order_by("-decided_at") if r.payload.get("rule_set") == version.rule_set_id), None
    )
    return request


def report_skipped(ids: list[int]) -> list[dict[str, Any]]:
    """Per run, the rules its pre-step skipped (their condition did not hold, or the request index
    showed they could not fire) and how many a stop rule left unreached, from its pre-step step."""
    out = []
    steps = RunStep.objects.filter(run_id__in=ids, kind=RunStep.Kind.PRESTEP).order_by("run_id", "seq")
    for run_id, output in steps.values_list("run_id", "output"):
        if not isinstance(output, dict):
            continue
        skipped = [name for name in output.get("skipped") or [] if isinstance(name, str)]
        count = output.get("skipped_count") if isinstance(output.get("skipped_count"), int) else len(skipped)
        unreached = output.get("not_reached_count") if isinstance(output.get("not_reached_count"), int) else 0
        if skipped or count or unreached:
            out.append({"run": run_id, "skipped": skipped, "count": count, "not_reached": unreached})
    return out


def run_document(run: Run) -> dict[str, Any]:
    """One run as a JSON document: the run (input masked as shown), every step as stored, its link."""
    (shown,) = selectors.runs_for_display([Run.objects.get(pk=run.pk)])
    link = ChainRecord.objects.filter(kind="run", ref=str(run.pk)).values(*LINK_COLUMNS).first()
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
        " warnings"
    )
    return {
        "format": "llamon-run/1",
        "id": shown.pk,
        **{f: getattr(shown, f) for f in fields},
        "steps": list(RunStep.objects.filter(run_id=run.pk).order_by("seq").values(*step_fields.split())),
        "decision": decision_records([run.pk]).get(str(run.pk)),
        "link": link,
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
