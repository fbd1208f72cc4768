"""A real task through a real broker: a worker process writes a row the test then reads."""

from __future__ import annotations

import time

import pytest

from agents.models import WorkerHeartbeat
from agents.tasks import worker_ping
from llamon_web.celery import app
from tests.conftest import celery_worker

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


def _wait_for_heartbeat(timeout_s: float = 30.0) -> WorkerHeartbeat:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        row = WorkerHeartbeat.objects.first()
        if row is not None:
            return row
        time.sleep(0.05)
    raise AssertionError("no worker wrote its heartbeat row")


def test_task_through_real_redis_is_run_by_a_worker(redis_url) -> None:
    assert not WorkerHeartbeat.objects.exists()
    with celery_worker(redis_url) as (proc, output):
        with app.connection_for_write(redis_url) as connection:
            worker_ping.apply_async(connection=connection)
        row = _wait_for_heartbeat()
    assert row.pid != 0
    assert "agents.tasks.worker_ping" in output.text()
    assert proc.pid != row.pid  # written by a pool process, not this test


def test_task_through_embedded_broker_is_run_by_a_worker(settings) -> None:
    assert settings.CELERY_BROKER_URL == "atomicfs://"
    assert not WorkerHeartbeat.objects.exists()
    with celery_worker(None):
        worker_ping.delay()
        row = _wait_for_heartbeat()
    assert row.hostname.endswith(f":{row.pid}")
