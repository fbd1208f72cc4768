"""A mining job split over two real Celery workers through a real redis-server."""

from __future__ import annotations

import time

import pytest

from agents.models import Agent
from governance import suggestions as service
from rules.models import RuleSet
from servers.models import McpServer
from tests.conftest import celery_worker
from tests.support.intent_runs import store
from tests.support.intents import INTENTS_LIST, generate

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]


def test_a_job_is_split_over_two_workers_and_finds_the_rules(redis_publisher, editor) -> None:  # noqa: F811
    rule_set = RuleSet.objects.create(name="bank")
    agent = Agent.objects.create(name="bank-agent", system_prompt="p", rule_set=rule_set)
    servers: dict[str, list[dict[str, str]]] = {}
    for intent in INTENTS_LIST:
        servers.setdefault(intent.mcp_id, []).append({"name": intent.tool})
    for mcp_id, tools in servers.items():
        agent.react_servers.add(
            McpServer.objects.create(
                mcp_id=mcp_id, transport="http", url="http://127.0.0.1:9/mcp", tools=tools
            )
        )
    observations, _truth = generate(
        1500,
        seed=2,
        only=("balance", "appointment", "claim_status", "claim_new", "fx_rate", "refund"),
        noise=0.01,
    )
    store(observations, agent)
    with celery_worker(redis_publisher) as (_, first), celery_worker(redis_publisher) as (_, second):
        job = service.suggestion_start(actor=editor, agent=agent, days=1, part_runs=250)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not job.finished:
            time.sleep(0.2)
            job.refresh_from_db()
    assert job.status == "succeeded", (job.status, job.error, first.text()[-2000:], second.text()[-2000:])
    assert job.parts == 6 and job.done == 18
    # Both workers took parts of the job.
    for output in (first, second):
        assert "governance.tasks.suggestion_part_task" in output.text()
    tools = {s["tool"] for s in job.result["suggestions"]}
    assert {"get_balance", "get_claim", "book_appointment"} <= tools, job.result["rejected"]
