"""Reads for impact analyses: the analyses themselves, and the recorded runs streamed for a replay."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Case, Q, QuerySet, TextField, When
from django.db.models.functions import Cast

from agents.models import Agent, Run, RunStep
from governance.models import ImpactAnalysis, SuggestionJob
from rules.models import RuleSet

MICROSECOND = timedelta(microseconds=1)  # the resolution of stored times (SQLite and PostgreSQL)
CHUNK = 2_000  # runs per keyset chunk (and per IN list of step ids: under SQLite's variable cap)
RUN_FIELDS = ("id", "query", "context", "a2a_data", "a2a_files")
# The JSON columns come as their stored text: a replay decodes only what it uses (JsonTexts). The
# time is not read per run (a datetime made per row was ~2 % of a replay): the keyset reads the
# last run's, and a sample its own (run_created).
_RUN_COLUMNS = tuple(
    Cast(name, TextField()) if name in ("context", "a2a_data", "a2a_files") else name for name in RUN_FIELDS
)


def analysis_list(*, rule_set: RuleSet, limit: int = 20) -> QuerySet[ImpactAnalysis]:
    """The newest analyses of a rule set (the form page lists them)."""
    return (
        ImpactAnalysis.objects.filter(rule_set=rule_set)
        .select_related("created_by")
        .defer("snapshot", "result")
        .order_by("-created_at", "-id")[:limit]
    )


@dataclass(frozen=True)
class RunFilter:
    """Which recorded runs a replay reads: one rule set's runs in a time window, optionally narrowed."""

    rule_set_name: str
    since: datetime
    until: datetime
    agent: Agent | None = None
    chatbot_id: str = ""
    user_id: str = ""

    def queryset(self) -> QuerySet[Run]:
        runs = Run.objects.filter(
            rule_set_name=self.rule_set_name, created_at__gte=self.since, created_at__lt=self.until
        )
        if self.agent is not None:
            runs = runs.filter(agent=self.agent)
        if self.chatbot_id:
            runs = runs.filter(chatbot_id=self.chatbot_id)
        if self.user_id:
            runs = runs.filter(user_id=self.user_id)
        return runs


def recorded_count(*, runs: RunFilter, limit: int) -> int:
    """How many runs match (at most ``limit``: a count past the cap is not needed)."""
    return runs.queryset().order_by()[:limit].count()


def recorded_chunks(
    *, runs: RunFilter, limit: int, chunk: int = CHUNK
) -> Iterator[tuple[list[tuple[Any, ...]], tuple[int, datetime]]]:
    """The matching runs, oldest first, as ``RUN_FIELDS`` tuples in keyset chunks (at most ``limit``);
    the JSON columns as their stored text (None for NULL). Each chunk comes with the (id,
    created_at) of its last run (``chunk_runs``'s ``last``).

    Each chunk continues after the (created_at, id) of the last one, along the run_created index:
    no OFFSET, no sort of the whole window, and only the columns a replay needs. The window's
    start moves up to the chunk (one lower bound: SQLite ranges the index on one of them, and
    with ``since`` it would read the window from its start again for every chunk).
    """
    page = runs.queryset().order_by("created_at", "id").values_list(*_RUN_COLUMNS)
    left = limit
    while left > 0:
        rows = list(page[: min(chunk, left)])
        if not rows:
            return
        last_id = rows[-1][0]
        last_at = Run.objects.filter(pk=last_id).values_list("created_at", flat=True).get()
        yield rows, (last_id, last_at)
        page = (
            replace(runs, since=last_at)
            .queryset()
            .filter(Q(created_at__gt=last_at) | Q(created_at=last_at, id__gt=last_id))
            .order_by("created_at", "id")
            .values_list(*_RUN_COLUMNS)
        )
        left -= len(rows)


def run_created(run_id: int) -> str:
    """When a run was created, as ISO text (a sample's; "" when the run is gone since)."""
    at = Run.objects.filter(pk=run_id).values_list("created_at", flat=True).first()
    return at.isoformat() if at is not None else ""


def chunk_runs(*, runs: RunFilter, after: tuple[Any, Any] | None, last: tuple[Any, Any]) -> QuerySet[Run]:
    """The runs of one chunk of ``recorded_chunks``: after the (id, created_at) of the previous
    chunk's last run (None: the first chunk), up to and with the chunk's own last one (the
    window narrowed to the chunk, for the index range as above)."""
    window = replace(runs, since=after[1] if after is not None else runs.since, until=last[1] + MICROSECOND)
    page = window.queryset().filter(Q(created_at__lt=last[1]) | Q(created_at=last[1], id__lte=last[0]))
    if after is not None:
        page = page.filter(Q(created_at__gt=after[1]) | Q(created_at=after[1], id__gt=after[0]))
    return page


# The C scanner json.loads ends in, without its three Python layers.
_SCAN = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def json_value(text: str | None) -> Any:
    """A JSON column read as its stored text, decoded (None for NULL): ``json.loads(text)``.

    A stored text is one value without surrounding space: the scanner reads it at once (half the
    time of ``json.loads`` on a rule step's input); anything else, valid or not, goes through
    ``json.loads`` (its value, its error).
    """
    if text is None:
        return None
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


class JsonTexts:
    """Stored JSON text decoded, each distinct short text once per replay.

    Runs that recorded the same call store the same params text, so a replay of 100,000 runs
    decodes a few thousand texts, not 300,000. The values are shared between the runs that stored
    the same text: callers read them and never change them.
    """

    def __init__(self, *, limit: int = 100_000, max_chars: int = 2_000, total_chars: int = 8_000_000) -> None:
        self.known: dict[str, Any] = {}
        self.limit, self.max_chars, self.left = (
            limit,
            max_chars,
            total_chars,
        )  # memory: a few times total_chars

    def __call__(self, text: str | None) -> Any:
        if text is None:
            return None
        found = self.known.get(text, _UNKNOWN)
        if found is _UNKNOWN:
            found = json_value(text)
            if len(text) <= self.max_chars and len(self.known) < self.limit and self.left >= len(text):
                self.known[text] = found
                self.left -= len(text)
        return found


_UNKNOWN = object()


class RecordedPrestep:
    """What one run recorded of its pre-step: whether it completed, and its rule steps in order.

    ``rules``: ``(name, status, mcp_id, tool_name, input)`` with the input as its stored JSON text
    (decoded when compared: ``services.old_side``'s ``decode``), so runs that recorded the same
    steps hold equal ones.
    """

    __slots__ = ("rules", "status")

    def __init__(self, status: str) -> None:
        self.status = status
        self.rules: list[tuple[str, str, str, str, str | None]] = []


def recorded_presteps(*, run_ids: list[int] | QuerySet[Run]) -> dict[int, RecordedPrestep]:
    """The pre-step and rule steps of the given runs (one indexed read, only the needed columns).

    ``run_ids`` may be a queryset of runs (``chunk_runs``): the database selects the steps by a
    subquery, cheaper than a list of 2,000 ids Django prepares one by one.
    """
    ids: Any = run_ids.values("id") if isinstance(run_ids, QuerySet) else run_ids
    # One read of every step of the runs, along the (run, seq) index, with the input of rule steps
    # only: with a condition on the kind, SQLite (no statistics) reads the kind index instead,
    # every pre-step of the table for each chunk.
    steps = (
        RunStep.objects.filter(run_id__in=ids)
        .order_by("run_id", "seq")
        .values_list(
            "run_id",
            "kind",
            "name",
            "status",
            "mcp_id",
            "tool_name",
            Case(
                When(kind=RunStep.Kind.RULE, then=Cast("input", TextField())),
                default=None,
                output_field=TextField(),
            ),
        )
    )
    out: dict[int, RecordedPrestep] = {}
    prestep, rule = RunStep.Kind.PRESTEP, RunStep.Kind.RULE
    for run_id, kind, name, status, mcp_id, tool_name, text in steps:
        if kind == rule:
            found = out.get(run_id)
            if found is not None:
                found.rules.append((name, status, mcp_id, tool_name, text))
        elif kind == prestep:
            out[run_id] = RecordedPrestep(status)
    return out


def suggestion_job_latest(*, agent: Any) -> SuggestionJob | None:
    """The agent's newest mining job (its result is what the savings page shows)."""
    return SuggestionJob.objects.filter(agent=agent).select_related("created_by").first()
