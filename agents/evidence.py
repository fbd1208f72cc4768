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
from django.utils import timezone
from django.utils.translation import gettext_lazy

from agents.models import Run, RunStep
from core.chain import Kind, chain_append, chain_deletion, chain_kind
from core.content_hash import sha256
from core.models import ChainRecord

STEP_FIELDS = ("run_id", "seq", "kind", "name", "status", "mcp_id", "tool_name", "input", "output", "error")
RUN_FIELDS = (
    "id",
    "source",
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


def step_digest(step: Mapping[str, Any]) -> list[Any]:
    """One step as its decision-record entry: what it was, and the digests of what it saw and said."""
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
    ]


def decision_record(run: Mapping[str, Any], steps: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """A finished run's record (without the ids of rows that may be deleted and set to null)."""
    return {
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


def decision_records(run_ids: list[int]) -> dict[str, dict[str, Any]]:
    """The records of these runs as they are stored now ({str(run id): record}; finished runs only).

    Read as values, not model instances (instances were most of an export's time)."""
    runs = {
        r["id"]: r for r in Run.objects.filter(pk__in=run_ids, status__in=Run.FINISHED).values(*RUN_FIELDS)
    }
    steps: dict[int, list[Any]] = defaultdict(list)
    for step in RunStep.objects.filter(run_id__in=list(runs)).order_by("run_id", "seq").values(*STEP_FIELDS):
        steps[step["run_id"]].append(step)
    return {str(pk): decision_record(run, steps[pk]) for pk, run in runs.items()}


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
            record = decision_records([run_id]).get(str(run_id))
            if record is not None:
                chain_append(kind="run", ref=str(run_id), content=record)
    return bool(ended)


def runs_deletion(run_ids: list[int], *, reason: str) -> None:
    """Say in the chain that these runs are deleted on purpose (before the DELETE, same transaction)."""
    chain_deletion(kind="run", refs=[str(i) for i in run_ids], reason=reason)


def _unchained(after_ref: str) -> list[str]:
    first = Run.objects.filter(pk=int(after_ref)).values_list("finished_at", flat=True).first()
    if first is None:
        return []
    rows = Run.objects.filter(status__in=Run.FINISHED, finished_at__gte=first)
    links = ChainRecord.objects.filter(kind="run")
    if rows.count() <= links.count():
        return []
    chained = {int(r) for r in links.values_list("ref", flat=True).iterator() if r.isdigit()}
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
            label=gettext_lazy("run"),
        ),
    )
