"""Staged rollout (bucketing, services) and shadow mode (recording), without a worker.

The worker-side proof (a real run served by the candidate, divergences recorded) is in
tests/agents/test_rollout_on_workers.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from agents import rollout_runtime as rollout
from agents import runtime, services
from agents.errors import AgentConflictError, AgentError
from agents.models import Agent, Run, ShadowExample, ShadowTally
from core.models import AuditEvent
from llamon_agent.tools import AgentRequest
from llamon_web.demo import SEED_RULES
from rules import engine
from rules import services as rule_services
from rules.models import RuleSetVersion
from tests.support.rule_sets import build_rule_set

pytestmark = pytest.mark.django_db

ORDER_QUERY = "주문 조회 A-1001"


def _state(agent: Agent) -> tuple:
    agent.refresh_from_db()
    return (
        agent.rule_set_mode,
        agent.pinned_version_id,
        agent.rollout_version_id,
        agent.rollout_percent,
        agent.rollout_chatbot_ids,
        agent.shadow_version_id,
        agent.revision,
    )


# --- Bucketing ----------------------------------------------------------------------------------


def test_a_session_keeps_its_bucket_and_agents_bucket_it_independently() -> None:
    assert all(rollout.rollout_bucket(7, "s-42") == rollout.rollout_bucket(7, "s-42") for _ in range(10))
    buckets = [rollout.rollout_bucket(7, f"s-{i}") for i in range(200)]
    assert all(0 <= b < 100 for b in buckets)
    # One agent's first 10 % are not every agent's first 10 %.
    other = [rollout.rollout_bucket(8, f"s-{i}") for i in range(200)]
    assert buckets != other


def test_the_share_of_sessions_served_the_candidate_follows_the_percentage(agent, versions) -> None:
    agent.rollout_version = versions[1]
    for percent in (0, 10, 30, 75, 100):
        agent.rollout_percent = percent
        served = sum(
            rollout.serves_candidate(agent, session_id=f"session-{i}", chatbot_id="") for i in range(10_000)
        )
        assert abs(served - percent * 100) <= 250, (percent, served)  # 10,000 sessions: within 2.5 points
        # Sticky: the same sessions again get the same answer.
        again = sum(
            rollout.serves_candidate(agent, session_id=f"session-{i}", chatbot_id="") for i in range(10_000)
        )
        assert again == served


def test_a_listed_chatbot_gets_the_candidate_whatever_the_share(agent, versions) -> None:
    agent.rollout_version, agent.rollout_percent, agent.rollout_chatbot_ids = versions[1], 0, ["bot-a"]
    assert rollout.serves_candidate(agent, session_id="s", chatbot_id="bot-a")
    assert not rollout.serves_candidate(agent, session_id="s", chatbot_id="bot-b")
    assert not rollout.serves_candidate(agent, session_id="s", chatbot_id="")
    agent.rollout_version = None  # no rollout: nobody gets a candidate
    assert not rollout.serves_candidate(agent, session_id="s", chatbot_id="bot-a")


def test_a_run_without_session_draws_its_own_bucket(agent, versions) -> None:
    agent.rollout_version, agent.rollout_percent = versions[1], 50
    outcomes = {rollout.serves_candidate(agent, session_id="", chatbot_id="") for _ in range(400)}
    assert outcomes == {True, False}  # not sticky: both happen (odds of not: 2 in 2**400)


def test_run_rules_names_the_version_that_serves_the_run(agent, versions) -> None:
    v1, v2 = versions
    run = Run(agent=agent, session_id="s-1", chatbot_id="bot-a")
    rules, served = runtime.run_rules(agent, run)
    assert (rules.ref, served.version, served.candidate) == ("v1", v1, False)
    agent.rollout_version, agent.rollout_chatbot_ids = v2, ["bot-a"]
    rules, served = runtime.run_rules(agent, run)
    assert (rules.ref, rules.content_hash, served.version, served.candidate) == (
        "v2",
        v2.content_hash,
        v2,
        True,
    )


# --- Services -----------------------------------------------------------------------------------


def test_start_change_promote_are_audited_and_promote_pins_the_candidate(agent, versions, author) -> None:
    v1, v2 = versions
    services.rollout_set(actor=author, agent=agent, version=v2, percent=10, chatbot_ids=[" bot-a ", "bot-a"])
    agent.refresh_from_db()
    assert (agent.rollout_version, agent.rollout_percent, agent.rollout_chatbot_ids) == (v2, 10, ["bot-a"])
    assert agent.rollout_started_at is not None
    services.rollout_set(actor=author, agent=agent, version=v2, percent=50, chatbot_ids=[])
    services.rollout_promote(actor=author, agent=agent)
    agent.refresh_from_db()
    assert (agent.rule_set_mode, agent.pinned_version, agent.rollout_version, agent.rollout_percent) == (
        "pinned",
        v2,
        None,
        0,
    )
    actions = list(
        AuditEvent.objects.filter(object_id=str(agent.pk), action__startswith="agent.rollout")
        .order_by("id")
        .values_list("action", flat=True)
    )
    assert actions == ["agent.rollout.start", "agent.rollout.change", "agent.rollout.promote"]
    promote = AuditEvent.objects.get(action="agent.rollout.promote")
    assert promote.before["rollout_version"] == 2 and promote.after["pinned_version"] == 2


def test_rollback_clears_the_rollout_and_keeps_the_stable_version(agent, versions, author) -> None:
    v1, v2 = versions
    services.rollout_set(actor=author, agent=agent, version=v2, percent=100, chatbot_ids=["x"])
    services.rollout_rollback(actor=author, agent=agent)
    agent.refresh_from_db()
    assert (
        agent.pinned_version,
        agent.rollout_version,
        agent.rollout_percent,
        agent.rollout_chatbot_ids,
    ) == (
        v1,
        None,
        0,
        [],
    )
    assert AuditEvent.objects.filter(action="agent.rollout.rollback", object_id=str(agent.pk)).count() == 1
    with pytest.raises(AgentConflictError, match="no rollout to roll back"):
        services.rollout_rollback(actor=author, agent=agent)
    with pytest.raises(AgentConflictError, match="no rollout to promote"):
        services.rollout_promote(actor=author, agent=agent)


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"percent": 101}, "percent", "from 0 to 100"),
        ({"percent": -1}, "percent", "from 0 to 100"),
        ({"percent": True}, "percent", "from 0 to 100"),
        ({"percent": "50"}, "percent", "from 0 to 100"),
        ({"version": None}, "version", "published version"),
        ({"chatbot_ids": ["b"] * 201}, "chatbot_ids", "at most 200"),
        ({"chatbot_ids": ["bot\x00a"]}, "chatbot_ids", "control character"),
        ({"chatbot_ids": ["x" * 201]}, "chatbot_ids", "at most 200 characters"),
        ({"chatbot_ids": [""]}, "chatbot_ids", "non-empty"),
        ({"chatbot_ids": [5]}, "chatbot_ids", "non-empty string"),
        ({"chatbot_ids": "bot-a"}, "chatbot_ids", "a list"),
    ],
)
def test_bad_rollout_input_is_refused_and_changes_nothing(
    agent, versions, author, changes, field, message
) -> None:
    services.rollout_set(actor=author, agent=agent, version=versions[1], percent=20, chatbot_ids=["keep"])
    before = _state(agent)
    values = {"version": versions[1], "percent": 30, "chatbot_ids": [], **changes}
    with pytest.raises(AgentError, match=message) as refused:
        services.rollout_set(actor=author, agent=agent, **values)
    assert refused.value.field == field
    assert _state(agent) == before


def test_a_version_of_another_rule_set_is_refused(agent, author) -> None:
    other = build_rule_set(author, "other", SEED_RULES[:1])
    foreign = rule_services.rule_set_publish(actor=author, rule_set=other)
    before = _state(agent)
    with pytest.raises(AgentError, match="version of the agent's rule set 'rollout'"):
        services.rollout_set(actor=author, agent=agent, version=foreign, percent=10, chatbot_ids=[])
    with pytest.raises(AgentError, match="version of the agent's rule set 'rollout'"):
        services.shadow_set(actor=author, agent=agent, version=foreign)
    assert _state(agent) == before


def test_saving_the_agent_form_keeps_the_rollout(agent, versions, author) -> None:
    services.rollout_set(actor=author, agent=agent, version=versions[1], percent=40, chatbot_ids=["b"])
    stale = Agent.objects.get(pk=agent.pk)
    stale.rollout_version, stale.rollout_percent, stale.description = None, 0, "edited"  # a form's copy
    services.agent_save(actor=author, agent=stale)
    agent.refresh_from_db()
    assert (agent.description, agent.rollout_version, agent.rollout_percent) == ("edited", versions[1], 40)


def test_shadow_set_is_audited(agent, versions, author) -> None:
    services.shadow_set(actor=author, agent=agent, version=versions[1])
    services.shadow_set(actor=author, agent=agent, version=None)
    actions = list(
        AuditEvent.objects.filter(action__startswith="agent.shadow").values_list("action", flat=True)
    )
    assert sorted(actions) == ["agent.shadow.start", "agent.shadow.stop"]


# --- Shadow recording ---------------------------------------------------------------------------


def _live_prestep(version: RuleSetVersion, request: AgentRequest) -> Any:
    return engine.evaluate(list(version.content), request, dry_run=True).outcome


def test_shadow_counts_divergences_and_keeps_the_calls(agent, versions) -> None:
    v1, v2 = versions
    agent.shadow_version = v2
    same = AgentRequest(query="안녕하세요")  # neither version calls anything
    differs = AgentRequest(query=ORDER_QUERY, context={"userId": "C-1"})
    rollout.shadow_after_run(agent=agent, run_id=None, request=same, prestep=_live_prestep(v1, same))
    rollout.shadow_after_run(agent=agent, run_id=None, request=differs, prestep=_live_prestep(v1, differs))
    tally = ShadowTally.objects.get(agent=agent, version=v2)
    assert (tally.evaluated, tally.diverged, tally.errors) == (2, 1, 0)
    example = tally.examples.get()
    assert [c["tool_name"] for c in example.live_calls] == ["get_order"]
    assert [(c["rule"], c["params"]) for c in example.shadow_calls] == [
        ("route_order_lookup", {"query": ORDER_QUERY}),
        ("order_by_user", {"query": "C-1"}),
    ]


def test_only_the_newest_examples_are_kept(agent, versions) -> None:
    calls = [{"rule": "r", "mcp_id": "m", "tool_name": "t", "params": {}}]
    for _ in range(rollout.SHADOW_EXAMPLES + 5):
        rollout.shadow_record(agent=agent, version=versions[1], run_id=None, live=[], shadow=calls, error="")
    tally = ShadowTally.objects.get()
    assert tally.diverged == rollout.SHADOW_EXAMPLES + 5
    assert ShadowExample.objects.count() == rollout.SHADOW_EXAMPLES


def test_a_broken_shadow_is_a_shadow_error_not_a_failure(agent, versions) -> None:
    v1, _ = versions
    broken = RuleSetVersion.objects.create(
        rule_set=v1.rule_set,
        number=99,
        content_hash="x",
        tool_schema_hash="x",
        content=[{**SEED_RULES[0], "when": "(((", "stop": False, "enabled": True}],
    )
    agent.shadow_version = broken
    request = AgentRequest(query=ORDER_QUERY)
    rollout.shadow_after_run(agent=agent, run_id=None, request=request, prestep=_live_prestep(v1, request))
    tally = ShadowTally.objects.get(version=broken)
    assert (tally.evaluated, tally.diverged, tally.errors) == (1, 0, 1)
    assert tally.examples.get().error


def test_the_shadow_is_bounded_by_the_expression_cost_budget(agent, versions, settings) -> None:
    v1, _ = versions
    costly = RuleSetVersion.objects.create(
        rule_set=v1.rule_set,
        number=98,
        content_hash="y",
        tool_schema_hash="y",
        content=[
            {
                **SEED_RULES[0],
                "when": "len([query+query+query for x in query[:10000]]) > 0",
                "stop": False,
                "enabled": True,
            }
        ],
    )
    agent.shadow_version = costly
    request = AgentRequest(query=ORDER_QUERY * 1000)  # each item of the loop copies 48,000 characters
    rollout.shadow_after_run(agent=agent, run_id=None, request=request, prestep=_live_prestep(v1, request))
    example = ShadowTally.objects.get(version=costly).examples.get()
    # a version stored without the save's checks: its rule's static cost bound is over the
    # per-rule limit, so compiling it fails before anything runs (or the meter stops it)
    assert "over the limit of" in example.error or "budget" in example.error, example.error
