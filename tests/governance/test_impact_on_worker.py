"""An impact analysis on a real Celery worker through a real redis-server, over runs a worker really made."""

from __future__ import annotations

import time

import pytest
from django.core.management import call_command

from agents import services as agent_services
from agents.models import Agent, Run
from governance import services
from governance.models import ImpactAnalysis
from llamon_agent.tools import AgentRequest
from rules import services as rule_services
from rules.models import RuleSet
from tests.conftest import celery_worker
from tests.support.runs import wait_for_run

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]


def wait_for_analysis(pk: int, timeout_s: float = 90) -> ImpactAnalysis:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        analysis = ImpactAnalysis.objects.get(pk=pk)
        if analysis.finished:
            return analysis
        time.sleep(0.1)
    raise AssertionError(f"analysis {pk} is still {ImpactAnalysis.objects.get(pk=pk).status}")


def test_a_draft_is_replayed_on_a_worker_against_runs_the_worker_made(redis_publisher) -> None:  # noqa: F811
    call_command("load_demo", "--no-runs", verbosity=0)
    agent = Agent.objects.get(name="seed-demo")
    rule_set = RuleSet.objects.get(pk=agent.rule_set_id)
    with celery_worker(redis_publisher) as (_, output):
        runs = [
            agent_services.run_create(
                actor=None, agent=agent, request=AgentRequest(query=query, context=context)
            )
            for query, context in (
                ("주문 조회 부탁해 A-1001", {"userId": "C-1001"}),
                ("안녕하세요", {"userId": "C-1001", "chatbotId": "premium-support"}),
                ("날씨 어때?", {}),
            )
        ]
        runs = [wait_for_run(run.pk) for run in runs]
        assert all(r.status == Run.Status.SUCCEEDED for r in runs), [(r.status, r.error) for r in runs]

        rules = {r.name: r for r in rule_set.rules.all()}
        rule_services.rule_update(
            actor=None,
            rule=rules["route_order_lookup"],
            revision=None,
            params='{"query": ctx.query, "lang": "ko"}',
        )
        rule_services.rule_update(actor=None, rule=rules["route_by_chatbot_id"], revision=None, enabled=False)
        rule_set.refresh_from_db()
        analysis = services.impact_start(actor=None, rule_set=rule_set, version="draft", days=1)
        analysis = wait_for_analysis(analysis.pk)
    assert analysis.status == "succeeded", (analysis.error, output.text()[-3000:])
    assert "governance.tasks.impact_execute_task" in output.text()
    result = analysis.result
    assert (result["replayed"], result["unchanged"], result["changed"]) == (3, 1, 2)
    groups = {g["rule"]: g for g in result["rules"]}
    assert groups["route_order_lookup"]["changed"] == 1
    assert groups["route_order_lookup"]["samples"][0]["run_id"] == runs[0].pk
    assert groups["route_by_chatbot_id"]["removed"] == 1
    assert groups["route_by_chatbot_id"]["samples"][0]["run_id"] == runs[1].pk
    assert analysis.done == analysis.total == 3
