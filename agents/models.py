"""Agents, their runs and each run's steps, and the workers that execute them."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from core.fields import OrderedJSONField
from rules.models import RuleSet, RuleSetVersion
from servers.models import McpServer


class WorkerHeartbeat(models.Model):
    """The last sign of life of one Celery worker process (written by the worker itself)."""

    hostname = models.CharField(max_length=255, unique=True)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    seen_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-seen_at"]

    def __str__(self) -> str:
        return f"{self.hostname} (pid {self.pid})"


# A model connection's settings (what an admin writes; the rest is bookkeeping): the connection
# services and the change requests that change one read them.
CONNECTION_FIELDS = ("name", "provider", "base_url", "api_key_env", "model_names", "max_tokens")


class ModelConnection(models.Model):
    """An LLM endpoint an admin defined: the base URL and the only key variable sent to it.

    The key variable's value goes to this base URL and nowhere else: agents name a connection and
    one of its models, never a URL or a key variable of their own (docs/security.md).
    """

    class Provider(models.TextChoices):
        OPENAI = "openai-compatible", _("OpenAI-compatible endpoint (vLLM, Ollama, llama.cpp ...)")

    name = models.CharField(max_length=100, unique=True)
    provider = models.CharField(max_length=20, choices=Provider.choices, default=Provider.OPENAI)
    base_url = models.CharField(max_length=500)
    api_key_env = models.CharField(
        max_length=100, blank=True, help_text="The NAME of the variable holding the key (blank: no key)."
    )
    model_names = OrderedJSONField(
        default=list, help_text="The model names agents may use on this connection."
    )
    max_tokens = models.PositiveIntegerField(null=True, blank=True)
    revision = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Agent(models.Model):
    """A ReAct agent: prompt, pre-step rule set, chat model, guardrails and limits."""

    class RuleSetMode(models.TextChoices):
        PINNED = "pinned", _("a pinned published version")
        LATEST = "latest", _("the latest published version")
        DRAFT = "draft", _("the draft (for trying)")

    class Provider(models.TextChoices):
        OFFLINE = "offline", _("offline (no network; answers from pre-step results)")
        SCRIPTED = "scripted", _("scripted (replays a list of replies)")
        OPENAI = "openai-compatible", _("OpenAI-compatible endpoint (vLLM, Ollama, llama.cpp ...)")

    name = models.CharField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    system_prompt = models.TextField()
    rule_set = models.ForeignKey(
        RuleSet, null=True, blank=True, on_delete=models.PROTECT, related_name="agents"
    )
    rule_set_mode = models.CharField(max_length=8, choices=RuleSetMode.choices, default=RuleSetMode.LATEST)
    pinned_version = models.ForeignKey(
        RuleSetVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )

    model_provider = models.CharField(max_length=20, choices=Provider.choices, default=Provider.OFFLINE)
    model_name = models.CharField(max_length=200, blank=True)
    # An openai-compatible model is reached only through a connection an admin defined.
    model_connection = models.ForeignKey(
        ModelConnection, null=True, blank=True, on_delete=models.PROTECT, related_name="agents"
    )
    # What an agent saved before connections named as its endpoint: kept to show and to match a
    # connection an admin creates later; never used to connect (agents.runtime reads the connection).
    # db_default: the release before writes agents without them (expand/contract, docs/development.md).
    legacy_base_url = models.CharField(max_length=500, blank=True, db_default="")
    legacy_api_key_env = models.CharField(max_length=100, blank=True, db_default="")
    # The same values under the names the release before 0012 reads (0012 renamed them; 0020 added
    # them back, filled): kept until the release after the one that stops reading them drops them.
    model_base_url = models.CharField(max_length=500, blank=True, db_default="", editable=False)
    model_api_key_env = models.CharField(max_length=100, blank=True, db_default="", editable=False)
    model_script = OrderedJSONField(default=list, blank=True, help_text="Replies for the scripted model.")
    temperature = models.FloatField(default=0.0)

    react_servers = models.ManyToManyField(McpServer, blank=True, related_name="react_agents")
    input_max_chars = models.PositiveIntegerField(default=4000)
    input_blocked_patterns = OrderedJSONField(default=list, blank=True)
    output_blocked_patterns = OrderedJSONField(default=list, blank=True)
    output_masks = OrderedJSONField(default=list, blank=True)
    max_iterations = models.PositiveIntegerField(default=6)
    answer_from_prestep = models.BooleanField(default=False)

    # Staged rollout (agents.rollout_runtime, docs/agents.md): a candidate version of the rule set served
    # to a share of sessions and/or to named chatbots, besides the stable version above.
    rollout_version = models.ForeignKey(
        RuleSetVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    rollout_percent = models.PositiveSmallIntegerField(default=0)
    rollout_chatbot_ids = OrderedJSONField(default=list, blank=True)
    rollout_started_at = models.DateTimeField(null=True, blank=True)
    # The guard: more than this share of the candidate's runs failing (None: no guard), once it has
    # served rollout_guard_min_runs, rolls the rollout back on its own (agents.services.rollout).
    rollout_guard_error_percent = models.PositiveSmallIntegerField(null=True, blank=True, default=20)
    rollout_guard_min_runs = models.PositiveIntegerField(default=20, db_default=20)
    # Shadow mode: a version evaluated as a dry run beside the live pre-step of every run.
    shadow_version = models.ForeignKey(
        RuleSetVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )

    # Change control (agents.services.changes, docs/governance.md): on a protected agent, what
    # changes the version or the model it serves becomes a change request that needs this many
    # approvals by people other than the requester.
    # db_default on every column added since the release before: it inserts rows without them.
    protected = models.BooleanField(default=False, db_default=False)
    approvals_required = models.PositiveSmallIntegerField(default=1, db_default=1)

    revision = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ChangeRequest(models.Model):
    """A change to a protected agent waiting for approval: the action, its payload and its diff.

    ``base_revision`` is the agent's revision when it was asked (and ``rule_set_revision`` the
    draft's, for a publish): applying it after either moved on is refused. ``round`` counts the
    requester's edits: only approvals given in the current round count.
    """

    class State(models.TextChoices):
        PENDING = "pending", _("pending")
        APPLIED = "applied", _("applied")
        REJECTED = "rejected", _("rejected")
        WITHDRAWN = "withdrawn", _("withdrawn")

    # None: a grant of the admin role or the approver permission (or the reactivation of such an
    # account), gated while any agent is protected; its payload names the user.
    agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="change_requests"
    )
    action = models.CharField(max_length=40)
    payload = OrderedJSONField(default=dict)
    diff = OrderedJSONField(default=dict)
    reason = models.TextField(blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_by_name = models.CharField(max_length=150, blank=True)
    base_revision = models.PositiveIntegerField()
    rule_set_revision = models.PositiveIntegerField(null=True, blank=True)
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    round = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["state", "agent"], name="change_state_agent")]

    def __str__(self) -> str:
        return f"change request {self.pk} ({self.action} on {self.agent_id}, {self.state})"

    @property
    def subject(self) -> str:
        """What it changes, as people read it: the agent's name, or the user a grant is for."""
        agent = self.agent
        return agent.name if agent is not None else str(self.payload.get("username", ""))

    @property
    def approvals_needed(self) -> int:
        """The approvals it needs: the agent's number; one for a grant (four eyes)."""
        agent = self.agent
        return agent.approvals_required if agent is not None else 1


class ChangeReview(models.Model):
    """One approval or rejection of a change request, with its comment (in the request's round)."""

    class Decision(models.TextChoices):
        APPROVE = "approve", _("approved")
        REJECT = "reject", _("rejected")

    change_request = models.ForeignKey(ChangeRequest, on_delete=models.CASCADE, related_name="reviews")
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reviewer_name = models.CharField(max_length=150, blank=True)
    decision = models.CharField(max_length=8, choices=Decision.choices)
    comment = models.TextField(blank=True)
    round = models.PositiveIntegerField()
    # How the reviewer authenticated: "session", "token" or "token:<role>" (a capped token).
    credential = models.CharField(max_length=20, default="session")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["change_request", "reviewer", "round"], name="change_review_once_per_round"
            )
        ]

    def __str__(self) -> str:
        return f"{self.decision} of change request {self.change_request_id}"


class IngestCredential(models.Model):
    """What a served agent posts its runs with (``Authorization: Bearer llamon_ingest_...``): issued
    by an admin for one agent name, never a person's token. Only a SHA-256 of the secret is kept."""

    agent_name = models.CharField(max_length=100, db_index=True)
    prefix = models.CharField(max_length=16, db_index=True)
    token_hash = models.CharField(max_length=64, unique=True)
    created_by_name = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.agent_name} (llamon_ingest_{self.prefix}_…)"


class Run(models.Model):
    """One request answered by an agent: its input, where it ran, how it ended."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        TIMED_OUT = "timed_out"
        CANCELLED = "cancelled"

    class Source(models.TextChoices):
        WORKER = "worker"
        SERVED = "served"
        FLOW = "flow"

    FINISHED = (Status.SUCCEEDED, Status.FAILED, Status.TIMED_OUT, Status.CANCELLED)

    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.SET_NULL, related_name="runs")
    agent_name = models.CharField(max_length=100, blank=True)
    source = models.CharField(max_length=8, choices=Source.choices, default=Source.WORKER)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)

    query = models.TextField(blank=True)
    context = OrderedJSONField(default=dict, blank=True)
    a2a_data = OrderedJSONField(null=True, blank=True)
    a2a_files = OrderedJSONField(null=True, blank=True)
    # Copied out of the context (or a DataPart) so that every run of one customer can be found.
    user_id = models.CharField(max_length=200, blank=True)
    session_id = models.CharField(max_length=200, blank=True)
    chatbot_id = models.CharField(max_length=200, blank=True)

    rule_set_name = models.CharField(max_length=100, blank=True)
    rule_set_ref = models.CharField(max_length=20, blank=True, help_text="v3, or draft@rev")
    rule_set_hash = models.CharField(max_length=64, blank=True)
    # The published version that served the run (None: the draft, or no rule set) and whether it
    # was a staged rollout's candidate rather than the agent's stable version.
    rule_set_version = models.ForeignKey(
        RuleSetVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    rollout_candidate = models.BooleanField(default=False)

    answer = models.TextField(blank=True)
    error = models.TextField(blank=True)
    error_kind = models.CharField(max_length=20, blank=True)
    llm_calls = models.PositiveIntegerField(default=0)
    tool_calls = models.PositiveIntegerField(default=0)
    prestep_calls = models.PositiveIntegerField(default=0)

    cancel_requested = models.BooleanField(default=False)
    # Delivery: when the run's task message was last sent, and how many times recovery re-sent it.
    queued_at = models.DateTimeField(null=True, blank=True)
    delivery_attempts = models.PositiveSmallIntegerField(default=0)
    worker = models.CharField(max_length=255, blank=True)
    # The credential a served run was ingested with (None: a worker run, or one older than credentials).
    ingested_by = models.ForeignKey(
        IngestCredential, null=True, blank=True, on_delete=models.PROTECT, related_name="runs"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    rerun_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="reruns"
    )
    # A deterministic replay: its tool calls are answered from this run's recorded outputs. The id
    # outlives the original (retention may delete it first): a replay must never fall back to the
    # live servers, so with the original gone its calls have no recorded output (agents.replay).
    replay_of = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="replays",
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        # The run list reads newest first, (created_at, id) descending, by keyset (agents.selectors.
        # run_page): each filter on a run's own column has an index that ends in that order, so a
        # page is one index range scan, not a sort of every matching run (docs/performance.md).
        indexes = [
            models.Index(fields=["status", "heartbeat_at"]),
            models.Index(fields=["created_at", "id"], name="run_created"),
            models.Index(fields=["agent", "created_at", "id"], name="run_agent_created"),
            models.Index(fields=["status", "created_at", "id"], name="run_status_created"),
            models.Index(fields=["user_id", "created_at", "id"], name="run_user_created"),
            models.Index(fields=["chatbot_id", "created_at", "id"], name="run_chatbot_created"),
            models.Index(fields=["session_id", "created_at", "id"], name="run_session_created"),
            models.Index(fields=["rule_set_ref", "created_at", "id"], name="run_version_created"),
            models.Index(fields=["finished_at"], name="run_finished"),  # retention
        ]

    def __str__(self) -> str:
        return f"run {self.pk} ({self.status})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        # A run read for showing has its input masked (agents.selectors.runs_for_display): saving it
        # would overwrite the real input the worker and a re-run need.
        if getattr(self, "input_masked", False):
            raise ValueError(f"run {self.pk} was read with its input masked for display; it cannot be saved")
        super().save(*args, **kwargs)

    @property
    def finished(self) -> bool:
        return self.status in self.FINISHED

    @property
    def duration_ms(self) -> float | None:
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds() * 1000
        return None


class RunStep(models.Model):
    """One stage of a run, committed when it starts and completed when it ends."""

    class Kind(models.TextChoices):
        GUARDRAIL = "guardrail"
        PRESTEP = "prestep"
        RULE = "rule"
        LLM = "llm"
        TOOL = "tool"
        NODE = "node"
        ANSWER = "answer"
        ERROR = "error"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="steps")
    seq = models.PositiveIntegerField()
    event_id = models.CharField(max_length=64, blank=True)
    parent_seq = models.PositiveIntegerField(null=True, blank=True)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    name = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=20, default="running")
    mcp_id = models.CharField(max_length=64, blank=True)
    tool_name = models.CharField(max_length=200, blank=True)
    started_at = models.DateTimeField()
    duration_ms = models.FloatField(null=True, blank=True)
    input = OrderedJSONField(null=True, blank=True)
    output = OrderedJSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    tokens = OrderedJSONField(null=True, blank=True)
    # Why a tool's result breaks its declared output schema (it was handed on; a warning, not an error).
    warnings = OrderedJSONField(default=list, blank=True, db_default=[])

    class Meta:
        ordering = ["run_id", "seq"]  # by the column: "run" would join agents_run for its ordering
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="step_seq_unique")]
        # The run list's "rule fired" filter: the runs are read from the index alone.
        indexes = [models.Index(fields=["kind", "name", "status", "run"], name="step_kind_name_run")]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.kind} {self.name}"


class RunTool(models.Model):
    """A tool a run called (a rule's or the ReAct loop's call), once per run and tool: the run
    list's "tool called" filter.

    A filter through the steps had to walk the runs newest first and probe each one's steps (a tool
    that 1% of runs called: ~5,000 probes for a page, 100,000 for the capped count). This table
    carries the run's ``created_at``, so the filter walks the (tool_name, created_at, run) index in
    the run list's own order and stops after a page. Written by the trace sink with the step.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="tools_called")
    tool_name = models.CharField(max_length=200)
    created_at = models.DateTimeField()  # the run's, copied

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "tool_name"], name="runtool_unique")]
        indexes = [models.Index(fields=["tool_name", "created_at", "run"], name="runtool_tool_created")]

    def __str__(self) -> str:
        return f"{self.run_id} {self.tool_name}"


class RunSubject(models.Model):
    """One ``key=value`` a finished run is found by (``patientId=P-2002``): a scalar of its context
    or of a DataPart (agents.subjects.run_subjects). The run list's subject filter.

    Like RunTool, the row carries the run's ``created_at``, so the filter walks the (key, value,
    created_at, run) index newest first and stops after a page. Written when the run ends, in the
    transaction that seals its decision record; the verifier derives the rows again from the
    recorded request, so a row edited, deleted or added by hand names the run.
    """

    # No index of its own: the unique (run, key, value) index serves lookups by run.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="subjects", db_index=False)
    key = models.CharField(max_length=64)
    value = models.CharField(max_length=200)
    created_at = models.DateTimeField()  # the run's, copied

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "key", "value"], name="runsubject_unique")]
        indexes = [models.Index(fields=["key", "value", "created_at", "run"], name="runsubject_created")]

    def __str__(self) -> str:
        return f"{self.run_id} {self.key}={self.value}"


class ShadowTally(models.Model):
    """Shadow mode's counts for one agent and one shadow version (agents.rollout_runtime.shadow_record)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="shadow_tallies")
    version = models.ForeignKey(RuleSetVersion, on_delete=models.CASCADE, related_name="shadow_tallies")
    evaluated = models.PositiveIntegerField(default=0)
    diverged = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "version"], name="shadow_tally_unique")]

    def __str__(self) -> str:
        return f"shadow {self.version} on {self.agent}"


class ShadowExample(models.Model):
    """One run where the shadow version decided other calls than the live one (or failed).

    Only the newest SHADOW_EXAMPLES per tally are kept (older ones are deleted as new ones come).
    """

    tally = models.ForeignKey(ShadowTally, on_delete=models.CASCADE, related_name="examples")
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    live_calls = OrderedJSONField(default=list)
    shadow_calls = OrderedJSONField(default=list)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"shadow example {self.pk} (run {self.run_id})"


class PrivacySettings(models.Model):
    """Redaction of stored traces and how long runs are kept (one row)."""

    redaction_patterns = OrderedJSONField(
        default=list, blank=True, help_text="RE2 patterns; matches are replaced before storing."
    )
    mask_presets = OrderedJSONField(
        default=list, blank=True, help_text="Built-in masks (llamon_agent.guardrails.MASK_PRESETS)."
    )
    retention_days = models.PositiveIntegerField(default=30)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return "privacy settings"
