"""API schemas of the rules app: MCP servers, the registry, rule sets, rules, versions, evaluate, cases, audit."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from ninja import Field, ModelSchema, Schema
from pydantic import PrivateAttr, field_validator, model_validator
from pydantic_core import PydanticCustomError

from core.api import DbId, PatchIn, Revision, StrictIn
from core.models import AuditEvent
from core.userinput import FilterDateTime
from llamon_agent.expr import MAX_QUERY_CHARS
from llamon_agent.tools import AgentRequest
from rules.cases import case_modes, case_notice_text
from rules.engine import QUIET_PAGE, QUIET_SHOWN
from rules.errors import RuleError
from rules.models import Rule, RuleSet, RuleSetVersion, TestCase
from rules.samples import Sample, pins_check, sample_read
from rules.services import rule_fields_check

# --- MCP servers ----------------------------------------------------------------------------------


class RuleSetIn(StrictIn):
    name: str = Field(max_length=100)
    description: str = Field("", max_length=10_000)


class RuleSetPatchIn(PatchIn):
    name: str | None = Field(None, max_length=100)
    description: str | None = Field(None, max_length=10_000)
    revision: Revision = Field(description="The rule set revision you saw; a stale one is refused with 409.")


class RuleSetOut(ModelSchema):
    rule_count: int
    latest_version: int | None

    class Meta:
        model = RuleSet
        fields = ["id", "name", "description", "revision", "created_at", "updated_at"]

    @staticmethod
    def resolve_rule_count(obj: RuleSet) -> int:
        count = getattr(obj, "rule_count", None)
        return obj.rules.count() if count is None else count

    @staticmethod
    def resolve_latest_version(obj: RuleSet) -> int | None:
        if hasattr(obj, "latest_version"):
            return obj.latest_version
        latest = obj.versions.order_by("-number").first()
        return latest.number if latest else None


class RuleIn(StrictIn):
    """A rule: ``when`` and ``params`` are expressions (docs/expressions.md)."""

    name: str = Field(max_length=100)
    description: str = Field("", max_length=10_000)
    mcp_id: str = Field(max_length=64)
    tool_name: str = Field(max_length=200)
    when: str = Field(max_length=20_000)
    params: str = Field("{}", max_length=20_000)
    stop: bool = False
    enabled: bool = True


class RulePatchIn(PatchIn):
    """The fields to change, and the rule ``revision`` you saw (a stale one is refused with 409)."""

    revision: Revision
    name: str | None = Field(None, max_length=100)
    description: str | None = Field(None, max_length=10_000)
    mcp_id: str | None = Field(None, max_length=64)
    tool_name: str | None = Field(None, max_length=200)
    when: str | None = Field(None, max_length=20_000)
    params: str | None = Field(None, max_length=20_000)
    stop: bool | None = None
    enabled: bool | None = None


class RuleOut(ModelSchema):
    class Meta:
        model = Rule
        fields = [
            "id",
            "name",
            "description",
            "mcp_id",
            "tool_name",
            "when",
            "params",
            "stop",
            "enabled",
            "position",
            "revision",
            "updated_at",
        ]


class ReorderIn(StrictIn):
    order: list[int] = Field(
        max_length=10_000, description="Every rule id of the set, each once, in the new order."
    )
    revision: Revision | None = None


class PublishIn(StrictIn):
    message: str = Field("", max_length=500)
    revision: Revision | None = None
    reason: str = Field(
        "", max_length=2000, description="Why, for the approvers, when a protected agent serves the set"
    )


class RestoreIn(StrictIn):
    revision: Revision | None = None


class VersionOut(ModelSchema):
    author: str | None

    class Meta:
        model = RuleSetVersion
        fields = ["id", "number", "content_hash", "tool_schema_hash", "message", "created_at"]

    @staticmethod
    def resolve_author(obj: RuleSetVersion) -> str | None:
        return obj.author.get_username() if obj.author else None


class SnapshotRuleOut(Schema):
    name: str
    description: str
    mcp_id: str
    tool_name: str
    when: str
    params: str
    stop: bool
    enabled: bool


class VersionDetailOut(ModelSchema):
    author: str | None
    content: list[SnapshotRuleOut]

    class Meta:
        model = RuleSetVersion
        fields = ["id", "number", "content_hash", "tool_schema_hash", "message", "created_at"]

    @staticmethod
    def resolve_author(obj: RuleSetVersion) -> str | None:
        return obj.author.get_username() if obj.author else None


class ProblemOut(Schema):
    rule: str = Field(description="The rule's name.")
    level: str = Field(description="error (the pre-step will fail or the rule is dead) or warning.")
    code: str = Field(
        description="server_unknown, server_disabled, tools_unknown, tool_missing, params_mismatch, "
        "unreachable, duplicate or datapart_number (docs/rulesets.md, Checks and tool drift)."
    )
    message: str


class DiffRowOut(Schema):
    name: str
    change: Literal["added", "removed", "changed", "moved"]
    position: int | None = None
    old_position: int | None = None
    fields: list[dict[str, Any]] | None = None
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None


class DiffOut(Schema):
    a: str
    b: str
    rows: list[DiffRowOut]


# --- Export and import -----------------------------------------------------------------------------


class ExportCaseOut(Schema):
    name: str
    input: dict[str, Any]
    expected: dict[str, Any]


class ExportOut(Schema):
    """A ``llamon-ruleset/1`` document (docs/rulesets.md)."""

    format: str
    name: str
    description: str
    rules: list[SnapshotRuleOut]
    cases: list[ExportCaseOut]


class ContentServerOut(Schema):
    enabled: bool
    tools: list[dict[str, Any]] = Field(description="Each tool's name, description and input_schema.")


class ContentOut(Schema):
    """A rule set as ``llamon rules pull`` reads it: the export at one revision and its servers' tools."""

    rule_set: int
    name: str
    revision: int = Field(description="The revision the document is at; send it back with the push.")
    published_as: int | None = Field(
        description="The latest version's number when the draft has its content (nothing to publish), else null."
    )
    content_sha256: str = Field(
        description="SHA-256 of the content (rules in order, cases, description): the push's base."
    )
    document: ExportOut
    servers: dict[str, ContentServerOut] = Field(
        description="Every registered server: what a dry run binds (docs/rules-as-code.md)."
    )


class ContentIn(StrictIn):
    data: dict[str, Any] = Field(
        description="The whole set as a llamon-ruleset/1 document (rules and cases)."
    )
    base: str | None = Field(
        None,
        pattern=r"^[0-9a-f]{64}$",
        description="The content_sha256 the document was pulled at (ruleset.json's): refused with 409 only "
        "when the set changed since that content in a way the push would undo (docs/rules-as-code.md).",
    )
    ancestors: list[Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]] = Field(
        [],
        max_length=50,
        description="Content hashes the directory went through before (its git history), newest first: "
        "the first one the workbench knows is the base, else `base`.",
    )
    revision: Revision | None = Field(
        None,
        description="Without base (a directory pulled before content hashes): the rule set revision it was "
        "pulled at; a stale one is refused with 409.",
    )


class ContentSavedOut(RuleSetOut):
    content_sha256: str | None = Field(None, description="The new content's hash: the next push's base.")


class ToolsPyOut(Schema):
    filename: str
    source: str


class ImportIn(StrictIn):
    data: dict[str, Any] = Field(description="An exported llamon-ruleset/1 document.")
    name: str | None = Field(None, max_length=100, description="A new set's name (default: the file's).")
    replace: DbId | None = Field(None, description="Replace the draft rules of this rule set id instead.")
    revision: Revision | None = None


class ImportToolsIn(StrictIn):
    source: str = Field(description="The text of an app/tools.py (parsed, never run; at most 1 MiB).")
    filename: str = Field("app/tools.py", max_length=200, description="Named in the untranslatable list.")
    confirm: bool = Field(
        False, description="false: only the preview (nothing is written); true: write the rules."
    )
    sha256: str | None = Field(
        None,
        max_length=64,
        description="With confirm: the preview's sha256, so that what is written is what was seen.",
    )
    name: str | None = Field(None, max_length=100, description="A new set's name (default: the file's name).")
    replace: DbId | None = Field(None, description="Replace the draft rules of this rule set id instead.")
    revision: Revision | None = None


class ImportedRuleOut(Schema):
    name: str
    description: str
    mcp_id: str
    tool_name: str
    when: str
    params: str
    stop: bool
    enabled: bool
    function: str = Field(description="The Python function the rule comes from.")
    line: int


class UntranslatableOut(Schema):
    function: str
    file: str
    line: int
    code: str = Field(description="The kind of reason (call, global, statement, expression, ...).")
    detail: str
    reason: str = Field(description="The reason in English.")
    message: str = Field(description="file:line: function: reason, in the request's language.")


class ToolsPreviewOut(Schema):
    filename: str
    sha256: str = Field(description="SHA-256 of the source; send it back with confirm.")
    rules: list[ImportedRuleOut]
    untranslatable: list[UntranslatableOut]
    notes: list[str]
    problems: list[dict[str, Any]] = Field(
        description="Every problem of the rules before anything is written: level (error | warning), "
        "code, rule, function, line, message, and blocks (true: a confirmation is refused, with all of them)."
    )


class ImportToolsOut(Schema):
    preview: ToolsPreviewOut
    rule_set: RuleSetOut | None = Field(None, description="The rule set written (confirm only).")


# --- Evaluate --------------------------------------------------------------------------------------


def refused(exc: RuleError, *, named: bool = True) -> PydanticCustomError:
    """A check of the rules services refusing a body's value, as a validation error naming the field
    at fault (the API appends it to the location; a field validator's location is the field already)."""
    field = (exc.field or "") if named else ""
    return PydanticCustomError("refused", "{message}", {"message": str(exc.message), "field": field})


class SampleIn(StrictIn):
    """A sample request (query, context, DataParts, FileParts), read by rules.samples as the live
    tester's and the run form's boxes are: one check, one message for every entry point."""

    # The answer's ``request`` (and a run's input) names them a2a_data and a2a_files.
    FIELD_HINTS = {"a2a_data": "data", "a2a_files": "files"}

    query: str = Field("", max_length=MAX_QUERY_CHARS)
    context: dict[str, Any] | None = None
    data: list[dict[str, Any]] | dict[str, Any] | None = Field(
        None, description="DataParts: a list of objects, one object, or a whole A2A message (0.3 or 1.0)."
    )
    files: list[dict[str, Any]] | dict[str, Any] | None = Field(
        None, description='FileParts: [{"name", "mimeType", "uri", "size"}]'
    )
    _sample: Sample | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _read_sample(self) -> SampleIn:
        try:
            self._sample = sample_read(
                query=self.query, context=self.context, data=self.data, files=self.files
            )
        except RuleError as exc:
            raise refused(exc) from None
        return self

    def to_request(self) -> AgentRequest:
        """The request the pre-step sees."""
        assert self._sample is not None
        return self._sample.request


class DraftRuleIn(RuleIn):
    """An unsaved edit of one rule, checked as a saved one is (rules.services.rule_fields_check)."""

    @model_validator(mode="after")
    def _check(self) -> DraftRuleIn:
        try:
            rule_fields_check(
                name=self.name,
                mcp_id=self.mcp_id,
                tool_name=self.tool_name,
                when=self.when,
                params=self.params,
            )
        except RuleError as exc:
            raise refused(exc) from None
        return self


class EvaluateIn(SampleIn):
    """A sample request, parsed exactly as the live tester parses it."""

    execute: bool = Field(False, description="Really call the tools (editor role); default: dry run.")
    draft_rule: DraftRuleIn | None = Field(
        None, description="An unsaved edit of one rule to try on the draft."
    )
    original_name: str | None = Field(
        None, max_length=100, description="The rule draft_rule replaces (absent: appended)."
    )
    pinned: list[dict[str, Any]] | None = Field(
        None,
        description="With execute: calls answered from a recorded output instead of the tool, as in the "
        'live tester: [{"mcp_id", "tool_name", "params" (optional: any call of the tool), "output"}]',
    )

    @field_validator("pinned", mode="after")
    @classmethod
    def _pins(cls, value: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        try:
            return pins_check(value)
        except RuleError as exc:
            raise refused(exc, named=False) from None

    detail: Literal["summary", "all"] = Field(
        "summary",
        description=f"Which records the answer lists. summary: every rule that fired or failed, and the first "
        f"{QUIET_SHOWN} of the others (skipped, not reached), the rest counted in `omitted`, as the live "
        f"tester's page shows them. all: the others too, {QUIET_PAGE} at a time from `offset`.",
    )
    offset: int = Field(
        0,
        ge=0,
        le=10**9,
        description='With detail "all": the first skipped or not-reached rule listed (in evaluation order, '
        "counting those only); the answer's `next_offset` starts the next page.",
    )


class RuleRecordOut(Schema):
    rule: str
    mcp_id: str
    status: str
    tool_name: str | None = None
    params: Any = None
    result: Any = None
    duration_ms: float | None = None
    error: str | None = None
    tool_exists: bool | None = None


class EvaluateOut(Schema):
    ok: bool
    error: str | None
    dry_run: bool
    calls: int
    duration_ms: float
    results: list[dict[str, Any]]
    records: list[RuleRecordOut] = Field(
        description="In evaluation order: every rule that fired or failed, and the skipped and "
        "not-reached rules `detail` and `offset` chose."
    )
    counts: dict[str, int] = Field(
        description="Every rule of the set by status: fired, skipped, error, not_reached."
    )
    omitted: dict[str, int] = Field(
        description="The rules `records` does not list, by status: skipped and not reached, and "
        'fired beyond the first 30 in a "summary".'
    )
    detail: Literal["summary", "all"]
    next_offset: int | None = Field(
        description='With detail "all": the offset of the next page of skipped and not-reached rules '
        "(null: this page is the last)."
    )
    schema_errors: dict[str, list[str]]
    block: str = Field(
        description='The results block the LLM would read; "" in a summary that left fired rules out.'
    )
    block_chars: int = Field(description="The length of that block, also in a summary.")
    request: dict[str, Any]
    expected: dict[str, Any] | None = Field(
        description="The case this outcome proposes (every call, nothing else); null in a summary "
        'that left fired rules out: send detail "all" for it.'
    )


# --- Test cases ------------------------------------------------------------------------------------


class CaseIn(StrictIn):
    name: str = Field(max_length=200)
    input: dict[str, Any] = Field(description="{query, context, a2a_data, a2a_files}")
    expected: dict[str, Any] = Field(
        description="{must_fire: [...], must_not_fire: [...], error: str | null}"
    )


class CasePatchIn(PatchIn):
    name: str | None = Field(None, max_length=200)
    input: dict[str, Any] | None = None
    expected: dict[str, Any] | None = None


class CaseOut(ModelSchema):
    input: dict[str, Any]
    expected: dict[str, Any] = Field(
        description="The whole expected outcome, other_calls included (forbid: nothing else may fire)."
    )
    modes: list[str] = Field(description="How strict the case is, in words (the request's language).")
    notice: str = Field(description="What an upgrade changed in the case, until it is edited (or empty).")
    last_outcome: dict[str, Any] | None

    class Meta:
        model = TestCase
        fields = ["id", "name", "last_passed", "last_run_at", "created_at"]

    @staticmethod
    def resolve_expected(obj: TestCase) -> Any:
        return obj.expectation

    @staticmethod
    def resolve_modes(obj: TestCase) -> list[str]:
        return case_modes(obj)

    @staticmethod
    def resolve_notice(obj: TestCase) -> str:
        return case_notice_text(obj)


class CaseResultOut(Schema):
    case_id: int
    name: str
    passed: bool
    previous_passed: bool | None
    changed: bool
    changes: list[str] = Field(
        description="Call by call, what this run does otherwise than the case's previous run, and the rule why."
    )
    problems: list[str]
    diff: list[dict[str, Any]]


class SuiteOut(Schema):
    total: int
    passed: int
    failed: int
    ok: bool
    results: list[CaseResultOut]


# --- Audit -----------------------------------------------------------------------------------------


class AuditEventOut(ModelSchema):
    before: Any
    after: Any

    class Meta:
        model = AuditEvent
        fields = ["id", "actor_name", "action", "object_type", "object_id", "object_repr", "created_at"]


class AuditPageOut(Schema):
    count: int
    items: list[AuditEventOut]


class AuditFilterIn(StrictIn):
    # As long as the columns (a longer text matches nothing): the audit page's form says the same.
    actor: str = Field("", max_length=AuditEvent._meta.get_field("actor_name").max_length)
    object_type: str = Field("", max_length=AuditEvent._meta.get_field("object_type").max_length)
    action: str = Field("", max_length=AuditEvent._meta.get_field("action").max_length)
    since: FilterDateTime | None = None
    until: FilterDateTime | None = None
    q: str = Field("", max_length=AuditEvent._meta.get_field("object_repr").max_length)
    limit: int = Field(50, ge=1, le=500)
    offset: int = Field(0, ge=0, le=10**9)
