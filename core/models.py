"""The audit log's rows (written only by core.audit.audit_record)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from core.fields import OrderedJSONField


class AuditEvent(models.Model):
    """Who changed what, when, with the state before and after. Written only by audit_record()."""

    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    actor_name = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=64)
    object_type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=64, blank=True)
    object_repr = models.CharField(max_length=200, blank=True)
    before = OrderedJSONField(null=True, blank=True)
    after = OrderedJSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        db_table = "rules_auditevent"  # created by the rules app before the audit log moved here
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["object_type", "object_id"])]

    def __str__(self) -> str:
        return f"{self.actor_name or 'system'} {self.action} {self.object_type} {self.object_repr}"


class ChainRecord(models.Model):
    """One link of the evidence chain: a record's content hash, chained to the link before it.

    ``record_hash`` is the SHA-256 of ``seq|kind|ref|content_hash|prev_hash``, and ``prev_hash`` is
    the previous link's ``record_hash``: changing, removing or reordering any link, or the row a
    link names, breaks the chain from there on (``manage.py verify_records`` names where).
    Written only by :func:`core.chain.chain_append`.
    """

    seq = models.PositiveBigIntegerField(unique=True)
    kind = models.CharField(max_length=16)
    ref = models.CharField(max_length=64, blank=True)
    content_hash = models.CharField(max_length=64)
    prev_hash = models.CharField(max_length=64)
    record_hash = models.CharField(max_length=64)
    # The content itself, for links that stand alone (a retention batch: which runs it deleted).
    payload = OrderedJSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["seq"]
        indexes = [models.Index(fields=["kind", "ref"], name="chain_kind_ref")]

    def __str__(self) -> str:
        return f"#{self.seq} {self.kind} {self.ref}"


class ChainHead(models.Model):
    """The chain's last link (one row): appends lock it, so links are written one at a time."""

    seq = models.PositiveBigIntegerField(default=0)
    record_hash = models.CharField(max_length=64, default="0" * 64)

    def __str__(self) -> str:
        return f"head #{self.seq}"


class ChainCheck(models.Model):
    """One verification of the chain (``manage.py verify_records``): when, and what it found."""

    checked_at = models.DateTimeField(auto_now_add=True)
    ok = models.BooleanField()
    links = models.PositiveBigIntegerField(default=0)
    head_seq = models.PositiveBigIntegerField(default=0)
    head_hash = models.CharField(max_length=64, blank=True)
    broken_seq = models.PositiveBigIntegerField(null=True, blank=True)
    detail = models.TextField(blank=True)

    class Meta:
        ordering = ["-checked_at", "-id"]

    def __str__(self) -> str:
        return f"check {self.checked_at:%Y-%m-%d %H:%M}: {'ok' if self.ok else 'broken'}"
