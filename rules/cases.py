"""Regression test cases of a rule set: the expected-outcome format, its comparison, and the services.

A case is an input (the normal request shape: query, context, a2a_data, a2a_files) and an
expected outcome (docs/rulesets.md, "Test cases"):

    {"must_fire": [{"mcp_id"?: str, "tool_name": str, "params"?: dict, "match": "exact" | "partial"}],
     "must_not_fire": [{"mcp_id"?: str, "tool_name": str}],
     "other_calls": "forbid" | "allow",
     "error": str | null}

A case asserts the whole outcome: with ``other_calls`` "forbid" (the default) a call it does not
list fails it, so an empty expectation means "nothing fires"; "allow" and a ``must_fire`` entry
without params (or with ``match`` "partial") are the looser modes, chosen on purpose.

Cases always run as dry runs: nothing is called, so a suite can run after every rule save.
The comparison (``case_compare``) is pure and works on the JSON of an evaluation, so the
live tester can show "would this case pass" without touching the database.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from core.audit import audit_record
from llamon_agent import cases as agent_cases
from llamon_agent.cases import CaseResult, call_label, case_request, same_server
from llamon_agent.cases import case_expected_from_outcome as case_expected_from_outcome
from llamon_agent.expr import ExprError, request_size_error
from rules.engine import (
    compile_snapshot,
    evaluate,
    rule_set_snapshot,
    servers_by_id,
    snapshot_mcp_ids,
)
from rules.errors import RuleError, json_type_name
from rules.models import RuleSet, TestCase
from servers.models import McpServer

MAX_CASE_NAME_CHARS = 200
MAX_EXPECTATIONS = 100  # per list; a case checks a handful of calls, not a rule set's worth

EXPECTED_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "must_fire": {
            "type": "array",
            "maxItems": MAX_EXPECTATIONS,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["tool_name"],
                "properties": {
                    "mcp_id": {"type": "string", "minLength": 1},
                    "tool_name": {"type": "string", "minLength": 1},
                    "params": {"type": "object"},
                    "match": {"enum": ["exact", "partial"]},
                },
            },
        },
        "must_not_fire": {
            "type": "array",
            "maxItems": MAX_EXPECTATIONS,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["tool_name"],
                "properties": {
                    "mcp_id": {"type": "string", "minLength": 1},
                    "tool_name": {"type": "string", "minLength": 1},
                },
            },
        },
        "other_calls": {"enum": list(agent_cases.OTHER_CALLS)},
        # minLength: an empty text is contained in every message, so it would check nothing.
        "error": {"type": ["string", "null"], "minLength": 1},
    },
}
_EXPECTED_VALIDATOR = jsonschema.Draft202012Validator(EXPECTED_SCHEMA)
_INPUT_KEYS = ("query", "context", "a2a_data", "a2a_files")
CASE_FIELDS = ("name", "input", "expected")


# --- validation -------------------------------------------------------------------------------


def case_expected_clean(expected: Any) -> dict[str, Any]:
    """The expected outcome checked against EXPECTED_SCHEMA, with every key present; RuleError if malformed."""
    if not isinstance(expected, Mapping):
        raise RuleError(
            _("The expected outcome must be a JSON object, not %(expected)s.")
            % {"expected": json_type_name(expected)},
            field="expected",
        )
    errors = sorted(
        _EXPECTED_VALIDATOR.iter_errors(dict(expected)), key=lambda e: [str(p) for p in e.absolute_path]
    )
    if errors:
        reasons = "; ".join(_schema_reason(e) for e in errors[:3])
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        raise RuleError(
            _("The expected outcome is not valid: %(reasons)s%(more)s.") % {"reasons": reasons, "more": more},
            field="expected",
        )
    clean = {
        "must_fire": [
            {**item, "match": item.get("match", "exact")} for item in expected.get("must_fire", [])
        ],
        "must_not_fire": [dict(item) for item in expected.get("must_not_fire", [])],
        "other_calls": expected.get("other_calls", agent_cases.OTHER_CALLS[0]),
        "error": expected.get("error"),
    }
    for item in clean["must_not_fire"]:
        for wanted in clean["must_fire"]:
            if wanted["tool_name"] == item["tool_name"] and same_server(
                wanted.get("mcp_id"), item.get("mcp_id")
            ):
                raise RuleError(
                    _("The expected outcome says %(label)s must fire and must not fire; keep one.")
                    % {"label": call_label(item)},
                    field="expected",
                )
    return clean


def case_input_clean(value: Any) -> dict[str, Any]:
    """The case input as {query, context, a2a_data, a2a_files}; RuleError naming the bad field."""
    if not isinstance(value, Mapping):
        raise RuleError(
            _("The input must be a JSON object with a query, not %(value)s.")
            % {"value": json_type_name(value)},
            field="input",
        )
    unknown = sorted(set(value) - set(_INPUT_KEYS))
    if unknown:
        raise RuleError(
            _("The input has unknown field(s) %(join)s; it has query, context, a2a_data and a2a_files.")
            % {"join": ", ".join(map(repr, unknown))},
            field="input",
        )
    query = value.get("query")
    if not isinstance(query, str):
        raise RuleError(
            _("The input's query must be a text, not %(query)s.") % {"query": json_type_name(query)},
            field="query",
        )
    context = value.get("context", {})
    if context is None:
        context = {}
    if not isinstance(context, dict):
        raise RuleError(
            _("The input's context must be a JSON object, not %(context)s.")
            % {"context": json_type_name(context)},
            field="context",
        )
    clean: dict[str, Any] = {"query": query, "context": context}
    for key, what in (("a2a_data", "DataParts"), ("a2a_files", "FileParts")):
        parts = value.get(key)
        if parts is not None and (not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts)):
            raise RuleError(
                _("The input's %(key)s (%(what)s) must be a list of JSON objects or null.")
                % {"key": key, "what": what},
                field=key,
            )
        clean[key] = parts
    too_big = request_size_error(**clean)
    if too_big:
        raise RuleError(_("The input is too big: %(too_big)s.") % {"too_big": too_big}, field="input")
    try:
        json.dumps(clean, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise RuleError(
            _("The input holds values JSON cannot carry: %(exc)s.") % {"exc": exc}, field="input"
        ) from None
    return clean


def _schema_reason(error: jsonschema.ValidationError) -> str:
    where = "".join(
        f"[{p}]" if isinstance(p, int) else (f".{p}" if i else str(p))
        for i, p in enumerate(error.absolute_path)
    )
    message = error.message
    if error.validator == "enum" and error.absolute_path and error.absolute_path[-1] == "match":
        message = f"match must be 'exact' or 'partial', not {error.instance!r}"
    elif error.validator == "enum" and list(error.absolute_path) == ["other_calls"]:
        message = f"other_calls must be 'forbid' or 'allow', not {error.instance!r}"
    elif error.validator == "minLength" and list(error.absolute_path) == ["error"]:
        message = "error must be a non-empty text (the message must contain it) or null"
    elif error.validator == "type" and isinstance(error.validator_value, str):
        message = f"{error.instance!r} is not {_article(error.validator_value)}"
    return f"{where}: {message}" if where else message


def _article(kind: str) -> str:
    return {"object": "a JSON object", "array": "a list", "string": "a text"}.get(kind, f"a {kind}")


# --- comparison -------------------------------------------------------------------------------

# The comparison is the engine's (llamon_agent.cases), shared with ``llamon rules test``.


def case_compare(expected: Mapping[str, Any], outcome_json: Mapping[str, Any]) -> CaseResult:
    """Compare an evaluation's JSON with an expected outcome (checked first); never raises on a well-formed one."""
    return agent_cases.case_compare(case_expected_clean(expected), outcome_json)


# --- running ----------------------------------------------------------------------------------


class _DryRunner:
    """A snapshot and its servers, fetched once, for any number of case inputs.

    Evaluation is rules.engine.evaluate; its compiled rules are cached by content, so a suite
    compiles the draft once however many cases it runs.
    """

    def __init__(
        self, snapshot: Sequence[Mapping[str, Any]], servers: Mapping[str, McpServer] | None = None
    ) -> None:
        self.snapshot = list(snapshot)
        self.servers = servers if servers is not None else servers_by_id(snapshot_mcp_ids(self.snapshot))
        self.compile_error: str | None = None
        try:
            compile_snapshot(self.snapshot)
        except (ExprError, ValueError, TypeError) as exc:
            # A stored rule that no longer compiles (e.g. the language got stricter) fails every case.
            self.compile_error = f"the rule set does not compile: {exc}"

    def evaluate(self, case_input: Mapping[str, Any]) -> dict[str, Any]:
        """The evaluation JSON for one input, as ``Evaluation.answer()`` gives it (stored as the case's
        last outcome: every rule that fired or failed, the others counted, as the tester lists them)."""
        if self.compile_error is not None:
            return {
                "ok": False,
                "error": self.compile_error,
                "dry_run": True,
                "calls": 0,
                "duration_ms": 0.0,
                "results": [],
                "records": [],
                "schema_errors": {},
                "block": "",
            }
        return evaluate(self.snapshot, case_request(case_input), servers=self.servers).answer()


def _calls(outcome: Mapping[str, Any] | None) -> dict[tuple[str, str, str], Any]:
    """The calls an outcome made, by (rule, server, tool), with their params."""
    records = (outcome or {}).get("records") or []
    return {
        (r.get("rule", ""), r.get("mcp_id", ""), r.get("tool_name", "")): r.get("params")
        for r in records
        if isinstance(r, Mapping) and r.get("status") == "fired"
    }


def case_outcome_changes(previous: Mapping[str, Any] | None, current: Mapping[str, Any]) -> list[str]:
    """What differs between a case's previous outcome and this one, call by call, with the rule that
    made (or no longer makes) each call: the "which call and why" of a save that changed a case."""
    if not isinstance(previous, Mapping):
        return []
    before, after = _calls(previous), _calls(current)
    lines: list[str] = []
    statuses = {r.get("rule"): r for r in current.get("records") or [] if isinstance(r, Mapping)}
    for (rule, mcp_id, tool), params in after.items():
        call = {"call": f"{tool} ({mcp_id})", "rule": rule}
        if (rule, mcp_id, tool) not in before:
            lines.append(
                _("%(call)s now fires (rule %(rule)s, params %(params)s)")
                % {**call, "params": json.dumps(params, ensure_ascii=False, sort_keys=True)[:300]}
            )
        elif before[(rule, mcp_id, tool)] != params:
            lines.append(
                _("%(call)s now fires with other params (rule %(rule)s): %(old)s → %(new)s")
                % {
                    **call,
                    "old": json.dumps(before[(rule, mcp_id, tool)], ensure_ascii=False, sort_keys=True)[:300],
                    "new": json.dumps(params, ensure_ascii=False, sort_keys=True)[:300],
                }
            )
    for rule, mcp_id, tool in before:
        if (rule, mcp_id, tool) in after:
            continue
        call = {"call": f"{tool} ({mcp_id})", "rule": rule}
        record = statuses.get(rule)
        if record is None:
            lines.append(_("%(call)s no longer fires (rule %(rule)s did not fire)") % call)
        elif record.get("status") == "error":
            lines.append(
                _("%(call)s no longer fires (rule %(rule)s failed: %(error)s)")
                % {**call, "error": record.get("error")}
            )
        else:
            lines.append(_("%(call)s no longer fires (rule %(rule)s was skipped)") % call)
    old_error, new_error = previous.get("error"), current.get("error")
    if new_error and new_error != old_error:
        lines.append(_("the pre-step now fails: %(error)s") % {"error": new_error})
    elif old_error and not new_error:
        lines.append(_("the pre-step no longer fails"))
    return lines


@dataclass
class SuiteCaseResult:
    """One row of a suite run: the case, its result, and its pass/fail and outcome before this run."""

    case: TestCase
    result: CaseResult
    previous_passed: bool | None
    previous_outcome: Mapping[str, Any] | None = None

    @property
    def changes(self) -> list[str]:
        """Call by call, what this run does otherwise than the case's previous run (translated)."""
        return case_outcome_changes(self.previous_outcome, self.result.outcome or {})

    @property
    def changed(self) -> bool:
        """Whether the case passes or fails otherwise, or makes other calls, than on its previous run."""
        if self.previous_passed is None:
            return False
        return self.previous_passed != self.result.passed or bool(self.changes)

    @property
    def summary(self) -> str:
        """One translated line: the case, whether it passes now, and each call that changed."""
        if self.result.passed:
            head = _("%(case)s now passes") if not self.previous_passed else _("%(case)s still passes")
        else:
            head = _("%(case)s now fails") if self.previous_passed else _("%(case)s still fails")
        head %= {"case": self.case.name}
        detail = self.changes
        if not self.result.passed and self.result.problems:
            detail = [*detail, *self.result.problems[:3]]
        return f"{head}: {'; '.join(detail)}" if detail else head


@dataclass
class SuiteResult:
    """A suite run: every case's result, and the cases whose pass/fail changed since their last run."""

    results: list[SuiteCaseResult] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.results)

    @property
    def passed(self) -> int:
        return sum(1 for r in self.results if r.result.passed)

    @property
    def failed(self) -> int:
        return len(self.results) - self.passed

    @property
    def changed(self) -> list[SuiteCaseResult]:
        return [r for r in self.results if r.changed]

    @property
    def ok(self) -> bool:
        return self.failed == 0


def case_run(*, case: TestCase, snapshot: Sequence[Mapping[str, Any]] | None = None) -> CaseResult:
    """Dry-run one case on ``snapshot`` (default: its set's draft); stores last_outcome/last_passed/last_run_at."""
    if snapshot is None:
        snapshot = rule_set_snapshot(case.rule_set)
    return _run_and_store(case, _DryRunner(snapshot))


def suite_run(*, rule_set: RuleSet, snapshot: Sequence[Mapping[str, Any]] | None = None) -> SuiteResult:
    """Dry-run every case of ``rule_set`` on ``snapshot`` (default: the draft), storing each result."""
    if snapshot is None:
        snapshot = rule_set_snapshot(rule_set)
    runner = _DryRunner(snapshot)
    suite = SuiteResult()
    for case in rule_set.cases.order_by("name", "id"):
        previous, previous_outcome = case.last_passed, case.last_outcome
        suite.results.append(
            SuiteCaseResult(
                case=case,
                result=_run_and_store(case, runner),
                previous_passed=previous,
                previous_outcome=previous_outcome,
            )
        )
    return suite


def _run_and_store(case: TestCase, runner: _DryRunner) -> CaseResult:
    try:
        case_input = case_input_clean(case.input)
        outcome = runner.evaluate(case_input)
        result = case_compare(case.expectation, outcome)
    except RuleError as exc:
        # A case stored before a validation rule existed: report it as a failing case, not a crash.
        outcome = {"ok": False, "error": None, "records": []}
        result = CaseResult(
            passed=False, problems=[f"the case itself is invalid: {exc.message}"], diff=[], outcome=outcome
        )
    # Results are derived data, not an edit: stored for the suite table, not audited.
    TestCase.objects.filter(pk=case.pk).update(
        last_outcome=outcome, last_passed=result.passed, last_run_at=timezone.now()
    )
    case.last_outcome, case.last_passed = outcome, result.passed
    return result


# --- services ---------------------------------------------------------------------------------


def _case_snapshot(case: TestCase) -> dict[str, Any]:
    return {"name": case.name, "input": case.input, "expected": case.expectation, "pinned": case.pinned}


def _split(expected: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A clean expectation as stored: ``expected`` without ``other_calls``, which has its own column."""
    rest = {k: v for k, v in expected.items() if k != "other_calls"}
    return rest, expected["other_calls"]


def case_expected_loosen(
    expected: Mapping[str, Any], *, allow_other_calls: bool = False, ignore_params: bool = False
) -> dict[str, Any]:
    """The tester's proposal made looser on purpose: other calls may fire, and/or any params do."""
    loose = dict(expected)
    if allow_other_calls:
        loose["other_calls"] = "allow"
    if ignore_params:
        loose["must_fire"] = [
            {k: v for k, v in item.items() if k not in ("params", "match")}
            for item in expected.get("must_fire") or []
        ]
    return loose


def case_modes(case: TestCase) -> list[str]:
    """How strict the case is, in words (shown on the case): its looser modes, or that it is exact."""
    expected = case.expectation if isinstance(case.expected, dict) else {}
    wants = expected.get("must_fire") or []
    lines = []
    if case.other_calls == "allow":
        lines.append(_("Other calls may fire too (checks only the calls listed)."))
    elif not wants and not expected.get("error"):
        lines.append(_("Nothing may fire."))
    else:
        lines.append(_("No other call may fire."))
    if any(isinstance(w, dict) and "params" not in w for w in wants):
        lines.append(_("Params are ignored for some calls."))
    if any(isinstance(w, dict) and w.get("match") == "partial" for w in wants):
        lines.append(_("Params are matched partially for some calls."))
    return lines


def case_notice_text(case: TestCase) -> str:
    """The note an upgrade left on a case, in the reader's language ("" when none)."""
    notice = case.notice if isinstance(case.notice, dict) else None
    if not notice:
        return ""
    code = notice.get("code")
    if code == "migrated_allow":
        return _(
            "Upgraded: cases now assert the whole outcome, but when this case last ran other calls "
            "fired too (%(calls)s), so it keeps allowing other calls. List them, or make it strict "
            "by saving it again from the tester."
        ) % {"calls": ", ".join(map(str, notice.get("calls") or []))}
    if code == "migrated_forbid" and notice.get("empty"):
        return _(
            "Upgraded: this case expected nothing in particular and so asserted nothing; it now "
            "asserts that nothing fires, as its last run did."
        )
    if code == "migrated_forbid":
        return _(
            "Upgraded: this case now also asserts that no call other than those listed fires, as "
            "on its last run."
        )
    if code == "migrated_forbid_unrun":
        return _(
            "Upgraded: this case never ran; it now asserts that no call other than those listed "
            "fires. Run the suite to check it."
        )
    return ""


def _pins_clean(pinned: Any) -> list[dict[str, Any]]:
    """A case's pinned outputs, checked like the tester's (rules.pins)."""
    from rules.pins import pins_clean

    if not pinned:
        return []
    ids = [p.get("mcp_id") for p in pinned if isinstance(p, dict)] if isinstance(pinned, list) else []
    return pins_clean(pinned, servers_by_id([i for i in ids if isinstance(i, str)]))


def _clean_name(name: Any, *, rule_set: RuleSet, exclude_pk: int | None = None) -> str:
    if not isinstance(name, str) or not name.strip():
        raise RuleError(_("Give the test case a name."), field="name")
    name = name.strip()
    if "\x00" in name:
        raise RuleError(_("The test case name cannot contain a null character."), field="name")
    if len(name) > MAX_CASE_NAME_CHARS:
        raise RuleError(
            _("The test case name is longer than %(MAX_CASE_NAME_CHARS)s characters.")
            % {"MAX_CASE_NAME_CHARS": MAX_CASE_NAME_CHARS},
            field="name",
        )
    if rule_set.cases.filter(name=name).exclude(pk=exclude_pk).exists():
        raise RuleError(
            _("A test case named %(name)r already exists in this rule set; pick another name.")
            % {"name": name},
            field="name",
        )
    return name


@transaction.atomic
def case_create(
    *, actor: Any, rule_set: RuleSet, name: str, input: Any, expected: Any, pinned: Any = None
) -> TestCase:
    """Add a test case to ``rule_set`` after validating its name, input, expected outcome and pins; audited."""
    name = _clean_name(name, rule_set=rule_set)
    expected, other_calls = _split(case_expected_clean(expected))
    case = TestCase.objects.create(
        rule_set=rule_set,
        name=name,
        input=case_input_clean(input),
        expected=expected,
        other_calls=other_calls,
        pinned=_pins_clean(pinned),
        created_by=actor if getattr(actor, "is_authenticated", False) else None,
    )
    audit_record(actor=actor, action="case.create", obj=case, after=_case_snapshot(case))
    return case


@transaction.atomic
def case_update(
    *,
    actor: Any,
    case: TestCase,
    name: str | None = None,
    input: Any = None,
    expected: Any = None,
    pinned: Any = None,
) -> TestCase:
    """Change a case's name, input, expected outcome or pins (None keeps a field); audited when something changed."""
    current = TestCase.objects.select_for_update().get(pk=case.pk)
    before = _case_snapshot(current)
    if name is not None:
        current.name = _clean_name(name, rule_set=current.rule_set, exclude_pk=current.pk)
    if input is not None:
        current.input = case_input_clean(input)
    if expected is not None:
        current.expected, current.other_calls = _split(case_expected_clean(expected))
    if pinned is not None:
        current.pinned = _pins_clean(pinned)
    after = _case_snapshot(current)
    if after == before:
        return current
    if (after["input"], after["expected"]) != (before["input"], before["expected"]):
        # The last result answered another question: forget it so the next suite run
        # does not report this case as "changed outcome" because of the edit itself.
        current.last_outcome = current.last_passed = current.last_run_at = None
        current.notice = None  # its owner edited it: the upgrade's note is read
    current.save()
    audit_record(actor=actor, action="case.update", obj=current, before=before, after=after)
    return current


@transaction.atomic
def case_delete(*, actor: Any, case: TestCase) -> None:
    """Remove a test case; audited with what it was."""
    audit_record(actor=actor, action="case.delete", obj=case, before=_case_snapshot(case))
    case.delete()
