"""Comparing two runs: steps aligned by stage, name and tool in order, and what differs marked."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.urls import reverse
from django.utils import timezone

from agents.compare import align_steps, compare_runs
from agents.models import Agent, Run, RunStep


def _s(kind: str, name: str = "", tool: str = "", **fields) -> SimpleNamespace:
    base = {"status": "ok", "input": None, "output": None, "error": "", "duration_ms": 1.0, "seq": 0}
    return SimpleNamespace(kind=kind, name=name, tool_name=tool, **{**base, **fields})


def _ops(rows) -> list[tuple[str, str | None, str | None]]:
    return [(r.op, r.a and r.a.name, r.b and r.b.name) for r in rows]


BASE = [_s("guardrail", "input"), _s("rule", "route_order", "get_order"), _s("llm", "m"), _s("answer", "a")]


def test_identical_runs_align_one_to_one_and_timings_alone_do_not_count_as_a_change() -> None:
    other = [_s(s.kind, s.name, s.tool_name, duration_ms=99.0) for s in BASE]
    rows = align_steps(BASE, other)
    assert [r.op for r in rows] == ["same"] * 4
    assert rows[1].duration_delta_ms == 98.0


def test_a_step_only_the_second_run_has_is_an_insertion_in_place() -> None:
    b = [*BASE[:2], _s("rule", "route_faq", "search_docs"), *BASE[2:]]
    assert _ops(align_steps(BASE, b)) == [
        ("same", "input", "input"),
        ("same", "route_order", "route_order"),
        ("added", None, "route_faq"),
        ("same", "m", "m"),
        ("same", "a", "a"),
    ]


def test_a_step_only_the_first_run_has_is_a_deletion_in_place() -> None:
    b = [BASE[0], *BASE[2:]]
    assert _ops(align_steps(BASE, b)) == [
        ("same", "input", "input"),
        ("removed", "route_order", None),
        ("same", "m", "m"),
        ("same", "a", "a"),
    ]


def test_a_reordered_step_is_a_move_on_both_sides() -> None:
    a = [_s("rule", "one", "t1"), _s("rule", "two", "t2"), _s("rule", "three", "t3")]
    b = [_s("rule", "two", "t2"), _s("rule", "three", "t3"), _s("rule", "one", "t1")]
    rows = align_steps(a, b)
    assert [r.op for r in rows] == ["moved", "same", "same", "moved"]
    assert rows[0].a.name == rows[0].b.name == "one" and rows[-1].b.name == "one"
    assert compare_runs(_run(), _run(), a, b).counts["moved"] == 1


def test_same_step_with_other_params_output_or_status_is_changed_and_says_which() -> None:
    a = [_s("rule", "r", "get_order", input={"params": {"q": "A-1"}}, output={"id": 1})]
    b = [
        _s(
            "rule",
            "r",
            "get_order",
            input={"params": {"q": "A-2"}},
            output={"id": 2},
            status="error",
            error="x",
        )
    ]
    (row,) = align_steps(a, b)
    assert row.op == "changed" and row.changes == ["status", "params", "output", "error"]


def test_repeated_steps_are_not_dropped_as_junk() -> None:
    # 300 llm/tool turns: SequenceMatcher's autojunk would treat them as noise and align nothing.
    a = [_s("llm", "m") if i % 2 else _s("tool", "search", "search") for i in range(300)]
    b = [*a[:150], _s("rule", "extra", "x"), *a[150:]]
    rows = align_steps(a, b)
    assert [r.op for r in rows].count("same") == 300 and [r.op for r in rows].count("added") == 1


def _run(**fields) -> SimpleNamespace:
    base = dict.fromkeys(("query", "rule_set_ref", "rule_set_hash", "status", "answer", "error"), "")
    return SimpleNamespace(**{**base, "context": {}, "a2a_data": None, **fields})


def test_run_fields_say_which_differ() -> None:
    fields = compare_runs(_run(query="환불", answer="x"), _run(query="환불", answer="y"), [], []).run_fields
    differs = {f["label"]: f["differs"] for f in fields}
    assert differs["Query"] is False and differs["Answer"] is True


# --- the page ------------------------------------------------------------------------------------


@pytest.fixture
def two_runs(db) -> tuple[Run, Run]:
    agent = Agent.objects.create(name="support", system_prompt="p")
    runs = []
    for query, steps in (
        ("주문 A-1", [("rule", "route_order", "get_order", {"params": {"order_id": "A-1"}})]),
        (
            "주문 A-2",
            [
                ("rule", "route_order", "get_order", {"params": {"order_id": "A-2"}}),
                ("rule", "route_faq", "search_docs", {"params": {"q": "faq"}}),
            ],
        ),
    ):
        run = Run.objects.create(agent=agent, agent_name="support", query=query, status="succeeded")
        for seq, (kind, name, tool, data) in enumerate(steps, start=1):
            RunStep.objects.create(
                run=run,
                seq=seq,
                kind=kind,
                name=name,
                tool_name=tool,
                status="ok",
                input=data,
                started_at=timezone.now(),
                duration_ms=2.0,
            )
        runs.append(run)
    return runs[0], runs[1]


def test_the_page_marks_changed_params_and_the_added_step(viewer_client, two_runs) -> None:
    a, b = two_runs
    # Ticked in the list's order (newest first): the older run is still the left side.
    html = viewer_client.get(reverse("agents:run_compare"), {"run": [b.pk, a.pk]}).content.decode()
    assert 'data-op="changed" data-key="rule:route_order"' in html
    assert 'data-change="params"' in html
    assert 'data-op="added" data-key="rule:route_faq"' in html


@pytest.mark.parametrize("picked", [["1"], ["1", "2", "3"], ["x", "y"], ["0", "1"], ["1", str(2**70)]])
def test_a_pick_that_is_not_two_runs_goes_back_with_a_sentence(viewer_client, two_runs, picked) -> None:
    response = viewer_client.get(reverse("agents:run_compare"), {"run": picked}, follow=True)
    assert response.status_code == 200
    text = response.content.decode()
    assert "Tick exactly two runs" in text or "Choose two runs" in text or "does not exist" in text
