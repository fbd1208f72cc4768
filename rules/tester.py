"""The live tester's state and rows: what it remembers between pages, and what a big rule set shows.

The tester's inputs (query, context, DataParts, FileParts) are kept in the user's session, one
entry per rule set. Server side rather than in localStorage so that they survive a save, a
reload and the no-JavaScript form post alike, and the editor renders them into the form before
any script runs (the first live run uses them). A session belongs to one login, so one user's
sample never shows to another.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llamon_agent.prestep import RuleRecord, RuleStatus

TESTER_FIELDS = ("query", "context", "data", "files")
# What one rule set's remembered inputs may weigh in the session (the form's own caps are a bit
# lower: 32,000 query characters plus 200 KB of data); a bigger post is not remembered.
MAX_REMEMBERED_CHARS = 300_000
# Skipped and not-reached rules listed before "show all": 2,000 rules made a 470 KB answer.
SKIPPED_SHOWN = 20


def _session_key(rule_set_pk: int) -> str:
    return f"rules.tester.{rule_set_pk}"


def tester_inputs_load(session: Any, rule_set_pk: int) -> dict[str, str]:
    """The inputs last sent to this rule set's tester in this session (empty when none)."""
    stored = session.get(_session_key(rule_set_pk)) or {}
    return {f: stored[f] for f in TESTER_FIELDS if isinstance(stored.get(f), str)}


def tester_inputs_store(
    session: Any, rule_set_pk: int, post: Mapping[str, Any], *, prefix: str = "t"
) -> None:
    """Remember the tester's raw inputs (even invalid ones: the user is still typing)."""
    values = {f: post.get(f"{prefix}-{f}", "") for f in TESTER_FIELDS}
    values = {f: v if isinstance(v, str) else "" for f, v in values.items()}
    if sum(len(v) for v in values.values()) > MAX_REMEMBERED_CHARS:
        return
    key = _session_key(rule_set_pk)
    if session.get(key) != values:
        session[key] = values


@dataclass
class TesterRows:
    """The rows shown: every fired and failed rule, the first skipped ones, and a count of the rest."""

    rows: list[tuple[RuleRecord, list[str] | None, Any]] = field(default_factory=list)
    hidden_skipped: int = 0
    hidden_not_reached: int = 0

    @property
    def hidden(self) -> int:
        return self.hidden_skipped + self.hidden_not_reached


def tester_rows(
    records: Sequence[RuleRecord], schema_errors: Mapping[str, list[str]], *, show_all: bool
) -> TesterRows:
    """Choose the rows: fired and error rows always, skipped/not-reached ones up to SKIPPED_SHOWN."""
    out = TesterRows()
    quiet = 0
    for rec in records:
        if rec.status in (RuleStatus.FIRED, RuleStatus.ERROR) or show_all or quiet < SKIPPED_SHOWN:
            if rec.status not in (RuleStatus.FIRED, RuleStatus.ERROR):
                quiet += 1
            out.rows.append((rec, schema_errors.get(rec.rule), None))
        elif rec.status is RuleStatus.SKIPPED:
            out.hidden_skipped += 1
        else:
            out.hidden_not_reached += 1
    return out
