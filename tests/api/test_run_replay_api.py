"""POST /api/runs/{id}/replay and the run page's replay button: who may, what is refused, what is kept.

The replay's execution on a worker is tests/agents/test_run_replay.py; here nothing is enqueued
(the broker is the embedded one and the queued replays are only read back).
"""

from __future__ import annotations

import pytest
from django.test import Client

from agents.models import Agent, Run
from core.models import AuditEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def finished(make_user) -> Run:
    agent = Agent.objects.create(name="support", system_prompt="p")
    return Run.objects.create(
        agent=agent,
        agent_name="support",
        status=Run.Status.SUCCEEDED,
        query="주문 A-1",
        context={"userId": "u1"},
    )


def test_an_editor_replays_a_finished_run_through_the_api(caller, finished) -> None:
    response = caller("token:editor").call("post", f"/api/runs/{finished.pk}/replay")
    assert response.status_code == 202, response.content
    replay = Run.objects.get(pk=response.json()["id"])
    assert (replay.replay_of_id, replay.agent_id, replay.status) == (finished.pk, finished.agent_id, "queued")
    assert (replay.query, replay.context) == (finished.query, finished.context)
    assert caller("token:viewer").get(f"/api/runs/{replay.pk}").json()["replay_of"] == finished.pk
    event = AuditEvent.objects.get(action="run.replay")
    assert event.object_id == str(replay.pk) and event.after["replay_of"] == finished.pk


def test_a_replay_can_use_another_agents_settings(caller, finished) -> None:
    other = Agent.objects.create(name="support-new-model", system_prompt="another prompt")
    response = caller("token:editor").call("post", f"/api/runs/{finished.pk}/replay?agent={other.pk}")
    assert response.status_code == 202, response.content
    assert Run.objects.get(pk=response.json()["id"]).agent_id == other.pk


@pytest.mark.parametrize(
    ("status", "query", "code", "says"),
    [
        ("running", "", 409, "is still running: replay it once it has finished"),
        ("queued", "", 409, "is still queued"),
        ("succeeded", "?agent=987654", 422, "There is no agent with id 987654"),
        ("succeeded", "?agent=x%3B%20drop", 422, "agent"),
        ("succeeded", "?agent=-1", 422, "agent"),
        ("succeeded", "?agent=99999999999999999999999", 422, "agent"),
    ],
)
def test_bad_replays_are_refused_clearly_and_nothing_is_created(
    caller, finished, status, query, code, says
) -> None:
    Run.objects.filter(pk=finished.pk).update(status=status)
    response = caller("token:editor").call("post", f"/api/runs/{finished.pk}/replay{query}")
    assert response.status_code == code, response.content
    assert says in response.json()["detail"]
    assert not Run.objects.filter(replay_of=finished).exists()
    assert not AuditEvent.objects.filter(action="run.replay").exists()


def test_an_unknown_run_is_a_404_and_a_viewer_a_403(caller, finished) -> None:
    missing = caller("token:editor").call("post", "/api/runs/987654/replay")
    assert missing.status_code == 404 and "There is no run with id 987654" in missing.json()["detail"]
    assert caller("token:viewer").call("post", f"/api/runs/{finished.pk}/replay").status_code == 403
    assert caller("session:viewer").call("post", f"/api/runs/{finished.pk}/replay").status_code == 403
    assert not Run.objects.filter(replay_of=finished).exists()


def test_a_served_run_without_an_agent_needs_one_chosen(caller) -> None:
    served = Run.objects.create(agent_name="remote", source="served", status=Run.Status.SUCCEEDED, query="q")
    response = caller("token:editor").call("post", f"/api/runs/{served.pk}/replay")
    assert response.status_code == 422 and "choose the agent" in response.json()["detail"]


def test_the_page_button_replays_and_the_replay_links_to_the_compare(
    editor_client, make_user, finished
) -> None:
    viewer = Client()
    viewer.force_login(make_user("viewer", "replay-viewer"))
    assert 'id="replay"' not in viewer.get(f"/agents/runs/{finished.pk}/").content.decode()
    assert viewer.post(f"/agents/runs/{finished.pk}/replay").status_code == 403
    page = editor_client.get(f"/agents/runs/{finished.pk}/").content.decode()
    assert 'id="replay"' in page and "support, its current settings" in page

    response = editor_client.post(f"/agents/runs/{finished.pk}/replay", {"agent": ""})
    replay = Run.objects.get(replay_of=finished)
    assert response.status_code == 302 and response["Location"] == f"/agents/runs/{replay.pk}/"
    page = editor_client.get(response["Location"]).content.decode()
    assert "Replay of" in page and f"?a={finished.pk}&amp;b={replay.pk}" in page


@pytest.mark.parametrize("chosen", ["987654", "abc", "9" * 40, "<script>"])
def test_the_page_refuses_an_agent_that_does_not_exist(editor_client, finished, chosen) -> None:
    response = editor_client.post(f"/agents/runs/{finished.pk}/replay", {"agent": chosen}, follow=True)
    assert response.status_code == 200
    assert "to replay the run with: choose one from the list" in response.content.decode()
    assert not Run.objects.filter(replay_of=finished).exists()


def test_the_page_refuses_a_running_run(editor_client, finished) -> None:
    Run.objects.filter(pk=finished.pk).update(status=Run.Status.RUNNING)
    response = editor_client.post(f"/agents/runs/{finished.pk}/replay", follow=True)
    assert "is still running" in response.content.decode()
    assert not Run.objects.filter(replay_of=finished).exists()
    assert editor_client.post("/agents/runs/987654/replay").status_code == 404


def test_a_replay_runs_on_the_real_input_and_shows_it_masked(editor_client, finished) -> None:
    from agents import services
    from agents.models import PrivacySettings
    from agents.selectors import runs_for_display

    PrivacySettings.objects.update_or_create(pk=1, defaults={"mask_presets": ["email"]})
    Run.objects.filter(pk=finished.pk).update(query="mail kim@example.com about A-1")
    [shown] = runs_for_display([Run.objects.get(pk=finished.pk)])  # what a page holds: masked
    assert "kim@example.com" not in shown.query
    replay = services.run_replay(actor=None, run=shown)
    assert Run.objects.get(pk=replay.pk).query == "mail kim@example.com about A-1"  # the worker's input
    page = editor_client.get(f"/agents/runs/{replay.pk}/").content.decode()
    assert "kim@example.com" not in page
    assert "kim@example.com" not in str(AuditEvent.objects.get(action="run.replay").after)
