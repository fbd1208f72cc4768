"""Staged rollout and shadow mode: start, change, promote, roll back, shadow (agents.rollout
decides per run; docs/agents.md)."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from agents.errors import (
    AgentConflictError,
    AgentError,
)
from agents.models import Agent
from core.audit import audit_record

logger = logging.getLogger(__name__)


MAX_ROLLOUT_CHATBOTS = 200  # chatbotIds on one rollout's list
MAX_CHATBOT_ID_CHARS = 200  # as long as a run's chatbot_id column


def _rollout_state(agent: Agent) -> dict[str, Any]:
    return {
        "rule_set_mode": agent.rule_set_mode,
        "pinned_version": agent.pinned_version.number if agent.pinned_version else None,
        "rollout_version": agent.rollout_version.number if agent.rollout_version else None,
        "rollout_percent": agent.rollout_percent,
        "rollout_chatbot_ids": list(agent.rollout_chatbot_ids or []),
        "shadow_version": agent.shadow_version.number if agent.shadow_version else None,
    }


def _version_of_agent(agent: Agent, version: Any, *, field: str) -> Any:
    """Refuse a version that is not a published version of the agent's own rule set."""
    if agent.rule_set is None:
        raise AgentError(
            _("Agent %(name)r has no rule set, so it has no versions to roll out.") % {"name": agent.name},
            field=field,
        )
    if version is None or version.rule_set_id != agent.rule_set_id:
        raise AgentError(
            _("Choose a published version of the agent's rule set %(name)r.") % {"name": agent.rule_set.name},
            field=field,
        )
    return version


def _chatbot_ids_clean(chatbot_ids: list[Any]) -> list[str]:
    if not isinstance(chatbot_ids, list):
        raise AgentError(_("The chatbotIds are a list of strings."), field="chatbot_ids")
    if len(chatbot_ids) > MAX_ROLLOUT_CHATBOTS:
        raise AgentError(
            _("A rollout names at most %(most)s chatbotIds; this list has %(count)s.")
            % {"most": MAX_ROLLOUT_CHATBOTS, "count": f"{len(chatbot_ids):,}"},
            field="chatbot_ids",
        )
    cleaned: list[str] = []
    for value in chatbot_ids:
        if not isinstance(value, str) or not value.strip():
            raise AgentError(_("Each chatbotId is a non-empty string."), field="chatbot_ids")
        value = value.strip()
        if len(value) > MAX_CHATBOT_ID_CHARS:
            raise AgentError(
                _("A chatbotId is at most %(most)s characters (%(start)r... has %(count)s).")
                % {"most": MAX_CHATBOT_ID_CHARS, "start": value[:20], "count": f"{len(value):,}"},
                field="chatbot_ids",
            )
        if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
            raise AgentError(
                _("The chatbotId %(value)r holds a control character (NUL, a line break ...).")
                % {"value": value[:40]},
                field="chatbot_ids",
            )
        if value not in cleaned:
            cleaned.append(value)
    return cleaned


ROLLOUT_FIELDS = (
    "rollout_version_id",
    "rollout_percent",
    "rollout_chatbot_ids",
    "rollout_started_at",
    "shadow_version_id",
)


def rollout_keep(agent: Agent, current: Agent) -> None:
    """The agent form never changes the rollout or the shadow (their own services do): keep them."""
    for name in ROLLOUT_FIELDS:
        setattr(agent, name, getattr(current, name))
    if agent.rule_set_id != current.rule_set_id and (current.rollout_version_id or current.shadow_version_id):
        raise AgentError(
            _("Roll back the staged rollout and stop shadow mode before changing the agent's rule set."),
            field="rule_set",
        )


def _locked_agent(agent: Agent) -> Agent:
    return (
        Agent.objects.select_for_update(of=("self",))
        .select_related("rule_set", "pinned_version", "rollout_version", "shadow_version")
        .get(pk=agent.pk)
    )


def _agent_bump(agent: Agent, fields: list[str]) -> None:
    # A rollout change is a change of the agent: an editor's open form (an older revision) is refused.
    agent.revision += 1
    agent.save(update_fields=[*fields, "revision", "updated_at"])


@transaction.atomic
def rollout_set(*, actor: Any, agent: Agent, version: Any, percent: int, chatbot_ids: list[Any]) -> Agent:
    """Start a staged rollout of ``version`` (or change the running one): a share of sessions and/or chatbots."""
    agent = _locked_agent(agent)
    version = _version_of_agent(agent, version, field="version")
    if isinstance(percent, bool) or not isinstance(percent, int) or not 0 <= percent <= 100:
        raise AgentError(
            _("The share of traffic is a whole percentage from 0 to 100, not %(value)r.")
            % {"value": percent},
            field="percent",
        )
    chatbots = _chatbot_ids_clean(chatbot_ids)
    before = _rollout_state(agent)
    starting = agent.rollout_version_id is None or agent.rollout_version_id != version.pk
    agent.rollout_version, agent.rollout_percent, agent.rollout_chatbot_ids = version, percent, chatbots
    if starting:
        agent.rollout_started_at = timezone.now()
    _agent_bump(agent, ["rollout_version", "rollout_percent", "rollout_chatbot_ids", "rollout_started_at"])
    audit_record(
        actor=actor,
        action="agent.rollout.start" if starting else "agent.rollout.change",
        obj=agent,
        before=before,
        after=_rollout_state(agent),
    )
    return agent


def _rollout_clear(agent: Agent) -> None:
    agent.rollout_version, agent.rollout_percent, agent.rollout_chatbot_ids = None, 0, []
    agent.rollout_started_at = None


@transaction.atomic
def rollout_promote(*, actor: Any, agent: Agent) -> Agent:
    """The candidate becomes the agent's stable (pinned) version; the rollout ends."""
    agent = _locked_agent(agent)
    candidate = agent.rollout_version
    if candidate is None:
        raise AgentConflictError(_("Agent %(name)r has no rollout to promote.") % {"name": agent.name})
    before = _rollout_state(agent)
    agent.rule_set_mode, agent.pinned_version = Agent.RuleSetMode.PINNED, candidate
    _rollout_clear(agent)
    _agent_bump(
        agent,
        [
            "rule_set_mode",
            "pinned_version",
            "rollout_version",
            "rollout_percent",
            "rollout_chatbot_ids",
            "rollout_started_at",
        ],
    )
    audit_record(
        actor=actor, action="agent.rollout.promote", obj=agent, before=before, after=_rollout_state(agent)
    )
    return agent


@transaction.atomic
def rollout_rollback(*, actor: Any, agent: Agent) -> Agent:
    """End the rollout: every run gets the stable version again."""
    agent = _locked_agent(agent)
    if agent.rollout_version_id is None:
        raise AgentConflictError(_("Agent %(name)r has no rollout to roll back.") % {"name": agent.name})
    before = _rollout_state(agent)
    _rollout_clear(agent)
    _agent_bump(agent, ["rollout_version", "rollout_percent", "rollout_chatbot_ids", "rollout_started_at"])
    audit_record(
        actor=actor, action="agent.rollout.rollback", obj=agent, before=before, after=_rollout_state(agent)
    )
    return agent


@transaction.atomic
def shadow_set(*, actor: Any, agent: Agent, version: Any) -> Agent:
    """Name the version evaluated in shadow beside every run (None: shadow mode off)."""
    agent = _locked_agent(agent)
    if version is not None:
        version = _version_of_agent(agent, version, field="version")
    before = _rollout_state(agent)
    if (version.pk if version else None) == agent.shadow_version_id:
        return agent
    agent.shadow_version = version
    _agent_bump(agent, ["shadow_version"])
    audit_record(
        actor=actor,
        action="agent.shadow.start" if version else "agent.shadow.stop",
        obj=agent,
        before=before,
        after=_rollout_state(agent),
    )
    return agent
