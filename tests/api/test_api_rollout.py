"""The rollout and shadow API: the happy path, and every value a caller chooses refused with a clear 4xx."""

from __future__ import annotations

import pytest

from agents.models import Agent
from core.models import AuditEvent
from rules import services as rule_services

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_versions(sample, make_user):
    author = make_user("editor")
    rule_set = sample["rule_set"]
    rule_services.rule_update(
        actor=author, rule=sample["rule"], revision=sample["rule"].revision, description="changed for v2"
    )
    rule_set.refresh_from_db()
    v2 = rule_services.rule_set_publish(actor=author, rule_set=rule_set, message="v2")
    return sample["version"], v2


def test_start_change_promote_through_the_api(editor_api, viewer_api, sample, two_versions) -> None:
    agent = sample["agent"]
    url = f"/api/agents/{agent.pk}/rollout"
    assert viewer_api.get(url).json()["rollout"] is None
    body = editor_api.call("put", url, json={"version": 2, "percent": 25, "chatbot_ids": ["bot-a"]}).json()
    assert body["rollout"]["version"] == 2 and body["rollout"]["percent"] == 25
    # The agent followed "latest" (v2): the version served before the candidate, v1, is pinned as stable.
    assert body["rollout"]["chatbot_ids"] == ["bot-a"] and body["stable"] == "v1"
    assert body["rollout"]["guard_error_percent"] == 20 and body["rollout"]["served"] == []
    live = viewer_api.get(url).json()["rollout"]  # the page's live figures, the same selector
    assert [(v["role"], v["version"], v["runs"], v["differ"]) for v in live["versions"]] == [
        ("stable", "v1", 0, None),
        ("candidate", "v2", 0, None),
    ]
    assert live["guard"] == {
        "error_percent": 20,
        "min_runs": 20,
        "state": "waiting",
        "judged_runs": 0,
        "errors": 0,
        "candidate_error_percent": 0.0,
        "stable_judged_runs": 0,
        "stable_error_percent": 0.0,
        "stable_needed": True,
        "act": False,
    }
    body = editor_api.post(f"{url}/promote").json()
    assert body["rollout"] is None and body["stable"] == "v2"
    assert Agent.objects.get(pk=agent.pk).pinned_version == two_versions[1]
    assert editor_api.post(f"{url}/rollback").status_code == 409  # nothing left to roll back
    assert AuditEvent.objects.filter(action__startswith="agent.rollout").count() == 2


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"version": 2, "percent": 101}, "percent"),
        ({"version": 2, "percent": -5}, "percent"),
        ({"version": 7, "percent": 10}, "version"),  # no such version
        ({"version": 2, "percent": 10, "chatbot_ids": ["b"] * 10_000}, "chatbot_ids"),
        ({"version": 2, "percent": 10, "chatbot_ids": ["a\x00b"]}, None),  # NUL: the API's body check, 400
        ({"version": 2, "percent": 10, "chatbot_ids": ["a\nb"]}, "chatbot_ids"),
        ({"version": 2, "percent": 10, "chatbot_ids": ["x" * 5_000]}, "chatbot_ids"),
    ],
)
def test_bad_rollout_input_is_a_422_and_nothing_changes(
    editor_api, sample, two_versions, body, field
) -> None:
    agent = sample["agent"]
    url = f"/api/agents/{agent.pk}/rollout"
    assert (
        editor_api.call("put", url, json={"version": 2, "percent": 5, "chatbot_ids": ["keep"]}).status_code
        == 200
    )
    response = editor_api.call("put", url, json=body)
    assert response.status_code == (400 if field is None else 422), response.content
    assert response.json().get("field") == field and response.json()["detail"]
    kept = editor_api.get(url).json()["rollout"]
    assert (kept["version"], kept["percent"], kept["chatbot_ids"]) == (2, 5, ["keep"])


@pytest.mark.parametrize(
    "body",
    [
        {"version": "abc", "percent": 1},
        {"percent": 1},
        {"version": 2, "percent": "many"},
        {"version": 2, "chatbot_ids": "bot"},
        {"version": 2**70},
    ],
)
def test_malformed_rollout_bodies_are_a_422(editor_api, sample, two_versions, body) -> None:
    response = editor_api.call("put", f"/api/agents/{sample['agent'].pk}/rollout", json=body)
    assert response.status_code == 422 and response.json()["detail"]


def test_shadow_through_the_api(editor_api, viewer_api, sample, two_versions) -> None:
    url = f"/api/agents/{sample['agent'].pk}/shadow"
    assert editor_api.call("put", url, json={"version": 2}).json() == {"shadow_version": 2, "tallies": []}
    assert viewer_api.get(url).json()["shadow_version"] == 2
    refused = editor_api.call("put", url, json={"version": 9})
    assert refused.status_code == 422 and "no published version 9" in refused.json()["detail"]
    assert editor_api.call("put", url, json={"version": None}).json()["shadow_version"] is None


def test_the_runs_api_filters_by_served_version_and_rollout_side(viewer_api, sample, two_versions) -> None:
    from agents.models import Run

    v1, v2 = two_versions
    common = {"agent": sample["agent"], "agent_name": "sample-agent", "status": Run.Status.SUCCEEDED}
    stable = Run.objects.create(**common, query="s", rule_set_ref="v1", rule_set_version=v1)
    candidate = Run.objects.create(
        **common, query="c", rule_set_ref="v2", rule_set_version=v2, rollout_candidate=True
    )
    assert [r["id"] for r in viewer_api.get("/api/runs?version=v1").json()["items"]] == [stable.pk]
    body = viewer_api.get("/api/runs?candidate=yes").json()
    assert [(r["id"], r["rule_set_ref"], r["rollout_candidate"]) for r in body["items"]] == [
        (candidate.pk, "v2", True)
    ]
    for hostile in ("v0", "v1' OR 1=1", "x" * 30, "latest", "v-1"):
        response = viewer_api.get(f"/api/runs?version={hostile}")
        assert response.status_code == 422 and response.json()["field"].endswith("version"), hostile
    assert viewer_api.get("/api/runs?candidate=maybe").status_code == 422


def test_publish_the_draft_as_a_staged_rollout_through_the_api(editor_api, sample, two_versions) -> None:
    agent = sample["agent"]
    url = f"/api/agents/{agent.pk}/rollout"
    rule = sample["rule"]
    rule.refresh_from_db()
    rule_services.rule_update(actor=None, rule=rule, revision=rule.revision, description="the fix")
    wrong = editor_api.call("put", url, json={"version": 4, "percent": 10, "publish_draft": True})
    assert wrong.status_code == 422 and wrong.json()["field"] == "version"
    assert "would be published as v3, not v4" in wrong.json()["detail"]
    body = editor_api.call(
        "put", url, json={"version": 3, "percent": 10, "publish_draft": True, "message": "the fix"}
    ).json()
    assert (body["stable"], body["rollout"]["version"], body["rollout"]["percent"]) == ("v2", 3, 10)
    assert sample["rule_set"].versions.get(number=3).message == "the fix"
