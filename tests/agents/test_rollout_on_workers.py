"""Staged rollout and shadow mode on a real Celery worker, through a real redis-server and real MCP servers."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

import pytest
from django.core.management import call_command

from agents import selectors, services
from agents.models import Agent, Run, ShadowTally
from llamon_agent.tools import AgentRequest
from rules import services as rule_services
from tests.conftest import celery_worker
from tests.support.runs import wait_for_run

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]
QUERY = "주문 조회 부탁해 A-1001"


@pytest.mark.slow  # 20 s or more in the parallel suite: scheduled first, so the workers finish together
def test_a_rollout_chooses_the_version_and_the_shadow_records_divergences(redis_publisher) -> None:
    call_command("load_demo", "--no-runs", verbosity=0)
    agent = Agent.objects.get(name="seed-demo")
    rule_set = agent.rule_set
    v1 = rule_set.versions.order_by("-number").first()
    rule_services.rule_create(
        actor=None,
        rule_set=rule_set,
        name="order_by_id",
        mcp_id="order-service",
        tool_name="get_order",
        when='"A-1001" in ctx.query',
        params='{"order_id": "A-1001"}',
    )
    rule_set.refresh_from_db()
    v2 = rule_services.rule_set_publish(actor=None, rule_set=rule_set, message="adds order_by_id")
    Agent.objects.filter(pk=agent.pk).update(rule_set_mode="pinned", pinned_version=v1)
    agent.refresh_from_db()
    request = AgentRequest(query=QUERY, context={"userId": "C-1001", "sessionId": "s-1"})

    with celery_worker(redis_publisher) as (_, output):
        services.rollout_set(actor=None, agent=agent, version=v2, percent=100, chatbot_ids=[])
        services.shadow_set(actor=None, agent=agent, version=v2)
        # Served by the shadow version itself: not shadow-evaluated (it would differ from nothing).
        everyone = wait_for_run(services.run_create(actor=None, agent=agent, request=request).pk)
        services.rollout_set(actor=None, agent=agent, version=v2, percent=0, chatbot_ids=[])
        nobody = wait_for_run(services.run_create(actor=None, agent=agent, request=request).pk)

    assert everyone.status == Run.Status.SUCCEEDED, (everyone.error, output.text()[-2000:])
    assert (everyone.rule_set_ref, everyone.rule_set_version, everyone.rollout_candidate) == ("v2", v2, True)
    assert set(everyone.steps.filter(kind="rule").values_list("name", flat=True)) == {
        "route_order_lookup",
        "order_by_id",
    }
    assert nobody.status == Run.Status.SUCCEEDED, nobody.error
    assert (nobody.rule_set_ref, nobody.rule_set_version, nobody.rollout_candidate) == ("v1", v1, False)
    assert list(nobody.steps.filter(kind="rule").values_list("name", flat=True)) == ["route_order_lookup"]
    # The shadow (v2) would also have called get_order by id: one divergence, kept with the run; the
    # run v2 served itself was not evaluated.
    tally = ShadowTally.objects.get(agent=agent, version=v2)
    assert (tally.evaluated, tally.diverged, tally.errors) == (1, 1, 0)
    example = tally.examples.get()
    assert example.run_id == nobody.pk
    assert [c["rule"] for c in example.live_calls] == ["route_order_lookup"]
    assert [c["params"] for c in example.shadow_calls] == [{"query": QUERY}, {"order_id": "A-1001"}]
    assert nobody.prestep_calls == 1  # the shadow's dry run made no call of its own


@pytest.mark.slow
def test_the_guard_blames_the_candidate_only_for_its_own_failures(redis_publisher, make_user) -> None:
    """100 inputs the guardrail refuses and 12 model calls the endpoint refuses for its rate limit
    (HTTP 429; both refusals any version gets alike) never roll back nor count; a candidate whose own
    runs fail, beside a stable version that answers the same traffic, is rolled back."""
    with ExitStack() as stack:
        _guard_on_a_worker(stack, redis_publisher, make_user)


def _guard_on_a_worker(stack: ExitStack, redis_publisher: str, make_user: Any) -> None:
    import sys

    from agents.models import ModelConnection
    from core.models import AuditEvent
    from servers.models import McpServer
    from tests.support.openai_fake import FakeOpenAI
    from tests.support.runs import MISBEHAVING

    author = make_user("editor")
    model = stack.enter_context(FakeOpenAI())  # the model endpoint every run of both versions asks
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
        when='query != "busy"',  # "busy": no rule fires, the model is asked (and refuses: 429)
        params='{"value": "ok"}',
    )
    v1 = rule_services.rule_set_publish(actor=author, rule_set=rule_set)
    rule_services.rule_update(
        actor=author, rule=rule, revision=None, tool_name="fail", params='{"message": "candidate broke"}'
    )
    rule_set.refresh_from_db()
    v2 = rule_services.rule_set_publish(actor=author, rule_set=rule_set)
    agent = Agent.objects.create(
        name="guarded",
        system_prompt="p",
        rule_set=rule_set,
        rule_set_mode="pinned",
        pinned_version=v1,
        answer_from_prestep=True,
        input_max_chars=20,
        model_provider="openai-compatible",
        model_name="fake-model",
        model_connection=ModelConnection.objects.create(
            name="guarded", base_url=model.base_url, model_names=["fake-model"]
        ),
    )
    services.rollout_set(
        actor=author,
        agent=agent,
        version=v2,
        percent=50,
        chatbot_ids=[],
        guard_error_percent=20,
        guard_min_runs=5,
    )

    def send(query: str, count: int, prefix: str) -> list[Run]:
        ids = [
            services.run_create(
                actor=None,
                agent=agent,
                request=AgentRequest(query=query, context={"sessionId": f"{prefix}{i}"}),
            ).pk
            for i in range(count)
        ]
        return [wait_for_run(i, timeout_s=120) for i in ids]

    with celery_worker(redis_publisher) as (_, output):
        refused = send("x" * 200, 100, "long-")  # over the 20-character limit: refused by both versions
        assert {(r.status, r.error_kind) for r in refused} == {(Run.Status.FAILED, "guardrail")}, (
            output.text()[-2000:]
        )
        assert {r.rollout_candidate for r in refused} == {True, False}  # both sides got them
        agent.refresh_from_db()
        assert agent.rollout_version == v2  # nothing the candidate did
        assert selectors.guard_judgement(agent)["judged_runs"] == 0
        model.status = 429
        limited = send("busy", 12, "busy-")
        model.status = 200
        assert {(r.status, r.error_kind) for r in limited} == {(Run.Status.FAILED, "rate_limit")}
        assert {r.rollout_candidate for r in limited} == {True, False}
        judged = selectors.guard_judgement(agent)
        assert (judged["judged_runs"], judged["stable_judged_runs"]) == (0, 0), judged
        agent.refresh_from_db()
        assert agent.rollout_version == v2
        answered = send("hi", 40, "ok-")
    agent.refresh_from_db()
    assert agent.rollout_version is None and agent.pinned_version == v1, [
        (r.rollout_candidate, r.status) for r in answered
    ]
    event = AuditEvent.objects.get(action="agent.rollout.guard_rollback", object_id=str(agent.pk))
    assert "candidate broke" not in event.after["reason"] and "runs failed" in event.after["reason"]
    stable = [r for r in answered if not r.rollout_candidate]
    assert stable and all(r.status == Run.Status.SUCCEEDED for r in stable)
