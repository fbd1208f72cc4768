"""The audit log: one function appends to it; every app's services call it after a change.

Each event is also a link of the evidence chain (core.chain), in the same transaction.
"""

from __future__ import annotations

from typing import Any, cast

from django.db import connection, transaction
from django.db.models import Field, Max, Model
from django.utils import timezone

from core.chain import audit_content, chain_append_many, chain_lock
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
    (event,) = audit_write(
        actor=actor,
        events=[
            {
                "action": action,
                "object_type": object_type,
                "object_id": object_id,
                "object_repr": object_repr,
                "before": before,
                "after": after,
            }
        ],
    )
    return event


@transaction.atomic
def audit_write(*, actor: Any, events: list[dict[str, Any]]) -> list[AuditEvent]:
    """THE writer of audit rows: insert ``events`` (action, object_type, object_id, object_repr,
    before, after) and append each one's link to the evidence chain, in one transaction.

    The chain's head is locked first, so audit rows are written one writer at a time: the rows
    after the highest id before the insert are this call's (thousands at once are one
    executemany, as an import of 2,000 rules needs). Nothing else writes audit rows (a test
    scans the code for any other write).
    """
    if not events:
        return []
    user = actor if getattr(actor, "is_authenticated", False) else None
    now = timezone.now()
    chain_lock()
    last = AuditEvent.objects.aggregate(last=Max("pk"))["last"] or 0
    insert_many(
        AuditEvent,
        [
            {
                "actor": user.pk if user else None,
                "actor_name": user.get_username() if user else "system",
                "object_type": "",
                "object_id": "",
                "object_repr": "",
                "before": None,
                "after": None,
                **event,
                **_in_sight(event),
                "created_at": now,
            }
            for event in events
        ],
    )
    # The links are made from the rows as stored (JSON read back as the verifier will read it).
    stored = list(AuditEvent.objects.filter(pk__gt=last).order_by("pk"))
    if len(stored) != len(events):  # another writer slipped past the lock: refuse rather than mislink
        raise RuntimeError(f"audit rows written outside the audit writer ({len(stored)} for {len(events)})")
    chain_append_many(kind="audit", items=[(str(e.pk), audit_content(e)) for e in stored])
    return stored


def _in_sight(event: dict[str, Any]) -> dict[str, Any]:
    """The event's before and after with passwords, tokens and keys out of sight."""
    return {k: _out_of_sight(event[k]) for k in ("before", "after") if event.get(k) is not None}


def insert_many(model: type[Model], rows: list[dict[str, Any]]) -> None:
    """INSERT ``rows`` (field name -> value; a foreign key by its id) with one executemany.

    Rows are prepared by the model fields (the same conversions Django's save makes), not
    bulk_create, whose per-row SQL compilation took seconds of the write lock for 2,000 rules."""
    fields = [cast("Field[Any, Any]", model._meta.get_field(name)) for name in rows[0]]
    quote = connection.ops.quote_name
    sql = "INSERT INTO {} ({}) VALUES ({})".format(
        quote(model._meta.db_table),
        ", ".join(quote(f.column or f.name) for f in fields),
        ", ".join(["%s"] * len(fields)),
    )
    params = [
        [f.get_db_prep_save(row[f.name], connection) if row[f.name] is not None else None for f in fields]
        for row in rows
    ]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)
