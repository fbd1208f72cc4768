"""Coverage and health per rule: fires per day, errors, rule-step latency, and which test cases cover each rule.

Reads only (selectors). Every query on the runs is an aggregate or a bounded sample:

- fires and errors per (rule name, day, status): one ``GROUP BY`` over the rule steps of the rule
  set's runs in the window (days are the runs' ``created_at`` in the current time zone);
- latency: the newest ``SAMPLE_PER_RULE`` completed rule steps of each rule (one query, a
  ``ROW_NUMBER() OVER (PARTITION BY name)`` window), p50/p95 computed here with
  ``statistics.quantiles(method="inclusive")`` (linear interpolation, as PostgreSQL's
  ``percentile_cont``), so SQLite and PostgreSQL give the same figures;
- cases: each case's last suite outcome when it is newer than the draft's last change, otherwise
  the case is evaluated now as a dry run on the draft (as the suite does; nothing is stored).

A rule step is stored only when a rule decided a call or failed (a skip leaves none): a step that
is ``ok`` (or still ``running``) is a *fire*, a step that is ``error`` is an *error*.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any

from django.db.models import Count, F, Window
from django.db.models.functions import RowNumber, TruncDate
from django.utils import timezone
from django.utils.translation import gettext as _

from agents.models import Run, RunStep
from governance.errors import HealthError
from llamon_agent.expr import REGEX_COMPILE_ALLOWANCE, ExprError, regex_compile_allowance
from llamon_agent.prestep import RuleStatus
from llamon_agent.tools import AgentRequest
from rules import engine
from rules.cases import case_expected_clean, case_input_clean
from rules.errors import RuleError
from rules.models import RuleSet

MAX_DAYS = 90
DEFAULT_DAYS = 14
SAMPLE_PER_RULE = 1_000  # rule-step durations per rule for the percentiles (the newest)
MAX_EXTRA_RULES = 100  # rules seen in runs but no longer in the draft, shown after the draft's
MAX_GROUPS = 100_000  # (rule, day, status) rows read at most
MAX_CASES = 500  # cases read for coverage (the first by name)
ERROR = "error"


@dataclass
class RuleHealth:
    """One rule's row: its runs per day, totals, latency and the cases that cover it."""

    name: str
    position: int | None  # evaluation order in the draft (1-based); None: not in the draft
    enabled: bool = True
    mcp_id: str = ""
    tool_name: str = ""
    per_day: list[int] = field(default_factory=list)
    fires: int = 0
    errors: int = 0
    p50_ms: float | None = None
    p95_ms: float | None = None
    duration_samples: int = 0
    expect_fire: list[str] = field(default_factory=list)  # cases whose must_fire names this rule's call
    expect_not_fire: list[str] = field(default_factory=list)
    fired_in: list[str] = field(default_factory=list)  # cases in which it fired
    failed_in: list[str] = field(default_factory=list)  # cases in which it failed
    spark: list[dict[str, Any]] = field(default_factory=list)  # the page's bars (see bars)

    @property
    def in_draft(self) -> bool:
        return self.position is not None

    @property
    def never_fired(self) -> bool:
        return self.fires == 0

    @property
    def covered(self) -> bool:
        return bool(self.fired_in)

    def bars(self, labels: list[date], *, height: int = 20) -> list[dict[str, Any]]:
        """The sparkline's bars (SVG user units, drawn by the template): one per day, scaled to the busiest."""
        top = max(self.per_day, default=0) or 1
        out = []
        for i, (day, count) in enumerate(zip(labels, self.per_day, strict=True)):
            h = 0 if count == 0 else max(1, round(count * height / top))
            out.append({"x": i * 4, "y": height - h, "h": h, "count": count, "day": day})
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "position": self.position,
            "in_draft": self.in_draft,
            "enabled": self.enabled,
            "mcp_id": self.mcp_id,
            "tool_name": self.tool_name,
            "fires_per_day": self.per_day,
            "fires": self.fires,
            "errors": self.errors,
            "never_fired": self.never_fired,
            "p50_ms": self.p50_ms,
            "p95_ms": self.p95_ms,
            "duration_samples": self.duration_samples,
            "cases": {
                "expect_fire": self.expect_fire,
                "expect_not_fire": self.expect_not_fire,
                "fired": self.fired_in,
                "errors": self.failed_in,
            },
            "covered": self.covered,
        }


@dataclass
class RuleSetHealth:
    """The health page of one rule set over the last ``days`` days."""

    rule_set: RuleSet
    days: int
    since: datetime
    until: datetime
    day_labels: list[date]
    runs: int
    rules: list[RuleHealth]
    cases: int = 0
    cases_stored: int = 0  # outcomes taken from the last suite run
    cases_evaluated: int = 0  # outcomes evaluated now (no suite run since the draft changed)
    cases_invalid: int = 0
    cases_truncated: bool = False

    @property
    def coverage(self) -> dict[str, Any]:
        """Like ``opa test --coverage``: enabled draft rules that fire in at least one case."""
        counted = [r for r in self.rules if r.in_draft and r.enabled]
        covered = sum(1 for r in counted if r.covered)
        percent = round(100.0 * covered / len(counted), 1) if counted else None
        return {"covered": covered, "rules": len(counted), "percent": percent}

    @property
    def spark_width(self) -> int:
        """The sparklines' viewBox width: 4 units per day (a 3-unit bar and a gap)."""
        return 4 * self.days

    @property
    def never_fired(self) -> list[str]:
        return [r.name for r in self.rules if r.in_draft and r.enabled and r.never_fired]

    def to_json(self) -> dict[str, Any]:
        return {
            "rule_set": self.rule_set.pk,
            "name": self.rule_set.name,
            "days": self.days,
            "since": self.since,
            "until": self.until,
            "day_labels": [d.isoformat() for d in self.day_labels],
            "runs": self.runs,
            "never_fired": self.never_fired,
            "coverage": {
                **self.coverage,
                "cases": self.cases,
                "cases_stored": self.cases_stored,
                "cases_evaluated": self.cases_evaluated,
                "cases_invalid": self.cases_invalid,
                "cases_truncated": self.cases_truncated,
            },
            "rules": [r.to_json() for r in self.rules],
        }


def health_days(value: Any) -> int:
    """The number of days as a whole number from 1 to MAX_DAYS; HealthError (field ``days``) otherwise."""
    try:
        days = int(value) if not isinstance(value, bool | float) else None
    except (TypeError, ValueError):  # not a number, a NUL, or past Python's 4,300-digit limit
        days = None
    if days is None:
        raise HealthError(
            _("The days must be a whole number from 1 to %(most)s, not %(value)r.")
            % {"most": MAX_DAYS, "value": str(value)[:20]},
            field="days",
        )
    if not 1 <= days <= MAX_DAYS:
        shown = str(days) if len(str(days)) <= 20 else str(days)[:20] + "…"
        raise HealthError(
            _("The days must be between 1 and %(most)s, not %(value)s.") % {"most": MAX_DAYS, "value": shown},
            field="days",
        )
    return days


def rule_set_health(
    *, rule_set: RuleSet, days: int = DEFAULT_DAYS, now: datetime | None = None
) -> RuleSetHealth:
    """Fires per day, errors and latency per rule over the last ``days`` calendar days, and case coverage."""
    days = health_days(days)
    now = now or timezone.now()
    today = timezone.localdate(now)
    labels = [today - timedelta(days=days - 1 - i) for i in range(days)]
    since = timezone.make_aware(datetime.combine(labels[0], time.min))
    draft = engine.rule_set_snapshot(rule_set)
    rows = {
        r["name"]: RuleHealth(
            name=r["name"],
            position=i,
            enabled=bool(r.get("enabled", True)),
            mcp_id=r["mcp_id"],
            tool_name=r["tool_name"],
            per_day=[0] * days,
        )
        for i, r in enumerate(draft, start=1)
    }
    steps = RunStep.objects.filter(
        kind=RunStep.Kind.RULE,
        run__rule_set_name=rule_set.name,
        run__created_at__gte=since,
        run__created_at__lte=now,
    )
    index = {d: i for i, d in enumerate(labels)}
    extra = 0
    groups = (
        steps.annotate(day=TruncDate("run__created_at"))
        .values("name", "day", "status")
        .annotate(n=Count("id"))
        .order_by("name", "day", "status")[:MAX_GROUPS]
    )
    for group in groups:
        row = rows.get(group["name"])
        if row is None:
            if extra >= MAX_EXTRA_RULES:
                continue
            extra += 1
            row = rows[group["name"]] = RuleHealth(name=group["name"], position=None, per_day=[0] * days)
        if group["status"] == ERROR:
            row.errors += group["n"]
            continue
        row.fires += group["n"]
        day = _as_date(group["day"])
        slot = index.get(day) if day is not None else None
        if slot is not None:
            row.per_day[slot] += group["n"]
    _percentiles(steps, rows)
    runs = Run.objects.filter(rule_set_name=rule_set.name, created_at__gte=since, created_at__lte=now).count()
    health = RuleSetHealth(
        rule_set=rule_set,
        days=days,
        since=since,
        until=now,
        day_labels=labels,
        runs=runs,
        rules=sorted(rows.values(), key=lambda r: (r.position is None, r.position or 0, r.name)),
    )
    _case_coverage(health, draft, rows)
    for row in health.rules:
        row.spark = row.bars(labels)
    return health


def _as_date(value: Any) -> date | None:
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    if isinstance(value, str):  # a backend that hands the truncated day back as text
        return date.fromisoformat(value[:10])
    return None


def _percentiles(steps: Any, rows: Mapping[str, RuleHealth]) -> None:
    """p50/p95 of each rule's newest SAMPLE_PER_RULE completed step durations (one windowed query)."""
    sample = (
        steps.filter(duration_ms__isnull=False)
        .annotate(
            nth=Window(RowNumber(), partition_by=[F("name")], order_by=[F("run_id").desc(), F("id").desc()])
        )
        .filter(nth__lte=SAMPLE_PER_RULE)
        .values_list("name", "duration_ms")
    )
    durations: dict[str, list[float]] = {}
    for name, duration in sample:
        if name in rows:
            durations.setdefault(name, []).append(float(duration))
    for name, values in durations.items():
        row = rows[name]
        row.duration_samples = len(values)
        if len(values) == 1:
            row.p50_ms = row.p95_ms = round(values[0], 3)
        else:
            cuts = statistics.quantiles(values, n=100, method="inclusive")
            row.p50_ms, row.p95_ms = round(cuts[49], 3), round(cuts[94], 3)


def _case_coverage(
    health: RuleSetHealth, draft: list[dict[str, Any]], rows: Mapping[str, RuleHealth]
) -> None:
    """Which cases expect each rule's call to (not) fire, and in which cases it fired or failed."""
    rule_set = health.rule_set
    cases = list(rule_set.cases.order_by("name", "id")[: MAX_CASES + 1])
    health.cases_truncated = len(cases) > MAX_CASES
    cases = cases[:MAX_CASES]
    health.cases = len(cases)
    runner: _DraftRunner | None = None
    # Each case is a pre-step with its own budget; the regexes they compile are also bounded
    # together, so that a viewer's GET over 500 cases costs one request's compiling at most.
    with regex_compile_allowance(REGEX_COMPILE_ALLOWANCE):
        for case in cases:
            try:
                expected = case_expected_clean(case.expected)
                case_input = case_input_clean(case.input)
            except RuleError:
                health.cases_invalid += 1  # the suite reports it as failing; it covers nothing
                continue
            for rule in draft:
                if any(_names(want, rule) for want in expected["must_fire"]):
                    rows[rule["name"]].expect_fire.append(case.name)
                if any(_names(unwanted, rule) for unwanted in expected["must_not_fire"]):
                    rows[rule["name"]].expect_not_fire.append(case.name)
            if case.last_outcome is not None and case.last_run_at and case.last_run_at >= rule_set.updated_at:
                outcome = case.last_outcome
                health.cases_stored += 1
            else:
                runner = runner or _DraftRunner(draft)
                outcome = runner.evaluate(case_input)
                health.cases_evaluated += 1
            for record in outcome.get("records") or []:
                row = rows.get(record.get("rule", ""))
                if row is None or not row.in_draft:
                    continue
                if record.get("status") == str(RuleStatus.FIRED):
                    row.fired_in.append(case.name)
                elif record.get("status") == str(RuleStatus.ERROR):
                    row.failed_in.append(case.name)


def _names(expectation: Mapping[str, Any], rule: Mapping[str, Any]) -> bool:
    """An expectation names a rule when it is about the rule's tool (and server, when it says one)."""
    mcp_id = expectation.get("mcp_id")
    return expectation["tool_name"] == rule["tool_name"] and (mcp_id is None or mcp_id == rule["mcp_id"])


class _DraftRunner:
    """The draft and its servers, fetched once, evaluated as a dry run per case input (nothing stored)."""

    def __init__(self, draft: list[dict[str, Any]]) -> None:
        self.draft = draft
        self.servers = engine.servers_by_id(engine.snapshot_mcp_ids(draft))

    def evaluate(self, case_input: Mapping[str, Any]) -> dict[str, Any]:
        request = AgentRequest(
            query=case_input["query"],
            context=dict(case_input.get("context") or {}),
            a2a_data=case_input.get("a2a_data"),
            a2a_files=case_input.get("a2a_files"),
        )
        try:
            return engine.evaluate(self.draft, request, servers=self.servers).to_json()
        except (
            ExprError,
            ValueError,
            TypeError,
        ) as exc:  # a stored rule that no longer compiles: nothing fires
            return {"ok": False, "error": str(exc), "records": []}
