"""The rollout page: viewers see it, editors change it, bad values are a 400 that keeps the rollout."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agents import rollout_runtime as rollout
from agents.models import Agent

pytestmark = pytest.mark.django_db


def test_a_viewer_sees_the_rollout_but_cannot_change_it(viewer_client, agent, versions) -> None:  # noqa: F811
    page = viewer_client.get(reverse("agents:rollout", args=[agent.pk]))
    assert page.status_code == 200 and b"No rollout" in page.content and b"rollout-form" not in page.content
    refused = viewer_client.post(
        reverse("agents:rollout_set", args=[agent.pk]), {"version": 2, "percent": 50}
    )
    assert refused.status_code == 403
    assert viewer_client.post(reverse("agents:rollout_promote", args=[agent.pk])).status_code == 403
    assert Agent.objects.get(pk=agent.pk).rollout_version is None


def test_an_editor_starts_and_promotes_a_rollout(editor_client, agent, versions) -> None:  # noqa: F811
    url = reverse("agents:rollout_set", args=[agent.pk])
    response = editor_client.post(url, {"version": 2, "percent": 30, "chatbot_ids": "bot-a\nbot-b"})
    assert response.status_code == 302
    page = editor_client.get(reverse("agents:rollout", args=[agent.pk]))
    assert b"Candidate <strong>v2</strong>" in page.content and b"bot-b" in page.content
    editor_client.post(reverse("agents:rollout_promote", args=[agent.pk]))
    agent.refresh_from_db()
    assert (agent.pinned_version, agent.rollout_version) == (versions[1], None)


@pytest.mark.parametrize(
    "data",
    [
        {"version": 2, "percent": 101},
        {"version": 2, "percent": "-1"},
        {"version": 9, "percent": 10},
        {"version": 2, "percent": 10, "chatbot_ids": "\n".join(f"b{i}" for i in range(201))},
        {"version": 2, "percent": 10, "chatbot_ids": "a\x01b"},
    ],
)
def test_bad_values_are_a_400_and_keep_the_rollout(editor_client, agent, versions, data) -> None:  # noqa: F811
    url = reverse("agents:rollout_set", args=[agent.pk])
    assert editor_client.post(url, {"version": 2, "percent": 5, "chatbot_ids": "keep"}).status_code == 302
    response = editor_client.post(url, data)
    assert response.status_code == 400
    assert b"errorlist" in response.content
    agent.refresh_from_db()
    assert (agent.rollout_version, agent.rollout_percent, agent.rollout_chatbot_ids) == (
        versions[1],
        5,
        ["keep"],
    )


def test_promote_without_a_rollout_says_so(editor_client, agent, versions) -> None:  # noqa: F811
    response = editor_client.post(reverse("agents:rollout_promote", args=[agent.pk]), follow=True)
    assert b"has no rollout to promote" in response.content


def test_the_version_page_shows_shadow_divergences(viewer_client, agent, versions) -> None:  # noqa: F811
    calls = [{"rule": "r", "mcp_id": "order-service", "tool_name": "get_order", "params": {"query": "Q-77"}}]
    rollout.shadow_record(agent=agent, version=versions[1], run_id=None, live=[], shadow=calls)
    page = viewer_client.get(reverse("rules:versions", args=[versions[1].rule_set_id]))
    assert page.status_code == 200
    html = page.content.decode()
    assert (
        'class="shadow-diverged">1<' in html
        and "Q-77" in html
        and "v2 in shadow on" in html
        and "Shadow divergences" in html
    )


def test_a_run_served_by_the_candidate_says_so(viewer_client, agent) -> None:  # noqa: F811
    from agents.models import Run

    fields = {"agent": agent, "agent_name": agent.name, "query": "q", "rule_set_name": "rollout"}
    candidate = Run.objects.create(
        **fields, rule_set_ref="v2", rule_set_hash="h" * 64, rollout_candidate=True
    )
    stable = Run.objects.create(**fields, rule_set_ref="v1", rule_set_hash="h" * 64)
    assert (
        b"(rollout candidate)" in viewer_client.get(reverse("agents:run_detail", args=[candidate.pk])).content
    )
    assert (
        b"(rollout candidate)"
        not in viewer_client.get(reverse("agents:run_detail", args=[stable.pk])).content
    )
