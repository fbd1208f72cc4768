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
