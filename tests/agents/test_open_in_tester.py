"""'Open in tester': a run's input (masked as pages show it) and its tool outputs, in its rule set's tester."""

from __future__ import annotations

import html as html_lib
import json

import pytest
from django.urls import reverse
from django.utils import timezone

from agents.models import Agent, Run, RunStep
from agents.redaction import privacy_get
from rules import services as rule_services
from servers.models import McpServer
from tests.support.tester import execute_confirmed

pytestmark = pytest.mark.django_db
HX = {"HTTP_HX_REQUEST": "true"}
EMAIL = "kim@example.com"
OUTPUT = {"order_id": "A-1001", "status": "배송 중"}


@pytest.fixture
def run(make_user) -> Run:
    privacy = privacy_get()
    privacy.mask_presets = ["email"]
    privacy.save()
    McpServer.objects.create(
        mcp_id="order-service",
        transport="http",
        url="http://127.0.0.1:9/mcp",
        tools=[{"name": "get_order", "input_schema": {"type": "object"}}],
        tools_refreshed_at=timezone.now(),
    )
    author = make_user("editor")
    rule_set = rule_services.rule_set_create(actor=author, name="orders")
    rule_services.rule_create(
        actor=author,
        rule_set=rule_set,
        name="route_order",
        mcp_id="order-service",
        tool_name="get_order",
        when='"주문" in query',
        params='{"query": query}',
    )
    agent = Agent.objects.create(name="helper", system_prompt="p", rule_set=rule_set)
    run = Run.objects.create(
        agent=agent,
        agent_name="helper",
        status=Run.Status.SUCCEEDED,
        query="주문 A-1001",
        context={"userId": EMAIL, "chatbotId": "premium"},
        a2a_data=[{"ticketType": "faq"}],
        user_id=EMAIL,
    )
    RunStep.objects.create(
        run=run,
        seq=1,
        kind="rule",
        name="route_order",
        status="ok",
        mcp_id="order-service",
        tool_name="get_order",
        input={"mcp_id": "order-service", "tool_name": "get_order", "params": {"query": "주문 A-1001"}},
        output=OUTPUT,
        started_at=timezone.now(),
    )
    return run


def _open(client, run: Run, **data):
    return client.post(reverse("agents:run_open_in_tester", args=[run.pk]), data)


def _editor(client, run: Run) -> str:
    return html_lib.unescape(
        client.get(reverse("rules:editor", args=[run.agent.rule_set.pk])).content.decode()
    )


def test_the_run_input_lands_in_the_tester_masked_never_real(viewer_client, run) -> None:
    response = _open(viewer_client, run)
    assert response.status_code == 302 and response.url == reverse(
        "rules:editor", args=[run.agent.rule_set.pk]
    )
    page = _editor(viewer_client, run)
    assert EMAIL not in page
    assert '"userId": "[이메일]"' in page and '"chatbotId": "premium"' in page and "주문 A-1001" in page
    assert '"ticketType": "faq"' in page  # the DataParts too
    assert f"run {run.pk}</a>" in page and "masked 1 value" in page
    # Outputs only when asked; a viewer cannot Execute, so gets no pinned-outputs field at all.
    assert "Pinned tool outputs" not in page and 'A-1001", "status"' not in page


def test_with_outputs_the_recorded_calls_become_pins_and_execute_uses_them(editor_client, run) -> None:
    _open(editor_client, run, outputs="1")
    page = _editor(editor_client, run)
    assert '"output": {"order_id": "A-1001", "status": "배송 중"}' in page
    # Execute with the masked userId replaced; the server is down (port 9): the call is pinned, not made.
    pinned = json.dumps(
        [
            {
                "mcp_id": "order-service",
                "tool_name": "get_order",
                "params": {"query": "주문 A-1001"},
                "output": OUTPUT,
            }
        ]
    )
    response = execute_confirmed(
        editor_client,
        reverse("rules:test", args=[run.agent.rule_set.pk]),
        {"t-query": "주문 A-1001", "t-context": '{"userId": "C-1"}', "t-pinned": pinned},
        **HX,
    )
    text = html_lib.unescape(response.content.decode())
    assert response.status_code == 200 and 'data-ok="true"' in text and 'data-source="pinned"' in text


def test_execute_refuses_masked_values_and_a_dry_run_names_them(editor_client, run) -> None:
    _open(editor_client, run)
    url = reverse("rules:test", args=[run.agent.rule_set.pk])
    data = {"t-query": "주문 A-1001", "t-context": '{"userId": "[이메일]", "chatbotId": "premium"}'}
    refused = editor_client.post(url, {**data, "execute": "1"}, **HX)
    assert refused.status_code == 422
    assert "Execute would send masked values to real tools" in html_lib.unescape(refused.content.decode())
    dry = html_lib.unescape(editor_client.post(url, data, **HX).content.decode())
    assert dry.count("context.userId") == 1 and "the mask's text, not the real value" in dry
    replaced = editor_client.post(url, {**data, "t-context": '{"userId": "C-1"}'}, **HX)
    assert "the mask's text" not in replaced.content.decode()


def test_a_run_without_a_rule_set_says_so(viewer_client, run) -> None:
    Agent.objects.filter(pk=run.agent_id).update(rule_set=None)
    response = _open(viewer_client, run)
    assert response.status_code == 302
    follow = viewer_client.get(response.url).content.decode()
    assert "no agent with a rule set" in follow


def test_opening_is_a_post_and_another_user_does_not_see_it(viewer_client, run, client, make_user) -> None:
    assert viewer_client.get(reverse("agents:run_open_in_tester", args=[run.pk])).status_code == 405
    _open(viewer_client, run)
    other = client.__class__()
    other.force_login(make_user("viewer"))
    assert "tester-origin" not in _editor(other, run)


def test_a_run_served_by_an_older_version_is_tested_on_that_version_with_the_draft_beside(
    viewer_client, run
) -> None:
    """Issue 28 point 4: the run was served by v1; the draft moved on and now skips the rule."""
    rule_set = run.agent.rule_set
    v1 = rule_services.rule_set_publish(actor=None, rule_set=rule_set)
    Run.objects.filter(pk=run.pk).update(rule_set_version=v1, rule_set_ref="v1")
    rule = rule_set.rules.get(name="route_order")
    rule_services.rule_update(actor=None, rule=rule, revision=rule.revision, when='"환불" in query')
    _open(viewer_client, run)
    assert "served by v1" in _editor(viewer_client, run)
    response = viewer_client.post(
        reverse("rules:test", args=[rule_set.pk]), {"t-query": "주문 A-1001", "t-context": "{}"}, **HX
    )
    text = html_lib.unescape(response.content.decode())
    assert f"Testing v1, the version that served run {run.pk}" in text
    assert "get_order" in text.split('id="tester-outcome"')[1]  # v1's decision: it calls the tool
    differs = text.split('id="tester-draft-differs"')[1].split("</table>")[0]
    assert "order-service.get_order" in differs and "skipped" in differs  # v1 calls it, the draft skips
