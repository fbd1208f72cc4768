"""Staged rollout and shadow mode on a real Celery worker, through a real redis-server and real MCP servers."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from agents import services
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
