"""Runs at scale: keyset pages of the run list and /api/runs, capped counts, the paged step timeline, batch retention."""

from __future__ import annotations

import base64
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from agents import selectors, services
from agents.models import Agent, Run, RunStep, RunTool

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent() -> Agent:
    return Agent.objects.create(name="pager", system_prompt="p")


def _runs(agent: Agent, n: int, *, at=None, **fields) -> list[Run]:
    runs = [Run.objects.create(agent=agent, agent_name=agent.name, query=f"q{i}", **fields) for i in range(n)]
    if at is not None:
        Run.objects.filter(pk__in=[r.pk for r in runs]).update(created_at=at)
    return runs


def _walk(api, url: str) -> list[int]:
    """Every id of every page, following next_cursor to the end."""
    seen, cursor = [], ""
    for _ in range(100):
        body = api.get(url + (f"&cursor={cursor}" if cursor else "")).json()
        seen += [r["id"] for r in body["items"]]
        if not (cursor := body["next_cursor"]):
            return seen
    raise AssertionError("the cursor never ended")


def _expected(**filters) -> list[int]:
    return [
        r.pk for r in sorted(Run.objects.filter(**filters), key=lambda r: (r.created_at, r.pk), reverse=True)
    ]


def test_api_keyset_pages_list_every_run_once_newest_first_even_with_equal_timestamps(
    viewer_api, agent
) -> None:
    same = timezone.now() - timedelta(hours=1)
    _runs(agent, 5, at=same)  # five runs in one microsecond: the id decides their order
    _runs(agent, 2, at=same - timedelta(seconds=1))
    _runs(agent, 2)
    assert _walk(viewer_api, "/api/runs?limit=2") == _expected()
    assert _walk(viewer_api, "/api/runs?limit=3") == _expected()


def test_a_run_created_between_two_pages_does_not_shift_the_next_page(viewer_api, agent) -> None:
    _runs(agent, 6)
    first = viewer_api.get("/api/runs?limit=3").json()
    _runs(agent, 2)  # newer than every run already listed
    second = viewer_api.get(f"/api/runs?limit=3&cursor={first['next_cursor']}").json()
    assert [r["id"] for r in first["items"] + second["items"]] == _expected()[2:]
    assert second["next_cursor"] is None


def test_filters_combine_with_the_cursor(viewer_api, agent) -> None:
    other = Agent.objects.create(name="other", system_prompt="p")
    at = timezone.now() - timedelta(minutes=5)
    wanted = _runs(agent, 4, at=at, status=Run.Status.SUCCEEDED, user_id="C-1")
    _runs(agent, 2, at=at, status=Run.Status.FAILED, user_id="C-1")
    _runs(other, 2, at=at, status=Run.Status.SUCCEEDED, user_id="C-1")
    _runs(agent, 2, at=at, status=Run.Status.SUCCEEDED, user_id="C-2")
    for run in wanted[:3]:  # three of them fired the rule
        RunStep.objects.create(run=run, seq=1, kind="rule", name="route", status="ok", started_at=at)
    url = f"/api/runs?limit=1&agent={agent.pk}&status=succeeded&user_id=C-1"
    assert _walk(viewer_api, url) == _expected(pk__in=[r.pk for r in wanted])
    assert _walk(viewer_api, url + "&rule=route") == _expected(pk__in=[r.pk for r in wanted[:3]])
    body = viewer_api.get(url + "&rule=route").json()
    assert body["count"] == 3 and body["count_capped"] is False


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        "not-a-cursor",
        "%%%",
        _b64("2024-01-01T00:00:00+00:00"),
        _b64("2024-01-01T00:00:00|7"),
        _b64("yesterday|7"),
        _b64("2024-01-01T00:00:00+00:00|0"),
        _b64("2024-01-01T00:00:00+00:00|-3"),
        _b64("2024-01-01T00:00:00+00:00|" + "9" * 30),
        _b64("2024-01-01T00:00:00+00:00|x"),
        "A" * 150,
        "\u00e9\u00e9\u00e9\u00e9",
        "_-_-",
    ],
)
def test_a_bad_cursor_is_a_400_that_says_what_to_do(viewer_api, viewer_client, agent, cursor) -> None:
    _runs(agent, 2)
    response = viewer_api.get("/api/runs", data={"cursor": cursor})
    assert response.status_code == 400
    assert response.json()["field"] == "cursor"
    assert "is not one this server gave out" in response.json()["detail"]
    page = viewer_client.get(reverse("agents:run_list"), {"cursor": cursor})
    assert page.status_code == 400 and "is not one this server gave out" in page.content.decode()


def test_the_old_offset_paging_still_works_but_not_together_with_a_cursor(viewer_api, agent) -> None:
    _runs(agent, 5)
    body = viewer_api.get("/api/runs?limit=2&offset=2").json()
    assert [r["id"] for r in body["items"]] == _expected()[2:4] and body["count"] == 5
    rest = viewer_api.get(f"/api/runs?limit=2&cursor={body['next_cursor']}").json()
    assert [r["id"] for r in rest["items"]] == _expected()[4:]
    both = viewer_api.get(f"/api/runs?offset=1&cursor={body['next_cursor']}")
    assert both.status_code == 400 and "not both" in both.json()["detail"]


@pytest.mark.parametrize("offset", [10_001, 999_999_999, 10**30])
def test_an_offset_far_down_is_refused_with_the_way_to_page_instead(viewer_api, agent, offset: int) -> None:
    _runs(agent, 1)
    response = viewer_api.get(f"/api/runs?offset={offset}")
    assert response.status_code == 422
    assert "10000" in response.content.decode() and "offset" in response.content.decode()
    assert viewer_api.get("/api/runs?offset=10000").status_code == 200  # the bound itself is allowed


def test_the_count_stops_at_its_cap_and_says_so(viewer_api, agent, monkeypatch) -> None:
    monkeypatch.setattr(selectors, "COUNT_CAP", 3)
    _runs(agent, 5)
    body = viewer_api.get("/api/runs?limit=1").json()
    assert body["count"] == 3 and body["count_capped"] is True
    body = viewer_api.get(f"/api/runs?limit=1&agent={agent.pk}&status=failed").json()
    assert body["count"] == 0 and body["count_capped"] is False


def test_the_run_list_page_pages_by_cursor_with_and_without_htmx(viewer_client, agent, monkeypatch) -> None:
    from agents import views

    monkeypatch.setattr(views, "RUN_PAGE_SIZE", 2)
    _runs(agent, 3, at=timezone.now() - timedelta(minutes=1))
    _runs(agent, 2, user_id="C-9")
    order = _expected()
    html = viewer_client.get(reverse("agents:run_list")).content.decode()
    shown = [pk for pk in order if f'data-run="{pk}"' in html]
    assert shown == order[:2] and 'rel="next"' in html
    cursor = selectors.cursor_encode(Run.objects.get(pk=order[1]))
    older = viewer_client.get(reverse("agents:run_list"), {"cursor": cursor})  # the link, followed without JS
    assert [pk for pk in order if f'data-run="{pk}"' in older.content.decode()] == order[2:4]
    assert "newest" in older.content.decode()
    partial = viewer_client.get(
        reverse("agents:run_list"), {"cursor": cursor}, headers={"HX-Request": "true"}
    )
    assert partial.content.decode().lstrip().startswith('<div id="run-table">')
    # A filter stays in the older link: the next page is of the same filter.
    filtered = viewer_client.get(reverse("agents:run_list"), {"user_id": "C-9"}).content.decode()
    assert 'rel="next"' not in filtered and filtered.count("data-run=") == 2


def _long_run(agent: Agent, steps: int, **fields) -> Run:
    run = Run.objects.create(agent=agent, query="long", **fields)
    now = timezone.now()
    RunStep.objects.bulk_create(
        RunStep(run=run, seq=i, kind="llm" if i % 2 else "tool", name=f"s{i}", status="ok", started_at=now)
        for i in range(1, steps + 1)
    )
    return run


def _seqs(html: str) -> list[int]:
    import re

    return [int(s) for s in re.findall(r'data-seq="(\d+)"', html)]


def test_the_run_page_shows_200_steps_and_a_link_to_the_next_200(viewer_client, agent) -> None:
    run = _long_run(agent, 450, status=Run.Status.SUCCEEDED, finished_at=timezone.now())
    html = viewer_client.get(reverse("agents:run_detail", args=[run.pk])).content.decode()
    assert _seqs(html) == list(range(1, 201))
    assert f"{reverse('agents:run_detail', args=[run.pk])}?after=200#timeline" in html
    assert f"{reverse('agents:run_steps', args=[run.pk])}?after=200" in html and "every 700ms" not in html
    # Without JS: the link is a page of the next 200 steps, with a way back to the first.
    second = viewer_client.get(reverse("agents:run_detail", args=[run.pk]), {"after": 200}).content.decode()
    assert _seqs(second) == list(range(201, 401)) and 'id="steps-earlier"' in second
    # With htmx: the link fetches the next steps; the last page ends the poll (286) with no link left.
    last = viewer_client.get(
        reverse("agents:run_steps", args=[run.pk]), {"after": 400}, headers={"HX-Request": "true"}
    )
    assert last.status_code == 286 and _seqs(last.content.decode()) == list(range(401, 451))
    assert "steps-more" not in last.content.decode()
    middle = viewer_client.get(
        reverse("agents:run_steps", args=[run.pk]), {"after": 100}, headers={"HX-Request": "true"}
    )
    assert middle.status_code == 200 and _seqs(middle.content.decode()) == list(range(101, 301))
    assert "?after=300" in middle.content.decode()


def test_a_live_run_past_one_page_is_not_polled_until_its_last_page_is_shown(viewer_client, agent) -> None:
    run = _long_run(agent, 250, status=Run.Status.RUNNING)
    first = viewer_client.get(reverse("agents:run_detail", args=[run.pk])).content.decode()
    assert "every 700ms" not in first and "steps-more" in first
    tail = viewer_client.get(
        reverse("agents:run_steps", args=[run.pk]), {"after": 200}, headers={"HX-Request": "true"}
    )
    assert tail.status_code == 200 and "every 700ms" in tail.content.decode()


def test_the_poll_of_an_ended_run_reads_only_the_steps_it_shows(viewer_client, agent) -> None:
    run = _long_run(agent, 450, status=Run.Status.SUCCEEDED, finished_at=timezone.now())
    with CaptureQueriesContext(connection) as queries:
        response = viewer_client.get(reverse("agents:run_steps", args=[run.pk]), {"after": 440})
    assert response.status_code == 286
    step_reads = [q["sql"] for q in queries.captured_queries if 'FROM "agents_runstep"' in q["sql"]]
    # Each read is bounded: a page (LIMIT) or the diagnostics' rule steps (kind = ...), never all 450.
    assert step_reads and all("LIMIT" in sql or '"kind" = ' in sql for sql in step_reads), step_reads


def test_retention_deletes_in_batches_with_the_steps_and_counts_runs(agent) -> None:
    services.privacy_update(actor=None, redaction_patterns=[], mask_presets=[], retention_days=7)
    old = timezone.now() - timedelta(days=8)
    expired = [_long_run(agent, 3, status=Run.Status.SUCCEEDED, finished_at=old) for _ in range(7)]
    kept = _long_run(agent, 3, status=Run.Status.SUCCEEDED, finished_at=timezone.now())
    with CaptureQueriesContext(connection) as queries:
        assert services.runs_delete_expired(batch=3) == 7  # runs, not runs plus steps
    deletes = [q["sql"] for q in queries.captured_queries if q["sql"].startswith('DELETE FROM "agents_run"')]
    assert len(deletes) == 3  # 3 + 3 + 1
    assert list(Run.objects.values_list("pk", flat=True)) == [kept.pk]
    assert not RunStep.objects.filter(run_id__in=[r.pk for r in expired]).exists()
    assert RunStep.objects.filter(run=kept).count() == 3


def test_postgresql_has_the_trigram_index_of_the_text_filter_and_uses_the_filter_expression(
    viewer_api, agent
) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the trigram index is PostgreSQL's (SQLite scans)")
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'run_query_trgm'")
        [(definition,)] = cursor.fetchall()
    assert "gin_trgm_ops" in definition and "upper(query)" in definition.lower()
    _runs(agent, 3)
    Run.objects.filter(pk=Run.objects.order_by("id").first().pk).update(query="환불 요청 A-777")
    body = viewer_api.get("/api/runs", data={"q": "a-777"}).json()
    assert [r["query"] for r in body["items"]] == ["환불 요청 A-777"]


def _called(run: Run, *tools: str) -> None:
    """Steps that call ``tools`` recorded the way a run records them: through the trace sink."""
    from agents.sink import DbStepSink
    from llamon_agent.trace import TraceEvent

    sink = DbStepSink(run)
    for i, tool in enumerate(tools):
        for phase in ("start", "end"):
            sink.emit(
                TraceEvent(
                    id=f"{run.pk}-{i}",
                    kind="tool",
                    name=tool,
                    phase=phase,
                    start=1.0,
                    duration_ms=1.0 if phase == "end" else None,
                    status="ok" if phase == "end" else "running",
                    meta={"mcp_id": "order-service"},
                )
            )


def test_the_tool_filter_lists_each_run_once_across_pages_newest_first(viewer_api, agent) -> None:
    same = timezone.now() - timedelta(hours=1)
    runs = _runs(agent, 9, at=same) + _runs(agent, 4)
    for i, run in enumerate(runs):
        if i % 2 == 0:
            _called(run, "get_order", "get_order", "search_docs")  # the same tool twice: listed once
        elif i % 3 == 0:
            _called(run, "search_docs")
    assert RunTool.objects.filter(tool_name="get_order").count() == 7
    wanted = [pk for pk in _expected() if pk in {r.pk for r in runs[::2]}]
    for limit in (1, 2, 3, 50):
        assert _walk(viewer_api, f"/api/runs?tool=get_order&limit={limit}") == wanted
    assert _walk(viewer_api, f"/api/runs?tool=get_order&agent={agent.pk}&limit=2") == wanted
    body = viewer_api.get("/api/runs?tool=get_order&limit=2").json()
    assert body["count"] == 7
    html = viewer_api.get("/api/runs?tool=nothing-called-this").json()
    assert html["items"] == [] and html["count"] == 0


def test_a_run_deleted_by_retention_takes_its_tool_rows_with_it(agent) -> None:
    run = _runs(agent, 1)[0]
    _called(run, "get_order")
    run.delete()
    assert not RunTool.objects.exists()


def test_the_api_pages_steps_as_the_run_page_does(viewer_client, agent) -> None:
    """Same 200-step pages as the page (one selector serves both); finished only on the last page."""
    run = _long_run(agent, 450, status=Run.Status.SUCCEEDED, finished_at=timezone.now())
    url = f"/api/runs/{run.pk}/steps"
    seen, after, answers = [], 0, []
    while True:
        body = viewer_client.get(url, {"after": after}).json()
        answers.append(body)
        seen += [s["seq"] for s in body["steps"]]
        if body["finished"]:
            break
        after = body["last_seq"]
    assert seen == list(range(1, 451)) and [len(a["steps"]) for a in answers] == [200, 200, 50]
    assert [(a["more"], a["finished"]) for a in answers] == [(True, False), (True, False), (False, True)]
    page_two = viewer_client.get(reverse("agents:run_detail", args=[run.pk]), {"after": 200}).content.decode()
    assert _seqs(page_two) == [s["seq"] for s in answers[1]["steps"]]
