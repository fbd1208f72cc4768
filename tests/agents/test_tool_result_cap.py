"""A tool returning 50 MB: the run stores, hands on and shows it cut at the cap (issue #27, part 4).

A real MCP server (tests/servers/misbehaving.py, over stdio) returns 50 MB of text to a pre-step
rule; the run goes through a real Celery worker. Every stored step stays within the cap plus its
marker, the model is handed the cut text, and a viewer's run page (and the API) stays under 1 MB
and says that the result was cut, and from what size.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from agents import services
from agents.models import Agent, Run
from llamon_agent.mcp.results import TRUNCATED_RE
from llamon_agent.tools import AgentRequest
from tests.conftest import celery_worker
from tests.support.runs import misbehaving_agent, wait_for_run

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

FIFTY_MB = 50 * 1024 * 1024
CAP = 256 * 1024
MARKER_BYTES = 100  # "\n\n[truncated: the tool returned 52,428,800 bytes; the first 262,144 are kept]"


@pytest.fixture
def flood_agent(make_user) -> Agent:
    return misbehaving_agent(
        make_user("editor"),
        tool="flood_text",
        when='"flood" in query',
        params=f'{{"n_bytes": {FIFTY_MB}}}',
        timeout_s=120,
        name="flooded",
        rule_set_name="flood",
        rule_name="flood_rule",
    )


def test_a_50_mb_tool_result_is_stored_handed_on_and_shown_cut(
    redis_publisher, flood_agent, make_user
) -> None:
    with celery_worker(redis_publisher) as (_, output):
        run = services.run_create(actor=None, agent=flood_agent, request=AgentRequest(query="flood please"))
        run = wait_for_run(run.pk, timeout_s=240)
    assert run.status == Run.Status.SUCCEEDED, (run.error, output.text()[-2000:])

    rule = run.steps.get(kind="rule")
    assert isinstance(rule.output, str)
    match = TRUNCATED_RE.search(rule.output)
    assert match is not None and int(match.group(1).replace(",", "")) == FIFTY_MB
    assert rule.output[: match.start()] == "x" * CAP
    with connection.cursor() as cursor:  # the rows as the database holds them
        cursor.execute(
            "SELECT id, kind, COALESCE(LENGTH(CAST(input AS TEXT)), 0) + COALESCE(LENGTH(CAST(output AS TEXT)), 0)"
            " FROM agents_runstep"
            " WHERE run_id = %s",
            [run.pk],
        )
        sizes = {f"{kind} {pk}": size for pk, kind, size in cursor.fetchall()}
    assert max(sizes.values()) <= CAP + MARKER_BYTES + 4096, sizes  # 4 KB: the rest of a step's JSON
    (llm,) = run.steps.filter(kind="llm")
    assert "xxxx" in str(llm.input) and len(str(llm.input)) < CAP  # the model got (a part of) the cut text

    viewer = Client()
    viewer.force_login(make_user("viewer", "viewer-cap"))
    page = viewer.get(reverse("agents:run_detail", args=[run.pk]))
    assert page.status_code == 200
    assert len(page.content) <= 1024 * 1024, len(page.content)
    text = page.content.decode()
    assert "The tool returned 52,428,800 bytes: only the first 262,144 were kept" in text
    korean = viewer.get(reverse("agents:run_detail", args=[run.pk]), HTTP_ACCEPT_LANGUAGE="ko")
    assert "도구가 52,428,800바이트를 반환했습니다" in korean.content.decode()
    api = viewer.get(f"/api/runs/{run.pk}/steps")
    assert api.status_code == 200 and len(api.content) <= 1024 * 1024, len(api.content)
    print(f"\nstep sizes {sizes}; run page {len(page.content):,} bytes; steps API {len(api.content):,} bytes")
