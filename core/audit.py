"""The audit log: one function appends to it; every app's services call it after a change.

Each event is also a link of the evidence chain (core.chain), in the same transaction.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Model

from core.chain import audit_content, chain_append
from core.models import AuditEvent
from llamon_agent.guardrails import CREDENTIAL, Redactor

# Passwords, tokens and keys in what an event records (a stdio server's arguments ...) never enter
# the log: it is kept for good and read by auditors (docs/security.md, "Secrets").
_out_of_sight = Redactor([CREDENTIAL])


def snapshot(instance: Model, fields: tuple[str, ...]) -> dict[str, Any]:
    """The audit view of a model: the named fields as JSON-ready values."""
    return {name: getattr(instance, name) for name in fields}


@transaction.atomic
def audit_record(
    *,
    actor: Any,
    action: str,
    obj: Model | None = None,
    object_type: str = "",
    object_id: str = "",
    object_repr: str = "",
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> AuditEvent:
    """Append one audit event (actor may be None for the system, e.g. load_demo)."""
    if obj is not None:
        object_type = object_type or obj._meta.label_lower
        object_id = object_id or str(obj.pk)
        object_repr = object_repr or str(obj)[:200]
    user = actor if getattr(actor, "is_authenticated", False) else None
    event = AuditEvent.objects.create(
        actor=user,
        actor_name=user.get_username() if user else "system",
        action=action,
        object_type=object_type,
        object_id=object_id,
        object_repr=object_repr,
        before=None if before is None else _out_of_sight(before),
        after=None if after is None else _out_of_sight(after),
    )
    # The link is made from the row as stored (JSON read back as the verifier will read it).
    stored = AuditEvent.objects.get(pk=event.pk)
    chain_append(kind="audit", ref=str(event.pk), content=audit_content(stored))
    return event
