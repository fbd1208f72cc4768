"""A finished run's decision record: what the evidence chain holds for it.

The record is digests, not copies: the request (query, context, DataParts, FileParts), the
rule-set version that served it (name, ref, content hash, candidate or not), every step in
order with the digests of its input, output and error (the pre-step's calls, each rule and
tool with its params and result, the LLM calls, the answer), and the answer's digest. It is
built from the rows as stored (masked) when the run ends, and again by the verifier: any edit
of the run or of one of its steps since then changes it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy

from agents.models import Run, RunStep, RunSubject, RunTool
from agents.subjects import run_subjects
from core.chain import DELETION, Kind, chain_append, chain_deletion, chain_kind
from core.content_hash import sha256
from core.models import ChainRecord

STEP_FIELDS = (
    "run_id",
    "seq",
    "kind",
    "name",
    "status",
    "mcp_id",
    "tool_name",
    "input",
    "output",
    "error",
    "started_at",
)
RUN_FIELDS = (
    "id",
    "source",
    "ingested_by_id",
    "status",
    "agent_name",
    "user_id",
    "session_id",
    "chatbot_id",
    "rule_set_name",
    "rule_set_ref",
    "rule_set_hash",
    "rollout_candidate",
    "query",
    "context",
    "a2a_data",
    "a2a_files",
    "answer",
    "error",
    "error_kind",
    "created_at",
    "finished_at",
)


def request_digest(run: Mapping[str, Any]) -> str:
    """The digest of what the run was asked (as stored)."""
    return sha256(
        {"query": run["query"], "context": run["context"], "data": run["a2a_data"], "files": run["a2a_files"]}
    )


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def step_digest(step: Mapping[str, Any]) -> list[Any]:
    """One step as its decision-record entry: what it was, the digests of what it saw and said,
    and when it started (the call time exports show)."""
    return [
        step["seq"],
        step["kind"],
        step["name"],
        step["status"],
        step["mcp_id"],
        step["tool_name"],
        sha256(step["input"]),
        sha256(step["output"]),
        sha256(step["error"]),
        _iso(step["started_at"]),
    ]


# The record's shape: 2 added each step's start time, the run's "tool called" rows (what the run
# list's tool filter reads) and the ingest credential. Links sealed before hold shape 1, which
# the verifier still accepts for them (older_records): they cover what they covered.
RECORD_VERSION = 2


# What a record says in place of nothing when a run's subject rows are not the ones its request gives.
SUBJECTS_CHANGED = "the subject rows are not the ones the request gives"


def subjects_expected(run: Mapping[str, Any]) -> set[tuple[str, str, Any]]:
    """The subject rows a run must have: derived from its request, with its time."""
    return {(key, value, run["created_at"]) for key, value in run_subjects(run["context"], run["a2a_data"])}


def decision_record(
    run: Mapping[str, Any],
    steps: Iterable[Mapping[str, Any]],
    tools: Iterable[tuple[str, Any]] = (),
    subjects: Iterable[tuple[str, str, Any]] = (),
) -> dict[str, Any]:
    """A finished run's record (without the ids of rows that may be deleted and set to null).

    The subject rows are not listed: the record commits to the request they are derived from. When
    they are not exactly that derivation (a row edited, deleted or added by hand), the record says
    so (SUBJECTS_CHANGED), so it no longer matches the hash it was sealed with, whatever its shape."""
    record = {
        "v": RECORD_VERSION,
        "ingested_by": run["ingested_by_id"],
        "tools": sorted([name, _iso(at)] for name, at in tools),
        "run": run["id"],
        "source": run["source"],
        "status": run["status"],
        "agent": run["agent_name"],
        # The ids as a digest: the record travels in exports, where the ids are shown masked.
        "ids": sha256([run["user_id"], run["session_id"], run["chatbot_id"]]),
        "rule_set": {"name": run["rule_set_name"], "ref": run["rule_set_ref"], "hash": run["rule_set_hash"]},
        "candidate": run["rollout_candidate"],
        "request": request_digest(run),
        "answer": sha256(run["answer"]),
        "error": [run["error_kind"], sha256(run["error"])],
        "created_at": run["created_at"].isoformat(),
        "finished_at": run["finished_at"].isoformat() if run["finished_at"] else None,
        "steps": [step_digest(s) for s in steps],
    }
    if set(subjects) != subjects_expected(run):
        record["subjects"] = SUBJECTS_CHANGED
    return record


def decision_records(run_ids: list[int]) -> dict[str, dict[str, Any]]:
    """The records of these runs as they are stored now ({str(run id): record}; finished runs only).

    Read as values, not model instances (instances were most of an export's time)."""
    runs = {
        r["id"]: r for r in Run.objects.filter(pk__in=run_ids, status__in=Run.FINISHED).values(*RUN_FIELDS)
    }
    steps: dict[int, list[Any]] = defaultdict(list)
    for step in RunStep.objects.filter(run_id__in=list(runs)).order_by("run_id", "seq").values(*STEP_FIELDS):
        steps[step["run_id"]].append(step)
    tools, subjects = run_tools(list(runs)), run_subject_rows(list(runs))
    return {str(pk): decision_record(run, steps[pk], tools[pk], subjects[pk]) for pk, run in runs.items()}


def run_tools(run_ids: list[int]) -> dict[int, list[tuple[str, Any]]]:
    """The runs' "tool called" rows: {run id: [(tool, time)]}."""
    tools: dict[int, list[tuple[str, Any]]] = defaultdict(list)
    for run_id, name, at in RunTool.objects.filter(run_id__in=run_ids).values_list(
        "run_id", "tool_name", "created_at"
    ):
        tools[run_id].append((name, at))
    return tools


def run_subject_rows(run_ids: list[int]) -> dict[int, list[tuple[str, str, Any]]]:
    """The runs' subject rows: {run id: [(key, value, time)]}."""
    rows: dict[int, list[tuple[str, str, Any]]] = defaultdict(list)
    for run_id, key, value, at in RunSubject.objects.filter(run_id__in=run_ids).values_list(
        "run_id", "key", "value", "created_at"
    ):
        rows[run_id].append((key, value, at))
    return rows


def subjects_write(run_id: int) -> None:
    """Write a run's subject rows (run_end, in its transaction; the backfill migration does the same)."""
    run = Run.objects.filter(pk=run_id).values("context", "a2a_data", "created_at").first()
    if run is not None:
        RunSubject.objects.bulk_create(
            [
                RunSubject(run_id=run_id, key=key, value=value, created_at=run["created_at"])
                for key, value in run_subjects(run["context"], run["a2a_data"])
            ],
            ignore_conflicts=True,
        )


def older_records(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The record as links sealed before RECORD_VERSION 2 hold it (fewer fields covered)."""
    if record.get("v") != RECORD_VERSION:
        return []
    old = {k: v for k, v in record.items() if k not in ("v", "ingested_by", "tools")}
    old["steps"] = [step[:9] for step in record["steps"]]
    return [old]


def run_end(run_id: int, *, where: Mapping[str, Any], **fields: Any) -> bool:
    """THE way a run ends, whatever the route (worker, cancel, reaper, redelivery, ingest): set its
    end (``fields``: status, answer, error, ...; ``finished_at`` now unless given) if the run still
    matches ``where``, mark its steps still running as interrupted, and append its decision record
    to the evidence chain, in one transaction. False when the run no longer matched (ended already).
    Nothing else finishes a run (a test scans the code for any other write of an end)."""
    fields.setdefault("finished_at", timezone.now())
    with transaction.atomic():
        ended = Run.objects.filter(pk=run_id, **where).update(**fields)
        if ended:
            RunStep.objects.filter(run_id=run_id, status="running").update(status="interrupted")
            subjects_write(run_id)
            record = decision_records([run_id]).get(str(run_id))
            if record is not None:
                chain_append(kind="run", ref=str(run_id), content=record)
    return bool(ended)


def runs_deletion(run_ids: list[int], *, reason: str) -> None:
    """Say in the chain that these runs are deleted on purpose (before the DELETE, same transaction)."""
    chain_deletion(kind="run", refs=[str(i) for i in run_ids], reason=reason)


def _unchained(after_ref: str) -> list[str]:
    """Finished runs with no link: ended after the first sealed run, created after it, or with an id
    the database never hands out (<= 0), whatever times they claim."""
    first = Run.objects.filter(pk=int(after_ref)).values_list("finished_at", flat=True).first()
    since = Q(pk__gt=int(after_ref)) | Q(pk__lte=0)
    if first is not None:
        since |= Q(finished_at__gte=first)
    rows = Run.objects.filter(since, status__in=Run.FINISHED)
    links = ChainRecord.objects.filter(kind="run").count()
    deleted = sum(
        len(payload.get("refs") or [])
        for payload in ChainRecord.objects.filter(kind=DELETION).values_list("payload", flat=True)
        if isinstance(payload, dict) and payload.get("kind") == "run"
    )
    if rows.count() <= links - deleted:  # deletions are found link by link; this looks for insertions
        return []
    refs = ChainRecord.objects.filter(kind="run").values_list("ref", flat=True)
    chained = {int(r) for r in refs.iterator() if r.lstrip("-").isdigit()}
    return [
        str(pk) for pk in rows.order_by("pk").values_list("pk", flat=True).iterator() if pk not in chained
    ][:10]


def register() -> None:
    """Teach the chain's verifier to read runs back (AgentsConfig.ready)."""
    chain_kind(
        "run",
        Kind(
            current=lambda refs: decision_records([int(r) for r in refs if r.isdigit()]),
            unchained=_unchained,
            older=older_records,
            label=gettext_lazy("run"),
        ),
    )
