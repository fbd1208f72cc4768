"""API schemas of the governance app: impact analyses."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ninja import Field, Schema

from core.api import StrictIn
from governance.services import MAX_DAYS, MAX_FILTER_CHARS


class ImpactIn(StrictIn):
    """What to replay: ``version`` is ``"draft"`` or a published version number; the filters narrow the runs."""

    version: str | int = Field("draft", description='"draft" or a version number of the rule set.')
    days: int = Field(
        7, ge=1, le=MAX_DAYS, description=f"The last N days of recorded runs (1 to {MAX_DAYS})."
    )
    agent: str = Field("", max_length=MAX_FILTER_CHARS, description="Only the runs of this agent (its name).")
    chatbot_id: str = Field("", max_length=MAX_FILTER_CHARS, description="Only the runs with this chatbotId.")
    user_id: str = Field("", max_length=MAX_FILTER_CHARS, description="Only the runs with this userId.")


class ImpactOut(Schema):
    """An analysis: its choice, its progress, and the report once it has succeeded."""

    id: int
    rule_set: int = Field(alias="rule_set_id")
    candidate_ref: str
    candidate_hash: str
    days: int
    agent: str = Field(alias="agent_name")
    chatbot_id: str
    user_id: str
    since: datetime
    until: datetime
    status: str
    done: int
    total: int
    error: str
    created_at: datetime
    finished_at: datetime | None
    url: str = Field(description="The page that shows this analysis (shareable with viewers).")
    result: dict[str, Any] | None = Field(
        None,
        description="replayed, unchanged, changed, skipped, kinds {added, removed, changed, error, fixed}, "
        "rules [{rule, runs, added, removed, changed, error, fixed, param_keys, errors, samples}] (docs/governance.md).",
    )


class RuleHealthCasesOut(Schema):
    expect_fire: list[str] = Field(description="Cases whose must_fire names this rule's tool (and server).")
    expect_not_fire: list[str] = Field(description="Cases whose must_not_fire names this rule's tool.")
    fired: list[str] = Field(description="Cases in which the rule fired (last suite run, or evaluated now).")
    errors: list[str] = Field(description="Cases in which the rule failed.")


class RuleHealthOut(Schema):
    name: str
    position: int | None = Field(
        description="Evaluation order in the draft (1-based); null: not in the draft."
    )
    in_draft: bool
    enabled: bool
    mcp_id: str
    tool_name: str
    fires_per_day: list[int] = Field(description="Runs in which the rule fired, per day of day_labels.")
    fires: int
    errors: int
    never_fired: bool
    p50_ms: float | None = Field(description="Median duration of the rule step (its tool call), ms.")
    p95_ms: float | None
    duration_samples: int = Field(
        description="How many recorded durations the percentiles are computed from."
    )
    cases: RuleHealthCasesOut
    covered: bool = Field(description="The rule fires in at least one test case.")


class CoverageOut(Schema):
    covered: int
    rules: int = Field(description="Enabled rules of the draft.")
    percent: float | None
    cases: int
    cases_stored: int = Field(description="Cases whose last suite run is newer than the draft's last change.")
    cases_evaluated: int = Field(
        description="Cases evaluated now as a dry run on the draft (nothing stored)."
    )
    cases_invalid: int
    cases_truncated: bool


class RuleSetHealthOut(Schema):
    """Per rule: fires per day, errors and latency of the last ``days`` days, and test-case coverage."""

    rule_set: int
    name: str
    days: int
    since: datetime
    until: datetime
    day_labels: list[str]
    runs: int = Field(description="Runs of this rule set in the window.")
    never_fired: list[str] = Field(description="Enabled draft rules that did not fire in the window.")
    coverage: CoverageOut
    rules: list[RuleHealthOut]


class SuggestionsIn(StrictIn):
    """What to mine: the agent's finished runs of the last ``days`` days, and the precision asked for."""

    days: int = Field(
        14, ge=1, le=MAX_DAYS, description=f"The last N days of recorded runs (1 to {MAX_DAYS})."
    )
    min_precision: float = Field(
        0.99,
        ge=0.5,
        le=1.0,
        description="Propose only rules whose replayed precision is not shown below this.",
    )


class SavingsOut(Schema):
    """What the pre-step saved for one agent over a period, overall and per version (docs/suggestions.md)."""

    agent: str
    days: int
    since: datetime
    until: datetime
    runs_read: int = Field(description="Finished runs read (the newest, at most 20,000).")
    capped: bool
    total: dict[str, Any] = Field(
        description="runs, with_prestep, share_with_prestep, turns_saved, ms_saved, input/output_tokens_saved, "
        "cost_saved (USD, null without a price), recalled, recalled_runs, advice, turn {ms, input_tokens, output_tokens}."
    )
    versions: list[dict[str, Any]] = Field(description="The same figures per rule-set version (``version``).")


class SuggestionJobOut(Schema):
    """A mining job: its choice, its progress over parts and stages, and the suggestions once it has succeeded."""

    id: int
    agent: int = Field(alias="agent_id")
    days: int
    since: datetime
    until: datetime
    min_precision: float
    status: str
    stage: str
    parts: int
    runs: int
    done: int
    total: int
    error: str
    created_at: datetime
    finished_at: datetime | None
    url: str = Field(description="The agent's savings page, which shows the job.")
    result: dict[str, Any] | None = Field(
        None,
        description="runs, noise, suggestions [{mcp_id, tool, name, when, params, arguments, precision, margin, "
        "agreement, recall, args_accuracy, replayed, saving, cases}], rejected [{mcp_id, tool, runs, reason, code}].",
    )


class SuggestionDraftOut(Schema):
    rule: int
    rule_name: str
    cases: list[str]
