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
        run=run,
        seq=1,
        kind="rule",
        name="route_order",
        status=status,
        tool_name=tool_name,
        started_at=timezone.now(),
    )


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


def _poll_url(html: str) -> str:
    found = re.search(r'id="run-poller" hidden hx-get="([^"]+)"', html)
    assert found is not None, "no poller on the page"
    return found.group(1).replace("&amp;", "&")


def test_the_first_page_polls_for_newer_runs_with_the_filters_and_later_pages_do_not(
    viewer_client, agent
) -> None:
    for i in range(51):
        Run.objects.create(agent=agent, query=f"q{i}", user_id="C-1")
    first = viewer_client.get(reverse("agents:run_list"), {"user_id": "C-1"}).content.decode()
    url = _poll_url(first)
    assert 'hx-trigger="every 3s"' in first and "user_id=C-1" in url and "newer=" in url
    cursor = re.search(r'cursor=([^"&]+)"', first)  # the "older" link: the next page is keyed by a cursor
    assert cursor is not None
    second = viewer_client.get(
        reverse("agents:run_list"), {"user_id": "C-1", "cursor": unquote(cursor.group(1))}
    ).content.decode()
    assert 'id="run-table"' in second and 'id="run-poller"' not in second


def test_a_poll_answers_only_the_runs_started_since_and_then_polls_from_the_newest(
    viewer_client, agent
) -> None:
    old = Run.objects.create(agent=agent, query="예전", status=Run.Status.SUCCEEDED)
    url = _poll_url(viewer_client.get(reverse("agents:run_list")).content.decode())
    assert viewer_client.get(url, **HX).content.decode().count("data-run=") == 0  # nothing new yet
    new = Run.objects.create(agent=agent, query="방금 시작")
    poll = viewer_client.get(url, **HX).content.decode()
    assert "<html" not in poll and 'id="run-table"' not in poll
    assert f'data-run="{new.pk}"' in poll and f'data-run="{old.pk}"' not in poll
    again = viewer_client.get(_poll_url(poll), **HX).content.decode()
    # The next poll starts after the run just shown: it comes back only as the update of a queued run.
    assert "run-new" not in again and f'id="run-row-{new.pk}" hx-swap-oob="true"' in again


def test_a_poll_updates_the_rows_of_runs_still_running(viewer_client, agent) -> None:
    running = Run.objects.create(agent=agent, query="진행 중", status=Run.Status.RUNNING)
    url = _poll_url(viewer_client.get(reverse("agents:run_list")).content.decode())
    assert f"live={running.pk}" in url
    Run.objects.filter(pk=running.pk).update(status=Run.Status.SUCCEEDED)
    poll = viewer_client.get(url, **HX).content.decode()
    assert f'id="run-row-{running.pk}" hx-swap-oob="true"' in poll and "status-succeeded" in poll
    assert f"live={running.pk}" not in _poll_url(poll)  # finished: no longer asked for


def test_a_poll_with_a_cursor_it_did_not_give_out_is_a_400_with_a_sentence(viewer_client, agent) -> None:
    response = viewer_client.get(
        reverse("agents:run_list"), {"newer": "!!nonsense", "live": ["x", "-1"]}, **HX
    )
    assert response.status_code == 400 and "not one this server gave out" in response.content.decode()
