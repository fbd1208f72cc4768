"""Runs through their services: size limits, claiming, cancelling, reaping, expiring, the step sink."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from agents import services
from agents.errors import AgentError
from agents.models import Agent, Run, RunStep, RunTool, WorkerHeartbeat
from agents.sink import DbStepSink
from llamon_agent.expr import MAX_DATA_BYTES, MAX_QUERY_CHARS
from llamon_agent.tools import AgentRequest
from llamon_agent.trace import start_span

pytestmark = pytest.mark.django_db
HX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def agent() -> Agent:
    return Agent.objects.create(name="support", system_prompt="Be helpful.")


def test_a_query_over_the_limit_is_refused_before_anything_is_stored(
    agent, django_capture_on_commit_callbacks
) -> None:
    with (
        django_capture_on_commit_callbacks() as callbacks,
        pytest.raises(AgentError, match="the limit is 32,000") as info,
    ):
        services.run_create(actor=None, agent=agent, request=AgentRequest(query="x" * (MAX_QUERY_CHARS + 1)))
    assert info.value.field == "query"
    assert not Run.objects.exists() and callbacks == []


def test_dataparts_over_the_limit_are_refused(agent) -> None:
    big = [{"blob": "y" * MAX_DATA_BYTES}]
    with pytest.raises(AgentError, match="bytes together"):
        services.run_create(actor=None, agent=agent, request=AgentRequest(query="hi", a2a_data=big))
    assert not Run.objects.exists()


def test_run_create_enqueues_after_commit_and_records_the_ids(
    agent, django_capture_on_commit_callbacks, monkeypatch
) -> None:
    sent = []
    monkeypatch.setattr("agents.dispatch.run_enqueue", lambda run_id: sent.append(run_id))
    request = AgentRequest(
        query="주문 조회",
        context={"userId": "C-1001", "sessionId": "s-1"},
        a2a_data=[{"chatbotId": "premium-support"}],
    )
    with django_capture_on_commit_callbacks(execute=True):
        run = services.run_create(actor=None, agent=agent, request=request)
        assert sent == []  # not before the commit
    assert sent == [run.pk]
    assert (run.user_id, run.session_id, run.chatbot_id) == ("C-1001", "s-1", "premium-support")
    assert run.status == Run.Status.QUEUED


def test_a_run_is_claimed_once(agent) -> None:
    run = Run.objects.create(agent=agent, query="q")
    assert services.run_claim(run_id=run.pk) is True
    assert services.run_claim(run_id=run.pk) is False  # a redelivered message does nothing
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING and run.worker


def test_cancel_a_queued_run_at_once_and_flag_a_running_one(agent) -> None:
    queued = Run.objects.create(agent=agent, query="q")
    assert services.run_cancel(actor=None, run=queued).status == Run.Status.CANCELLED
    assert services.run_claim(run_id=queued.pk) is False
    running = Run.objects.create(agent=agent, query="q", status=Run.Status.RUNNING)
    flagged = services.run_cancel(actor=None, run=running)
    assert flagged.status == Run.Status.RUNNING and flagged.cancel_requested


def test_the_reaper_fails_runs_whose_heartbeat_stopped(agent) -> None:
    old = timezone.now() - timedelta(seconds=60)
    stale = Run.objects.create(
        agent=agent, query="q", status=Run.Status.RUNNING, started_at=old, heartbeat_at=old
    )
    fresh = Run.objects.create(
        agent=agent, query="q", status=Run.Status.RUNNING, started_at=old, heartbeat_at=timezone.now()
    )
    RunStep.objects.create(run=stale, seq=1, kind="llm", name="model", started_at=old)
    assert services.runs_reap(stale_after_s=30) == 1
    stale.refresh_from_db()
    fresh.refresh_from_db()
    assert stale.status == Run.Status.FAILED and stale.error_kind == "worker_lost"
    assert stale.error.startswith("worker lost: no heartbeat for 30 s")
    assert stale.steps.get().status == "interrupted"  # the step committed before the death is kept
    assert fresh.status == Run.Status.RUNNING


def test_the_reaper_blames_nobody_on_its_first_pass_after_a_silence(agent) -> None:
    # While the database was down no heartbeat could be written, and no worker could record a
    # sign of life: the first pass after it gives the runs a stale period to beat again.
    old = timezone.now() - timedelta(seconds=60)
    WorkerHeartbeat.objects.create(hostname="h:1", pid=1, started_at=old, seen_at=old)
    run = Run.objects.create(
        agent=agent, query="q", status=Run.Status.RUNNING, started_at=old, heartbeat_at=old
    )
    assert services.runs_reap(stale_after_s=30, reaper="h:2") == 0
    assert Run.objects.get(pk=run.pk).status == Run.Status.RUNNING
    assert WorkerHeartbeat.objects.get(hostname="h:2").seen_at > old  # the reaper is alive
    # The next pass follows a recent sign of life: a run still silent lost its worker.
    assert services.runs_reap(stale_after_s=30, reaper="h:2") == 1
    assert Run.objects.get(pk=run.pk).error_kind == "worker_lost"


def test_a_run_the_database_lost_ends_saying_so_not_worker_lost(agent, monkeypatch) -> None:
    from django.db import OperationalError

    from agents import runtime

    def lost(*, run_id: int) -> None:
        raise OperationalError("server closed the connection unexpectedly\n\tThis probably means ...")

    monkeypatch.setattr(runtime, "execute_claimed_run", lost)
    run = Run.objects.create(agent=agent, query="q")
    services.run_execute(run_id=run.pk)
    run.refresh_from_db()
    assert (run.status, run.error_kind) == (Run.Status.FAILED, "database")
    assert run.error == (
        "the database stopped answering during the run (server closed the connection unexpectedly); "
        "the worker recorded this end once it was back"
    )


def test_a_reaped_run_is_not_overwritten_by_a_late_finish(agent) -> None:
    run = Run.objects.create(agent=agent, query="q", status=Run.Status.FAILED, error="worker lost")
    services.run_finish(run_id=run.pk, status=Run.Status.SUCCEEDED, answer="late")
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and run.answer == ""


@pytest.mark.django_db(transaction=True)  # the heartbeat thread has its own connection
def test_the_heartbeat_thread_touches_a_running_run(agent) -> None:
    old = timezone.now() - timedelta(seconds=60)
    run = Run.objects.create(agent=agent, query="q", status=Run.Status.RUNNING, heartbeat_at=old)
    with services.run_heartbeat(run_id=run.pk, period_s=0.05):
        deadline = time.monotonic() + 5
        while Run.objects.get(pk=run.pk).heartbeat_at == old and time.monotonic() < deadline:
            time.sleep(0.02)
    assert Run.objects.get(pk=run.pk).heartbeat_at > old


@pytest.mark.django_db(transaction=True)
def test_the_heartbeat_connects_again_after_the_database_dropped_it(agent) -> None:
    from django.db import connection

    if connection.vendor != "postgresql":  # SQLite has no server to drop a connection
        pytest.skip("a dropped connection is PostgreSQL's (SQLite has no server)")
    old = timezone.now() - timedelta(seconds=60)
    run = Run.objects.create(agent=agent, query="q", status=Run.Status.RUNNING, heartbeat_at=old)

    def beaten_since(moment) -> bool:
        deadline = time.monotonic() + 10
        while Run.objects.get(pk=run.pk).heartbeat_at <= moment and time.monotonic() < deadline:
            time.sleep(0.05)
        return Run.objects.get(pk=run.pk).heartbeat_at > moment

    with services.run_heartbeat(run_id=run.pk, period_s=0.2):
        assert beaten_since(old)
        with connection.cursor() as cursor:  # what a database restart does to the beat's connection
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND datname = current_database() AND query LIKE %s",
                ["%heartbeat_at%"],
            )
            assert cursor.fetchone() is not None
        dropped = timezone.now()
        assert beaten_since(dropped)  # before the fix: "connection already closed" every beat


def test_retention_deletes_only_old_finished_runs(agent) -> None:
    services.privacy_update(actor=None, redaction_patterns=[], mask_presets=[], retention_days=7)
    old = timezone.now() - timedelta(days=8)
    Run.objects.create(agent=agent, query="old", status=Run.Status.SUCCEEDED, finished_at=old)
    Run.objects.create(agent=agent, query="recent", status=Run.Status.SUCCEEDED, finished_at=timezone.now())
    Run.objects.create(agent=agent, query="running", status=Run.Status.RUNNING)
    assert services.runs_delete_expired() == 1
    assert sorted(Run.objects.values_list("query", flat=True)) == ["recent", "running"]


def test_the_sink_commits_a_step_on_start_and_completes_it_on_end(agent) -> None:
    run = Run.objects.create(agent=agent, query="q")
    sink = DbStepSink(run, redact=lambda v: v)
    span = start_span(
        sink,
        "rule",
        "route_order_lookup",
        input={"mcp_id": "order-service", "tool_name": "get_order", "params": {"query": "q"}},
    )
    step = RunStep.objects.get(run=run)
    assert (step.seq, step.status, step.tool_name, step.mcp_id) == (
        1,
        "running",
        "get_order",
        "order-service",
    )
    span.output = {"found": True}
    span.finish()
    step.refresh_from_db()
    assert step.status == "ok" and step.output == {"found": True} and step.duration_ms is not None


def test_the_sink_redacts_what_it_stores(agent) -> None:
    from agents.redaction import redactor

    run = Run.objects.create(agent=agent, query="q")
    sink = DbStepSink(run, redact=redactor(patterns=[r"C-\d{4}"], presets=["card_number"]))
    span = start_span(
        sink, "tool", "get_customer_profile", input={"customer_id": "C-1001", "card": "4111 1111 1111 1111"}
    )
    span.finish()
    stored = RunStep.objects.get(run=run).input
    assert "C-1001" not in str(stored) and "4111" not in str(stored)


def test_a_result_off_its_output_schema_is_stored_masked_and_shown_as_a_warning(agent, admin_client) -> None:
    from agents.redaction import redactor

    run = Run.objects.create(agent=agent, query="q")
    sink = DbStepSink(run, redact=redactor(patterns=[], presets=["card_number"]))
    span = start_span(sink, "rule", "card_lookup", input={"mcp_id": "cards", "tool_name": "get_card"})
    span.output = {"card": 4111111111111111}
    span.meta["warnings"] = ["card: 4111111111111111 is not of type 'string'"]
    span.finish()
    step = RunStep.objects.get(run=run)
    assert step.warnings and "4111" not in str(step.warnings)  # the message quotes the value: masked
    url = reverse("agents:run_steps", args=[run.pk])
    for language, phrase in (("en", "does not fit the tool's output schema"), ("ko", "출력 스키마")):
        html = admin_client.get(url, HTTP_ACCEPT_LANGUAGE=language).content.decode()
        assert 'class="warn small output-warnings"' in html and phrase in html, language
    plain = Run.objects.create(agent=agent, query="q")
    start_span(DbStepSink(plain), "rule", "fits").finish()
    assert RunStep.objects.get(run=plain).warnings == []


def test_agent_validation_refuses_bad_patterns_and_keeps_the_old_agent(agent) -> None:
    agent.input_blocked_patterns = ["(unclosed"]
    with pytest.raises(AgentError, match="not a valid regular expression") as info:
        services.agent_save(actor=None, agent=agent)
    assert info.value.field == "input_blocked_patterns"
    assert Agent.objects.get(pk=agent.pk).input_blocked_patterns == []


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"name": "   "}, "name", "This field cannot be blank."),
        ({"name": "x" * 101}, "name", "at most 100 characters"),
        ({"rule_set": 2**40}, "rule_set", "There is no rule set with id"),
        ({"pinned_version": 99}, "pinned_version", "no published version 99"),
        ({"react_servers": ["nope"]}, "react_servers", "No enabled MCP server"),
        ({"input_blocked_patterns": ["a\nb"]}, "input_blocked_patterns", "one non-empty line"),
        ({"model_provider": "gpt"}, "model_provider", "is not a valid choice"),
        ({"model_provider": "scripted"}, "model_script", "at least one reply"),
    ],
)
def test_named_values_are_checked_by_the_service_whatever_the_route(agent, change, field, message) -> None:
    """The API and the MCP endpoint hand values to the service, not to the page's form: the
    service alone must refuse each bad value with its field and keep the agent as it was."""
    values = {**services.agent_values(agent), **change}
    with pytest.raises(AgentError, match=message) as info:
        services.agent_save_values(actor=None, agent=Agent.objects.get(pk=agent.pk), values=values)
    assert info.value.field == field
    assert services.agent_values(Agent.objects.get(pk=agent.pk)) == services.agent_values(agent)


def test_named_values_round_trip(agent) -> None:
    values = services.agent_values(agent)
    saved = services.agent_save_values(actor=None, agent=Agent.objects.get(pk=agent.pk), values=values)
    assert services.agent_values(saved) == values


def test_agent_save_refuses_a_stale_revision(agent) -> None:
    services.agent_save(actor=None, agent=Agent.objects.get(pk=agent.pk), revision=1)
    stale = Agent.objects.get(pk=agent.pk)
    stale.description = "mine"
    with pytest.raises(AgentError, match="changed while you were editing"):
        services.agent_save(actor=None, agent=stale, revision=1)


def test_the_poll_returns_only_new_steps_and_stops_when_the_run_ended(viewer_client, agent) -> None:
    run = Run.objects.create(agent=agent, query="q", status=Run.Status.RUNNING)
    now = timezone.now()
    for seq in (1, 2, 3):
        RunStep.objects.create(run=run, seq=seq, kind="llm", name=f"turn-{seq}", status="ok", started_at=now)
    RunStep.objects.create(run=run, seq=4, kind="tool", name="get_order", status="running", started_at=now)
    response = viewer_client.get(reverse("agents:run_steps", args=[run.pk]), {"after": 2}, **HX)
    html = response.content.decode()
    assert response.status_code == 200
    assert "turn-3" in html and "turn-1" not in html and "turn-2" not in html
    assert "after=3" in html  # the still-running step 4 is fetched again next time
    Run.objects.filter(pk=run.pk).update(status=Run.Status.SUCCEEDED, answer="done")
    RunStep.objects.filter(run=run, seq=4).update(status="ok")
    final = viewer_client.get(reverse("agents:run_steps", args=[run.pk]), {"after": 3}, **HX)
    assert final.status_code == 286  # htmx: stop polling
    assert "get_order" in final.content.decode() and "done" in final.content.decode()


def test_run_detail_lists_steps_and_the_filters_find_runs_by_rule_and_customer(viewer_client, agent) -> None:
    now = timezone.now()
    a = Run.objects.create(agent=agent, query="주문 조회", user_id="C-1001", status=Run.Status.SUCCEEDED)
    b = Run.objects.create(agent=agent, query="날씨", user_id="C-2002", status=Run.Status.SUCCEEDED)
    RunStep.objects.create(
        run=a,
        seq=1,
        kind="rule",
        name="route_order_lookup",
        status="ok",
        tool_name="get_order",
        started_at=now,
    )
    RunTool.objects.create(
        run=a, tool_name="get_order", created_at=a.created_at
    )  # as the trace sink writes it
    html = viewer_client.get(reverse("agents:run_list"), {"rule": "route_order_lookup"}).content.decode()
    assert f'data-run="{a.pk}"' in html and f'data-run="{b.pk}"' not in html
    html = viewer_client.get(reverse("agents:run_list"), {"user_id": "C-2002"}).content.decode()
    assert f'data-run="{b.pk}"' in html and f'data-run="{a.pk}"' not in html
    html = viewer_client.get(reverse("agents:run_list"), {"tool": "get_order"}, **HX).content.decode()
    assert 'id="run-table"' in html and "<html" not in html and f'data-run="{a.pk}"' in html
    detail = viewer_client.get(reverse("agents:run_detail", args=[a.pk])).content.decode()
    assert "route_order_lookup" in detail and 'id="timeline"' in detail


def test_diagnostics_flag_an_llm_call_that_repeats_a_pre_step_call(agent) -> None:
    from agents.selectors import run_diagnostics

    now = timezone.now()
    run = Run.objects.create(agent=agent, query="q", status=Run.Status.SUCCEEDED)
    RunStep.objects.create(
        run=run,
        seq=1,
        kind="rule",
        name="route",
        status="ok",
        tool_name="get_order",
        input={"params": {"query": "A-1"}},
        started_at=now,
    )
    RunStep.objects.create(
        run=run,
        seq=2,
        kind="tool",
        name="get_order",
        status="ok",
        tool_name="get_order",
        input={"query": "A-1"},
        started_at=now,
    )
    messages = [d["message"] for d in run_diagnostics(run=run)]
    assert any("same params the pre-step rule route already used" in m for m in messages)


def test_the_reaper_fails_served_runs_that_stopped_sending_traces_with_their_own_bound(agent) -> None:
    old = timezone.now() - timedelta(seconds=120)
    served = Run.objects.create(
        query="q", source=Run.Source.SERVED, status=Run.Status.RUNNING, heartbeat_at=old
    )
    worker = Run.objects.create(agent=agent, query="q", status=Run.Status.RUNNING, heartbeat_at=old)
    assert services.runs_reap(stale_after_s=30, served_stale_after_s=600) == 1  # the worker run only
    served.refresh_from_db()
    assert served.status == Run.Status.RUNNING
    assert services.runs_reap(stale_after_s=30, served_stale_after_s=60) == 1
    served.refresh_from_db()
    worker.refresh_from_db()
    assert served.status == Run.Status.FAILED and served.error_kind == "served_lost"
    assert served.error.startswith("served agent stopped reporting: no trace event for 60 s")
    assert worker.error_kind == "worker_lost"


def _bot():
    """The served agent "bot"'s ingest credential (one per test)."""
    from agents.models import IngestCredential

    found = IngestCredential.objects.filter(agent_name="bot").first()
    return found or services.ingest_credential_issue(actor=None, agent_name="bot")[0]


def test_every_ingested_batch_is_a_sign_of_life() -> None:
    run, _ = services.run_ingest(
        credential=_bot(),
        run=None,
        events=[],
        source="served",
        agent=None,
        agent_name="bot",
        request=AgentRequest(query="q"),
        finish=None,
    )
    Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=900))
    services.run_ingest(
        credential=_bot(),
        run=run,
        events=[],
        source="served",
        agent=None,
        agent_name="bot",
        request=None,
        finish=None,
    )
    assert services.runs_reap(served_stale_after_s=600) == 0
    assert Run.objects.get(pk=run.pk).status == Run.Status.RUNNING


def test_stored_run_data_keeps_no_mcp_stderr_tail() -> None:
    from agents.redaction import redactor
    from llamon_agent.mcp.transports import STDERR_MARKER

    redact = redactor(patterns=[], presets=[])
    stored = redact(
        {"error": f"tool 'x': the session died (exit code 3){STDERR_MARKER}token=abc | more lines"}
    )
    assert stored["error"].startswith("tool 'x': the session died (exit code 3)")
    assert (
        "abc" not in stored["error"]
        and "more lines" not in stored["error"]
        and "admins only" in stored["error"]
    )


def test_a_served_runs_steps_hide_what_its_input_hid_even_in_pieces() -> None:
    from agents.redaction import privacy_get
    from llamon_agent.trace import ListSink

    privacy = privacy_get()
    privacy.mask_presets = ["email"]
    privacy.save()
    recorded = ListSink()
    span = start_span(recorded, "tool", "search_docs", input={"q": "메일 Kim@Example.com 검색"})
    span.output = {"terms": ["메일", "kim", "example", "com", "검색"]}
    span.finish()
    run, _ = services.run_ingest(
        credential=_bot(),
        run=None,
        events=recorded.events,
        source="served",
        agent=None,
        agent_name="bot",
        request=AgentRequest(query="메일 Kim@Example.com 검색"),
        finish={"status": "succeeded", "answer": "kim / example / com 으로 찾았습니다", "error": ""},
    )
    step = RunStep.objects.get(run=run)
    assert step.input == {"q": "메일 [이메일] 검색"}
    assert step.output == {"terms": ["메일", "[이메일]", "[이메일]", "[이메일]", "검색"]}
    assert Run.objects.get(pk=run.pk).answer == "[이메일] 으로 찾았습니다"


def test_a_served_runs_oversized_tool_output_is_stored_cut(settings) -> None:
    from llamon_agent.mcp.results import truncation
    from llamon_agent.trace import ListSink

    settings.LLAMON_TOOL_RESULT_MAX_BYTES = 4096
    recorded = ListSink()
    for name, output in (("local_text", "y" * 1_000_000), ("local_rows", {"rows": list(range(100_000))})):
        span = start_span(recorded, "tool", name, input={})
        span.output = output
        span.finish()
    small = start_span(recorded, "tool", "small", input={})
    small.output = {"ok": True}
    small.finish()
    run, _ = services.run_ingest(
        credential=_bot(),
        run=None,
        events=recorded.events,
        source="served",
        agent=None,
        agent_name="bot",
        request=AgentRequest(query="q"),
        finish=None,
    )
    text, rows, kept = (s.output for s in RunStep.objects.filter(run=run).order_by("seq"))
    assert truncation(text) == {"size": 1_000_000, "kept": 4096} and text.startswith("y" * 4096)
    assert truncation(rows)["size"] == len(json.dumps({"rows": list(range(100_000))}))
    assert rows.startswith('{"rows": [0, 1, 2') and kept == {"ok": True}
