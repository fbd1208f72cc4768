"""Model connections: the LLM endpoints an admin defines (create, edit, delete; validated, audited).

A connection pairs a base URL with the one key variable sent to it. Saving one also gives it to
every agent that waits for a connection with the same URL and key variable (saved before
connections existed) and uses one of its models: the admin's pairing is what lets them run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext as _

from agents.checks import connection_check
from agents.errors import AgentConflictError, AgentError, ChangeRequested
from agents.models import CONNECTION_FIELDS, Agent, ModelConnection
from agents.services.editing import locked_for_edit
from agents.services.gate import change_gate, field_diff, gated_atomic
from core.audit import audit_record
from core.userinput import plain_text_refusal

MAX_CONNECTION_MODELS = 100
MAX_TOKENS_LIMIT = 1_000_000


def _snapshot(connection: ModelConnection) -> dict[str, Any]:
    return {f: getattr(connection, f) for f in CONNECTION_FIELDS}


def connection_values(connection: ModelConnection) -> dict[str, Any]:
    """A connection as the values :func:`connection_save` takes (the base a partial change applies to)."""
    return _snapshot(connection)


def _validate(connection: ModelConnection) -> None:
    try:  # the model's own field rules (blank, length, choices), whichever route filled it
        connection.clean_fields()
    except ValidationError as exc:
        field, messages = next(iter(exc.message_dict.items()))
        raise AgentError(messages[0], field=field) from None
    refusal = plain_text_refusal(connection.name)
    if refusal is not None:
        raise AgentError(refusal, field="name")
    models = connection.model_names
    if not isinstance(models, list) or not models:
        raise AgentError(_("Name at least one model agents may use on this connection."), field="model_names")
    if len(models) > MAX_CONNECTION_MODELS:
        raise AgentError(
            _("A connection names at most %(n)s models.") % {"n": MAX_CONNECTION_MODELS}, field="model_names"
        )
    for model in models:
        if (
            not isinstance(model, str)
            or not model.strip()
            or model != model.strip()
            or len(model) > 200
            or any(ord(c) < 32 for c in model)
        ):
            raise AgentError(
                _("Each model name is one line of at most 200 characters: %(model)r is not.")
                % {"model": model},
                field="model_names",
            )
    if connection.max_tokens is not None and not 1 <= connection.max_tokens <= MAX_TOKENS_LIMIT:
        raise AgentError(
            _("Max tokens is between 1 and %(n)s.") % {"n": MAX_TOKENS_LIMIT}, field="max_tokens"
        )
    connection_check(connection)  # the URL guard and the operator's allow-list of key variables


@gated_atomic
def connection_save(
    *, actor: Any, connection: ModelConnection, values: Mapping[str, Any], revision: int | None = None
) -> ModelConnection | ChangeRequested:
    """Create or update a connection (admin; validated, audited); agents waiting for it get it.

    Changing a connection a protected agent uses (its URL, key variable, models, max tokens, name)
    changes what that agent does: a change request on the agent (the one needing most approvals),
    raised once committed."""
    creating = connection.pk is None
    before = None
    if not creating:
        current = locked_for_edit(
            connection,
            revision,
            _(
                "Connection %(name)r was changed while you were editing (revision %(revision)s, yours was %(revision2)s). Nothing was overwritten: reload and apply your change again."
            ),
        )
        before = _snapshot(current)
        connection.revision = current.revision + 1
    connection.name = (values.get("name") or "").strip()
    connection.provider = values.get("provider") or ModelConnection.Provider.OPENAI
    connection.base_url = (values.get("base_url") or "").strip()
    connection.api_key_env = (values.get("api_key_env") or "").strip()
    connection.model_names = list(dict.fromkeys(values.get("model_names") or []))
    connection.max_tokens = values.get("max_tokens")
    if ModelConnection.objects.filter(name=connection.name).exclude(pk=connection.pk).exists():
        raise AgentError(
            _("A model connection named %(name)r already exists.") % {"name": connection.name}, field="name"
        )
    _validate(connection)
    after = _snapshot(connection)
    if before is not None and after != before:
        users = Agent.objects.filter(model_connection=connection, protected=True)
        agent = users.select_for_update().order_by("-approvals_required", "name").first()
        if agent is not None and (
            pending := change_gate(
                actor=actor,
                agent=agent,
                action="connection.update",
                payload={
                    "connection": connection.pk,
                    "name": before["name"],
                    "before": before,
                    "values": after,
                },
                diff={"fields": field_diff(before, after)},
            )
        ):
            return pending
    connection.save()
    if creating or after != before:
        audit_record(
            actor=actor,
            action="connection.create" if creating else "connection.update",
            obj=connection,
            before=before,
            after=after,
        )
    _adopt_waiting_agents(actor=actor, connection=connection)
    return connection


def _adopt_waiting_agents(*, actor: Any, connection: ModelConnection) -> None:
    """Give the connection to agents saved before connections with exactly its URL and key variable."""
    # A protected agent changes only by a change request: it keeps waiting (its editor asks for it).
    waiting = Agent.objects.select_for_update().filter(
        protected=False,
        model_connection=None,
        model_provider=Agent.Provider.OPENAI,
        legacy_base_url=connection.base_url,
        legacy_api_key_env=connection.api_key_env,
        model_name__in=connection.model_names,
    )
    for agent in waiting:
        before = {"model_connection": None, "legacy_base_url": agent.legacy_base_url}
        Agent.objects.filter(pk=agent.pk).update(
            model_connection=connection,
            legacy_base_url="",
            legacy_api_key_env="",
            revision=agent.revision + 1,
        )
        audit_record(
            actor=actor,
            action="agent.connection_assign",
            obj=agent,
            before=before,
            after={"model_connection": connection.name},
        )


@transaction.atomic
def connection_delete(*, actor: Any, connection: ModelConnection) -> None:
    """Delete a connection no agent uses (audited); one in use is refused, naming the agents."""
    users = list(connection.agents.order_by("name").values_list("name", flat=True)[:10])
    if users:
        raise AgentConflictError(
            _("Connection %(name)r is used by %(agents)s: give them another connection first.")
            % {"name": connection.name, "agents": ", ".join(users)}
        )
    audit_record(actor=actor, action="connection.delete", obj=connection, before=_snapshot(connection))
    connection.delete()
