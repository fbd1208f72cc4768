"""Writes for MCP servers and the audit log. Every write here records an AuditEvent."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Model

from rules.models import AuditEvent, McpServer

MCP_SERVER_FIELDS = (
    "mcp_id",
    "description",
    "transport",
    "command",
    "args",
    "env_names",
    "url",
    "header_names",
    "timeout_s",
    "enabled",
)


def snapshot(instance: Model, fields: tuple[str, ...]) -> dict[str, Any]:
    """The audit view of a model: the named fields as JSON-ready values."""
    return {name: getattr(instance, name) for name in fields}


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
    return AuditEvent.objects.create(
        actor=user,
        actor_name=user.get_username() if user else "system",
        action=action,
        object_type=object_type,
        object_id=object_id,
        object_repr=object_repr,
        before=before,
        after=after,
    )


@transaction.atomic
def mcp_server_upsert(*, actor: Any, mcp_id: str, **fields: Any) -> tuple[McpServer, bool]:
    """Create the server or update it to the given fields; audited only when something changed."""
    server = McpServer.objects.filter(mcp_id=mcp_id).first()
    if server is None:
        server = McpServer(mcp_id=mcp_id, **fields)
        server.full_clean()
        server.save()
        audit_record(actor=actor, action="mcp_server.create", obj=server, after=snapshot(server, MCP_SERVER_FIELDS))
        return server, True
    before = snapshot(server, MCP_SERVER_FIELDS)
    for name, value in fields.items():
        setattr(server, name, value)
    after = snapshot(server, MCP_SERVER_FIELDS)
    if after != before:
        server.full_clean()
        server.save()
        audit_record(actor=actor, action="mcp_server.update", obj=server, before=before, after=after)
    return server, False
