"""Runs on real Celery worker processes through a real redis-server, including their faults."""

from __future__ import annotations

import os
import signal
import time

import pytest
from django.core.management import call_command

from agents import services
from agents.models import Agent, ModelConnection, Run, RunStep
from agents.tasks import run_execute_task
from llamon_agent.tools import AgentRequest
from llamon_web.celery import app
from rules import services as rule_services
from servers.models import McpServer
from tests.conftest import celery_worker, free_port
from tests.support.runs import misbehaving_agent, wait_for_run

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


@pytest.fixture
def hang_agent(make_user) -> Agent:
    """An agent whose pre-step calls a tool that hangs when the query says 'hang'."""
    return misbehaving_agent(
        make_user("editor"),
        tool="hang",
        when='"hang" in query',
        params='{"seconds": 30}',
        timeout_s=2,
        name="faulty",
        rule_set_name="faults",
        rule_name="hang_rule",
    )


def test_the_demo_agent_runs_on_a_worker_through_redis(redis_publisher) -> None:
    call_command("load_demo", "--no-runs", verbosity=0)
    agent = Agent.objects.get(name="seed-demo")
    with celery_worker(redis_publisher) as (_, output):
        run = services.run_create(
            actor=None,
            agent=agent,
            request=AgentRequest(query="주문 조회 부탁해 A-1001", context={"userId": "C-1001"}),
        )
        run = wait_for_run(run.pk)
    assert run.status == Run.Status.SUCCEEDED, (run.error, output.text()[-2000:])
    assert run.rule_set_ref == "v1" and len(run.rule_set_hash) == 64
    # A server the worker's warm-up has not opened yet is a "connect ..." step first; not a step of the agent.
    kinds = list(
        run.steps.order_by("seq").exclude(name__startswith="connect ").values_list("kind", flat=True)
    )
    assert (
        kinds[0] == "guardrail"
        and "prestep" in kinds
        and "rule" in kinds
        and "llm" in kinds
        and kinds[-1] in ("answer", "guardrail")
    )
    rule = run.steps.get(kind="rule")
    assert (rule.name, rule.tool_name, rule.status) == ("route_order_lookup", "get_order", "ok")
    assert "A-1001" in str(rule.output)
    assert run.answer.startswith("확정 호출 결과를 바탕으로 답변합니다:")
    assert run.llm_calls == 1 and run.prestep_calls == 1


def test_a_hanging_tool_times_out_and_the_worker_serves_the_next_run(redis_publisher, hang_agent) -> None:
    with celery_worker(redis_publisher):
        hung = services.run_create(actor=None, agent=hang_agent, request=AgentRequest(query="please hang"))
        hung = wait_for_run(hung.pk)
        fine = services.run_create(actor=None, agent=hang_agent, request=AgentRequest(query="hello"))
        fine = wait_for_run(fine.pk)
    assert hung.status == Run.Status.FAILED
    assert hung.error.startswith("확정 호출된 MCP 단계에서 오류가 발생했습니다: hang_rule: ")
    assert hung.llm_calls == 0  # the error contract: no LLM call
    assert hung.steps.get(kind="rule").status == "error"
    assert fine.status == Run.Status.SUCCEEDED and fine.llm_calls == 1


@pytest.mark.slow
def test_a_killed_worker_fails_the_run_within_the_bound_and_a_redelivery_does_nothing(
    redis_publisher, hang_agent, settings
) -> None:
    McpServer.objects.filter(mcp_id="misbehaving").update(timeout_s=60)
    with celery_worker(redis_publisher) as (worker, _):
        run = services.run_create(actor=None, agent=hang_agent, request=AgentRequest(query="hang now"))
        wait_for_run(
            run.pk, until=lambda r: RunStep.objects.filter(run=r, kind="rule", status="running").exists()
        )
        os.killpg(worker.pid, signal.SIGKILL)  # the worker and its pool processes, mid-call
        killed_at = time.monotonic()
        worker.wait(timeout=10)
    steps_before = list(RunStep.objects.filter(run=run).order_by("seq").values_list("kind", "name"))
    assert ("rule", "hang_rule") in steps_before  # committed before the call started

    # Beat's reaper, called here on its schedule: the run is failed once its heartbeat is stale.
    bound = settings.LLAMON_RUN_STALE_AFTER_S + settings.LLAMON_RUN_HEARTBEAT_S + 5
    while Run.objects.get(pk=run.pk).status == Run.Status.RUNNING and time.monotonic() - killed_at < bound:
        services.runs_reap()
        time.sleep(0.5)
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and run.error_kind == "worker_lost", run.error
    assert run.error.startswith("worker lost: no heartbeat for")
    assert list(RunStep.objects.filter(run=run).order_by("seq").values_list("kind", "name")) == steps_before
    assert RunStep.objects.get(run=run, kind="rule").status == "interrupted"

    # The broker gives the message back (here: sent again); a new worker finds the run claimed.
    with celery_worker(redis_publisher) as (_, output):
        run_execute_task.delay(run.pk)
        output.wait_for("is not queued any more", timeout_s=30)
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert list(RunStep.objects.filter(run=run).order_by("seq").values_list("kind", "name")) == steps_before


def test_an_unreachable_llm_endpoint_fails_the_run_with_a_readable_error(redis_publisher) -> None:
    port = free_port()  # nothing listens there
    agent = Agent.objects.create(
        name="remote",
        system_prompt="p",
        model_provider="openai-compatible",
        model_name="m",
        model_connection=ModelConnection.objects.create(
            name="remote", base_url=f"http://127.0.0.1:{port}/v1", model_names=["m"]
        ),
    )
    with celery_worker(redis_publisher):
        run = services.run_create(actor=None, agent=agent, request=AgentRequest(query="hello"))
        run = wait_for_run(run.pk)
    assert run.status == Run.Status.FAILED
    assert run.error.startswith("LLM call failed:") and f"127.0.0.1:{port}" in run.error
    assert "Traceback" not in run.error


def test_cancelling_a_running_run_stops_it_at_the_next_step(redis_publisher, hang_agent) -> None:
    McpServer.objects.filter(mcp_id="misbehaving").update(timeout_s=60)
    rule_services.rule_update(
        actor=None, rule=hang_agent.rule_set.rules.get(), revision=None, params='{"seconds": 2}'
    )
    with celery_worker(redis_publisher):
        run = services.run_create(actor=None, agent=hang_agent, request=AgentRequest(query="hang briefly"))
        wait_for_run(run.pk, until=lambda r: r.status == Run.Status.RUNNING)
        services.run_cancel(actor=None, run=run)
        run = wait_for_run(run.pk)
    assert run.status == Run.Status.CANCELLED
    assert run.llm_calls == 0


def test_the_celery_app_is_back_on_the_embedded_broker_after_these_tests() -> None:
    assert app.conf.broker_url == "atomicfs://"


def test_a_sigterm_to_the_workers_whole_process_group_lets_its_runs_finish(
    redis_publisher, make_user
) -> None:
    """`kill -TERM -PGID` (systemd's default KillMode=control-group) while two runs wait on a tool:
    the pool's children ignore it, the main process shuts down warm, and both runs succeed. A third
    child has run nothing yet: it may die of the signal, which loses nothing."""
    agent = misbehaving_agent(
        make_user("editor"),
        tool="hang",
        when="len(query) > 0",
        params='{"seconds": 2}',
        timeout_s=30,
        name="release",
        rule_set_name="release",
    )
    with celery_worker(redis_publisher, concurrency=3) as (proc, output):
        runs = [
            services.run_create(actor=None, agent=agent, request=AgentRequest(query=f"run {i}"))
            for i in range(2)
        ]
        for run in runs:
            wait_for_run(run.pk, until=lambda r: r.status == Run.Status.RUNNING)
        os.killpg(proc.pid, signal.SIGTERM)  # the whole group: main process and pool children
        assert proc.wait(timeout=60) == 0, output.text()[-3000:]
    ended = [Run.objects.get(pk=run.pk) for run in runs]
    assert [r.status for r in ended] == [Run.Status.SUCCEEDED] * 2, (
        [(r.status, r.error_kind, r.error) for r in ended],
        output.text()[-3000:],
    )
    assert all(r.steps.get(kind="rule").status == "ok" for r in ended)
