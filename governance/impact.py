"""The impact diff: which tool calls a candidate rule set decides differently from what runs recorded.

Pure functions and a report accumulator, no database: services feed them one run at a time.

One run is compared rule by rule. A rule decides at most one call per pre-step, so the old side
(the calls the run recorded) and the new side (the candidate's dry-run decision on the same
request) are both ``{rule: Call}``; for each rule in either side the change is one of:

- ``added``: the candidate calls a tool under this rule, the run did not;
- ``removed``: the run called a tool under this rule, the candidate does not;
- ``changed``: both call, but the server, the tool or the params differ (the differing
  top-level param keys are counted);
- ``error``: the candidate's pre-step fails at this rule (an expression error, a malformed
  call, an unknown tool, an unbound server) where the recorded run did not fail there;
- ``fixed``: the recorded run failed at this rule's decision and the candidate does not.

A run with no change is *unchanged*. Both sides are compared after the same masking (the
privacy redaction) so that a stored, masked param equals the candidate's freshly computed one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

KINDS = ("added", "removed", "changed", "error", "fixed")
SAMPLES_PER_RULE = 3  # sample runs kept per rule (shown side by side)
CALLS_PER_SAMPLE = 20  # calls kept per side of one sample
SAMPLE_QUERY_CHARS = 300
PARAM_KEYS_SHOWN = 10  # top changed param keys listed per rule
MAX_RULE_GROUPS = 1_000  # rule names grouped; more are counted under OTHER_RULES
OTHER_RULES = "(other rules)"
_MISSING = object()


# Call, Side and RuleChange are named tuples, not frozen dataclasses: a replay makes a few of
# each per run, and a named tuple is made in half the time.


class Call(NamedTuple):
    """One decided tool call: the server, the tool and the params (JSON data)."""

    mcp_id: str
    tool_name: str
    params: Any

    def to_json(self, rule: str) -> dict[str, Any]:
        return {"rule": rule, "mcp_id": self.mcp_id, "tool_name": self.tool_name, "params": self.params}


class Side(NamedTuple):
    """One side of a comparison: the decided calls by rule, in order, and the rule the pre-step failed at."""

    calls: Mapping[str, Call]
    error_rule: str | None = None
    error: str | None = None


class RuleChange(NamedTuple):
    rule: str
    kind: str
    param_keys: tuple[str, ...] = ()


def changed_param_keys(old: Any, new: Any) -> tuple[str, ...]:
    """The top-level keys whose values differ (``("(params)",)`` when either side is not an object)."""
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return () if old == new else ("(params)",)
    keys = list(dict.fromkeys([*old, *new]))
    return tuple(str(k) for k in keys if old.get(k, _MISSING) != new.get(k, _MISSING))


def run_diff(old: Side, new: Side) -> list[RuleChange]:
    """The per-rule changes between a run's recorded pre-step and the candidate's decision (empty: unchanged)."""
    changes: list[RuleChange] = []
    for rule in dict.fromkeys([*old.calls, *new.calls]):
        before, after = old.calls.get(rule), new.calls.get(rule)
        if before is None and after is not None:
            changes.append(RuleChange(rule, "added"))
        elif after is None and before is not None:
            # A rule the candidate failed at is reported once, as its error, not also as a removal.
            if new.error_rule != rule:
                changes.append(RuleChange(rule, "removed"))
        elif before is not None and after is not None and before != after:
            keys = changed_param_keys(before.params, after.params)
            if before.mcp_id != after.mcp_id:
                keys = ("(server)", *keys)
            if before.tool_name != after.tool_name:
                keys = ("(tool)", *keys)
            changes.append(RuleChange(rule, "changed", keys))
    if new.error_rule is not None and new.error_rule != old.error_rule:
        changes.append(RuleChange(new.error_rule, "error"))
    if old.error_rule is not None and old.error_rule != new.error_rule:
        changes.append(RuleChange(old.error_rule, "fixed"))
    return changes


@dataclass
class RuleGroup:
    """The changes of one rule over every replayed run, with a few sample runs."""

    rule: str
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    runs: int = 0
    param_keys: dict[str, int] = field(default_factory=dict)
    samples: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        keys = sorted(self.param_keys.items(), key=lambda kv: (-kv[1], kv[0]))[:PARAM_KEYS_SHOWN]
        return {
            "rule": self.rule,
            "runs": self.runs,
            **self.counts,
            "param_keys": [{"key": k, "runs": n} for k, n in keys],
            "errors": self.errors,
            "samples": self.samples,
        }


@dataclass
class ImpactReport:
    """Accumulates run diffs into the stored result: totals, groups by rule, samples."""

    replayed: int = 0
    unchanged: int = 0
    skipped: int = 0
    groups: dict[str, RuleGroup] = field(default_factory=dict)

    @property
    def changed(self) -> int:
        return self.replayed - self.unchanged

    def add(
        self,
        *,
        run_id: int,
        created_at: str | Callable[[], str],
        query: Callable[[], str],
        old: Side,
        new: Side,
        mask: Callable[[Any], Any],
        shown: Callable[[], tuple[Side, Side]] | None = None,
    ) -> list[RuleChange]:
        """Count one replayed run; a sample is made (masked, via ``query()``) only when a group wants one.

        ``created_at``: the run's time as ISO text, or a function that reads it (for a sample only).

        ``shown()``: the sides a sample shows, when ``old`` and ``new`` are not whole (a replay
        masks only the calls that differ to count the changes, and the whole sides for a sample).
        """
        self.replayed += 1
        changes = run_diff(old, new)
        if not changes:
            self.unchanged += 1
            return changes
        sample: dict[str, Any] | None = None
        seen: set[str] = set()
        for change in changes:
            group = self._group(change.rule)
            group.counts[change.kind] += 1
            for key in change.param_keys:
                group.param_keys[key] = group.param_keys.get(key, 0) + 1
            if change.kind == "error" and new.error and len(group.errors) < SAMPLES_PER_RULE:
                message = str(mask(new.error))[:500]
                if message not in group.errors:
                    group.errors.append(message)
            if group.rule in seen:
                continue
            seen.add(group.rule)
            group.runs += 1
            if len(group.samples) < SAMPLES_PER_RULE:
                if sample is None:
                    old_shown, new_shown = shown() if shown is not None else (old, new)
                    at = created_at if isinstance(created_at, str) else created_at()
                    sample = _sample(run_id, at, query(), old_shown, new_shown, changes)
                group.samples.append(sample)
        return changes

    def add_unchanged(self) -> None:
        """Count one replayed run already known unchanged (``run_diff`` found nothing): ``add`` without the diff."""
        self.replayed += 1
        self.unchanged += 1

    def skip(self) -> None:
        """Count a run that never completed its pre-step (nothing to compare)."""
        self.skipped += 1

    def _group(self, rule: str) -> RuleGroup:
        group = self.groups.get(rule)
        if group is None:
            if len(self.groups) >= MAX_RULE_GROUPS - 1:  # the last group is OTHER_RULES
                rule = OTHER_RULES
                group = self.groups.get(rule)
            if group is None:
                group = self.groups[rule] = RuleGroup(rule)
        return group

    def to_json(self) -> dict[str, Any]:
        kinds = dict.fromkeys(KINDS, 0)
        for group in self.groups.values():
            for kind, n in group.counts.items():
                kinds[kind] += n
        ordered = sorted(self.groups.values(), key=lambda g: (-g.runs, g.rule))
        return {
            "replayed": self.replayed,
            "unchanged": self.unchanged,
            "changed": self.changed,
            "skipped": self.skipped,
            "kinds": kinds,
            "rules": [g.to_json() for g in ordered],
        }


def _sample(
    run_id: int, created_at: str, query: str, old: Side, new: Side, changes: Sequence[RuleChange]
) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "created_at": created_at,
        "query": query[:SAMPLE_QUERY_CHARS],
        "changes": [{"rule": c.rule, "kind": c.kind} for c in changes],
        "old": _calls_json(old.calls.items()),
        "new": _calls_json(new.calls.items()),
        "old_error_rule": old.error_rule,
        "new_error_rule": new.error_rule,
    }


def _calls_json(calls: Iterable[tuple[str, Call]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for rule, call in calls:
        if len(out) >= CALLS_PER_SAMPLE:
            break
        out.append(call.to_json(rule))
    return out
