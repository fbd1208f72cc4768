"""Runs that run out of time end `timed_out` (soft limit on a real worker, hard limit via the reaper),
a tool result holding NaN or Infinity keeps its trace step, and a run stores at most LLAMON_RUN_MAX_BYTES."""

from __future__ import annotations

import hashlib
import json
import math
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from agents import services
from agents.models import Agent, Run, RunStep
from agents.sink import CUT_KEY, DbStepSink, RunBytes
from llamon_agent.tools import AgentRequest
from llamon_agent.trace import start_span
from tests.conftest import celery_worker
from tests.support.runs import misbehaving_agent, wait_for_run


@pytest.fixture
def agent(db) -> Agent:
    return Agent.objects.create(name="support", system_prompt="Be helpful.")


@pytest.mark.django_db
def test_the_reaper_marks_a_run_killed_by_the_hard_limit_timed_out(agent, settings) -> None:
    settings.LLAMON_RUN_HARD_LIMIT_S = 50
    old = timezone.now() - timedelta(seconds=60)
    killed = Run.objects.create(
        agent=agent, query="q", status=Run.Status.RUNNING, started_at=old, heartbeat_at=old
    )
    recent = timezone.now() - timedelta(seconds=40)  # started within the limit: its worker died
    lost = Run.objects.create(
        agent=agent, query="q", status=Run.Status.RUNNING, started_at=recent, heartbeat_at=recent
    )
    RunStep.objects.create(run=killed, seq=1, kind="tool", name="slow", started_at=old)
    assert services.runs_reap(stale_after_s=30) == 2
    killed.refresh_from_db()
    lost.refresh_from_db()
    assert (killed.status, killed.error_kind) == (Run.Status.TIMED_OUT, "timeout")
    assert killed.error == (
        "The run took longer than the hard limit of 50 s and its worker process was stopped."
    )
    assert killed.steps.get().status == "interrupted"
    assert (lost.status, lost.error_kind) == (Run.Status.FAILED, "worker_lost")


@pytest.mark.django_db
def test_timed_out_runs_are_shown_and_filtered_in_pages_and_the_api(agent, viewer_client) -> None:
    done = Run.objects.create(agent=agent, query="slow one", status=Run.Status.TIMED_OUT, error="too long")
    Run.objects.create(agent=agent, query="fine one", status=Run.Status.SUCCEEDED)
    html = viewer_client.get(reverse("agents:run_list"), {"status": "timed_out"}).content.decode()
    assert "slow one" in html and "fine one" not in html
    api = viewer_client.get("/api/runs", {"status": "timed_out"}).json()
    assert [r["id"] for r in api["items"]] == [done.pk] and api["items"][0]["status"] == "timed_out"
    page = viewer_client.get(reverse("agents:run_detail", args=[done.pk])).content.decode()
    assert 'data-status="timed_out"' in page


@pytest.mark.django_db
def test_a_tool_result_with_nan_keeps_its_step(agent, viewer_client) -> None:
    run = Run.objects.create(agent=agent, query="q", status=Run.Status.SUCCEEDED)
    sink = DbStepSink(run)
    span = start_span(sink, "tool", "get_score", input={"x": math.inf})
    span.output = {"score": math.nan, "range": [-math.inf, 1.5], "nested": {"v": math.nan}}
    span.finish()
    step = RunStep.objects.get(run=run)
    assert step.status == "ok"
    assert step.input == {"x": "Infinity"}
    assert step.output == {"score": "NaN", "range": ["-Infinity", 1.5], "nested": {"v": "NaN"}}
    page = viewer_client.get(reverse("agents:run_detail", args=[run.pk])).content.decode()
    assert "get_score" in page and "NaN" in page
    assert viewer_client.get(f"/api/runs/{run.pk}/steps").status_code == 200


@pytest.mark.slow  # 20 s or more in the parallel suite: scheduled first, so the workers finish together
@pytest.mark.services
@pytest.mark.timeout(120)
@pytest.mark.django_db(transaction=True)
def test_a_run_past_its_soft_limit_on_a_worker_ends_timed_out(redis_publisher, make_user, settings) -> None:
    agent = misbehaving_agent(
        make_user("editor"),
        tool="hang",
        when='"hello" in query',
        params='{"seconds": 50}',
        timeout_s=60,
        name="slow",
        rule_set_name="slow",
    )
    # The message carries the sender's limits (agents.dispatch); the worker checks its own setting too.
    settings.LLAMON_RUN_SOFT_LIMIT_S, settings.LLAMON_RUN_HARD_LIMIT_S = 8, 20
    limits = {"LLAMON_TEST_RUN_SOFT_LIMIT_S": "8", "LLAMON_TEST_RUN_HARD_LIMIT_S": "20"}
    with celery_worker(redis_publisher, env=limits) as (_, output):
        run = services.run_create(actor=None, agent=agent, request=AgentRequest(query="hello"))
        run = wait_for_run(run.pk, timeout_s=60)
    assert run.status == Run.Status.TIMED_OUT, (run.status, run.error, output.text()[-2000:])
    assert run.error_kind == "timeout"
    assert run.error.startswith("The run took longer than 8 s and was stopped.")
    assert not run.steps.filter(status="running").exists()  # whatever was under way is settled


@pytest.mark.django_db
def test_a_run_stores_at_most_its_byte_limit_and_commits_to_what_it_cut(
    agent, viewer_client, settings
) -> None:
    settings.LLAMON_RUN_MAX_BYTES = 1024 * 1024
    run = Run.objects.create(agent=agent, query="q", status=Run.Status.SUCCEEDED)
    sink = DbStepSink(run)
    big = {"rows": ["가" * 1000 + str(i) for i in range(80)]}  # ~240 KB of JSON each
    for i in range(40):  # 40 rules returning ~240 KB each: ~9.6 MB without the limit
        span = start_span(sink, "rule", f"rule_{i}", input={"i": i})
        span.output = {**big, "i": i}
        span.finish()
    span = start_span(sink, "answer", "answer", input={"i": "last"})
    span.output = "답변: 주문이 배송 중입니다."  # small: stored whole past the limit
    span.finish()
    steps = list(RunStep.objects.filter(run=run).order_by("seq"))
    stored = sum(len(json.dumps([s.input, s.output], ensure_ascii=False).encode()) for s in steps)
    assert stored <= settings.LLAMON_RUN_MAX_BYTES + 41 * 200, stored
    cut = [s for s in steps if isinstance(s.output, dict) and CUT_KEY in s.output]
    assert 30 <= len(cut) <= 37, len(cut)  # the first ones whole, then markers
    for step in cut:
        i = int(step.name.removeprefix("rule_"))
        text = json.dumps({**big, "i": i}, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        assert step.output == {
            CUT_KEY: "run byte limit",
            "bytes": len(text.encode()),
            "sha256": hashlib.sha256(text.encode()).hexdigest(),
        }
    assert steps[-1].output == "답변: 주문이 배송 중입니다."
    page = viewer_client.get(reverse("agents:run_detail", args=[run.pk]))
    assert page.status_code == 200 and len(page.content) < 3 * settings.LLAMON_RUN_MAX_BYTES


def test_the_run_byte_limit_counts_what_it_keeps_and_never_cuts_small_values() -> None:
    budget = RunBytes(4096)
    small, large = {"id": "x" * 500}, {"blob": "y" * 3000}
    assert budget.bounded(large) == large and budget.bounded(small) == small
    assert budget.bounded(large)[CUT_KEY] == "run byte limit"  # 3,000 + 3,000 > 4,096
    assert budget.bounded(small) == small  # under 1 KB: whole, even past the limit
    assert budget.bounded(None) is None and budget.bounded("") == ""
