"""API schemas of the agents app: agents, runs, steps and trace ingest."""

from __future__ import annotations

from typing import Any, Literal

from ninja import Field, ModelSchema, Schema
from pydantic import ConfigDict, field_validator
from pydantic_core import PydanticCustomError

from agents.checks import agent_model_problem
from agents.models import Agent, ModelConnection, Run, RunStep
from agents.subjects import EXAMPLE, SUBJECT_MAX, SubjectError, subject_parse
from core.api import DbId, PatchIn, Revision, StrictIn
from core.userinput import FilterDateTime
from llamon_agent.expr import MAX_QUERY_CHARS
from rules.schemas import SampleIn

Mask = Literal["card_number", "kr_rrn", "email"]
Pattern = str  # one RE2 pattern per item (checked by agents.services when saved)

# The deprecated offset paging reads and drops every run it skips (offset=500,000: 866 ms at a
# million runs); bounded so that one request cannot stall a worker, as search engines bound theirs.
MAX_OFFSET = 10_000


class AgentIn(StrictIn):
    """An agent. ``rule_set`` is a rule set id; ``pinned_version`` a version *number* of that set;
    an openai-compatible model names ``model_connection`` (an id) and one of its models."""

    # An unknown field is refused, not dropped: a client still sending model_base_url or
    # model_api_key_env learns that an agent holds neither any more (model connections do).
    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=100)
    description: str = Field("", max_length=10_000)
    system_prompt: str | None = Field(
        None, max_length=50_000, description="Default: the seed's pre-step line."
    )
    rule_set: DbId | None = None
    rule_set_mode: Literal["pinned", "latest", "draft"] = "latest"
    pinned_version: DbId | None = None
    model_provider: Literal["offline", "scripted", "openai-compatible"] = "offline"
    model_connection: DbId | None = None
    model_name: str = Field("", max_length=200)
    model_script: list[dict[str, Any]] = Field(default_factory=list, max_length=1000)
    temperature: float = Field(0.0, ge=0, le=2)
    react_servers: list[str] = Field(
        default_factory=list, max_length=100, description="mcp_ids of enabled servers"
    )
    input_max_chars: int = Field(4000, ge=1, le=1_000_000)
    input_blocked_patterns: list[Pattern] = Field(default_factory=list, max_length=100)
    output_blocked_patterns: list[Pattern] = Field(default_factory=list, max_length=100)
    output_masks: list[Mask] = Field(default_factory=list, max_length=3)
    max_iterations: int = Field(6, ge=1, le=50)
    answer_from_prestep: bool = False


class AgentPatchIn(PatchIn):
    """The fields to change, and the agent ``revision`` you saw (a stale one is refused with 409)."""

    NULLABLE = frozenset({"rule_set", "pinned_version", "system_prompt", "model_connection"})

    model_config = ConfigDict(extra="forbid")

    revision: Revision
    name: str | None = Field(None, max_length=100)
    description: str | None = Field(None, max_length=10_000)
    system_prompt: str | None = Field(None, max_length=50_000)
    rule_set: DbId | None = None
    rule_set_mode: Literal["pinned", "latest", "draft"] | None = None
    pinned_version: DbId | None = None
    model_provider: Literal["offline", "scripted", "openai-compatible"] | None = None
    model_connection: DbId | None = None
    model_name: str | None = Field(None, max_length=200)
    model_script: list[dict[str, Any]] | None = Field(None, max_length=1000)
    temperature: float | None = Field(None, ge=0, le=2)
    react_servers: list[str] | None = Field(None, max_length=100)
    input_max_chars: int | None = Field(None, ge=1, le=1_000_000)
    input_blocked_patterns: list[Pattern] | None = Field(None, max_length=100)
    output_blocked_patterns: list[Pattern] | None = Field(None, max_length=100)
    output_masks: list[Mask] | None = Field(None, max_length=3)
    max_iterations: int | None = Field(None, ge=1, le=50)
    answer_from_prestep: bool | None = None
    change_reason: str | None = Field(
        None, max_length=2000, description="Why, for the approvers, when the agent is protected"
    )


class AgentOut(ModelSchema):
    rule_set: int | None
    model_connection: int | None
    model_problem: str | None = Field(description="Why the agent's model cannot run now (null: it can).")
    pinned_version: int | None
    model_script: list[dict[str, Any]]
    react_servers: list[str]
    input_blocked_patterns: list[str]
    output_blocked_patterns: list[str]
    output_masks: list[str]

    class Meta:
        model = Agent
        fields = [
            "id",
            "name",
            "description",
            "system_prompt",
            "rule_set_mode",
            "model_provider",
            "model_name",
            "temperature",
            "input_max_chars",
            "max_iterations",
            "answer_from_prestep",
            "protected",
            "approvals_required",
            "revision",
            "created_at",
            "updated_at",
        ]

    @staticmethod
    def resolve_rule_set(obj: Agent) -> int | None:
        return obj.rule_set_id

    @staticmethod
    def resolve_model_connection(obj: Agent) -> int | None:
        return obj.model_connection_id

    @staticmethod
    def resolve_model_problem(obj: Agent) -> str | None:
        return agent_model_problem(obj)

    @staticmethod
    def resolve_pinned_version(obj: Agent) -> int | None:
        return obj.pinned_version.number if obj.pinned_version_id else None

    @staticmethod
    def resolve_react_servers(obj: Agent) -> list[str]:
        return sorted(obj.react_servers.values_list("mcp_id", flat=True))


# --- Model connections ---------------------------------------------------------------------------

ModelName = Field(min_length=1, max_length=200)


class ModelConnectionIn(StrictIn):
    """A model connection (admin): ``api_key_env`` is the NAME of an allowed variable; its value is
    sent to ``base_url`` only; agents use one of ``model_names``."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=100)
    provider: Literal["openai-compatible"] = "openai-compatible"
    base_url: str = Field(max_length=500)
    api_key_env: str = Field("", max_length=100)
    model_names: list[str] = Field(min_length=1, max_length=100)
    max_tokens: int | None = Field(None, ge=1, le=1_000_000)


class ModelConnectionPatchIn(PatchIn):
    """The fields to change and the ``revision`` you saw (a stale one is refused with 409)."""

    NULLABLE = frozenset({"max_tokens"})

    model_config = ConfigDict(extra="forbid")
    revision: Revision
    name: str | None = Field(None, max_length=100)
    base_url: str | None = Field(None, max_length=500)
    api_key_env: str | None = Field(None, max_length=100)
    model_names: list[str] | None = Field(None, min_length=1, max_length=100)
    max_tokens: int | None = Field(None, ge=1, le=1_000_000)


class ModelConnectionOut(ModelSchema):
    model_names: list[str]

    class Meta:
        model = ModelConnection
        fields = [
            "id",
            "name",
            "provider",
            "base_url",
            "api_key_env",
            "max_tokens",
            "revision",
            "created_at",
            "updated_at",
        ]


# --- Runs ------------------------------------------------------------------------------------------


class RunCreateIn(SampleIn):
    """Start a run on a worker: the agent and a request, parsed as the run form parses it."""

    agent: DbId


class RunAcceptedOut(Schema):
    id: int
    status: str
    url: str


class CallOut(Schema):
    rule: str
    mcp_id: str
    tool: str
    status: str


class RunOut(ModelSchema):
    agent: int | None
    calls: list[CallOut] | None = Field(None, description="The run list only: which rule called which tool.")
    rerun_of: int | None
    replay_of: int | None
    context: dict[str, Any]
    a2a_data: list[dict[str, Any]] | None
    a2a_files: list[dict[str, Any]] | None
    duration_ms: float | None

    class Meta:
        model = Run
        fields = [
            "id",
            "agent_name",
            "source",
            "status",
            "query",
            "user_id",
            "session_id",
            "chatbot_id",
            "rule_set_name",
            "rule_set_ref",
            "rule_set_hash",
            "rollout_candidate",
            "answer",
            "error",
            "error_kind",
            "llm_calls",
            "tool_calls",
            "prestep_calls",
            "cancel_requested",
            "created_at",
            "started_at",
            "finished_at",
        ]

    @staticmethod
    def resolve_agent(obj: Run) -> int | None:
        return obj.agent_id

    @staticmethod
    def resolve_rerun_of(obj: Run) -> int | None:
        return obj.rerun_of_id

    @staticmethod
    def resolve_replay_of(obj: Run) -> int | None:
        return obj.replay_of_id


class RunFilterIn(StrictIn):
    """The run list's filters."""

    agent: DbId | None = None
    status: Literal["queued", "running", "succeeded", "failed", "timed_out", "cancelled"] | None = None
    version: str = Field(
        "",
        max_length=20,
        pattern=r"^(|v[1-9][0-9]{0,8}|draft@[0-9]{1,9})$",
        description="The version that served the run: v4 (or draft@12)",
    )
    candidate: Literal["", "yes", "no"] = Field(
        "", description="yes: a staged rollout's candidate served it; no: the stable version"
    )
    rule: str = Field("", max_length=200, description="A rule that fired")
    tool: str = Field("", max_length=200, description="A tool that was called")
    user_id: str = Field("", max_length=200)
    chatbot_id: str = Field("", max_length=200)
    session_id: str = Field("", max_length=200)
    subject: str = Field(
        "",
        max_length=SUBJECT_MAX,
        description=f"key=value of the run's context or of a DataPart ({EXAMPLE}; nested objects as "
        "dotted keys): finished runs only. Key: letters, digits, _ . - (at most 64); value: at most "
        "200 characters, no control characters.",
    )
    q: str = Field("", max_length=200, description="Text in the query")
    period: Literal["24h", "7d", "30d"] | None = Field(
        None, description="Only runs of the last 24 hours, 7 or 30 days"
    )
    since: FilterDateTime | None = None
    until: FilterDateTime | None = None
    limit: int = Field(50, ge=1, le=500)
    cursor: str = Field(
        "", max_length=200, description="The next_cursor of the previous page (keyset paging)."
    )
    offset: int = Field(
        0,
        ge=0,
        le=MAX_OFFSET,
        description=f"Deprecated: skips runs, at most {MAX_OFFSET:,} (OFFSET reads every run it skips); "
        "use cursor, which costs the same on any page.",
    )

    @field_validator("subject", mode="before")
    @classmethod
    def _subject(cls, value: Any) -> Any:
        # Before the length check: its sentence (and language) is subject_parse's, as on the page.
        if isinstance(value, str) and value:
            try:
                subject_parse(value)
            except SubjectError as exc:
                raise PydanticCustomError("subject", "{message}", {"message": str(exc)}) from None
        return value


class RunExportIn(RunFilterIn):
    """The run list's filters, and the file's format."""

    format: Literal["csv", "jsonl"] = Field("csv", description="csv (spreadsheets) or jsonl (with proofs)")


class RunPageOut(Schema):
    count: int = Field(description="How many runs match, counted up to 1,000 (see count_capped).")
    count_capped: bool = Field(description="True when more than 1,000 runs match: count stopped there.")
    next_cursor: str | None = Field(
        description="Pass as ?cursor= for the next (older) page; null on the last."
    )
    items: list[RunOut]


class RunStepOut(ModelSchema):
    input: Any = None
    output: Any = None
    tokens: Any = None

    class Meta:
        model = RunStep
        fields = [
            "seq",
            "event_id",
            "parent_seq",
            "kind",
            "name",
            "status",
            "mcp_id",
            "tool_name",
            "started_at",
            "duration_ms",
            "error",
        ]


class RunStepsOut(Schema):
    run_id: int
    status: str
    finished: bool = Field(description="The run has ended and every step has been read.")
    more: bool = Field(
        description="More steps follow this page (200 at most a page, and about 1 MB of their values)."
    )
    last_seq: int = Field(description="Ask for ?after=last_seq next: every step up to it has ended.")
    steps: list[RunStepOut] = Field(
        description="A step's input or output over 256 KB as indented JSON is given as its first part: "
        '{"llamon_part": 1, "parts", "field", "bytes", "sha256", "text", "next"}; read the others at `next`.'
    )


class StepValueIn(StrictIn):
    """Which part of which value of a step."""

    field: Literal["input", "output"] = Field("output", description="The step's input or output")
    part: int = Field(1, ge=1, le=1_000_000, description="Which part, from 1")


class StepValueOut(Schema):
    llamon_part: int = Field(description="This part's number, from 1.")
    parts: int = Field(description="How many parts the value has (256 KB of UTF-8 each at most).")
    field: str
    bytes: int = Field(description="The size of the whole value as indented JSON, UTF-8.")
    sha256: str = Field(description="SHA-256 of the whole text: the parts put together must match it.")
    text: str = Field(description="This part of the indented JSON text (cut between characters).")
    next: str | None = Field(description="Where the next part is; null on the last.")


# --- Trace ingest ----------------------------------------------------------------------------------


class IngestRequestIn(StrictIn):
    query: str = Field("", max_length=MAX_QUERY_CHARS)
    context: dict[str, Any] = Field(default_factory=dict)
    a2a_data: list[dict[str, Any]] | None = None
    a2a_files: list[dict[str, Any]] | None = None


class TraceEventIn(StrictIn):
    """One ``llamon_agent.trace.TraceEvent`` as ``to_json()`` writes it."""

    id: str = Field(min_length=1, max_length=64)
    kind: Literal["guardrail", "prestep", "rule", "llm", "tool", "node", "answer", "error"]
    name: str = Field(max_length=200)
    phase: Literal["start", "end"]
    parent: str | None = Field(None, max_length=64)
    start: float = Field(0.0, ge=0, le=4_102_444_800, description="Epoch seconds when the step started.")
    duration_ms: float | None = Field(None, ge=0, le=1e10)
    status: str = Field("running", max_length=20)
    input: Any = None
    output: Any = None
    error: str | None = Field(None, max_length=10_000)
    meta: dict[str, Any] = Field(default_factory=dict)


class RunFinishIn(StrictIn):
    status: Literal["succeeded", "failed", "timed_out", "cancelled"]
    answer: str = Field("", max_length=200_000)
    error: str = Field("", max_length=10_000)
    error_kind: str = Field("", max_length=20)


class ServedVersionIn(StrictIn):
    """The rule-set version a served agent serves, as its exported ``app/tools.py`` names it."""

    rule_set: str = Field(min_length=1, max_length=100)
    ref: str = Field(pattern=r"^(v[1-9][0-9]{0,8}|draft@[0-9]{1,9})$", description="v3, or draft@12")
    content_hash: str = Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256 of the version's content")


class IngestIn(StrictIn):
    """A batch of trace events: without ``run_id`` it creates the run (``source``, ``request``)."""

    run_id: DbId | None = None
    source: Literal["served", "flow"] = "served"
    agent: DbId | None = Field(None, description="A registered agent's id, when the served agent is one.")
    agent_name: str = Field("", max_length=100)
    request: IngestRequestIn | None = None
    events: list[TraceEventIn] = Field(default_factory=list, max_length=1000)
    finish: RunFinishIn | None = None
    version: ServedVersionIn | None = Field(
        None, description="With the first batch: the rule-set version the served agent serves."
    )


class IngestOut(Schema):
    run_id: int
    created: bool
    status: str
    steps: int


# --- Staged rollout and shadow mode ------------------------------------------------------------------


class RolloutIn(StrictIn):
    """Start or change a staged rollout: ``version`` is a version *number* of the agent's rule set."""

    version: DbId
    percent: int = Field(0, description="Share of sessions (0-100) served the candidate, sticky by sessionId")
    chatbot_ids: list[str] = Field(
        default_factory=list, description="chatbotIds always served the candidate (at most 200)"
    )
    guard_error_percent: int | None = Field(
        20,
        ge=0,
        le=100,
        description="The guard: roll back on its own when more than this share of the candidate's runs fail (null: no guard)",
    )
    guard_min_runs: int = Field(
        20, ge=1, le=100_000, description="...once the candidate has served this many runs"
    )
    change_reason: str = Field(
        "", max_length=2000, description="Why, for the approvers, when the agent is protected"
    )
    publish_draft: bool = Field(
        False,
        description="Publish the rule set's draft first, as ``version`` (the next number), and roll that out: one step, refused while a rollout runs or when another agent serves 'latest'",
    )
    message: str = Field("", max_length=500, description="With publish_draft: the new version's message")


class ProtectionIn(StrictIn):
    """Whether the agent is protected and how many approvals its changes need (admin)."""

    protected: bool
    approvals_required: int = Field(1, ge=1, le=10)


class ReviewIn(StrictIn):
    comment: str = Field("", max_length=2000)


class ChangeReviewOut(Schema):
    reviewer: str
    decision: Literal["approve", "reject"]
    comment: str
    round: int
    current: bool = Field(description="Given since the requester's last edit (only these count)")
    not_counted: str = Field(
        "",
        description="Why this approval no longer counts (deactivated, no longer an approver ...); empty: it counts",
    )
    created_at: Any


class ChangeRequestOut(Schema):
    id: int
    agent: int | None = Field(description="null: a grant of power (the payload names the user)")
    agent_name: str = Field(description="the agent's name, or the user a grant is for")
    action: str = Field(
        description="agent.update, agent.protect, agent.delete, shadow.set, rollout.set, rollout.promote, rollout.rollback, rollout.publish, rule_set.publish; grants: user.set_role, user.set_approver, user.activate"
    )
    state: Literal["pending", "applied", "rejected", "withdrawn"]
    payload: dict[str, Any]
    diff: dict[str, Any] = Field(description="fields: [{field, before, after}]; versions: {from, to, rows}")
    reason: str
    requested_by: str
    created_at: Any
    updated_at: Any
    decided_at: Any = None
    round: int
    approvals: int
    approvals_required: int
    stale: str = Field(description="Why it can no longer be applied as asked ('' when it can)")
    reviews: list[ChangeReviewOut]


class ChangeRequestFilterIn(StrictIn):
    agent: DbId | None = None
    state: Literal["pending", "applied", "rejected", "withdrawn"] | None = None


class RolloutServedOut(Schema):
    version: str = Field(description="v3: the version that served these runs")
    candidate: bool
    sessions: int
    runs: int
    errors: int = Field(description="failed and timed-out runs")
    error_percent: float
    fired: int = Field(description="runs where at least one pre-step rule fired (made a call)")
    fire_percent: float


class RolloutVersionOut(Schema):
    role: Literal["stable", "candidate", "shadow"]
    version: str = Field(description="v3")
    sessions: int | None = Field(description="null for the shadow version: it serves nothing")
    runs: int | None
    errors: int | None = Field(description="failed and timed-out runs")
    error_percent: float | None
    fired: int | None = Field(description="runs where at least one pre-step rule fired (made a call)")
    fire_percent: float | None
    shadow_evaluated: int | None = Field(
        description="runs this version was evaluated on in shadow mode (null: no shadow data)"
    )
    differ: int | None = Field(description="of those, runs where its calls differ from the live ones")
    differ_percent: float | None


class RolloutGuardOut(Schema):
    error_percent: int | None = Field(description="the threshold (null: the guard is off)")
    min_runs: int
    state: Literal["off", "waiting", "watching"] = Field(
        description="waiting: fewer judged runs than min_runs on a side (the stable side only under 100 %); watching: it judges every finished run"
    )
    judged_runs: int = Field(
        description="the candidate's succeeded, failed and timed-out runs, refusals both versions give (the guardrails) aside"
    )
    errors: int = Field(description="the candidate's judged runs that failed or timed out")
    candidate_error_percent: float
    stable_judged_runs: int = Field(description="the stable side's judged runs since the rollout started")
    stable_error_percent: float
    stable_needed: bool = Field(
        description="whether the guard waits for the stable side too (a share under 100 %)"
    )
    act: bool = Field(
        description="whether the guard rolls back now: over the threshold and worse than stable"
    )


class RolloutStateOut(Schema):
    version: int
    percent: int
    chatbot_ids: list[str]
    started_at: Any = None
    guard_error_percent: int | None = None
    guard_min_runs: int
    served: list[RolloutServedOut] = Field(description="Per version since the rollout started, stable first")
    versions: list[RolloutVersionOut] = Field(
        description="Live figures since the rollout started: stable, candidate, and the shadow version where on"
    )
    guard: RolloutGuardOut


class RolloutOut(Schema):
    agent: int
    revision: int
    rule_set: str | None
    stable: str = Field(
        description="What serves the other runs and what a roll back returns to: v3 (a running rollout always pins it), latest or draft"
    )
    rollout: RolloutStateOut | None
    shadow_version: int | None


class ShadowIn(StrictIn):
    """Name the version evaluated in shadow beside every run (a version number), or null to stop."""

    version: DbId | None = None


class ShadowExampleOut(Schema):
    run: int | None
    live_calls: list[dict[str, Any]]
    shadow_calls: list[dict[str, Any]]
    error: str
    created_at: Any


class ShadowTallyOut(Schema):
    version: int
    evaluated: int
    diverged: int
    errors: int
    examples: list[ShadowExampleOut]


class ShadowOut(Schema):
    shadow_version: int | None
    tallies: list[ShadowTallyOut]
