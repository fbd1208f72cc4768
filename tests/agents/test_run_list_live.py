"""The run list: the "rule fired" filter counts failed calls, and the first page follows new runs."""

from __future__ import annotations

import re
from urllib.parse import unquote

import pytest
from django.urls import reverse
from django.utils import timezone

from agents.models import Agent, Run, RunStep

pytestmark = pytest.mark.django_db
HX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def agent() -> Agent:
    return Agent.objects.create(name="support", system_prompt="p")


def _rule_step(run: Run, status: str, tool_name: str) -> None:
    RunStep.objects.create(
        run=run, seq=1, kind="rule", name="route_order", status=status, tool_name=tool_name,
        started_at=timezone.now(),
    )  # fmt: skip


def test_rule_fired_includes_rules_whose_call_failed(viewer_client, agent) -> None:
    ok, failed_call, running, bad_expression, other = (
        Run.objects.create(agent=agent, query=q)
        for q in ("ok", "call failed", "running", "bad when", "other")
    )
    _rule_step(ok, "ok", "get_order")
    _rule_step(failed_call, "error", "get_order")
    _rule_step(running, "running", "get_order")
    _rule_step(bad_expression, "error", "")  # its `when` raised: it never fired
    html = viewer_client.get(reverse("agents:run_list"), {"rule": "route_order"}).content.decode()
    for run in (ok, failed_call, running):
        assert f'data-run="{run.pk}"' in html
    for run in (bad_expression, other):
        assert f'data-run="{run.pk}"' not in html


def test_the_first_page_polls_its_region_with_the_filters_and_later_pages_do_not(
    viewer_client, agent
) -> None:
    for i in range(51):
        Run.objects.create(agent=agent, query=f"q{i}", user_id="C-1")
    first = viewer_client.get(reverse("agents:run_list"), {"user_id": "C-1"}).content.decode()
    assert 'hx-trigger="every 3s"' in first and "user_id=C-1" in first
    cursor = re.search(r'cursor=([^"&]+)"', first)  # the "older" link: the next page is keyed by a cursor
    assert cursor is not None
    second = viewer_client.get(
        reverse("agents:run_list"), {"user_id": "C-1", "cursor": unquote(cursor.group(1))}
    ).content.decode()
    assert 'id="run-table"' in second and 'hx-trigger="every 3s"' not in second


def test_a_poll_shows_a_run_started_since(viewer_client, agent) -> None:
    viewer_client.get(reverse("agents:run_list"))
    new = Run.objects.create(agent=agent, query="방금 시작")
    poll = viewer_client.get(reverse("agents:run_list"), **HX).content.decode()
    assert "<html" not in poll and f'data-run="{new.pk}"' in poll and 'id="run-table"' in poll
