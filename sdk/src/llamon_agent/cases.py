"""A rule set's test cases checked by the engine alone: the comparison of an outcome with an expected one.

One implementation for the workbench's case runner (rules.cases, which adds validation, storage and
translation) and for ``llamon rules test`` (llamon_agent.rules_code), which runs a pulled set's
cases with no server. An expected outcome (docs/rulesets.md, "Test cases"):

    {"must_fire": [{"mcp_id"?: str, "tool_name": str, "params"?: dict, "match": "exact" | "partial"}],
     "must_not_fire": [{"mcp_id"?: str, "tool_name": str}],
     "other_calls": "forbid" | "allow",
     "error": str | null}

A case asserts the whole outcome: with ``other_calls`` "forbid" (the default, also when the key is
absent) every call that fires must be one of ``must_fire``, so ``{}`` means "nothing fires". "allow"
is the looser mode, chosen on purpose: calls the case does not list may fire too.

``case_compare`` takes an expectation already checked (every key present, ``match`` filled in:
``expected_defaults`` fills them without checking) and the JSON of an evaluation
(``PrestepOutcome.to_json()``); it is pure and never raises on a well-formed expectation.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llamon_agent.prestep import CompiledRules, RuleStatus, StaticToolBackend, run_prestep
from llamon_agent.tools import AgentRequest

_VALUE_CHARS = 300  # how much of a params dict a problem sentence quotes
INPUT_KEYS = ("query", "context", "a2a_data", "a2a_files")
OTHER_CALLS = ("forbid", "allow")  # the first is the default


def expected_defaults(expected: Mapping[str, Any]) -> dict[str, Any]:
    """The expected outcome with every key present and ``match`` filled in (no other check)."""
    return {
        "must_fire": [
            {**item, "match": item.get("match", "exact")} for item in expected.get("must_fire") or []
        ],
        "must_not_fire": [dict(item) for item in expected.get("must_not_fire") or []],
        "other_calls": expected.get("other_calls") or OTHER_CALLS[0],
        "error": expected.get("error"),
    }


def case_request(case_input: Mapping[str, Any]) -> AgentRequest:
    """The request a case's input stands for (query, context, DataParts, FileParts)."""
    return AgentRequest(
        query=case_input["query"],
        context=dict(case_input.get("context") or {}),
        a2a_data=case_input.get("a2a_data"),
        a2a_files=case_input.get("a2a_files"),
    )


def case_dry_run(
    compiled: CompiledRules, case_input: Mapping[str, Any], tools: Mapping[str, Sequence[Any]]
) -> dict[str, Any]:
    """The outcome JSON of one case's input, dry run (nothing is called) over fixed tool lists.

    ``tools`` maps each bound server's id to its tools (``ToolInfo`` or names); a server absent
    from it is not bound, as on the workbench for a disabled or unknown server.
    """
    outcome = run_prestep(compiled, case_request(case_input), backend=StaticToolBackend(tools), dry_run=True)
    return outcome.to_json()


@dataclass
class CaseResult:
    """Whether an outcome meets a case's expectation: plain-English problems and rows to show side by side."""

    passed: bool
    problems: list[str]
    diff: list[dict[str, Any]]
    outcome: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "problems": self.problems, "diff": self.diff}


def case_expected_from_outcome(outcome_json: Mapping[str, Any]) -> dict[str, Any]:
    """The expected outcome a case would have if what happens now is right: every call with its exact
    params, and nothing else (``other_calls`` "forbid")."""
    error = outcome_json.get("error")
    if error:
        # A dry run continues past an error, but a real run stops there: the error is the outcome.
        return {"must_fire": [], "must_not_fire": [], "other_calls": "forbid", "error": error}
    return {
        "must_fire": [
            {
                "mcp_id": rec["mcp_id"],
                "tool_name": rec["tool_name"],
                "params": rec["params"],
                "match": "exact",
            }
            for rec in _fired(outcome_json)
        ],
        "must_not_fire": [],
        "other_calls": "forbid",
        "error": None,
    }


def case_compare(expected: Mapping[str, Any], outcome_json: Mapping[str, Any]) -> CaseResult:
    """Compare an evaluation's JSON with a checked expected outcome (``expected_defaults`` shape)."""
    fired = _fired(outcome_json)
    problems: list[str] = []
    diff: list[dict[str, Any]] = []
    used: set[int] = set()

    missed: list[Mapping[str, Any]] = []  # must_fire entries that found no matching call
    for want in expected["must_fire"]:
        row = _match_must_fire(want, fired, used)
        diff.append(row)
        if not row["ok"]:
            problems.append(row["message"])
            missed.append(want)

    for unwanted in expected["must_not_fire"]:
        hit = next((rec for rec in fired if _same_call(unwanted, rec)), None)
        label = call_label(unwanted)
        message = (
            f"{label} should not have fired but did (rule {hit['rule']}, params {_show(hit['params'])})"
            if hit
            else f"{label} did not fire, as expected"
        )
        diff.append(
            {
                "check": "must_not_fire",
                "label": label,
                "ok": hit is None,
                "expected": unwanted,
                "actual": _call_view(hit),
                "params_diff": [],
                "message": message,
            }
        )
        if hit:
            problems.append(message)

    # The whole outcome: a call no must_fire entry accounts for. A call of a tool whose must_fire
    # entry failed (other params) is already reported there; a failed pre-step's outcome is its error.
    if expected.get("other_calls", OTHER_CALLS[0]) == "forbid" and not outcome_json.get("error"):
        extra = [
            rec
            for i, rec in enumerate(fired)
            if i not in used and not any(_same_call(want, rec) for want in missed)
        ]
        for rec in extra:
            label = call_label(rec)
            message = (
                f"{label} fired but the case expects no other call (rule {rec['rule']}, "
                f"params {_show(rec['params'])})"
            )
            diff.append(
                {
                    "check": "other_calls",
                    "label": label,
                    "ok": False,
                    "expected": None,
                    "actual": _call_view(rec),
                    "params_diff": [],
                    "message": message,
                }
            )
            problems.append(message)
        if not extra:
            diff.append(
                {
                    "check": "other_calls",
                    "label": "other calls",
                    "ok": True,
                    "expected": None,
                    "actual": None,
                    "params_diff": [],
                    "message": "no other call fired, as expected",
                }
            )

    row = _error_row(expected["error"], outcome_json.get("error"))
    diff.append(row)
    if not row["ok"]:
        problems.append(row["message"])
    return CaseResult(passed=not problems, problems=problems, diff=diff, outcome=dict(outcome_json))


def _fired(outcome_json: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [rec for rec in outcome_json.get("records") or [] if rec.get("status") == str(RuleStatus.FIRED)]


def _match_must_fire(want: dict[str, Any], fired: list[dict[str, Any]], used: set[int]) -> dict[str, Any]:
    """The diff row of one must_fire expectation; a matching fired call is consumed (two calls need two)."""
    label = call_label(want)
    partial = want["match"] == "partial"
    candidates = [(i, rec) for i, rec in enumerate(fired) if i not in used and _same_call(want, rec)]
    for i, rec in candidates:
        if "params" not in want or not _params_diff(want["params"], rec["params"], partial=partial):
            used.add(i)
            return {
                "check": "must_fire",
                "label": label,
                "ok": True,
                "expected": want,
                "actual": _call_view(rec),
                "params_diff": [],
                "message": f"{label} fired as expected (rule {rec['rule']})",
            }
    if candidates:
        i, rec = candidates[0]
        changes = _params_diff(want["params"], rec["params"], partial=partial)
        how = "containing" if partial else ""
        message = (
            f"{label} fired with params {_show(rec['params'])}, expected {how + ' ' if how else ''}"
            f"{_show(want['params'])}: {_describe(changes)}"
        )
        return {
            "check": "must_fire",
            "label": label,
            "ok": False,
            "expected": want,
            "actual": _call_view(rec),
            "params_diff": changes,
            "message": message,
        }
    elsewhere = [rec for rec in fired if rec.get("tool_name") == want["tool_name"]]
    message = f"{label} should have fired but did not"
    if elsewhere and want.get("mcp_id"):
        message += f" (it fired on {elsewhere[0]['mcp_id']} instead)"
    return {
        "check": "must_fire",
        "label": label,
        "ok": False,
        "expected": want,
        "actual": None,
        "params_diff": [],
        "message": message,
    }


def _error_row(wanted: str | None, actual: str | None) -> dict[str, Any]:
    if wanted is None:
        ok = actual is None
        message = "the pre-step succeeded, as expected" if ok else f"the pre-step failed: {actual}"
    elif actual is None:
        ok = False
        message = f"the pre-step should have failed with an error containing {wanted!r} but it succeeded"
    else:
        ok = wanted in actual
        message = (
            f"the pre-step failed as expected: {actual}"
            if ok
            else f"the pre-step failed with {actual!r}, expected an error containing {wanted!r}"
        )
    return {
        "check": "error",
        "label": "error",
        "ok": ok,
        "expected": wanted,
        "actual": actual,
        "params_diff": [],
        "message": message,
    }


def _params_diff(expected: Any, actual: Any, *, partial: bool, path: str = "") -> list[dict[str, Any]]:
    """Where ``actual`` differs from ``expected``; with ``partial``, keys absent from ``expected`` are ignored."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        changes: list[dict[str, Any]] = []
        for key, value in expected.items():
            sub = _join(path, key)
            if key not in actual:
                changes.append({"path": sub, "kind": "missing", "expected": value, "actual": None})
            else:
                changes += _params_diff(value, actual[key], partial=partial, path=sub)
        if not partial:
            changes += [
                {"path": _join(path, key), "kind": "unexpected", "expected": None, "actual": value}
                for key, value in actual.items()
                if key not in expected
            ]
        return changes
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        changes = []
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            changes += _params_diff(e, a, partial=partial, path=f"{path}[{i}]")
        return changes
    if _same_value(expected, actual):
        return []
    return [{"path": path or "(params)", "kind": "changed", "expected": expected, "actual": actual}]


def _same_value(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0 (A2A 1.0 sends numbers as floats), but true is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))
    return type(a) is type(b) and a == b


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else str(key)


def _describe(changes: Sequence[Mapping[str, Any]]) -> str:
    words = {"changed": "differs", "missing": "is missing", "unexpected": "is not expected"}
    parts = [f"{c['path']!r} {words[c['kind']]}" for c in changes[:5]]
    if len(changes) > 5:
        parts.append(f"and {len(changes) - 5} more")
    return ", ".join(parts)


def _same_call(want: Mapping[str, Any], rec: Mapping[str, Any]) -> bool:
    return rec.get("tool_name") == want["tool_name"] and same_server(want.get("mcp_id"), rec.get("mcp_id"))


def same_server(a: str | None, b: str | None) -> bool:
    return a is None or b is None or a == b


def call_label(item: Mapping[str, Any]) -> str:
    return f"{item['tool_name']} on {item['mcp_id']}" if item.get("mcp_id") else str(item["tool_name"])


def _call_view(rec: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if rec is None:
        return None
    return {k: rec.get(k) for k in ("rule", "mcp_id", "tool_name", "params")}


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= _VALUE_CHARS else text[: _VALUE_CHARS - 1] + "…"
