"""Change control with no way around it (issue 41).

The field walk: every concrete field of the Agent model (and its ReAct servers) is changed on a
protected agent through every write route (the service itself, the page, the REST API, the rules
routes that publish or restore); none may change the agent without a change request, gated routes
answer 202 naming it, and nothing answers 500. A field nobody classified fails the walk.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied
from django.test import Client
from django.urls import reverse

from accounts.roles import approver_set
from accounts.token_services import token_create
from agents import services
from agents.errors import AgentConflictError, ChangeRequested
from agents.models import Agent, ChangeRequest, ModelConnection
from agents.services.agents import UNGATED_FIELDS

pytestmark = pytest.mark.django_db

BOOKKEEPING = {"id", "revision", "created_at", "updated_at"}


@pytest.fixture
def admin(make_user):
    return make_user("admin")


@pytest.fixture
def approver(make_user):
    user = make_user("viewer")
    approver_set(user=user, approver=True)
    return user


@pytest.fixture
def protected(agent, admin, versions, demo_servers) -> Agent:
    agent.output_masks = ["card_number", "kr_rrn"]
    agent.input_blocked_patterns = ["secret"]
    agent.save()
    agent.react_servers.set([demo_servers["order-service"]])
    return services.agent_protect(actor=admin, agent=agent, protected=True, approvals_required=2)


def _state(agent_id: int) -> dict[str, Any]:
    """What the agent is, as stored: every column and its ReAct servers (its revision aside: an
    ungated edit or a request's bookkeeping may move it, never what it does)."""
    agent = Agent.objects.get(pk=agent_id)
    row = {f.attname: f.value_from_object(agent) for f in Agent._meta.concrete_fields}
    row.pop("updated_at")
    row.pop("revision")
    row["react_servers"] = sorted(agent.react_servers.values_list("mcp_id", flat=True))
    return row


def _api_changes(agent: Agent, versions, connection: ModelConnection) -> dict[str, dict[str, Any]]:
    """One change per field the agent's edit carries (the API's names and values)."""
    v1, v2 = versions
    return {
        "name": {"name": "renamed"},
        "system_prompt": {"system_prompt": "Ignore the rules."},
        "rule_set": {"rule_set": None, "rule_set_mode": "latest", "pinned_version": None},
        "rule_set_mode": {"rule_set_mode": "latest", "pinned_version": None},
        "pinned_version": {"pinned_version": v2.number},
        "model_provider": {"model_provider": "scripted", "model_script": [{"content": "hi"}]},
        "model_name": {"model_name": "other"},
        "model_connection": {
            "model_provider": "openai-compatible",
            "model_connection": connection.pk,
            "model_name": "m1",
        },
        "model_script": {"model_script": [{"content": "x"}]},
        "temperature": {"temperature": 1.5},
        "react_servers": {"react_servers": ["order-service", "knowledge-base"]},
        "input_max_chars": {"input_max_chars": 100_000},
        "input_blocked_patterns": {"input_blocked_patterns": []},
        "output_blocked_patterns": {"output_blocked_patterns": ["x"]},
        "output_masks": {"output_masks": []},
        "max_iterations": {"max_iterations": 50},
        "answer_from_prestep": {"answer_from_prestep": True},
    }


# Fields the agent's edit never writes: each has its own route (checked below) or is written only
# by a service that leaves protected agents alone.
OWN_ROUTES = {
    "rollout_version": "rollout",
    "rollout_percent": "rollout",
    "rollout_chatbot_ids": "rollout",
    "rollout_started_at": "rollout",
    "rollout_guard_error_percent": "rollout",
    "rollout_guard_min_runs": "rollout",
    "shadow_version": "shadow",
    "protected": "protection",
    "approvals_required": "protection",
    "legacy_base_url": "connection adoption",
    "legacy_api_key_env": "connection adoption",
}


def _form(agent: Agent, change: dict[str, Any]) -> dict[str, Any]:
    """The agent page's form as it shows the agent, with ``change`` (API names) applied."""
    values = {**services.agent_values(agent), **change}
    data: dict[str, Any] = {k: v for k, v in values.items() if v is not None}
    if values.get("pinned_version") is not None:
        data["pinned_version"] = agent.rule_set.versions.get(number=values["pinned_version"]).pk
    data["model_script"] = json.dumps(values["model_script"])
    data["react_servers"] = [
        s.pk for s in agent.react_servers.model.objects.filter(mcp_id__in=values["react_servers"])
    ]
    for key in ("input_blocked_patterns", "output_blocked_patterns"):
        data[key] = "\n".join(values[key])
    if not values["answer_from_prestep"]:
        data.pop("answer_from_prestep")
    data["revision"] = agent.revision
    return data


def test_every_field_through_every_route_is_a_change_request(
    protected, versions, author, admin, demo_servers
) -> None:
    connection = ModelConnection.objects.create(
        name="c", base_url="http://127.0.0.1:9/v1", model_names=["m1"]
    )
    changes = _api_changes(protected, versions, connection)
    # Copies kept for the release before (expand/contract): no form or schema of this release can
    # write them (editable=False), so no route has anything to change there.
    previous_release = {f.name for f in Agent._meta.concrete_fields if not f.editable} - BOOKKEEPING
    assert previous_release == {"model_base_url", "model_api_key_env"}, previous_release
    gated = {
        f.name
        for f in Agent._meta.concrete_fields
        if f.name not in UNGATED_FIELDS | BOOKKEEPING | previous_release
    } | {"react_servers"}
    unclassified = gated - set(changes) - set(OWN_ROUTES)
    assert not unclassified, f"no route of the walk changes {unclassified}: add it"
    before = _state(protected.pk)
    editor, boss = Client(), Client()
    editor.force_login(author)
    boss.force_login(admin)
    for field, change in changes.items():
        for user, who in ((author, editor), (admin, boss)):
            agent = Agent.objects.get(pk=protected.pk)
            # The service, as every route calls it.
            with pytest.raises(ChangeRequested):
                services.agent_save_values(
                    actor=user, agent=agent, values={**services.agent_values(agent), **change}
                )
            # The REST API: 202 naming the request.
            agent = Agent.objects.get(pk=protected.pk)
            response = who.patch(
                f"/api/agents/{agent.pk}",
                {**change, "revision": agent.revision},
                content_type="application/json",
            )
            assert response.status_code == 202, (field, response.content)
            assert ChangeRequest.objects.filter(pk=response.json()["change_request"]).exists()
            # The page: the form goes to the request's page.
            agent = Agent.objects.get(pk=protected.pk)
            response = who.post(reverse("agents:edit", args=[agent.pk]), _form(agent, change))
            assert response.status_code == 302, (field, response.content.decode()[-2000:])
            assert "/agents/changes/" in response["Location"], field
            assert _state(protected.pk) == before, field
    # Every concrete field set on the instance and saved by the service: a request, or nothing changed.
    for field in Agent._meta.concrete_fields:
        if field.name in UNGATED_FIELDS | BOOKKEEPING:
            continue
        agent = Agent.objects.get(pk=protected.pk)
        value = field.value_from_object(agent)
        bump = {
            bool: lambda v: not v,
            int: lambda v: v + 1,
            float: lambda v: v + 0.5,
            str: lambda v: f"{v}x",
            list: lambda v: [*v, "email"],
        }
        new: Any = bump[type(value)](value) if type(value) in bump else None
        if field.is_relation:
            new = None if value is not None else versions[1].pk
            if field.name == "model_connection":
                new = connection.pk
        if field.name in ("rollout_started_at",):
            from django.utils import timezone

            new = timezone.now()
        setattr(agent, field.attname, new)
        try:
            services.agent_save(actor=author, agent=agent)
        except ChangeRequested:
            pass
        except Exception as exc:  # a refusal (a bad value) changes nothing either
            assert getattr(exc, "message", None), (field.name, exc)
        assert _state(protected.pk) == before, field.name


def test_own_routes_of_a_protected_agent_answer_202(protected, versions, author, admin) -> None:
    before = _state(protected.pk)
    editor, boss = Client(), Client()
    editor.force_login(author)
    boss.force_login(admin)
    base = f"/api/agents/{protected.pk}"
    calls = [
        (editor, "put", f"{base}/rollout", {"version": 2, "percent": 10}),
        (editor, "put", f"{base}/shadow", {"version": 2}),
        (boss, "put", f"{base}/protection", {"protected": False, "approvals_required": 1}),
        (boss, "put", f"{base}/protection", {"protected": True, "approvals_required": 1}),
        (editor, "delete", base, None),
        (boss, "delete", base, None),
    ]
    for client, method, url, body in calls:
        kwargs: dict[str, Any] = {"content_type": "application/json"}
        if body is not None:
            kwargs["data"] = body
        response = getattr(client, method)(url, **kwargs)
        assert response.status_code == 202, (url, body, response.content)
        assert "change request #" in response.json()["detail"]
        assert _state(protected.pk) == before, (url, body)
    # The pages: shadow mode and protection go to the request.
    page = editor.post(reverse("agents:shadow_set", args=[protected.pk]), {"version": 2})
    assert page.status_code == 302 and "/agents/changes/" in page["Location"]
    page = boss.post(reverse("agents:protect", args=[protected.pk]), {"approvals_required": 1})
    assert page.status_code == 302 and "/agents/changes/" in page["Location"]
    assert _state(protected.pk) == before
    # Raising protection needs nobody else.
    response = boss.put(
        f"{base}/protection", {"protected": True, "approvals_required": 3}, "application/json"
    )
    assert response.status_code == 200 and Agent.objects.get(pk=protected.pk).approvals_required == 3


def test_the_rules_routes_change_what_a_protected_agent_serves_only_by_request(
    protected, versions, author
) -> None:
    """Restore, import and push write the draft (a protected agent never serves it); publishing what a
    protected agent following "latest" would serve is a request, on the API and the MCP endpoint."""
    v1, _ = versions
    Agent.objects.filter(pk=protected.pk).update(rule_set_mode="latest", pinned_version=None)
    before = _state(protected.pk)
    client = Client()
    client.force_login(author)
    rule_set = v1.rule_set
    response = client.post(
        f"/api/rule-sets/{rule_set.pk}/versions/1/restore", {}, content_type="application/json"
    )
    assert response.status_code in (200, 201), response.content
    response = client.post(f"/api/rule-sets/{rule_set.pk}/publish", {}, content_type="application/json")
    assert response.status_code == 202, response.content
    headers = {
        "Authorization": f"Bearer {token_create(actor=author, name='t').secret}",
        "Accept": "application/json, text/event-stream",
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    body["params"] = {"name": "publish_rule_set", "arguments": {"rule_set_id": rule_set.pk, "publish": {}}}
    answer = Client().post("/api/mcp", json.dumps(body), content_type="application/json", headers=headers)
    result = answer.json()["result"]
    assert result["isError"] and "change request #" in result["content"][0]["text"]
    assert rule_set.versions.count() == 2 and _state(protected.pk) == before


def test_deleting_a_protected_agent_is_a_request_and_never_drops_a_pending_one(
    protected, versions, author, admin, approver, make_user
) -> None:
    second = make_user("viewer")
    approver_set(user=second, approver=True)
    with pytest.raises(ChangeRequested) as asked:
        services.agent_delete(actor=author, agent=protected)
    delete = ChangeRequest.objects.get(pk=asked.value.change_request_id)
    with pytest.raises(ChangeRequested) as asked:
        services.rollout_set(actor=author, agent=protected, version=versions[1], percent=5, chatbot_ids=[])
    rollout = ChangeRequest.objects.get(pk=asked.value.change_request_id)
    services.change_request_review(actor=approver, change_request=delete, decision="approve")
    with pytest.raises(AgentConflictError, match="pending change requests"):
        services.change_request_review(actor=second, change_request=delete, decision="approve")
    assert Agent.objects.filter(pk=protected.pk).exists()
    services.change_request_withdraw(actor=author, change_request=rollout)
    applied = services.change_request_review(actor=second, change_request=delete, decision="approve")
    assert applied.state == "applied" and not Agent.objects.filter(pk=protected.pk).exists()


def test_only_the_description_changes_at_once(protected, author) -> None:
    agent = Agent.objects.get(pk=protected.pk)
    saved = services.agent_save_values(
        actor=author, agent=agent, values={**services.agent_values(agent), "description": "now documented"}
    )
    assert saved.description == "now documented" and not ChangeRequest.objects.exists()


# --- Valid when applied (part 2) ------------------------------------------------------------------


def _approve(user, change, credential: str = "session"):
    user._llamon_credential = credential
    return services.change_request_review(actor=user, change_request=change, decision="approve")


def _prompt_request(author, agent) -> ChangeRequest:
    agent = Agent.objects.get(pk=agent.pk)
    with pytest.raises(ChangeRequested) as asked:
        services.agent_save_values(
            actor=author, agent=agent, values={**services.agent_values(agent), "system_prompt": "new"}
        )
    return ChangeRequest.objects.get(pk=asked.value.change_request_id)


@pytest.mark.parametrize("lapse", ["deactivated", "no longer an approver"])
def test_an_approval_that_lapsed_no_longer_counts(
    protected, author, admin, approver, make_user, lapse
) -> None:
    from accounts.services import user_set_active, user_set_approver

    change = _prompt_request(author, protected)
    _approve(approver, change)
    if lapse == "deactivated":
        user_set_active(actor=admin, user=approver, active=False)
    else:
        user_set_approver(actor=admin, user=approver, approver=False)
    second = make_user("viewer")
    approver_set(user=second, approver=True)
    change = _approve(second, change)  # 2 needed: the lapsed one no longer counts
    assert change.state == "pending" and Agent.objects.get(pk=protected.pk).system_prompt == "p"
    viewer = Client()
    viewer.force_login(second)
    for language, words in (("en", "does not count"), ("ko", "반영되지 않음")):
        page = viewer.get(reverse("agents:change_detail", args=[change.pk]), HTTP_ACCEPT_LANGUAGE=language)
        text = page.content.decode()
        assert words in text and "review-not-counted" in text, language
    assert viewer.get(f"/api/change-requests/{change.pk}").json()["approvals"] == 1
    third = make_user("editor")
    approver_set(user=third, approver=True)
    assert _approve(third, change).state == "applied"


def test_a_token_capped_at_a_role_cannot_approve(protected, author, make_user) -> None:
    user = make_user("editor")
    approver_set(user=user, approver=True)
    change = _prompt_request(author, protected)
    capped = token_create(actor=user, name="capped", max_role="viewer").secret
    response = Client().post(
        f"/api/change-requests/{change.pk}/approve",
        {"comment": ""},
        content_type="application/json",
        headers={"Authorization": f"Bearer {capped}"},
    )
    assert response.status_code == 403 and "capped" in response.json()["detail"], response.content
    assert change.reviews.count() == 0
    own = token_create(actor=user, name="own").secret
    response = Client().post(
        f"/api/change-requests/{change.pk}/approve",
        {"comment": ""},
        content_type="application/json",
        headers={"Authorization": f"Bearer {own}"},
    )
    assert response.status_code == 200 and response.json()["state"] == "pending"  # 2 needed


def test_an_account_the_requester_made_cannot_approve_their_change(
    protected, admin, approver, make_user
) -> None:
    from accounts.services import user_create, user_set_approver, user_set_role

    def granted(grant):  # a grant is a change request: an independent approver lets it through
        with pytest.raises(ChangeRequested) as asked:
            grant()
        assert (
            _approve(approver, ChangeRequest.objects.get(pk=asked.value.change_request_id)).state == "applied"
        )

    stand_in = user_create(actor=admin, username="stand-in", role="viewer")
    granted(lambda: user_set_approver(actor=admin, user=stand_in, approver=True))
    deputy = user_create(actor=admin, username="deputy", role="viewer")
    granted(lambda: user_set_role(actor=admin, user=deputy, role="admin"))
    # The deputy (an account the requester made) makes another: still the requester's.
    third = user_create(actor=deputy, username="third", role="viewer")
    granted(lambda: user_set_role(actor=deputy, user=third, role="admin"))
    change = _prompt_request(admin, protected)
    for user in (stand_in, deputy, third):
        with pytest.raises(PermissionDenied, match="not independent"):
            _approve(user, change)
    assert change.reviews.count() == 0


# --- Approvers know (part 5) ----------------------------------------------------------------------


def test_the_inbox_counts_what_waits_for_each_approver(protected, author, approver, make_user) -> None:
    change = _prompt_request(author, protected)
    other = make_user("editor")  # not an approver: no inbox at all
    pages = {}
    for user in (approver, author, other):
        client = Client()
        client.force_login(user)
        pages[user.pk] = client
    page = pages[approver.pk].get(reverse("agents:list"), HTTP_ACCEPT_LANGUAGE="ko").content.decode()
    assert 'id="nav-inbox-count"' in page and ">1</span>" in page and "승인" in page
    inbox = pages[approver.pk].get(reverse("agents:change_list"), {"inbox": "1"}).content.decode()
    assert f"#{change.pk}" in inbox
    assert "nav-inbox" not in pages[other.pk].get(reverse("agents:list")).content.decode()
    approver_set(user=author, approver=True)  # the requester's own request never waits for them
    assert "nav-inbox-count" not in pages[author.pk].get(reverse("agents:list")).content.decode()
    _approve(approver, change)  # reviewed this round (2 needed): no longer waiting for them
    assert "nav-inbox-count" not in pages[approver.pk].get(reverse("agents:list")).content.decode()


def test_approvers_get_a_mail_when_configured(
    protected, author, approver, make_user, settings, django_capture_on_commit_callbacks
) -> None:
    from django.core import mail

    from accounts.services import language_set

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    approver.email = "approver@bank.example"
    approver.save()
    language_set(user=approver, language="ko")
    silent = make_user("editor")  # no approver: no mail
    silent.email = "editor@bank.example"
    silent.save()
    with django_capture_on_commit_callbacks(execute=True):
        _prompt_request(author, protected)
    assert mail.outbox == []  # off by default
    settings.LLAMON_APPROVAL_MAIL = True
    with django_capture_on_commit_callbacks(execute=True) as sent, pytest.raises(ChangeRequested):
        services.agent_delete(actor=author, agent=protected)
    assert len(sent) == 1 and len(mail.outbox) == 1  # once the request is committed
    change = ChangeRequest.objects.get(action="agent.delete")
    message = mail.outbox[-1]
    assert message.to == ["approver@bank.example"] and f"#{change.pk}" in message.subject
    assert "검토" in message.subject and f"/agents/changes/{change.pk}/" in message.body


def test_a_viewer_approver_reads_the_share_and_runs_the_impact_on_the_request_page(
    protected, versions, author, approver, make_user
) -> None:
    from governance.models import ImpactAnalysis
    from governance.services import impact_execute

    with pytest.raises(ChangeRequested) as asked:
        services.rollout_publish(actor=author, agent=protected, percent=25, chatbot_ids=["bot-a"])
    change = ChangeRequest.objects.get(pk=asked.value.change_request_id)
    client = Client()
    client.force_login(approver)
    page = client.get(reverse("agents:change_detail", args=[change.pk])).content.decode()
    assert "<code>rollout_percent</code></td><td><code>0</code></td><td><code>25</code>" in page
    assert "bot-a" in page and 'id="change-impact-run"' in page
    response = client.post(reverse("governance:change_impact", args=[change.pk]))
    analysis = ImpactAnalysis.objects.get()
    assert response.status_code == 302 and f"?impact={analysis.pk}" in response["Location"]
    assert analysis.candidate_ref.startswith("draft") and analysis.agent_name == protected.name
    impact_execute(analysis_id=analysis.pk)  # what the worker does
    page = client.get(response["Location"]).content.decode()
    assert reverse("governance:impact_report", args=[analysis.pk]) in page
    report = client.get(reverse("governance:impact_report", args=[analysis.pk])).content.decode()
    assert 'id="impact-summary"' in report and "<html" not in report
    # A viewer who is no approver reads the page but may not start an analysis.
    nobody = Client()
    nobody.force_login(make_user("viewer"))
    assert (
        'id="change-impact-run"'
        not in nobody.get(reverse("agents:change_detail", args=[change.pk])).content.decode()
    )
    refused = nobody.post(reverse("governance:change_impact", args=[change.pk]), follow=True)
    assert "approver permission" in refused.content.decode()
    assert ImpactAnalysis.objects.count() == 1


def test_the_inbox_count_costs_the_same_queries_at_1_and_at_20_pending_requests(
    protected, admin, approver
) -> None:
    """The count runs on every page an approver loads: its queries do not grow with the requests."""
    from django.db import connection
    from django.test import RequestFactory
    from django.test.utils import CaptureQueriesContext

    from accounts.services import user_create
    from agents.context import change_inbox_context

    def count() -> tuple[int, int]:
        request = RequestFactory().get("/")
        request.user = type(approver).objects.get(pk=approver.pk)  # nothing cached
        with CaptureQueriesContext(connection) as queries:
            waiting = change_inbox_context(request)["change_inbox"]
        return waiting, len(queries)

    for n in range(20):  # each requester an account the admin made: the audit says who is behind whom
        _prompt_request(user_create(actor=admin, username=f"author-{n}", role="editor"), protected)
        if n == 0:
            one = count()
    twenty = count()
    assert (one[0], twenty[0]) == (1, 20)
    assert one[1] == twenty[1], (one, twenty)
