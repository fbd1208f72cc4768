"""Staged rollout and shadow mode at run time: which version serves a run, and the shadow's dry run.

Called by agents.runtime on a worker. The writes an editor makes (start, promote, roll back, name a
shadow) are services in agents.services; this module only decides and records per run.
See docs/agents.md ("Staged rollout and shadow mode").
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F

from agents.models import Agent, Run, ShadowExample, ShadowTally
from rules.models import RuleSetVersion

logger = logging.getLogger(__name__)

BUCKETS = 100  # one bucket per percent of traffic
SHADOW_EXAMPLES = 20  # divergences kept per agent and shadow version (the newest)
SHADOW_ERROR_CHARS = 2_000
_random = random.SystemRandom()


def rollout_bucket(agent_id: int, session_id: str) -> int:
    """The bucket (0-99) of one session of one agent: the same for every run of that session.

    A SHA-256 of (agent id, sessionId), so that sessions spread evenly and one session's bucket
    differs from agent to agent (a session is not the first 10 % of every rollout).
    """
    digest = hashlib.sha256(f"{agent_id}\x00{session_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % BUCKETS


def serves_candidate(agent: Agent, *, session_id: str, chatbot_id: str) -> bool:
    """Whether a run of this session and chatbot gets the rollout's candidate version.

    A chatbotId on the rollout's list always does; otherwise the session's bucket is below the
    share. A run without sessionId draws a random bucket of its own (it is not sticky).
    """
    if agent.rollout_version_id is None:
        return False
    if chatbot_id and chatbot_id in (agent.rollout_chatbot_ids or []):
        return True
    percent = agent.rollout_percent
    if percent <= 0:
        return False
    if percent >= BUCKETS:
        return True
    bucket = rollout_bucket(agent.pk, session_id) if session_id else _random.randrange(BUCKETS)
    return bucket < percent


# --------------------------------------------------------------------------- shadow mode


def decided_calls(records: Any) -> list[dict[str, Any]]:
    """The calls a pre-step decided (tool and params), whether or not the call then succeeded."""
    from llamon_agent.prestep import RuleStatus
    from llamon_agent.trace import jsonable

    calls = []
    for rec in records:
        if rec.tool_name and rec.params is not None and rec.status in (RuleStatus.FIRED, RuleStatus.ERROR):
            calls.append(
                {
                    "rule": rec.rule,
                    "mcp_id": rec.mcp_id,
                    "tool_name": rec.tool_name,
                    "params": jsonable(rec.params),
                }
            )
    return calls


def _call_keys(calls: list[dict[str, Any]]) -> list[str]:
    """Calls compared by server, tool and params (not by the rule that decided them), in any order."""
    return sorted(
        json.dumps(
            [c["mcp_id"], c["tool_name"], c["params"]], sort_keys=True, ensure_ascii=False, default=str
        )
        for c in calls
    )


def calls_diverge(live: list[dict[str, Any]], shadow: list[dict[str, Any]]) -> bool:
    return _call_keys(live) != _call_keys(shadow)


def shadow_after_run(*, agent: Agent, run_id: int, request: Any, prestep: Any) -> None:
    """Evaluate the agent's shadow version as a dry run on the run's request and record the result.

    Never raises and never changes the run: any failure is recorded as a shadow error (and logged).
    Nothing is called (``rules.engine.evaluate`` with ``dry_run=True``, the tester's evaluation),
    and the expression cost budgets of a live pre-step apply to it.
    """
    version = agent.shadow_version
    if version is None or prestep is None:  # no shadow, or the input guardrail stopped the run
        return
    live: list[dict[str, Any]] = []
    shadow: list[dict[str, Any]] = []
    error = ""
    try:
        from rules import engine

        live = decided_calls(prestep.records)
        evaluation = engine.evaluate(engine.version_rules(version).snapshot, request, dry_run=True)
        shadow = decided_calls(evaluation.outcome.records)
        if not evaluation.outcome.ok:
            error = evaluation.outcome.error or "the shadow pre-step failed"
    except Exception as exc:  # the shadow must never fail the live run
        logger.warning("run %s: shadow evaluation of %s failed: %s", run_id, version, exc)
        error = f"{type(exc).__name__}: {exc}"
    try:
        shadow_record(agent=agent, version=version, run_id=run_id, live=live, shadow=shadow, error=error)
    except Exception:
        logger.exception("run %s: recording the shadow evaluation failed", run_id)


def shadow_record(
    *,
    agent: Agent,
    version: RuleSetVersion,
    run_id: int | None,
    live: list[dict[str, Any]],
    shadow: list[dict[str, Any]],
    error: str = "",
) -> bool:
    """Count one shadow evaluation; keep it as an example when it diverged or failed. Returns diverged."""
    from agents.redaction import redactor, run_redactor

    diverged = not error and calls_diverge(live, shadow)
    with transaction.atomic():
        tally = _tally(agent, version)
        ShadowTally.objects.filter(pk=tally.pk).update(
            evaluated=F("evaluated") + 1,
            diverged=F("diverged") + int(diverged),
            errors=F("errors") + int(bool(error)),
        )
        if diverged or error:
            # Params carry customer data, as the run's steps do (and pieces of its input).
            run = Run.objects.filter(pk=run_id).first() if run_id is not None else None
            redact = run_redactor(run) if run is not None else redactor()
            ShadowExample.objects.create(
                tally=tally,
                run_id=run_id,
                live_calls=redact(live),
                shadow_calls=redact(shadow),
                error=redact(error[:SHADOW_ERROR_CHARS]),
            )
            stale = ShadowExample.objects.filter(tally=tally).order_by("-id").values_list("id", flat=True)
            old = list(stale[SHADOW_EXAMPLES:])
            if old:
                ShadowExample.objects.filter(id__in=old).delete()
    return diverged


def _tally(agent: Agent, version: RuleSetVersion) -> ShadowTally:
    try:
        with transaction.atomic():
            return ShadowTally.objects.get_or_create(agent=agent, version=version)[0]
    except IntegrityError:  # another worker created it meanwhile
        return ShadowTally.objects.get(agent=agent, version=version)
