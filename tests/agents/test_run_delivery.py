"""Delivery that recovers: a down broker refuses a run cleanly, a lost task message is sent again, then failed.

Everything talks to a real redis-server: the test run's own, or a loopback port nothing listens on
(a broker that is down).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import time
from datetime import timedelta

import pytest
import redis
from django.urls import reverse
from django.utils import timezone

from agents import services
from agents.errors import BrokerUnavailableError
from agents.models import Agent, Run
from agents.tasks import SENT_AT_HEADER, runs_reap_task
from llamon_agent.tools import AgentRequest
from tests.conftest import celery_worker, free_port, redis_server
from tests.support.celery_publish import publishing_to
from tests.support.runs import wait_for_run

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]
DOWN = "The run queue (the Celery broker) is unavailable, so the run was not started and nothing was kept."


@pytest.fixture
def agent() -> Agent:
    return Agent.objects.create(name="support", system_prompt="Be helpful.")


@pytest.fixture
def broker_down(settings):
    """Publishing goes to a loopback port nothing listens on (connection refused)."""
    url = f"redis://127.0.0.1:{free_port()}/0"
    with publishing_to(url, settings.LLAMON_REDIS_TRANSPORT_OPTIONS):
        yield url


@pytest.fixture
def broker_frozen(settings):
    """A redis-server that accepts connections but never answers (SIGSTOPped), as a hung host does."""
    with redis_server() as (proc, port):
        proc.send_signal(signal.SIGSTOP)
        try:
            with publishing_to(f"redis://127.0.0.1:{port}/0", settings.LLAMON_REDIS_TRANSPORT_OPTIONS):
                yield
        finally:
            proc.send_signal(signal.SIGCONT)  # so that it can be terminated


def _queued_messages(url: str) -> list[dict]:
    client = redis.Redis.from_url(url)
    try:
        return [json.loads(raw) for raw in client.lrange("celery", 0, -1)]
    finally:
        client.close()


@pytest.fixture
def empty_queue(redis_publisher: str) -> str:
    redis.Redis.from_url(redis_publisher).delete("celery")
    return redis_publisher


def test_the_api_answers_503_and_keeps_no_run_when_the_broker_is_down(
    editor_client, agent, broker_down
) -> None:
    response = editor_client.post(
        "/api/runs", {"agent": agent.pk, "query": "hello"}, content_type="application/json"
    )
    assert response.status_code == 503, response.content
    assert response.json()["detail"].startswith(DOWN)
    assert not Run.objects.exists()  # nothing queued that no one will ever run


@pytest.mark.timeout(60)  # without socket timeouts the publish would wait forever on the frozen Redis
def test_a_frozen_broker_is_a_503_too_not_a_hung_request(
    editor_client, agent, broker_frozen, settings
) -> None:
    response = editor_client.post(
        "/api/runs", {"agent": agent.pk, "query": "hello"}, content_type="application/json"
    )
    assert response.status_code == 503 and response.json()["detail"].startswith(DOWN)
    assert not Run.objects.exists()


def test_the_start_run_form_says_the_broker_is_down_keeps_the_input_and_no_run(
    editor_client, agent, broker_down
) -> None:
    response = editor_client.post(
        reverse("agents:run_start"), {"agent": agent.pk, "query": "내 주문 어디쯤?"}
    )
    assert response.status_code == 503
    page = response.content.decode()
    assert DOWN in page and "내 주문 어디쯤?" in page
    assert not Run.objects.exists()


def test_a_rerun_while_the_broker_is_down_is_refused_and_the_original_stays(agent, broker_down) -> None:
    original = Run.objects.create(agent=agent, agent_name=agent.name, query="again", status="succeeded")
    with pytest.raises(BrokerUnavailableError):
        services.run_rerun(actor=None, run=original)
    assert list(Run.objects.values_list("pk", flat=True)) == [original.pk]


def test_a_run_started_with_the_broker_up_is_queued_once(agent, empty_queue) -> None:
    run = services.run_create(actor=None, agent=agent, request=AgentRequest(query="hi"))
    assert run.queued_at is not None and run.delivery_attempts == 0
    assert [m["headers"]["argsrepr"] for m in _queued_messages(empty_queue)] == [f"({run.pk},)"]


def test_a_run_whose_message_was_lost_is_sent_again_then_failed_with_a_reason(
    agent, empty_queue, settings
) -> None:
    settings.LLAMON_RUN_CLAIM_GRACE_S = 5
    settings.LLAMON_RUN_DELIVERY_ATTEMPTS = 2
    long_ago = timezone.now() - timedelta(minutes=10)
    lost = Run.objects.create(agent=agent, agent_name=agent.name, query="lost", queued_at=long_ago)
    never_sent = Run.objects.create(agent=agent, agent_name=agent.name, query="crash before publish")
    Run.objects.filter(pk=never_sent.pk).update(created_at=long_ago)  # queued_at None: committed, never sent
    running = Run.objects.create(agent=agent, agent_name=agent.name, status="running", queued_at=long_ago)

    assert services.runs_redeliver() == {"resent": 2, "failed": 0}
    sent = sorted(m["headers"]["argsrepr"] for m in _queued_messages(empty_queue))
    assert sent == sorted([f"({lost.pk},)", f"({never_sent.pk},)"])
    lost.refresh_from_db()
    assert lost.status == "queued" and lost.delivery_attempts == 1
    assert lost.queued_at > long_ago

    # Sent again within the grace: not yet considered lost.
    assert services.runs_redeliver() == {"resent": 0, "failed": 0}
    # Each later pass that finds them still queued sends again, up to the limit, then fails them.
    later = timezone.now() + timedelta(seconds=6)
    assert services.runs_redeliver(sent_before=later) == {"resent": 2, "failed": 0}
    assert services.runs_redeliver(sent_before=later + timedelta(seconds=6)) == {"resent": 0, "failed": 2}
    lost.refresh_from_db()
    assert lost.status == "failed" and lost.error_kind == "not_delivered" and lost.finished_at
    assert lost.error.startswith("never picked up by a worker (broker unavailable?)")
    assert Run.objects.get(pk=running.pk).status == "running"  # the reaper's business, not this


def test_a_run_behind_a_backlog_is_not_touched(agent, empty_queue, settings) -> None:
    """Its message was sent after the reaper's (it is still ahead in the queue): not lost, only waiting."""
    settings.LLAMON_RUN_CLAIM_GRACE_S = 5
    reaper_sent = timezone.now() - timedelta(minutes=5)  # the reaper's message waited 5 min in the queue
    waiting = Run.objects.create(
        agent=agent, agent_name=agent.name, query="behind", queued_at=reaper_sent - timedelta(seconds=2)
    )
    assert services.runs_redeliver(sent_before=reaper_sent) == {"resent": 0, "failed": 0}
    assert Run.objects.get(pk=waiting.pk).delivery_attempts == 0
    assert _queued_messages(empty_queue) == []


def test_the_reaper_message_carries_when_it_was_sent_and_the_task_uses_it(
    agent, empty_queue, settings
) -> None:
    settings.LLAMON_RUN_CLAIM_GRACE_S = 5
    runs_reap_task.delay()
    [message] = _queued_messages(empty_queue)
    sent_at = message["headers"][SENT_AT_HEADER]
    assert abs(sent_at - time.time()) < 60

    # A run queued just before that message was sent is still within the grace: untouched.
    Run.objects.create(agent=agent, agent_name=agent.name, query="x", queued_at=timezone.now())
    runs_reap_task.apply(headers={SENT_AT_HEADER: sent_at})
    assert Run.objects.get().delivery_attempts == 0
    # The same run seen by a reaper message sent well after it: lost, sent again.
    runs_reap_task.apply(headers={SENT_AT_HEADER: time.time() + 10})
    assert Run.objects.get().delivery_attempts == 1


def test_a_worker_reads_the_reapers_sent_time_from_its_message(agent, empty_queue) -> None:
    """The message says it was sent an hour from now: a run queued now is behind it, so lost."""
    run = Run.objects.create(agent=agent, agent_name=agent.name, query="x", queued_at=timezone.now())
    with celery_worker(empty_queue):
        runs_reap_task.apply_async(headers={SENT_AT_HEADER: time.time() + 3600})
        # Re-sent, so this worker now runs it (had it read no header, "now" would leave it queued).
        run = wait_for_run(run.pk)
    assert run.delivery_attempts == 1 and run.status == "succeeded", run.error


def test_the_run_page_says_a_lost_message_was_sent_again_and_then_why_it_failed(
    viewer_client, agent, settings
) -> None:
    settings.LLAMON_RUN_DELIVERY_ATTEMPTS = 0  # no re-send: the next pass fails it
    run = Run.objects.create(agent=agent, agent_name=agent.name, query="x", delivery_attempts=1)
    page = viewer_client.get(reverse("agents:run_detail", args=[run.pk])).content.decode()
    assert (
        "Waiting for a worker… (its task message was lost, e.g. by a broker restart, and was sent again: attempt 2)"
        in page
    )
    assert services.runs_redeliver(sent_before=timezone.now() + timedelta(minutes=1))["failed"] == 1
    page = viewer_client.get(reverse("agents:run_detail", args=[run.pk])).content.decode()
    assert "never picked up by a worker (broker unavailable?): its task message was sent 2 times" in page


class _FullDisk:
    """The os module, except that writing a file fails as on a full disk (ENOSPC)."""

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)

    @staticmethod
    def write(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_under_the_embedded_broker_is_said_not_blamed_on_the_broker(
    editor_client, agent, settings, monkeypatch
) -> None:
    """The embedded broker writes each message to a file: on a full disk the 503 says the disk is
    full (English and Korean), not that the broker is down; no run is kept."""
    from llamon_web import broker
    from tests.support.celery_publish import publishing_to

    assert settings.CELERY_BROKER_URL == "atomicfs://"
    monkeypatch.setattr(broker, "os", _FullDisk())
    with publishing_to("atomicfs://", settings.CELERY_BROKER_TRANSPORT_OPTIONS):
        for language, full in (
            ("en", "The server's disk is full, so the run could not be queued"),
            ("ko", "서버 디스크"),
        ):
            response = editor_client.post(
                "/api/runs",
                {"agent": agent.pk, "query": "hello"},
                content_type="application/json",
                headers={"Accept-Language": language},
            )
            detail = response.json()["detail"]
            assert response.status_code == 503 and full in detail, detail
            assert "broker" not in detail.lower() and "브로커" not in detail
    assert not Run.objects.exists()
