"""Agents: save (create or edit, validated and audited) and delete."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.utils.translation import gettext as _

from agents.checks import llm_key_env_check, llm_url_check
from agents.errors import (
    AgentConflictError,
    AgentError,
)
from agents.models import Agent
from agents.services.rollout import rollout_keep
from core.audit import audit_record

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
    "model_base_url",
    "model_api_key_env",
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


def _agent_validate(agent: Agent) -> None:
    import re2

    for field in ("input_blocked_patterns", "output_blocked_patterns"):
        for pattern in getattr(agent, field):
            try:
                re2.compile(pattern)
            except re2.error as exc:
                raise AgentError(
                    _("The pattern %(pattern)r is not a valid regular expression: %(exc)s")
                    % {"pattern": pattern, "exc": exc},
                    field=field,
                ) from None
    pinned = agent.pinned_version
    if agent.rule_set_mode == Agent.RuleSetMode.PINNED and (
        pinned is None or pinned.rule_set_id != agent.rule_set_id
    ):
        raise AgentError(
            _("Choose a published version of the agent's rule set to pin."), field="pinned_version"
        )
    if agent.model_provider == Agent.Provider.OPENAI and not agent.model_base_url:
        raise AgentError(
            _("An OpenAI-compatible model needs its base URL (e.g. http://127.0.0.1:11434/v1)."),
            field="model_base_url",
        )
    if agent.model_provider == Agent.Provider.OPENAI:
        llm_url_check(agent.model_base_url)
    if agent.model_api_key_env:
        llm_key_env_check(agent.model_api_key_env)
    if agent.model_provider == Agent.Provider.SCRIPTED and not agent.model_script:
        raise AgentError(_("A scripted model needs at least one reply."), field="model_script")
    if not 1 <= agent.max_iterations <= 50:
        raise AgentError(_("Maximum iterations must be between 1 and 50."), field="max_iterations")


@transaction.atomic
def agent_save(
    *, actor: Any, agent: Agent, react_servers: list[Any] | None = None, revision: int | None = None
) -> Agent:
    """Create or update an agent (validated, audited); a stale revision is refused."""
    creating = agent.pk is None
    before = None
    if not creating:
        current = Agent.objects.select_for_update().get(pk=agent.pk)
        if revision is not None and revision != current.revision:
            raise AgentConflictError(
                _(
                    "Agent %(name)r was changed while you were editing (revision %(revision)s, yours was %(revision2)s). Nothing was overwritten: reload and apply your change again."
                )
                % {"name": current.name, "revision": current.revision, "revision2": revision}
            )
        before = _agent_snapshot(current)
        agent.revision = current.revision + 1
        rollout_keep(agent, current)
    if Agent.objects.filter(name=agent.name).exclude(pk=agent.pk).exists():
        raise AgentError(_("An agent named %(name)r already exists.") % {"name": agent.name}, field="name")
    _agent_validate(agent)
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


@transaction.atomic
def agent_delete(*, actor: Any, agent: Agent) -> None:
    """Delete an agent (its runs stay, with the agent's name); audited."""
    audit_record(actor=actor, action="agent.delete", obj=agent, before=_agent_snapshot(agent))
    agent.delete()
