"""Rule sets: the draft rules, immutable versions and regression cases."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from core.fields import OrderedJSONField
from servers.models import mcp_id_validator


class RuleSet(models.Model):
    """An ordered list of routing rules: the editable draft of what versions freeze."""

    name = models.CharField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    # Bumped by every change to the draft (rules added, edited, moved, removed) so that a
    # stale editor cannot silently overwrite someone else's change.
    revision = models.PositiveIntegerField(default=1)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Rule(models.Model):
    """A routing rule stored as data: `when` and `params` are expressions (docs/expressions.md)."""

    rule_set = models.ForeignKey(RuleSet, on_delete=models.CASCADE, related_name="rules")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    # The server's mcp_id, not a foreign key: a rule on a server that was removed or renamed
    # must stay visible (and flagged) rather than vanish with it.
    mcp_id = models.CharField(max_length=64, validators=[mcp_id_validator])
    tool_name = models.CharField(max_length=200)
    when = models.TextField()
    params = models.TextField(default="{}")
    stop = models.BooleanField(default=False)
    enabled = models.BooleanField(default=True)
    position = models.PositiveIntegerField(default=0)
    revision = models.PositiveIntegerField(default=1)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["position", "id"]
        constraints = [models.UniqueConstraint(fields=["rule_set", "name"], name="rule_name_unique_in_set")]

    def __str__(self) -> str:
        return self.name


class RuleSetVersion(models.Model):
    """An immutable snapshot of a rule set made by *publish*."""

    rule_set = models.ForeignKey(RuleSet, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    content = OrderedJSONField()
    content_hash = models.CharField(max_length=64)
    tool_schema_hash = models.CharField(max_length=64)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    message = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-number"]
        constraints = [models.UniqueConstraint(fields=["rule_set", "number"], name="version_number_unique")]

    def __str__(self) -> str:
        return f"{self.rule_set.name} v{self.number}"

    def save(self, *args, **kwargs) -> None:
        if self.pk is not None:
            raise ValueError("a published version is immutable")
        super().save(*args, **kwargs)


class TestCase(models.Model):
    """A regression case: an input and what the pre-step must (not) do with it."""

    __test__ = False  # not a pytest class

    rule_set = models.ForeignKey(RuleSet, on_delete=models.CASCADE, related_name="cases")
    name = models.CharField(max_length=200)
    input = OrderedJSONField(help_text="{query, context, a2a_data, a2a_files}")
    expected = OrderedJSONField(help_text="{must_fire: [...], must_not_fire: [...], error: str | null}")
    # Whether calls the case does not list may fire ("allow", a looser mode chosen on purpose) or not
    # ("forbid": the case asserts the whole outcome). A column of its own rather than a key of
    # ``expected``: the release before it refuses unknown keys there, and reads this table during
    # an upgrade. The database's default keeps that release's inserts working.
    other_calls = models.CharField(max_length=10, default="forbid", db_default="forbid")
    # Why the case changed without its owner editing it (a data migration), shown on the cases page
    # until the case is edited: {"code": ..., "calls": [...]} (rules.cases.case_notice_text).
    notice = OrderedJSONField(null=True, blank=True, default=None)
    # Recorded tool outputs the tester's Execute reuses when the case is opened (rules.pins); a
    # suite run is a dry run and never uses them.
    pinned = OrderedJSONField(default=list, blank=True, help_text="[{mcp_id, tool_name, params?, output}]")
    last_outcome = OrderedJSONField(null=True, blank=True)
    last_passed = models.BooleanField(null=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [models.UniqueConstraint(fields=["rule_set", "name"], name="case_name_unique_in_set")]

    def __str__(self) -> str:
        return self.name

    @property
    def expectation(self) -> dict:
        """The whole expected outcome, as the API, the exports and the comparison take it."""
        if not isinstance(self.expected, dict):
            return self.expected  # stored before validation existed: the runner reports it as invalid
        return {**self.expected, "other_calls": self.other_calls}


class TesterInput(models.Model):
    """One of a user's recent inputs to a rule set's live tester, offered back in the tester's picker.

    Private to the user (never listed to anyone else), at most ``rules.tester.RECENT_KEPT`` per user
    and rule set (the oldest dropped), each one a valid tester input within the tester's own caps.
    A table rather than the session: recent inputs survive a logout and a second browser.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    rule_set = models.ForeignKey(RuleSet, on_delete=models.CASCADE, related_name="+")
    # The tester's fields as typed: query, context, data, files, pinned (texts, as the form takes them).
    values = OrderedJSONField(default=dict)
    digest = models.CharField(max_length=64)  # of ``values``: one row per distinct input
    # Written by the live run as the user types: the next keystrokes within a short while replace it.
    typing = models.BooleanField(default=True)
    used_at = models.DateTimeField()

    class Meta:
        ordering = ["-used_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["user", "rule_set", "digest"], name="tester_input_unique")
        ]
        indexes = [models.Index(fields=["user", "rule_set", "-used_at"], name="tester_input_recent")]

    def __str__(self) -> str:
        return f"{self.rule_set_id}/{self.user_id}: {self.digest[:12]}"

    @property
    def label(self) -> str:
        """What the picker shows: the query, or else the first JSON box that holds something."""
        for name in ("query", "context", "data", "files"):
            text = " ".join(str(self.values.get(name) or "").split())
            if text and text != "{}":
                return text
        return ""


class RuleSetContent(models.Model):
    """A content of a rule set (draft rules, cases, description) by its SHA-256, as ``llamon rules
    pull`` or ``push`` saw it: the base a push from git is checked against (rules.content).

    Recorded once per distinct content of a set; the newest ``rules.content.CONTENTS_KEPT`` are kept.
    """

    rule_set = models.ForeignKey(RuleSet, on_delete=models.CASCADE, related_name="+")
    content_hash = models.CharField(max_length=64)
    document = OrderedJSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["rule_set", "content_hash"], name="rule_set_content_unique")
        ]

    def __str__(self) -> str:
        return f"{self.rule_set_id}:{self.content_hash[:12]}"
