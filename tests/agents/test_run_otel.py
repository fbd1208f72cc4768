"""A run on a real Celery worker is exported over OTLP/HTTP when the OTEL_* variables say so.

The worker process gets the standard variables (endpoint, headers) and sends its spans with the
real SDK exporter to the loopback receiver of tests/support/otlp_receiver.py; the spans are read back and
compared with the steps the same run stored in the database.
"""

from __future__ import annotations

import time

import pytest
from django.core.management import call_command

from agents import services
from agents.models import Agent, Run
from llamon_agent.tools import AgentRequest
from tests.conftest import celery_worker
from tests.support.otlp_receiver import Receiver, start_receiver
from tests.support.runs import wait_for_run

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


def wait_for_root(receiver: Receiver, run_id: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with receiver.lock:
            if any(s.attributes.get("llamon.run.id") == str(run_id) for s in receiver.spans):
                return
        time.sleep(0.1)
    raise AssertionError(f"no root span of run {run_id} arrived; got {[s.name for s in receiver.spans]}")


def test_a_worker_run_is_exported_with_the_steps_it_stored(redis_publisher, monkeypatch) -> None:
    receiver, server = start_receiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=llamon")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")  # export soon after the run, not in 5 s
    call_command("load_demo", "--no-runs", verbosity=0)
    agent = Agent.objects.get(name="seed-demo")
    try:
        with celery_worker(redis_publisher) as (_, output):
            run = services.run_create(
                actor=None, agent=agent, request=AgentRequest(query="주문 조회 부탁해 A-1001", context={})
            )
            run = wait_for_run(run.pk)
            assert run.status == Run.Status.SUCCEEDED, (run.error, output.text()[-2000:])
            wait_for_root(receiver, run.pk)
    finally:
        server.shutdown()
        server.server_close()

    (root,) = [s for s in receiver.spans if s.attributes.get("llamon.run.id") == str(run.pk)]
    assert root.name == "invoke_agent seed-demo" and root.attributes["llamon.run.source"] == "worker"
    assert receiver.headers[0]["x-tenant"] == "llamon"
    spans = [s for s in receiver.spans if s.trace_id == root.trace_id]
    by_step = {s.attributes.get("llamon.step.id"): s for s in spans}
    steps = list(run.steps.order_by("seq"))
    assert len(spans) == len(steps) + 1  # every stored step, plus the run itself
    for step in steps:
        span = by_step[step.event_id]
        assert span.attributes["llamon.step.kind"] == step.kind
        # The span's times are the step's own (microseconds, as the database keeps them).
        assert abs(span.start_ns / 1000 - step.started_at.timestamp() * 1e6) < 2
        assert abs((span.end_ns - span.start_ns) / 1e6 - step.duration_ms) < 0.01
    (rule,) = [s for s in spans if s.name == "rule route_order_lookup"]
    assert rule.attributes["gen_ai.tool.name"] == "get_order"
    assert rule.attributes["llamon.mcp_id"] == "order-service"
    (chat,) = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert chat.kind == "SPAN_KIND_CLIENT" and chat.attributes["gen_ai.request.model"]
