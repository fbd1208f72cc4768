"""A run near LLAMON_RUN_MAX_BYTES is read a page at a time: the run page, its step pages and the
API's each stay under a few MB; a value too large for one page is given in parts that put
together are the value, on the page and in the API; a part that does not exist is a 404 or 422."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.token_services import token_create
from agents.models import Run, RunStep

pytestmark = pytest.mark.django_db

MB = 1 << 20
LIMIT = 2 * MB  # what no page or answer of this run may reach ("a few MB" with room to spare)


def _record(i: int) -> dict:
    return {"id": f"R-{i}", "memo": '진료 기록 요약 "인용" <b> & ' * 3, "amount": i * 1000}


@pytest.fixture
def big_run(agent) -> tuple[Run, dict[int, dict]]:
    """~3.9 MB of step values (the default LLAMON_RUN_MAX_BYTES is 4 MiB): an LLM call whose input
    is ~1.7 MB, six tool results of ~300 KB and 300 small steps."""
    run = Run.objects.create(agent=agent, agent_name=agent.name, query="q", status=Run.Status.SUCCEEDED)
    now, values, steps = timezone.now(), {}, []
    messages = [{"role": "user", "content": "환자 기록을 요약해 주세요 " * 40 + str(i)} for i in range(1500)]
    values[1] = {"messages": messages, "tools": [{"name": "get_chart"}]}
    steps.append(RunStep(run=run, seq=1, kind="llm", name="m", status="ok", started_at=now, input=values[1]))
    for seq in range(2, 8):
        values[seq] = {"records": [_record(seq * 10_000 + i) for i in range(1500)]}
        steps.append(
            RunStep(
                run=run,
                seq=seq,
                kind="tool",
                name="t",
                tool_name="get_chart",
                status="ok",
                started_at=now,
                input={"args": {}},
                output=values[seq],
            )
        )
    for seq in range(8, 308):
        steps.append(
            RunStep(run=run, seq=seq, kind="tool", name="t", status="ok", started_at=now, output={"n": seq})
        )
    RunStep.objects.bulk_create(steps)
    stored = sum(len(json.dumps([s.input, s.output], ensure_ascii=False).encode()) for s in steps)
    assert 3.5 * MB < stored < settings.LLAMON_RUN_MAX_BYTES, stored
    return run, values


def _whole(client: Client, headers: dict, first: dict) -> str:
    """A value's parts put together, read through the API from its first part."""
    text, part = first["text"], first
    while part["next"]:
        response = client.get(part["next"], headers=headers)
        assert response.status_code == 200 and len(response.content) < MB
        part = response.json()
        text += part["text"]
    assert len(text.encode()) == first["bytes"]
    assert hashlib.sha256(text.encode()).hexdigest() == first["sha256"]
    return text


def test_every_api_page_stays_small_and_the_parts_give_back_each_value(make_user, big_run) -> None:
    run, values = big_run
    client = Client()
    headers = {"Authorization": f"Bearer {token_create(actor=make_user('viewer'), name='t').secret}"}
    seen, after, pages = [], 0, 0
    while True:
        response = client.get(f"/api/runs/{run.pk}/steps?after={after}", headers=headers)
        assert response.status_code == 200 and len(response.content) < LIMIT, len(response.content)
        body, pages = response.json(), pages + 1
        for step in body["steps"]:
            seen.append(step["seq"])
            for field in ("input", "output"):
                value = step[field]
                if step["seq"] in values and isinstance(value, dict) and "llamon_part" in value:
                    assert value["parts"] > 1 and value["field"] == field
                    assert json.loads(_whole(client, headers, value)) == values[step["seq"]]
                    values.pop(step["seq"])
        if not body["more"]:
            break
        after = body["last_seq"]
    assert seen == list(range(1, 308)) and pages >= 3
    assert not values, f"these values were not given in parts: {sorted(values)}"


def test_the_run_page_and_its_step_pages_stay_small_and_link_the_next_part(viewer_client, big_run) -> None:
    run, _values = big_run
    response = viewer_client.get(reverse("agents:run_detail", args=[run.pk]))
    page = response.content.decode()
    assert response.status_code == 200 and len(response.content) < LIMIT, len(response.content)
    seen = [int(s) for s in re.findall(r'id="step-(\d+)"', page)]
    while match := re.search(r'hx-get="[^"]*/steps\?after=(\d+)"[^>]*id="steps-more"', page):
        response = viewer_client.get(reverse("agents:run_steps", args=[run.pk]) + f"?after={match[1]}")
        assert len(response.content) < LIMIT, len(response.content)
        page = response.content.decode()
        seen += [int(s) for s in re.findall(r'id="step-(\d+)"', page)]
    assert seen == list(range(1, 308))
    part = viewer_client.get(reverse("agents:run_step_value", args=[run.pk, 1]) + "?field=input&part=2")
    assert part.status_code == 200 and len(part.content) < MB and 'id="next-part"' in part.content.decode()


@pytest.mark.parametrize("query", ["field=input&part=0", "field=input&part=999", "field=bogus", "part=x1"])
def test_a_part_that_does_not_exist_is_refused(viewer_client, make_user, agent, query) -> None:
    run = Run.objects.create(agent=agent, agent_name=agent.name, query="q", status=Run.Status.SUCCEEDED)
    RunStep.objects.create(run=run, seq=1, kind="tool", name="t", started_at=timezone.now(), input={"a": 1})
    page = viewer_client.get(reverse("agents:run_step_value", args=[run.pk, 1]) + "?" + query)
    assert page.status_code == 404
    client = Client()
    headers = {"Authorization": f"Bearer {token_create(actor=make_user('viewer'), name='t').secret}"}
    answer = client.get(f"/api/runs/{run.pk}/steps/1/value?{query}", headers=headers)
    assert answer.status_code in (404, 422) and answer.json()["detail"]
    if answer.status_code == 422:
        assert answer.json()["field"] in ("field", "part")
    assert client.get(f"/api/runs/{run.pk}/steps/999/value", headers=headers).status_code == 404
