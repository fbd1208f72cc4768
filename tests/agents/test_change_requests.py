"""Approvals (issue 28, part 2): on a protected agent a change of what it serves is a change request.

The gate is inside the services, so the page, the API and the MCP endpoint all end in a change
request; approval by someone other than the requester, holding the approver permission, applies it
once, even when two approvals arrive together.
"""

from __future__ import annotations

import json
import threading

import pytest
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.test import Client
from django.urls import reverse

from accounts.roles import approver_set
from accounts.token_services import token_create
from agents import services
from agents.errors import AgentConflictError, ChangeRequested
from agents.models import Agent, ChangeRequest
from core.models import AuditEvent
from rules import services as rule_services

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(make_user):
    return make_user("admin")


@pytest.fixture
def approver(make_user):
    user = make_user("viewer")  # approving needs no write role: whoever approves need not write changes
    approver_set(user=user, approver=True)
    return user


@pytest.fixture
def protected(agent, admin) -> Agent:
    return services.agent_protect(actor=admin, agent=agent, protected=True, approvals_required=1)


def _rollout(actor, agent, version, percent=10) -> ChangeRequest:
    with pytest.raises(ChangeRequested) as asked:
        services.rollout_set(
            actor=actor,
            agent=agent,
            version=version,
            percent=percent,
            chatbot_ids=[],
            change_reason="fix #12",
        )
    return ChangeRequest.objects.get(pk=asked.value.change_request_id)


def _approve(actor, change, comment="ok") -> ChangeRequest:
    return services.change_request_review(
        actor=actor, change_request=change, decision="approve", comment=comment
    )


def test_a_protected_rollout_waits_for_an_approver_other_than_the_requester(
    protected, versions, author, approver, make_user
) -> None:
    _, v2 = versions
    change = _rollout(author, protected, v2)
    protected.refresh_from_db()
    assert protected.rollout_version_id is None  # nothing changed yet
    assert change.reason == "fix #12" and change.diff["versions"]["to"] == "v2"
    assert {"field": "rollout_percent", "before": 0, "after": 10} in change.diff["fields"]
    # Neither the requester nor a viewer or an editor without the permission may approve.
    approver_set(user=author, approver=True)
    for user in (author, make_user("viewer"), make_user("editor")):
        with pytest.raises(PermissionDenied):
            _approve(user, change)
    assert change.reviews.count() == 0
    change = _approve(approver, change, "looks right")
    protected.refresh_from_db()
    assert change.state == "applied" and protected.rollout_version == v2 and protected.rollout_percent == 10
    actions = list(
        AuditEvent.objects.filter(action__startswith="change_request.")
        .order_by("id")
        .values_list("action", flat=True)
    )
    assert actions == ["change_request.create", "change_request.approve", "change_request.apply"]
    start = AuditEvent.objects.get(action="agent.rollout.start")
    assert start.actor == author  # the change is the requester's, applied by the approval
    assert AuditEvent.objects.filter(action="agent.protect").exists()


def test_an_edit_resets_the_approvals(protected, versions, author, approver, admin, make_user) -> None:
    _, v2 = versions
    services.agent_protect(actor=admin, agent=protected, protected=True, approvals_required=2)
    change = _rollout(author, protected, v2, percent=10)
    change = _approve(approver, change)
    assert change.state == "pending"
    edited = _rollout(author, protected, v2, percent=30)  # the requester edits their pending change
    assert edited.pk == change.pk and edited.round == 2 and edited.payload["percent"] == 30
    second = make_user("editor")
    approver_set(user=second, approver=True)
    edited = _approve(second, edited)
    assert edited.state == "pending"  # the first approval was for the old round
    edited = _approve(approver, edited)
    protected.refresh_from_db()
    assert edited.state == "applied" and protected.rollout_percent == 30
    assert AuditEvent.objects.filter(action="change_request.edit").count() == 1


def test_a_rejected_change_changes_nothing_and_a_stale_one_is_refused(
    protected, versions, author, approver, admin
) -> None:
    _, v2 = versions
    before = Agent.objects.values().get(pk=protected.pk)
    change = services.change_request_review(
        actor=approver, change_request=_rollout(author, protected, v2), decision="reject", comment="not now"
    )
    assert change.state == "rejected"
    assert Agent.objects.values().get(pk=protected.pk) == before
    with pytest.raises(AgentConflictError):
        _approve(admin, change)
    # The agent moves on (its description is edited, which needs no approval) after a change was
    # asked: refused on apply.
    stale = _rollout(author, protected, v2)
    values = {**services.agent_values(protected), "description": "moved on"}
    services.agent_save_values(actor=admin, agent=Agent.objects.get(pk=protected.pk), values=values)
    with pytest.raises(AgentConflictError, match="changed since this was asked"):
        _approve(approver, stale)
    stale.refresh_from_db()
    assert stale.state == "pending" and stale.reviews.count() == 0
    assert Agent.objects.get(pk=protected.pk).rollout_version_id is None


@pytest.mark.django_db(transaction=True)
def test_two_approvals_at_once_apply_the_change_once(
    protected, versions, author, approver, make_user
) -> None:
    _, v2 = versions
    change = _rollout(author, protected, v2)
    other = make_user("viewer")
    approver_set(user=other, approver=True)
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def approve(user) -> None:
        try:
            barrier.wait()
            outcomes.append(_approve(user, change).state)
        except AgentConflictError as exc:
            outcomes.append(f"refused: {exc.message}")
        finally:
            connection.close()

    threads = [threading.Thread(target=approve, args=(u,)) for u in (approver, other)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes)[0] == "applied" and "already" in sorted(outcomes)[1], outcomes
    assert AuditEvent.objects.filter(action="agent.rollout.start").count() == 1
    assert AuditEvent.objects.filter(action="change_request.apply").count() == 1


def test_every_route_ends_in_a_change_request(protected, versions, author, approver, client) -> None:
    v1, v2 = versions
    # The page: pinning another version on the agent form.
    client.force_login(author)
    form = {
        "name": protected.name,
        "system_prompt": "p",
        "rule_set": v1.rule_set_id,
        "rule_set_mode": "pinned",
    }
    form |= {
        "pinned_version": v2.pk,
        "model_provider": "offline",
        "temperature": "0",
        "input_max_chars": "4000",
    }
    form |= {"max_iterations": "6", "revision": protected.revision, "change_reason": "v2 fixes the typo"}
    response = client.post(reverse("agents:edit", args=[protected.pk]), form)
    page_change = ChangeRequest.objects.get(action="agent.update")
    assert response.status_code == 302 and response["Location"] == reverse(
        "agents:change_detail", args=[page_change.pk]
    )
    assert Agent.objects.get(pk=protected.pk).pinned_version == v1
    # The API: starting a rollout is 202 with the change request.
    response = client.put(
        f"/api/agents/{protected.pk}/rollout", {"version": 2, "percent": 10}, content_type="application/json"
    )
    assert response.status_code == 202, response.content
    assert ChangeRequest.objects.filter(pk=response.json()["change_request"], action="rollout.set").exists()
    # The MCP endpoint: publishing a version the agent (following "latest" now) would serve.
    Agent.objects.filter(pk=protected.pk).update(rule_set_mode="latest", pinned_version=None)
    rule_services.rule_update(
        actor=author, rule=v2.rule_set.rules.get(name="order_by_user"), revision=None, when="True"
    )
    headers = {
        "Authorization": f"Bearer {token_create(actor=author, name='t').secret}",
        "Accept": "application/json, text/event-stream",
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    body["params"] = {"name": "publish_rule_set", "arguments": {"rule_set_id": v1.rule_set_id, "publish": {}}}
    answer = (
        Client().post("/api/mcp", json.dumps(body), content_type="application/json", headers=headers).json()
    )
    assert answer["result"]["isError"] and "change request #" in answer["result"]["content"][0]["text"]
    publish = ChangeRequest.objects.get(action="rule_set.publish")
    assert v1.rule_set.versions.count() == 2
    # The approver applies it; the page says so in Korean too.
    viewer = Client()
    viewer.force_login(approver)
    page = viewer.get(reverse("agents:change_detail", args=[publish.pk]), HTTP_ACCEPT_LANGUAGE="ko")
    assert "변경 요청" in page.content.decode() and "change-approve" in page.content.decode()
    response = viewer.post(reverse("agents:change_review", args=[publish.pk]), {"decision": "approve"})
    assert response.status_code == 302 and v1.rule_set.versions.count() == 3
    # The page's edit applies as the whole edit it was.
    assert _approve(approver, page_change).state == "applied"
    agent = Agent.objects.get(pk=protected.pk)
    assert (agent.rule_set_mode, agent.pinned_version) == ("pinned", v2)
    assert AuditEvent.objects.get(action="agent.update").actor == author
