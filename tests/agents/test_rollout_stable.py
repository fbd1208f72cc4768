"""Rollouts that mean what they say (issue 28, part 3): an explicit stable version, and the guard.

On the shipped demo the agent follows "latest": a "10 %" rollout of the version just published
served everyone (candidate == latest) and a roll back kept it. Now starting a rollout pins the
version served before the candidate as stable, publishing never changes either side, a roll back
returns to stable, and a rollout of the stable version itself is refused. The guard rolls a
candidate whose runs fail back on its own (a real stdio MCP server whose tool errors).
"""

from __future__ import annotations

import sys

import pytest
from django.urls import reverse

from agents import runtime, selectors, services
from agents.errors import AgentError
from agents.models import Agent, Run
from agents.rollout_runtime import shadow_record
from core.models import AuditEvent
from llamon_web.demo import SEED_RULES
from rules import services as rule_services
from servers.models import McpServer
from tests.support.rule_sets import build_rule_set
from tests.support.runs import MISBEHAVING

pytestmark = pytest.mark.django_db


def _served(agent: Agent, sessions: range | list[str]) -> list[tuple[str, bool]]:
    agent = Agent.objects.select_related("rule_set", "pinned_version", "rollout_version").get(pk=agent.pk)
    return [
        (rules.ref, served.candidate)
        for rules, served in (
            runtime.run_rules(agent, Run(agent=agent, session_id=f"s-{n}")) for n in sessions
        )
    ]


@pytest.fixture
def latest_agent(versions) -> Agent:
    v1, _ = versions
    return Agent.objects.create(
        name="latest-agent", system_prompt="p", rule_set=v1.rule_set, rule_set_mode="latest"
    )


def test_a_rollout_on_latest_pins_the_version_served_before_the_candidate(
    latest_agent, versions, author
) -> None:
    v1, v2 = versions  # v2 was just published: "latest" already serves it to everyone
    assert set(_served(latest_agent, range(20))) == {("v2", False)}
    services.rollout_set(actor=author, agent=latest_agent, version=v2, percent=10, chatbot_ids=[])
    latest_agent.refresh_from_db()
    assert (latest_agent.rule_set_mode, latest_agent.pinned_version) == ("pinned", v1)
    start = AuditEvent.objects.get(action="agent.rollout.start", object_id=str(latest_agent.pk))
    assert start.before["rule_set_mode"] == "latest" and start.after["pinned_version"] == 1
    served = _served(latest_agent, range(200))
    on_candidate = sum(candidate for _, candidate in served)
    assert 0 < on_candidate <= 40  # 10 % of 200 sessions, sticky buckets
    assert {ref for ref, candidate in served if not candidate} == {"v1"}
    # Publishing changes neither side of the running rollout.
    rule_services.rule_update(
        actor=author, rule=v1.rule_set.rules.order_by("position").first(), revision=None, description="v3"
    )
    rule_services.rule_set_publish(actor=author, rule_set=v1.rule_set)
    assert _served(latest_agent, range(200)) == served
    # A roll back returns every session to the stable version.
    services.rollout_rollback(actor=author, agent=latest_agent)
    assert set(_served(latest_agent, range(50))) == {("v1", False)}


def test_a_rollout_of_the_stable_version_is_refused(versions, author) -> None:
    v1, v2 = versions
    pinned = Agent.objects.create(
        name="pinned", system_prompt="p", rule_set=v1.rule_set, rule_set_mode="pinned", pinned_version=v1
    )
    with pytest.raises(AgentError, match="v1 is already the stable version agent 'pinned' serves") as refused:
        services.rollout_set(actor=author, agent=pinned, version=v1, percent=10, chatbot_ids=[])
    assert refused.value.field == "version"
    draft = Agent.objects.create(name="draft", system_prompt="p", rule_set=v1.rule_set, rule_set_mode="draft")
    with pytest.raises(AgentError, match="follows the draft"):
        services.rollout_set(actor=author, agent=draft, version=v2, percent=10, chatbot_ids=[])
    assert not AuditEvent.objects.filter(action__startswith="agent.rollout").exists()


def test_a_rollout_of_the_only_version_on_latest_is_refused_and_says_how(author, demo_servers) -> None:
    rule_set = build_rule_set(author, "single", SEED_RULES[:1])
    v1 = rule_services.rule_set_publish(actor=author, rule_set=rule_set)
    agent = Agent.objects.create(name="single", system_prompt="p", rule_set=rule_set, rule_set_mode="latest")
    with pytest.raises(AgentError, match="no earlier version to keep as stable"):
        services.rollout_set(actor=author, agent=agent, version=v1, percent=10, chatbot_ids=[])
    agent.refresh_from_db()
    assert (agent.rule_set_mode, agent.rollout_version) == ("latest", None)


def test_the_stable_version_cannot_be_moved_while_a_rollout_runs(latest_agent, versions, author) -> None:
    v1, v2 = versions
    services.rollout_set(actor=author, agent=latest_agent, version=v2, percent=10, chatbot_ids=[])
    for changes in ({"rule_set_mode": "latest"}, {"pinned_version": v2}, {"rule_set_mode": "draft"}):
        edited = Agent.objects.get(pk=latest_agent.pk)
        for name, value in changes.items():
            setattr(edited, name, value)
        with pytest.raises(AgentError, match="v1 as the stable version: promote it or roll it back"):
            services.agent_save(actor=author, agent=edited)
    latest_agent.refresh_from_db()
    assert (latest_agent.rule_set_mode, latest_agent.pinned_version) == ("pinned", v1)


def test_the_rollout_page_says_what_latest_means_and_counts_each_side(
    editor_client, latest_agent, versions, author
) -> None:
    v1, v2 = versions
    page = editor_client.get(reverse("agents:rollout", args=[latest_agent.pk])).content.decode()
    assert "each publish goes live for every session at once" in page
    response = editor_client.post(
        reverse("agents:rollout_set", args=[latest_agent.pk]),
        {
            "version": v2.number,
            "percent": 10,
            "chatbot_ids": "",
            "guard_error_percent": 30,
            "guard_min_runs": 5,
        },
        follow=True,
    )
    page = response.content.decode()
    assert "v1 stays the stable version" in page
    common = {"agent": latest_agent, "agent_name": latest_agent.name, "query": "q"}
    for n, (ref, version, candidate, status, calls) in enumerate(
        [
            ("v1", v1, False, Run.Status.SUCCEEDED, 1),
            ("v1", v1, False, Run.Status.SUCCEEDED, 0),
            ("v2", v2, True, Run.Status.FAILED, 2),
            ("v2", v2, True, Run.Status.SUCCEEDED, 0),
            ("v2", v2, True, Run.Status.RUNNING, 1),  # not finished: not counted yet
        ]
    ):
        Run.objects.create(
            **common,
            session_id=f"s-{n % 3}",
            rule_set_ref=ref,
            rule_set_version=version,
            rollout_candidate=candidate,
            status=status,
            prestep_calls=calls,
        )
    body = editor_client.get(reverse("agents:rollout", args=[latest_agent.pk])).content.decode()
    assert "Guard: once the candidate has served 5 runs, more than 30 % of them failing" in body
    assert "waiting: 2 of 5 runs" in body and "no shadow data" in body
    rollout = selectors.rollout_view(Agent.objects.get(pk=latest_agent.pk))["rollout"]
    assert rollout["served"] == [
        {"version": "v1", "candidate": False, "sessions": 2, "runs": 2, "errors": 0, "error_percent": 0.0}
        | {"fired": 1, "fire_percent": 50.0},
        {"version": "v2", "candidate": True, "sessions": 2, "runs": 2, "errors": 1, "error_percent": 50.0}
        | {"fired": 1, "fire_percent": 50.0},
    ]
    stable, candidate = rollout["versions"]
    assert (stable["role"], stable["version"], stable["runs"], stable["fire_percent"]) == (
        "stable",
        "v1",
        2,
        50.0,
    )
    assert (candidate["role"], candidate["errors"], candidate["differ"]) == ("candidate", 1, None)
    assert rollout["guard"] == {
        "error_percent": 30,
        "min_runs": 5,
        "state": "waiting",
        "judged_runs": 2,
        "errors": 1,
        "candidate_error_percent": 50.0,
        "stable_judged_runs": 2,
        "stable_error_percent": 0.0,
        "stable_needed": True,
        "act": False,
    }
    # Shadow data of the candidate: the calls that differ from stable; the poller gets the figures alone.
    shadow_record(agent=latest_agent, version=v2, run_id=None, live=[], shadow=[], error="")
    shadow_record(agent=latest_agent, version=v2, run_id=None, live=[], shadow=[_CALL])
    services.shadow_set(actor=author, agent=latest_agent, version=v1)  # another version in shadow: its row
    live = editor_client.get(reverse("agents:rollout", args=[latest_agent.pk]), {"figures": "1"})
    figures = live.content.decode()
    assert figures.startswith('<div id="rollout-figures"') and "<html" not in figures
    assert "1 of 2 runs (50.0 %)" in figures and "50.0 %" in figures and "served-shadow" in figures
    korean = editor_client.get(
        reverse("agents:rollout", args=[latest_agent.pk]), {"figures": "1"}, HTTP_ACCEPT_LANGUAGE="ko"
    ).content.decode()
    assert "사전 단계 실행됨" in korean and "실행 2건 중 1건 (50.0 %)" in korean
    assert "대기 중: 실행 5건 중 2건" in korean and "기준" in korean
    roles = [
        row["role"]
        for row in selectors.rollout_view(Agent.objects.get(pk=latest_agent.pk))["rollout"]["versions"]
    ]
    assert roles == ["stable", "candidate", "shadow"]
    services.rollout_rollback(actor=author, agent=latest_agent)
    assert (
        editor_client.get(reverse("agents:rollout", args=[latest_agent.pk]), {"figures": "1"}).content == b""
    )


_CALL = {"rule": "r", "mcp_id": "demo", "tool_name": "t", "params": {}}


def test_the_versions_page_says_before_publishing_that_latest_agents_get_it_at_once(
    editor_client, latest_agent, versions
) -> None:
    url = reverse("rules:versions", args=[latest_agent.rule_set.pk])
    page = editor_client.get(url).content.decode()
    assert 'id="publish-goes-live"' in page and "latest-agent" in page
    Agent.objects.filter(pk=latest_agent.pk).update(rule_set_mode="pinned", pinned_version=versions[0])
    assert 'id="publish-goes-live"' not in editor_client.get(url).content.decode()


def _draft_change(author, rule_set) -> None:
    rule = rule_set.rules.order_by("position").first()
    rule_services.rule_update(actor=author, rule=rule, revision=None, description="the fix")


def _revision(rule_set) -> int:
    rule_set.refresh_from_db()
    return rule_set.revision


def test_publish_as_a_staged_rollout_publishes_and_stages_in_one_step(
    editor_client, latest_agent, versions, author
) -> None:
    v1, v2 = versions
    rule_set = v1.rule_set
    _draft_change(author, rule_set)
    page = editor_client.get(reverse("rules:versions", args=[rule_set.pk])).content.decode()
    assert 'id="publish-staged"' in page and "share of latest-agent's sessions" in page
    response = editor_client.post(
        reverse("agents:rollout_set", args=[latest_agent.pk]),
        {"staged_publish": "1", "percent": "10", "message": "the fix", "revision": _revision(rule_set)},
        follow=True,
    )
    assert "Published v3 as a staged rollout: 10 % of sessions get it; v2 stays the stable version" in (
        response.content.decode()
    )
    latest_agent.refresh_from_db()
    v3 = rule_set.versions.get(number=3)
    assert (latest_agent.rule_set_mode, latest_agent.pinned_version, latest_agent.rollout_version) == (
        "pinned",
        v2,
        v3,
    )
    assert latest_agent.rollout_percent == 10 and v3.message == "the fix"
    served = _served(latest_agent, range(100))
    assert {ref for ref, candidate in served if not candidate} == {"v2"}
    assert 0 < sum(candidate for _, candidate in served) <= 20
    actions = list(AuditEvent.objects.order_by("id").values_list("action", flat=True))
    assert actions[-2:] == ["rule_set.publish", "agent.rollout.start"]
    # A rollout runs now: staging another one is refused, and nothing is published.
    _draft_change(author, rule_set)
    with pytest.raises(AgentError, match="A staged rollout of v3 is running"):
        services.rollout_publish(actor=author, agent=latest_agent, percent=10)
    assert rule_set.versions.count() == 3


def test_a_staged_publish_is_refused_when_another_agent_would_get_it_at_once(
    latest_agent, versions, author
) -> None:
    rule_set = versions[0].rule_set
    _draft_change(author, rule_set)
    Agent.objects.create(name="other-latest", system_prompt="p", rule_set=rule_set, rule_set_mode="latest")
    with pytest.raises(AgentError, match="other-latest also serve the latest version"):
        services.rollout_publish(actor=author, agent=latest_agent, percent=10)
    with pytest.raises(AgentError, match="whole percentage"):
        services.rollout_publish(actor=author, agent=latest_agent, percent=101)
    latest_agent.refresh_from_db()
    assert rule_set.versions.count() == 2 and latest_agent.rule_set_mode == "latest"


def test_a_staged_publish_on_a_protected_agent_is_one_change_request(
    latest_agent, versions, author, make_user
) -> None:
    from accounts.roles import approver_set
    from agents.errors import ChangeRequested
    from agents.models import ChangeRequest

    rule_set = versions[0].rule_set
    _draft_change(author, rule_set)
    services.agent_protect(actor=make_user("admin"), agent=latest_agent, protected=True, approvals_required=1)
    with pytest.raises(ChangeRequested) as asked:
        services.rollout_publish(actor=author, agent=latest_agent, percent=25, change_reason="the fix")
    change = ChangeRequest.objects.get(pk=asked.value.change_request_id)
    assert change.action == "rollout.publish" and change.diff["versions"]["from"] == "v2"
    assert rule_set.versions.count() == 2  # nothing published yet
    approver = make_user("viewer")
    approver_set(user=approver, approver=True)
    services.change_request_review(actor=approver, change_request=change, decision="approve", comment="ok")
    latest_agent.refresh_from_db()
    assert (latest_agent.pinned_version.number, latest_agent.rollout_version.number) == (2, 3)
    assert latest_agent.rollout_percent == 25
    assert ChangeRequest.objects.filter(action="rule_set.publish").count() == 0  # one request, not two


def test_the_run_list_filters_by_served_version_and_rollout_side(
    viewer_client, latest_agent, versions
) -> None:
    v1, v2 = versions
    common = {"agent": latest_agent, "agent_name": latest_agent.name, "status": Run.Status.SUCCEEDED}
    stable = Run.objects.create(**common, query="stable run", rule_set_ref="v1", rule_set_version=v1)
    candidate = Run.objects.create(
        **common, query="candidate run", rule_set_ref="v2", rule_set_version=v2, rollout_candidate=True
    )
    page = viewer_client.get(reverse("agents:run_list"), {"version": "v2"}).content.decode()
    assert "candidate run" in page and "stable run" not in page and "run-candidate" in page
    page = viewer_client.get(reverse("agents:run_list"), {"candidate": "no"}).content.decode()
    assert "stable run" in page and "candidate run" not in page
    ids = [r.pk for r in selectors.run_list(filters={"version": "v1", "candidate": "no"})]
    assert ids == [stable.pk] and candidate.pk not in ids
    for hostile in ("v0", "v1' OR 1=1", "x" * 30, "latest", "v-1"):
        page = viewer_client.get(reverse("agents:run_list"), {"version": hostile})
        assert "A version is written v4" in page.content.decode(), hostile


# --- the guard ------------------------------------------------------------------------------------


@pytest.fixture
def failing_candidate(author) -> tuple[Agent, object, object]:
    """v1 calls echo on a real stdio MCP server; v2 calls its tool that always errors."""
    McpServer.objects.create(
        mcp_id="misbehaving",
        transport="stdio",
        command=sys.executable,
        args=[MISBEHAVING],
        timeout_s=20,
        tools=[
            {"name": "echo", "description": "", "input_schema": {}},
            {"name": "fail", "description": "", "input_schema": {}},
        ],
    )
    rule_set = rule_services.rule_set_create(actor=author, name="guarded")
    rule = rule_services.rule_create(
        actor=author,
        rule_set=rule_set,
        name="look_up",
        mcp_id="misbehaving",
        tool_name="echo",
        when="True",
        params='{"value": "ok"}',
    )
    v1 = rule_services.rule_set_publish(actor=author, rule_set=rule_set)
    rule_services.rule_update(
        actor=author, rule=rule, revision=None, tool_name="fail", params='{"message": "candidate broke"}'
    )
    rule_set.refresh_from_db()
    v2 = rule_services.rule_set_publish(actor=author, rule_set=rule_set)
    agent = Agent.objects.create(
        name="guarded", system_prompt="p", rule_set=rule_set, rule_set_mode="latest", answer_from_prestep=True
    )
    return agent, v1, v2


def _run(agent: Agent, session: str) -> Run:
    run = Run.objects.create(agent=agent, agent_name=agent.name, query="q", session_id=session)
    services.run_execute(run_id=run.pk)  # the worker task's body, in this process
    run.refresh_from_db()
    return run


def test_the_guard_rolls_a_failing_candidate_back_on_its_own(failing_candidate, author) -> None:
    agent, v1, v2 = failing_candidate
    services.rollout_set(
        actor=author,
        agent=agent,
        version=v2,
        percent=100,
        chatbot_ids=[],
        guard_error_percent=50,
        guard_min_runs=3,
    )
    first, second = _run(agent, "a"), _run(agent, "b")
    assert [(r.rule_set_ref, r.rollout_candidate, r.status) for r in (first, second)] == [
        ("v2", True, Run.Status.FAILED),
        ("v2", True, Run.Status.FAILED),
    ]
    assert "candidate broke" in first.error
    agent.refresh_from_db()
    assert agent.rollout_version == v2  # under the minimum number of runs: the guard waits
    third = _run(agent, "c")
    assert third.status == Run.Status.FAILED
    agent.refresh_from_db()
    assert (agent.rollout_version, agent.rule_set_mode, agent.pinned_version) == (None, "pinned", v1)
    event = AuditEvent.objects.get(action="agent.rollout.guard_rollback", object_id=str(agent.pk))
    assert event.actor is None and "3 of its 3 runs failed" in event.after["reason"]
    after = _run(agent, "a")  # the session that got the candidate before
    assert (after.rule_set_ref, after.rollout_candidate, after.status) == ("v1", False, Run.Status.SUCCEEDED)


def test_the_guard_leaves_a_healthy_candidate_and_can_be_off(failing_candidate, author) -> None:
    agent, v1, v2 = failing_candidate
    # v2 fails, but the guard is off: nothing rolls back.
    services.rollout_set(
        actor=author,
        agent=agent,
        version=v2,
        percent=100,
        chatbot_ids=[],
        guard_error_percent=None,
        guard_min_runs=1,
    )
    for session in "abc":
        assert _run(agent, session).status == Run.Status.FAILED
    agent.refresh_from_db()
    assert agent.rollout_version == v2
    assert not AuditEvent.objects.filter(action="agent.rollout.guard_rollback").exists()


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"guard_error_percent": 101}, "guard_error_percent"),
        ({"guard_error_percent": -1}, "guard_error_percent"),
        ({"guard_error_percent": True}, "guard_error_percent"),
        ({"guard_min_runs": 0}, "guard_min_runs"),
        ({"guard_min_runs": "5"}, "guard_min_runs"),
    ],
)
def test_bad_guard_values_are_refused(latest_agent, versions, author, changes, field) -> None:
    with pytest.raises(AgentError) as refused:
        services.rollout_set(
            actor=author, agent=latest_agent, version=versions[1], percent=10, chatbot_ids=[], **changes
        )
    assert refused.value.field == field
    latest_agent.refresh_from_db()
    assert (latest_agent.rule_set_mode, latest_agent.rollout_version) == ("latest", None)
