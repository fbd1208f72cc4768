"""Staged rollout and shadow mode: start, change, promote, roll back, shadow (agents.rollout_runtime
decides per run; docs/agents.md)."""

from __future__ import annotations

import logging
from typing import Any

from django.utils import timezone
from django.utils.translation import gettext as _

from agents.errors import (
    AgentConflictError,
    AgentError,
    ChangeRequested,
)
from agents.models import Agent
from agents.selectors import guard_judgement
from agents.services.gate import bounded, change_gate, field_diff, gated_atomic, ungated
from core.audit import audit_record

logger = logging.getLogger(__name__)


MAX_ROLLOUT_CHATBOTS = 200  # chatbotIds on one rollout's list
MAX_CHATBOT_ID_CHARS = 200  # as long as a run's chatbot_id column


def _rollout_state(agent: Agent) -> dict[str, Any]:
    return {
        "rollout_guard": [agent.rollout_guard_error_percent, agent.rollout_guard_min_runs],
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
    "rollout_guard_error_percent",
    "rollout_guard_min_runs",
    "shadow_version_id",
)

# The guard's defaults: a rollout whose candidate fails more than 20 % of its runs, once it has
# served 20, is rolled back on its own.
GUARD_ERROR_PERCENT = 20
GUARD_MIN_RUNS = 20


def rollout_stable(agent: Agent, candidate: Any) -> Any:
    """The version a rollout of ``candidate`` keeps as stable (what a roll back returns to).

    Pinned: the pinned version. Latest: the version served before the candidate, that is the latest
    one, or when the candidate is the latest (it was just published) the newest one before it.
    Refusals say what to do instead.
    """
    rule_set = agent.rule_set
    if agent.rule_set_mode == Agent.RuleSetMode.DRAFT:
        raise AgentError(
            _(
                "Agent %(name)r follows the draft, so it has no stable version to return to: pin a published version first."
            )
            % {"name": agent.name},
            field="version",
        )
    if agent.rule_set_mode == Agent.RuleSetMode.PINNED:
        stable = agent.pinned_version
    else:
        assert rule_set is not None  # _version_of_agent refused an agent without one
        versions = rule_set.versions.order_by("-number")
        stable = versions.first()
        if stable is not None and stable.pk == candidate.pk:
            stable = versions.filter(number__lt=candidate.number).first()
        if stable is None:
            raise AgentError(
                _(
                    "v%(number)s is the only version agent %(name)r has served: there is no earlier version to keep as stable. Publish another version, or pin one."
                )
                % {"number": candidate.number, "name": agent.name},
                field="version",
            )
    if stable is not None and stable.pk == candidate.pk:
        raise AgentError(
            _(
                "v%(number)s is already the stable version agent %(name)r serves to every session: a rollout of it would change nothing. Roll out a newer version."
            )
            % {"number": candidate.number, "name": agent.name},
            field="version",
        )
    return stable


def _versions_diff(old: Any, new: Any) -> dict[str, Any]:
    """What the change serves instead: the rule-by-rule diff from ``old`` to ``new`` (versions)."""
    from rules.selectors import version_diff

    return {
        "from": f"v{old.number}" if old else "",
        "to": f"v{new.number}",
        "rows": version_diff(old=old.content if old else [], new=new.content),
    }


def _guard_check(guard_error_percent: Any, guard_min_runs: Any) -> None:
    if guard_error_percent is not None and (
        isinstance(guard_error_percent, bool)
        or not isinstance(guard_error_percent, int)
        or not 0 <= guard_error_percent <= 100
    ):
        raise AgentError(
            _("The guard's error rate is a whole percentage from 0 to 100, not %(value)r.")
            % {"value": guard_error_percent},
            field="guard_error_percent",
        )
    if (
        isinstance(guard_min_runs, bool)
        or not isinstance(guard_min_runs, int)
        or not 1 <= guard_min_runs <= 100_000
    ):
        raise AgentError(
            _("The guard's minimum number of runs is from 1 to 100,000, not %(value)r.")
            % {"value": guard_min_runs},
            field="guard_min_runs",
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
    if current.rollout_version_id and (
        agent.rule_set_mode != current.rule_set_mode or agent.pinned_version_id != current.pinned_version_id
    ):
        # The stable version is what a roll back returns to: it does not move while a rollout runs.
        raise AgentError(
            _(
                "A staged rollout is running with v%(stable)s as the stable version: promote it or roll it back before changing which version the agent serves."
            )
            % {"stable": current.pinned_version.number if current.pinned_version else "?"},
            field="rule_set_mode",
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


@gated_atomic
def rollout_set(
    *,
    actor: Any,
    agent: Agent,
    version: Any,
    percent: int,
    chatbot_ids: list[Any],
    guard_error_percent: int | None = GUARD_ERROR_PERCENT,
    guard_min_runs: int = GUARD_MIN_RUNS,
    change_reason: str = "",
) -> Agent | ChangeRequested:
    """Start a staged rollout of ``version`` (or change the running one): a share of sessions and/or chatbots.

    The stable version is explicit: an agent following "latest" is pinned to the version served
    before the candidate (audited), so publishing never changes what either side serves and a roll
    back returns to it. ``guard_error_percent`` (None: no guard) and ``guard_min_runs``: the
    candidate is rolled back on its own when more than that share of its runs fail, once it has
    served that many (:func:`rollout_guard_check`).
    """
    agent = _locked_agent(agent)
    version = _version_of_agent(agent, version, field="version")
    stable = rollout_stable(agent, version)
    _guard_check(guard_error_percent, guard_min_runs)
    if isinstance(percent, bool) or not isinstance(percent, int) or not 0 <= percent <= 100:
        raise AgentError(
            _("The share of traffic is a whole percentage from 0 to 100, not %(value)r.")
            % {"value": percent},
            field="percent",
        )
    chatbots = _chatbot_ids_clean(chatbot_ids)
    before = _rollout_state(agent)
    proposed = {
        **before,
        "rollout_guard": [guard_error_percent, guard_min_runs],
        "rule_set_mode": Agent.RuleSetMode.PINNED,
        "pinned_version": stable.number if stable else None,
        "rollout_version": version.number,
        "rollout_percent": percent,
        "rollout_chatbot_ids": chatbots,
    }
    payload = {
        "version": version.number,
        "percent": percent,
        "chatbot_ids": chatbots,
        "guard_error_percent": guard_error_percent,
        "guard_min_runs": guard_min_runs,
    }
    diff = {"fields": field_diff(before, proposed), "versions": _versions_diff(stable, version)}
    if pending := change_gate(
        actor=actor, agent=agent, action="rollout.set", payload=payload, diff=diff, reason=change_reason
    ):
        return pending
    starting = agent.rollout_version_id is None or agent.rollout_version_id != version.pk
    agent.rollout_version, agent.rollout_percent, agent.rollout_chatbot_ids = version, percent, chatbots
    agent.rollout_guard_error_percent, agent.rollout_guard_min_runs = guard_error_percent, guard_min_runs
    agent.rule_set_mode, agent.pinned_version = Agent.RuleSetMode.PINNED, stable  # "latest" stops here
    if starting:
        agent.rollout_started_at = timezone.now()
    _agent_bump(
        agent,
        [
            "rule_set_mode",
            "pinned_version",
            "rollout_version",
            "rollout_percent",
            "rollout_chatbot_ids",
            "rollout_started_at",
            "rollout_guard_error_percent",
            "rollout_guard_min_runs",
        ],
    )
    audit_record(
        actor=actor,
        action="agent.rollout.start" if starting else "agent.rollout.change",
        obj=agent,
        before=before,
        after=_rollout_state(agent),
    )
    return agent


@gated_atomic
def rollout_publish(
    *,
    actor: Any,
    agent: Agent,
    percent: int,
    message: str = "",
    revision: int | None = None,
    number: int | None = None,
    chatbot_ids: list[Any] | None = None,
    guard_error_percent: int | None = GUARD_ERROR_PERCENT,
    guard_min_runs: int = GUARD_MIN_RUNS,
    change_reason: str = "",
) -> Agent | ChangeRequested:
    """Publish the agent's rule-set draft as a staged rollout instead of live for everyone at once.

    In one transaction: the draft becomes the next version and :func:`rollout_set` rolls it out
    to ``percent`` % of the agent's sessions, the version served before it pinned as stable. Refused
    while a rollout runs, and when another agent also serves the rule set's latest version (the
    publish would be live for all its sessions at once). On a protected agent it is one change
    request (``rollout.publish``) that does both once approved. ``number``: the version number the
    caller expects the draft to get (the API's ``version``); another one is refused.
    """
    from rules.errors import RuleError
    from rules.models import RuleSet
    from rules.selectors import version_diff
    from rules.services import rule_set_publish

    if isinstance(percent, bool) or not isinstance(percent, int) or not 0 <= percent <= 100:
        raise AgentError(
            _("The share of traffic is a whole percentage from 0 to 100, not %(value)r.")
            % {"value": percent},
            field="percent",
        )
    message = bounded(message, most=500, field="message")
    _guard_check(guard_error_percent, guard_min_runs)
    chatbots = _chatbot_ids_clean(chatbot_ids or [])
    if agent.rule_set_id is None:
        raise AgentError(
            _("Agent %(name)r has no rule set, so it has no versions to roll out.") % {"name": agent.name}
        )
    # The rule set first, then the agents (the order a plain publish and its gate lock them in).
    rule_set = RuleSet.objects.select_for_update().get(pk=agent.rule_set_id)
    agent = _locked_agent(agent)
    if agent.rule_set_id != rule_set.pk:
        raise AgentConflictError(_("The agent's rule set changed meanwhile: reload the page."))
    if agent.rollout_version_id is not None:
        raise AgentConflictError(
            _(
                "A staged rollout of v%(number)s is running on agent %(name)r: promote it or roll it back before staging another version."
            )
            % {"number": agent.rollout_version.number if agent.rollout_version else "?", "name": agent.name}
        )
    others = list(
        Agent.objects.select_for_update()
        .filter(rule_set=rule_set, rule_set_mode=Agent.RuleSetMode.LATEST)
        .exclude(pk=agent.pk)
        .order_by("name")
        .values_list("name", flat=True)
    )
    if others:
        raise AgentError(
            _(
                "%(others)s also serve the latest version of %(rule_set)r: the new version would go live for all their sessions at once. Pin them to a version first, or publish as usual."
            )
            % {"others": ", ".join(others), "rule_set": rule_set.name}
        )
    latest = rule_set.versions.order_by("-number").first()
    next_number = (latest.number + 1) if latest else 1
    if number is not None and number != next_number:
        raise AgentError(
            _("The draft of %(rule_set)r would be published as v%(next)s, not v%(number)s.")
            % {"rule_set": rule_set.name, "next": next_number, "number": number},
            field="version",
        )
    payload = {
        "rule_set": rule_set.pk,
        "message": message,
        "percent": percent,
        "chatbot_ids": chatbots,
        "guard_error_percent": guard_error_percent,
        "guard_min_runs": guard_min_runs,
    }
    diff: dict[str, Any] = {}
    if agent.protected:  # what the approvers review: the draft against the version served now
        from rules.engine import rule_set_snapshot

        rows = version_diff(old=latest.content if latest else [], new=rule_set_snapshot(rule_set))
        before = _rollout_state(agent)
        proposed = {
            **before,
            "rollout_guard": [guard_error_percent, guard_min_runs],
            "rollout_version": next_number,
            "rollout_percent": percent,
            "rollout_chatbot_ids": chatbots,
        }
        diff = {
            "fields": field_diff(before, proposed),  # the share it asks for, among the rest
            "versions": {"from": f"v{latest.number}" if latest else "", "to": "draft", "rows": rows},
        }
    if pending := change_gate(
        actor=actor,
        agent=agent,
        action="rollout.publish",
        payload=payload,
        diff=diff,
        reason=change_reason,
        rule_set_revision=rule_set.revision,
    ):
        return pending
    with ungated():  # this agent's gate is passed (or it is not protected); no other agent serves it
        try:
            version = rule_set_publish(actor=actor, rule_set=rule_set, message=message, revision=revision)
        except RuleError as exc:
            raise AgentError(exc.message, field=exc.field) from exc
        return rollout_set(
            actor=actor,
            agent=agent,
            version=version,
            percent=percent,
            chatbot_ids=chatbots,
            guard_error_percent=guard_error_percent,
            guard_min_runs=guard_min_runs,
        )


def _rollout_clear(agent: Agent) -> None:
    agent.rollout_version, agent.rollout_percent, agent.rollout_chatbot_ids = None, 0, []
    agent.rollout_started_at = None


@gated_atomic
def rollout_promote(*, actor: Any, agent: Agent, change_reason: str = "") -> Agent | ChangeRequested:
    """The candidate becomes the agent's stable (pinned) version; the rollout ends."""
    agent = _locked_agent(agent)
    candidate = agent.rollout_version
    if candidate is None:
        raise AgentConflictError(_("Agent %(name)r has no rollout to promote.") % {"name": agent.name})
    before = _rollout_state(agent)
    proposed = {**before, "pinned_version": candidate.number, "rollout_version": None, "rollout_percent": 0}
    proposed["rollout_chatbot_ids"] = []
    diff = {
        "fields": field_diff(before, proposed),
        "versions": _versions_diff(agent.pinned_version, candidate),
    }
    if pending := change_gate(
        actor=actor, agent=agent, action="rollout.promote", payload={}, diff=diff, reason=change_reason
    ):
        return pending
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


@gated_atomic
def rollout_rollback(
    *, actor: Any, agent: Agent, reason: str = "", change_reason: str = ""
) -> Agent | ChangeRequested:
    """End the rollout: every run gets the stable (pinned) version again (``reason``: the guard's)."""
    agent = _locked_agent(agent)
    if agent.rollout_version_id is None:
        raise AgentConflictError(_("Agent %(name)r has no rollout to roll back.") % {"name": agent.name})
    before = _rollout_state(agent)
    proposed = {**before, "rollout_version": None, "rollout_percent": 0, "rollout_chatbot_ids": []}
    if pending := change_gate(
        actor=actor,
        agent=agent,
        action="rollout.rollback",
        payload={},
        diff={"fields": field_diff(before, proposed)},
        reason=change_reason,
    ):
        return pending
    _rollout_clear(agent)
    _agent_bump(agent, ["rollout_version", "rollout_percent", "rollout_chatbot_ids", "rollout_started_at"])
    audit_record(
        actor=actor,
        action="agent.rollout.guard_rollback" if reason else "agent.rollout.rollback",
        obj=agent,
        before=before,
        after={**_rollout_state(agent), **({"reason": reason} if reason else {})},
    )
    return agent


def rollout_guard_check(*, agent_id: int, version_id: int) -> bool:
    """After a candidate's run finished: roll the rollout back when its error rate is over the guard.

    The judgement is agents.selectors.guard_judgement (the Rollout page shows the same): only the
    candidate's own failures count, refusals both versions give never do. Returns whether it rolled
    back (audited, by no person).
    """
    agent = (
        Agent.objects.filter(pk=agent_id, rollout_version_id=version_id)
        .exclude(rollout_guard_error_percent=None)
        .first()
    )
    if agent is None or agent.rollout_started_at is None:
        return False
    guard = guard_judgement(agent)
    if not guard["act"]:
        return False
    reason = _(
        "The guard rolled back v%(number)s: %(errors)s of its %(total)s runs failed (%(rate)s %%, over %(threshold)s %%)."
    ) % {
        "number": agent.rollout_version.number if agent.rollout_version else "?",
        "errors": guard["errors"],
        "total": guard["judged_runs"],
        "rate": round(guard["candidate_error_percent"]),
        "threshold": guard["error_percent"],
    }
    try:
        with ungated():  # the guard acts for nobody, protected agent or not (audited as the system)
            rollout_rollback(actor=None, agent=agent, reason=reason)
    except AgentConflictError:  # another worker's run rolled it back first
        return False
    logger.warning("agent %s: %s", agent.name, reason)
    return True


@gated_atomic
def shadow_set(*, actor: Any, agent: Agent, version: Any, change_reason: str = "") -> Agent | ChangeRequested:
    """Name the version evaluated in shadow beside every run (None: shadow mode off)."""
    agent = _locked_agent(agent)
    if version is not None:
        version = _version_of_agent(agent, version, field="version")
    before = _rollout_state(agent)
    if (version.pk if version else None) == agent.shadow_version_id:
        return agent
    proposed = {**before, "shadow_version": version.number if version else None}
    if pending := change_gate(
        actor=actor,
        agent=agent,
        action="shadow.set",
        payload={"version": version.number if version else None},
        diff={"fields": field_diff(before, proposed)},
        reason=change_reason,
    ):
        return pending
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
