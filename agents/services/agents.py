"""Agents: save (create or edit, validated and audited) and delete."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from agents.errors import (
    AgentConflictError,
    AgentError,
    ChangeRequested,
)
from agents.models import Agent, ChangeRequest, ModelConnection
from agents.services.editing import locked_for_edit
from agents.services.gate import change_gate, field_diff, gated_atomic
from agents.services.rollout import rollout_keep
from core.audit import audit_record
from core.library_messages import regex_error_text
from llamon_agent.prestep import DEFAULT_PRESTEP_INSTRUCTION
from rules.models import RuleSet, RuleSetVersion
from servers.models import McpServer

logger = logging.getLogger(__name__)


AGENT_FIELDS = (
    "name",
    "description",
    "system_prompt",
    "rule_set_id",
    "rule_set_mode",
    "pinned_version_id",
    "model_provider",
    "model_name",
    "model_connection_id",
    "model_script",
    "temperature",
    "input_max_chars",
    "input_blocked_patterns",
    "output_blocked_patterns",
    "output_masks",
    "max_iterations",
    "answer_from_prestep",
)


def _agent_snapshot(agent: Agent) -> dict[str, Any]:
    data = {f: getattr(agent, f) for f in AGENT_FIELDS}
    data["react_servers"] = sorted(agent.react_servers.values_list("mcp_id", flat=True)) if agent.pk else []
    return data


DEFAULT_SYSTEM_PROMPT = f"You are a helpful support agent.\n{DEFAULT_PRESTEP_INSTRUCTION}"
# What the API and the MCP endpoint may set, as they name it: the rule set by id, the pinned
# version by its number in that set, the ReAct servers by mcp_id, patterns as lists.
VALUE_FIELDS = (
    "name",
    "description",
    "system_prompt",
    "rule_set",
    "rule_set_mode",
    "pinned_version",
    "model_provider",
    "model_connection",
    "model_name",
    "model_script",
    "temperature",
    "react_servers",
    "input_max_chars",
    "input_blocked_patterns",
    "output_blocked_patterns",
    "output_masks",
    "max_iterations",
    "answer_from_prestep",
)


def agent_values(agent: Agent) -> dict[str, Any]:
    """An agent as the values :func:`agent_save_values` takes (the base a partial change applies to)."""
    values = {
        f: getattr(agent, f)
        for f in VALUE_FIELDS
        if f not in {"rule_set", "pinned_version", "react_servers", "model_connection"}
    }
    values["rule_set"] = agent.rule_set_id
    values["model_connection"] = agent.model_connection_id
    values["pinned_version"] = agent.pinned_version.number if agent.pinned_version is not None else None
    values["react_servers"] = list(agent.react_servers.values_list("mcp_id", flat=True)) if agent.pk else []
    return values


def _agent_apply(agent: Agent, values: Mapping[str, Any]) -> list[McpServer]:
    """Set the agent's fields from ``values`` (references resolved, each refusal naming its field)."""
    rule_set = None
    if values.get("rule_set") is not None:
        rule_set = RuleSet.objects.filter(pk=values["rule_set"]).first()
        if rule_set is None:
            raise AgentError(
                _("There is no rule set with id %(id)s.") % {"id": values["rule_set"]}, field="rule_set"
            )
    pinned = None
    if values.get("pinned_version") is not None:
        pinned = RuleSetVersion.objects.filter(rule_set=rule_set, number=values["pinned_version"]).first()
        if pinned is None:
            raise AgentError(
                _("The agent's rule set has no published version %(pinned)s.")
                % {"pinned": values["pinned_version"]},
                field="pinned_version",
            )
    connection = None
    if values.get("model_connection") is not None:
        connection = ModelConnection.objects.filter(pk=values["model_connection"]).first()
        if connection is None:
            raise AgentError(
                _("There is no model connection with id %(id)s.") % {"id": values["model_connection"]},
                field="model_connection",
            )
    wanted = list(dict.fromkeys(values.get("react_servers") or []))
    servers = {s.mcp_id: s for s in McpServer.objects.filter(enabled=True, mcp_id__in=wanted)}
    if missing := [m for m in wanted if m not in servers]:
        raise AgentError(
            _("No enabled MCP server with the id(s) %(join)s.") % {"join": ", ".join(map(repr, missing))},
            field="react_servers",
        )
    for field in ("input_blocked_patterns", "output_blocked_patterns"):
        if any("\n" in p or "\r" in p or not p.strip() for p in values.get(field) or []):
            raise AgentError(_("Each pattern is one non-empty line."), field=field)
    agent.name = (values.get("name") or "").strip()
    agent.description = values.get("description") or ""
    agent.system_prompt = values.get("system_prompt") or DEFAULT_SYSTEM_PROMPT
    agent.rule_set = rule_set
    agent.rule_set_mode = values.get("rule_set_mode") or Agent.RuleSetMode.LATEST
    agent.pinned_version = pinned
    agent.model_provider = values.get("model_provider") or Agent.Provider.OFFLINE
    agent.model_name = values.get("model_name") or ""
    agent.model_connection = connection
    agent.model_script = list(values.get("model_script") or [])
    agent.temperature = values.get("temperature", 0.0)
    agent.input_max_chars = values.get("input_max_chars", 4000)
    agent.input_blocked_patterns = [p.strip() for p in values.get("input_blocked_patterns") or []]
    agent.output_blocked_patterns = [p.strip() for p in values.get("output_blocked_patterns") or []]
    agent.output_masks = list(values.get("output_masks") or [])
    agent.max_iterations = values.get("max_iterations", 6)
    agent.answer_from_prestep = bool(values.get("answer_from_prestep"))
    return [servers[m] for m in wanted]


def agent_save_values(
    *,
    actor: Any,
    agent: Agent,
    values: Mapping[str, Any],
    revision: int | None = None,
    change_reason: str = "",
) -> Agent:
    """Create or update an agent from named values (the API's and the MCP endpoint's way in)."""
    react_servers = _agent_apply(agent, values)
    return agent_save(
        actor=actor, agent=agent, react_servers=react_servers, revision=revision, change_reason=change_reason
    )


# Change control gates by default: on a protected agent every change of a stored field (and of its
# ReAct servers) is a change request, except these, which change neither what it does nor shows.
UNGATED_FIELDS = frozenset({"description"})
# Bookkeeping the save itself writes (or keeps): never a change someone asks for.
_BOOKKEEPING = frozenset({"id", "revision", "created_at", "updated_at"})


def agent_gated_state(agent: Agent, react_servers: list[Any] | None = None) -> dict[str, Any]:
    """Every gated value of ``agent`` as stored (each concrete field, the ReAct servers): a protected
    agent changes without a request only when this stays the same."""
    state = {
        f.attname: f.value_from_object(agent)
        for f in Agent._meta.concrete_fields
        if f.name not in UNGATED_FIELDS | _BOOKKEEPING
    }
    if react_servers is not None:
        state["react_servers"] = sorted(s.pk for s in react_servers)
    elif agent.pk:
        state["react_servers"] = sorted(agent.react_servers.values_list("pk", flat=True))
    return state


def _agent_validate(agent: Agent) -> None:
    import re2

    try:  # the model's own field rules (blank, length, choices), whichever route filled it
        agent.clean_fields()
    except ValidationError as exc:
        field, messages = next(iter(exc.message_dict.items()))
        raise AgentError(messages[0], field=field) from None
    for field in ("input_blocked_patterns", "output_blocked_patterns"):
        for pattern in getattr(agent, field):
            try:
                re2.compile(pattern)
            except re2.error as exc:
                raise AgentError(
                    _("The pattern %(pattern)r is not a valid regular expression: %(exc)s")
                    % {"pattern": pattern, "exc": regex_error_text(exc)},
                    field=field,
                ) from None
    pinned = agent.pinned_version
    if agent.rule_set_mode == Agent.RuleSetMode.PINNED and (
        pinned is None or pinned.rule_set_id != agent.rule_set_id
    ):
        raise AgentError(
            _("Choose a published version of the agent's rule set to pin."), field="pinned_version"
        )
    if agent.model_provider == Agent.Provider.OPENAI:
        connection = agent.model_connection
        if connection is None:
            raise AgentError(
                _("An OpenAI-compatible model runs through a model connection: choose one an admin defined."),
                field="model_connection",
            )
        if agent.model_name not in connection.model_names:
            raise AgentError(
                _("Choose one of the models of connection %(name)r: %(models)s.")
                % {"name": connection.name, "models": ", ".join(connection.model_names) or "-"},
                field="model_name",
            )
    if agent.model_connection is not None:
        # The connection is the endpoint now: what the agent held before connections is history.
        agent.legacy_base_url = agent.legacy_api_key_env = ""
    if agent.model_provider == Agent.Provider.SCRIPTED and not agent.model_script:
        raise AgentError(_("A scripted model needs at least one reply."), field="model_script")
    if not 1 <= agent.max_iterations <= 50:
        raise AgentError(_("Maximum iterations must be between 1 and 50."), field="max_iterations")


@gated_atomic
def agent_save(
    *,
    actor: Any,
    agent: Agent,
    react_servers: list[Any] | None = None,
    revision: int | None = None,
    change_reason: str = "",
) -> Agent | ChangeRequested:
    """Create or update an agent (validated, audited); a stale revision is refused.

    On a protected agent, a change of any field but :data:`UNGATED_FIELDS` is a change request of the
    whole edit (``change_reason``: why, for the approvers), applied once approved.
    """
    creating = agent.pk is None
    before = None
    if not creating:
        current = locked_for_edit(
            agent,
            revision,
            _(
                "Agent %(name)r was changed while you were editing (revision %(revision)s, yours was %(revision2)s). Nothing was overwritten: reload and apply your change again."
            ),
        )
        before = _agent_snapshot(current)
        agent.revision = current.revision + 1
        rollout_keep(agent, current)
        # Protection is the admin's (agents.services.changes.agent_protect), never an edit's.
        agent.protected, agent.approvals_required = current.protected, current.approvals_required
        if current.protected and agent.rule_set_mode == Agent.RuleSetMode.DRAFT:
            raise AgentError(
                _("A protected agent serves published versions only: its draft is edited without approval."),
                field="rule_set_mode",
            )
    if Agent.objects.filter(name=agent.name).exclude(pk=agent.pk).exists():
        raise AgentError(_("An agent named %(name)r already exists.") % {"name": agent.name}, field="name")
    _agent_validate(agent)
    if not creating and current.protected:
        old_values, new_values = agent_values(current), agent_values(agent)
        if react_servers is not None:
            new_values["react_servers"] = [s.mcp_id for s in react_servers]
        if agent_gated_state(current) != agent_gated_state(agent, react_servers) and (
            pending := change_gate(
                actor=actor,
                agent=current,
                action="agent.update",
                payload=new_values,
                diff={"fields": field_diff(old_values, new_values)},
                reason=change_reason,
            )
        ):
            return pending
    agent.save()
    if react_servers is not None:
        agent.react_servers.set(react_servers)
    after = _agent_snapshot(agent)
    if creating or after != before:
        audit_record(
            actor=actor,
            action="agent.create" if creating else "agent.update",
            obj=agent,
            before=before,
            after=after,
        )
    return agent


@gated_atomic
def agent_delete(*, actor: Any, agent: Agent, change_reason: str = "") -> None | ChangeRequested:
    """Delete an agent (its runs stay, with the agent's name); audited.

    A protected agent's deletion is a change request; an agent with a pending change request is
    refused (the requests are decided or withdrawn first: a deletion never drops one unseen).
    """
    current = Agent.objects.select_for_update(of=("self",)).get(pk=agent.pk)
    if asked := change_gate(
        actor=actor,
        agent=current,
        action="agent.delete",
        payload={},
        diff={"fields": [{"field": "deleted", "before": current.name, "after": None}]},
        reason=change_reason,
    ):
        return asked
    if current.change_requests.filter(state=ChangeRequest.State.PENDING).exists():
        raise AgentConflictError(
            _("Agent %(name)r has pending change requests: decide or withdraw them before deleting it.")
            % {"name": current.name}
        )
    audit_record(actor=actor, action="agent.delete", obj=current, before=_agent_snapshot(current))
    current.delete()
    return None
