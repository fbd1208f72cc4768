"""Jobs that read recorded runs on the workers: impact analyses (a candidate rule set replayed
against them) and rule suggestions (rules mined from them), with their stored results."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from core.fields import OrderedJSONField
from rules.models import RuleSet


class JobStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class JobProgress:
    """``finished`` and ``percent`` of a job with ``status``, ``done`` and ``total``."""

    Status = JobStatus
    FINISHED = (JobStatus.SUCCEEDED, JobStatus.FAILED)
    status: str
    done: int
    total: int

    @property
    def finished(self) -> bool:
        return self.status in self.FINISHED

    @property
    def percent(self) -> int:
        if self.status == JobStatus.SUCCEEDED:
            return 100
        return int(100 * self.done / self.total) if self.total else 0


class ImpactAnalysis(JobProgress, models.Model):
    """One replay of a draft or a version over the runs of the last N days; viewers read it by URL."""

    rule_set = models.ForeignKey(RuleSet, on_delete=models.CASCADE, related_name="impact_analyses")
    # "draft@<revision>" or "v<number>"; the rules themselves are frozen in `snapshot` when started,
    # so a draft edited meanwhile does not change what is replayed.
    candidate_ref = models.CharField(max_length=20)
    candidate_hash = models.CharField(max_length=64)
    snapshot = OrderedJSONField(default=list)
    days = models.PositiveSmallIntegerField()
    agent_name = models.CharField(max_length=100, blank=True)
    chatbot_id = models.CharField(max_length=200, blank=True)
    user_id = models.CharField(max_length=200, blank=True)
    since = models.DateTimeField()
    until = models.DateTimeField()

    status = models.CharField(max_length=10, choices=JobStatus, default=JobStatus.QUEUED)
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    result = OrderedJSONField(null=True, blank=True)
    error = models.TextField(blank=True)

    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["rule_set", "created_at"], name="impact_rule_set_created")]

    def __str__(self) -> str:
        return f"impact analysis {self.pk} of {self.rule_set_id} {self.candidate_ref}"


class SuggestionJob(JobProgress, models.Model):
    """Rules mined from one agent's recorded runs (llamon_agent.suggest), in parts spread over workers.

    Three stages, each a map over ``parts`` ranges of run ids (one task per part, its output a
    :class:`SuggestionPart` row) then a reduce done by whichever task finishes the stage's last
    part: ``vocabulary`` (candidate literals), ``features`` (the runs as literal ids; then learning),
    ``replay`` (the candidates through the engine on held-out runs; then the selection). A part's
    row is written once: a task redelivered after a worker died finds it and goes on.
    """

    STAGES = ("vocabulary", "features", "replay")

    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="suggestion_jobs")
    days = models.PositiveSmallIntegerField()
    since = models.DateTimeField()
    until = models.DateTimeField()
    min_precision = models.FloatField(default=0.99)
    stage = models.CharField(max_length=12, default="vocabulary")
    parts = models.PositiveSmallIntegerField(default=1)
    runs = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)  # parts finished, over the three stages
    status = models.CharField(max_length=10, choices=JobStatus, default=JobStatus.QUEUED)
    # Between stages: the run-id bounds of each part, the merged vocabulary, the candidates.
    state = OrderedJSONField(default=dict, blank=True)
    result = OrderedJSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"suggestions {self.pk} for agent {self.agent_id}"

    @property
    def total(self) -> int:  # type: ignore[override]
        return len(self.STAGES) * self.parts


class SuggestionPart(models.Model):
    """One part's output for one stage of a :class:`SuggestionJob` (JSON, written once)."""

    job = models.ForeignKey(SuggestionJob, on_delete=models.CASCADE, related_name="part_rows")
    stage = models.CharField(max_length=12)
    number = models.PositiveSmallIntegerField()
    data = OrderedJSONField(default=dict)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "stage", "number"], name="suggestion_part_unique")
        ]

    def __str__(self) -> str:
        return f"part {self.number} of {self.stage} for job {self.job_id}"
