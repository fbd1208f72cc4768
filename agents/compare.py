"""Two runs side by side: their steps aligned, and what differs marked.

Steps are aligned by their key (stage, rule or node name, tool name) in order, the way a text
diff aligns lines: :class:`difflib.SequenceMatcher` over the two key sequences. Pairs with the
same key are compared field by field (status, params/input, output, error); steps only one run
has are "added" or "removed", and a step that left one place and shows up at another (a rule
moved, a tool called later) is "moved" on both sides. Timings always differ a little, so they
are shown as a delta and never make a pair "changed".

Pure: works on anything with a step's attributes (RunStep rows, or plain objects in tests).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.utils.translation import gettext_lazy as _

# Steps compared per side: a 5,000-step run is aligned on its first COMPARE_STEPS steps (the
# matcher's worst case is quadratic); the page says when a run was cut.
COMPARE_STEPS = 1_000
COMPARED_FIELDS = ("status", "input", "output", "error")
RUN_FIELDS = (
    ("query", _("Query")),
    ("context", _("Context")),
    ("a2a_data", "DataParts"),
    ("rule_set_ref", _("Rule set")),
    ("rule_set_hash", _("Rule set hash")),
    ("status", _("Status")),
    ("answer", _("Answer")),
    ("error", _("Error")),
)
# How the page names a step's state in the comparison (the op itself stays the CSS class).
OP_LABELS = {
    "same": _("same"),
    "changed": _("changed"),
    "added": _("added"),
    "removed": _("removed"),
    "moved": _("moved"),
}
# The step fields that can differ, as the page names them.
FIELD_LABELS = {
    "params": _("params"),
    "status": _("status"),
    "input": _("input"),
    "output": _("output"),
    "error": _("error"),
}


def step_key(step: Any) -> tuple[str, str, str]:
    """What makes two steps "the same step": its stage, its name and the tool it called."""
    return (step.kind, step.name or "", step.tool_name or "")


@dataclass
class CompareRow:
    """One line of the comparison: a step of A, of B, or both, and what differs."""

    op: str  # same | changed | added | removed | moved
    a: Any = None
    b: Any = None
    changes: list[str] = field(default_factory=list)  # labels of the fields that differ

    @property
    def duration_delta_ms(self) -> float | None:
        da = getattr(self.a, "duration_ms", None)
        db = getattr(self.b, "duration_ms", None)
        return None if da is None or db is None else db - da


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def step_changes(a: Any, b: Any) -> list[str]:
    """Labels of the fields two steps with the same key differ in ("params" for a call's input)."""
    out = []
    for name in COMPARED_FIELDS:
        left, right = getattr(a, name, None), getattr(b, name, None)
        if _canonical(left) == _canonical(right):
            continue
        if name == "input" and a.kind in ("rule", "tool"):
            out.append("params")
        else:
            out.append(name)
    return out


def align_steps(a_steps: Sequence[Any], b_steps: Sequence[Any]) -> list[CompareRow]:
    """The two step lists aligned in order (see the module docstring)."""
    a_keys = [step_key(s) for s in a_steps]
    b_keys = [step_key(s) for s in b_steps]
    # The matcher is quadratic on steps that repeat (llm, tool, llm, ...): the common head and
    # tail, where two runs of one agent usually agree, are paired first without it.
    head = 0
    while head < min(len(a_keys), len(b_keys)) and a_keys[head] == b_keys[head]:
        head += 1
    tail = 0
    while tail < min(len(a_keys), len(b_keys)) - head and a_keys[-1 - tail] == b_keys[-1 - tail]:
        tail += 1
    # autojunk off: an agent's steps repeat; the heuristic would treat them as noise and drop them.
    matcher = difflib.SequenceMatcher(
        a=a_keys[head : len(a_keys) - tail], b=b_keys[head : len(b_keys) - tail], autojunk=False
    )
    opcodes = [
        (op, i1 + head, i2 + head, j1 + head, j2 + head) for op, i1, i2, j1, j2 in matcher.get_opcodes()
    ]
    if head:
        opcodes.insert(0, ("equal", 0, head, 0, head))
    if tail:
        opcodes.append(("equal", len(a_keys) - tail, len(a_keys), len(b_keys) - tail, len(b_keys)))
    rows: list[CompareRow] = []
    for op, i1, i2, j1, j2 in opcodes:
        if op == "equal":
            for a, b in zip(a_steps[i1:i2], b_steps[j1:j2], strict=True):
                changes = step_changes(a, b)
                rows.append(CompareRow("changed" if changes else "same", a, b, changes))
            continue
        # replace, delete, insert: A's steps first (removed), then B's (added), in order.
        rows.extend(CompareRow("removed", a=s) for s in a_steps[i1:i2])
        rows.extend(CompareRow("added", b=s) for s in b_steps[j1:j2])
    _mark_moves(rows)
    return rows


def _mark_moves(rows: list[CompareRow]) -> None:
    """A removed step whose key one added step has (and no other removed step claimed) moved there."""
    added: dict[tuple[str, str, str], list[CompareRow]] = {}
    for row in rows:
        if row.op == "added":
            added.setdefault(step_key(row.b), []).append(row)
    for row in rows:
        if row.op != "removed":
            continue
        candidates = added.get(step_key(row.a))
        if not candidates:
            continue
        there = candidates.pop(0)
        row.op = there.op = "moved"
        row.changes = there.changes = step_changes(row.a, there.b)
        row.b, there.a = there.b, row.a  # each side names where its step went / came from


@dataclass
class RunComparison:
    rows: list[CompareRow]
    run_fields: list[dict[str, Any]]
    counts: dict[str, int]
    cut: bool  # a run had more steps than COMPARE_STEPS


def run_field_diffs(a: Any, b: Any) -> list[dict[str, Any]]:
    """The run-level fields (input, rule set, outcome) of both runs and whether they differ."""
    return [
        {
            "name": name,
            "label": label,
            "a": getattr(a, name),
            "b": getattr(b, name),
            "differs": _canonical(getattr(a, name)) != _canonical(getattr(b, name)),
        }
        for name, label in RUN_FIELDS
    ]


def compare_runs(a: Any, b: Any, a_steps: Sequence[Any], b_steps: Sequence[Any]) -> RunComparison:
    """Everything the compare page shows; the step lists are cut at COMPARE_STEPS by the caller."""
    rows = align_steps(a_steps, b_steps)
    counts = dict.fromkeys(("same", "changed", "added", "removed", "moved"), 0)
    for row in rows:
        counts[row.op] += 1
    counts["moved"] //= 2  # one move is two rows
    cut = len(a_steps) >= COMPARE_STEPS or len(b_steps) >= COMPARE_STEPS
    return RunComparison(rows=rows, run_fields=run_field_diffs(a, b), counts=counts, cut=cut)
