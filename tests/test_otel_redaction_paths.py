"""One redaction for every exporter (issue #45, point 4): a customer's e-mail is masked in the OTel
spans of a worker run and of a `llamon run` agent alike.

The privacy settings mask e-mails. The same message goes through a real Celery worker (the demo
agent) and through a react project served by `llamon run` in registry mode against the live server
(it reads the privacy settings from `GET /api/privacy`); both export to one real OTLP/HTTP
receiver on 127.0.0.1 with message content captured. Each path's spans carry the content, masked.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from accounts.token_services import token_create
from agents import services
from agents.models import Agent, PrivacySettings, Run
from llamon_agent.tools import AgentRequest
from tests.conftest import celery_worker
from tests.support.otlp_receiver import start_receiver
from tests.support.runs import wait_for_run
from tests.support.served import Served, a2a_send, new_project

pytestmark = [
    pytest.mark.slow,
    pytest.mark.services,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(300),
]

EMAIL = "kim.customer@example.com"
MESSAGE = f"주문 A-1001 배송 조회 부탁해요. 연락처는 {EMAIL} 입니다"
OTEL = {
    "OTEL_BSP_SCHEDULE_DELAY": "100",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true",
}


def _spans_of(receiver: Any, service: str, timeout_s: float = 60.0) -> list[str]:
    """The spans ``service`` exported, as text, once its root span (invoke_agent) has arrived."""
    deadline = time.monotonic() + timeout_s
    while True:
        with receiver.lock:
            mine = [s for s in receiver.spans if s.resource.get("service.name") == service]
        if any(s.name.startswith("invoke_agent") for s in mine):
            time.sleep(0.5)  # the rest of the batch
            with receiver.lock:
                mine = [s for s in receiver.spans if s.resource.get("service.name") == service]
            return [json.dumps([s.name, s.attributes, s.status_message], ensure_ascii=False) for s in mine]
        assert time.monotonic() < deadline, f"no root span from {service}"
        time.sleep(0.1)


def test_a_customer_email_is_masked_in_spans_from_a_worker_and_from_llamon_run(
    live_server, redis_publisher, make_user, monkeypatch, tmp_path: Path
) -> None:
    receiver, server = start_receiver()
    try:
        call_command("load_demo", "--no-runs", "--no-refresh", verbosity=0)
        PrivacySettings.objects.update_or_create(pk=1, defaults={"mask_presets": ["email"]})
        for name, value in {**OTEL, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}.items():
            monkeypatch.setenv(name, value)

        monkeypatch.setenv("OTEL_SERVICE_NAME", "llamon-worker")
        with celery_worker(redis_publisher) as (_, output):
            agent = Agent.objects.get(name="seed-demo")
            run = services.run_create(
                actor=None, agent=agent, request=AgentRequest(query=MESSAGE, context={})
            )
            run = wait_for_run(run.pk)
            assert run.status == Run.Status.SUCCEEDED, (run.error, output.text()[-2000:])
            worker_spans = _spans_of(receiver, "llamon-worker")

        token = token_create(actor=make_user("editor"), name="served-agent").secret
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMON_") and k != "MCP_ID"}
        env.update(
            LLAMON_REGISTRY_URL=live_server.url,
            LLAMON_REGISTRY_TOKEN=token,
            LLAMON_REGISTRY_TRUSTED="1",  # the workbench is the operator's own: its stdio servers start
            OTEL_SERVICE_NAME="llamon-run",
        )
        served = Served(new_project("react", tmp_path / "support-agent"), env)
        try:
            served.wait_ready()
            asyncio.run(a2a_send(served.url, MESSAGE, {"userId": "C-1001"}))
            served_spans = _spans_of(receiver, "llamon-run")
        finally:
            served.stop()
    finally:
        server.shutdown()
        server.server_close()

    for path, spans in (("worker", worker_spans), ("llamon run", served_spans)):
        text = "\n".join(spans)
        assert "llamon.input" in text, (path, text[:2000])  # content was exported ...
        assert "[이메일]" in text, (path, text[:2000])  # ... with the e-mail masked
        assert EMAIL not in text and "kim.customer" not in text, (path, text[:4000])
