"""What a worker keeps between runs, and how it writes a run's steps (docs/performance.md, "Worker path").

In process: the published versions' rules a process keeps (read and compiled once, never another
version's), the batched step sink (a call's step is committed before the call, the local steps
with it or when the run ends), the database connection a worker keeps between tasks and the
cancel flag a run reads once per step.
"""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents import runtime, services
from agents.models import Agent, Run, RunStep, RunTool
from agents.sink import DbStepSink
from llamon_agent.trace import start_span
from llamon_web.demo import SEED_RULES
from rules import engine
from rules import services as rule_services
from rules.models import RuleSetVersion
from tests.support.rule_sets import build_rule_set
from tests.support.runs import misbehaving_agent

pytestmark = pytest.mark.django_db
CONTENT_COLUMN = re.compile(r'"rules_rulesetversion"\."content"(?!_)')


def test_a_version_is_read_once_a_new_one_is_picked_up_and_no_agent_gets_anothers_rules(
    agent, versions, author
) -> None:
    v1, v2 = versions
    follows = Agent.objects.create(
        name="follows", system_prompt="p", rule_set=v1.rule_set, rule_set_mode="latest"
    )
    first = runtime.agent_rules(follows)
    assert (first.ref, first.snapshot) == ("v2", v2.content)
    with CaptureQueriesContext(connection) as queries:
        again = runtime.agent_rules(Agent.objects.select_related("rule_set").get(pk=follows.pk))
    assert again.version is first.version and again.compiled() is first.compiled()
    assert not any(CONTENT_COLUMN.search(q["sql"]) for q in queries), "the content was read again"

    # A version published since is what the next run gets.
    rule_services.rule_create(
        actor=author,
        rule_set=v1.rule_set,
        name="search_too",
        mcp_id="knowledge-base",
        tool_name="search_docs",
        when='"검색" in ctx.query',
        params='{"q": ctx.query}',
    )
    v3 = rule_services.rule_set_publish(actor=author, rule_set=v1.rule_set)
    third = runtime.agent_rules(Agent.objects.select_related("rule_set").get(pk=follows.pk))
    assert (third.ref, third.snapshot) == ("v3", v3.content) and third.compiled() is not first.compiled()
    assert [info.name for info in third.compiled().infos][-1] == "search_too"

    # The fixture's agent pins v1: v1's rules, whatever this process read before.
    assert runtime.agent_rules(Agent.objects.get(pk=agent.pk)).snapshot == v1.content

    # Another rule set, its v1 like ours: its own rules.
    other_set = build_rule_set(author, "other", [SEED_RULES[1]])
    other_v1 = rule_services.rule_set_publish(actor=author, rule_set=other_set)
    other = Agent.objects.create(name="other", system_prompt="p", rule_set=other_set, rule_set_mode="latest")
    theirs = runtime.agent_rules(other)
    assert (theirs.ref, theirs.snapshot) == ("v1", other_v1.content)
    assert [info.name for info in theirs.compiled().infos] == [SEED_RULES[1]["name"]]

    # A row that comes with the id of one read before (after a rolled-back transaction) is not it.
    stand_in = RuleSetVersion(
        pk=v1.pk,
        rule_set=other_set,
        number=1,
        content=other_v1.content,
        content_hash=other_v1.content_hash,
        created_at=other_v1.created_at,
    )
    assert engine.version_rules(stand_in).snapshot == other_v1.content


def test_a_batched_sink_commits_a_calls_step_before_the_call_and_the_rest_with_the_next_write(
    agent,
) -> None:
    run = Run.objects.create(agent=agent, query="q", status=Run.Status.RUNNING)
    sink = DbStepSink(run, batch=True, created_at=run.created_at)

    def stored() -> list[tuple[int, str, str, int | None]]:
        return list(
            RunStep.objects.filter(run=run).order_by("seq").values_list("seq", "kind", "status", "parent_seq")
        )

    start_span(sink, "guardrail", "input").finish()
    prestep = start_span(sink, "prestep", "deterministic pre-step")
    assert stored() == []  # local steps wait
    rule = start_span(
        sink,
        "rule",
        "route_order_lookup",
        input={"mcp_id": "order-service", "tool_name": "get_order"},
        parent=prestep.id,
    )
    # Before the call: the call's step, running, and everything before it.
    assert stored() == [
        (1, "guardrail", "ok", None),
        (2, "prestep", "running", None),
        (3, "rule", "running", 2),
    ]
    assert list(RunTool.objects.filter(run=run).values_list("tool_name", flat=True)) == ["get_order"]
    rule.output = {"found": True}
    rule.finish()
    assert stored()[2] == (3, "rule", "ok", 2)  # a call's end is written at once too
    prestep.finish()
    start_span(sink, "answer", "answer").finish()
    assert stored()[1] == (2, "prestep", "running", None)
    sink.flush()
    assert stored() == [
        (1, "guardrail", "ok", None),
        (2, "prestep", "ok", None),
        (3, "rule", "ok", 2),
        (4, "answer", "ok", None),
    ]
    assert RunStep.objects.get(run=run, seq=3).output == {"found": True}
    sink.flush()  # nothing held: nothing written twice
    assert RunStep.objects.filter(run=run).count() == 4


def test_a_worker_keeps_its_database_connection_between_tasks_unless_it_cannot_serve(monkeypatch) -> None:
    from django.db import connections

    from agents.signals import _on_task_prerun
    from llamon_web.celery import app

    assert app.conf.get("CELERY_DB_REUSE_MAX")  # else Celery's fixup closes it around every task
    kept, failed, left_open = (connections.create_connection("default") for _ in range(3))
    for conn in (kept, failed, left_open):
        conn.ensure_connection()
    failed.errors_occurred = True  # what a database error leaves behind
    left_open.set_autocommit(False)  # a task that left a transaction open
    monkeypatch.setattr(connections, "all", lambda initialized_only=False: [kept, failed, left_open])
    raw = kept.connection
    _on_task_prerun()
    assert kept.connection is raw
    assert failed.connection is None and left_open.connection is None
    kept.close()


def test_a_run_reads_its_cancel_flag_once_per_step_and_still_stops_before_the_next_call(
    make_user, monkeypatch
) -> None:
    """The engine asks before each stage whether to stop; asked again with no step begun or ended
    since the last read (the run's read after its claim, the model's set-up, the input guardrail),
    the database is not read again. A cancel requested during a call is seen before the next one."""
    agent = misbehaving_agent(
        make_user("editor"),
        tool="echo",
        when="True",
        params='{"value": "ok"}',
        timeout_s=20,
        name="echoer",
        rule_set_name="echoes",
        rule_name="look_up",
        model_provider="scripted",
        model_script=[{"content": "never"}],
    )
    run = Run.objects.create(agent=agent, agent_name=agent.name, query="hi")
    seen: list[str] = []
    emit = DbStepSink.emit

    def cancel_during_the_call(sink: DbStepSink, event) -> None:
        seen.append(f"{event.kind} {event.phase}")
        emit(sink, event)
        if event.kind == "rule" and event.phase == "start":  # what run_cancel does to a running run
            Run.objects.filter(pk=sink.run_id).update(cancel_requested=True)

    def note_reads(execute, sql, params, many, context):
        if sql.startswith("SELECT") and "cancel_requested" in sql.split("WHERE", 1)[-1]:
            seen.append("read")
        return execute(sql, params, many, context)

    monkeypatch.setattr(DbStepSink, "emit", cancel_during_the_call)
    with connection.execute_wrapper(note_reads):
        services.run_execute(run_id=run.pk)
    run.refresh_from_db()
    assert (run.status, run.error, run.llm_calls) == (Run.Status.CANCELLED, "the run was cancelled", 0)
    agent.rule_set.refresh_from_db()
    assert run.rule_set_ref == f"draft@{agent.rule_set.revision}"  # stored with the run's first write
    reads = [n for n, what in enumerate(seen) if what == "read"]
    # The first read follows a step (a cold server's connect, else the input guardrail); a step
    # begins or ends between any two.
    assert reads and reads[0] > 0 and all(b - a > 1 for a, b in zip(reads, reads[1:], strict=False)), seen
    assert "llm start" not in seen and seen.index("rule end") < reads[-1], seen  # seen after the call
