"""Impact analyses: a candidate rule set replayed against recorded runs, and the stored report."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from core.fields import OrderedJSONField
from rules.models import RuleSet


class ImpactAnalysis(models.Model):
    """One replay of a draft or a version over the runs of the last N days; viewers read it by URL."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    FINISHED = (Status.SUCCEEDED, Status.FAILED)

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

    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
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

    @property
    def finished(self) -> bool:
        return self.status in self.FINISHED

    @property
    def percent(self) -> int:
        if self.status == self.Status.SUCCEEDED:
            return 100
        return int(100 * self.done / self.total) if self.total else 0
