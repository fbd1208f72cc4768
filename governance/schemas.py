"""API schemas of the governance app: impact analyses."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ninja import Field, Schema

from governance.services import MAX_DAYS, MAX_FILTER_CHARS


class ImpactIn(Schema):
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
