"""Values that used to be 500s (found by fuzzing, several only on PostgreSQL) get a 4xx or a form
error that says what is wrong, and key order survives a round trip through the database."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
from django.urls import reverse

from accounts.token_services import token_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(client, make_user):
    secret = token_create(actor=make_user("admin"), name="hostile").secret
    headers = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}

    def call(method: str, url: str, body: str | bytes | None = None):
        if body is None:
            return getattr(client, method)(url, **headers)
        return client.generic(method.upper(), url, body, content_type="application/json", **headers)

    return call


BODIES = {
    "NaN": ('{"name": "x", "description": NaN}', "NaN is not a JSON number"),
    "Infinity": ('{"name": Infinity}', "Infinity is not a JSON number"),
    "inf by overflow": ('{"name": "x", "extra": 1e999}', "too large"),
    "deep": ('{"name": "x", "d": ' + "[" * 50_000 + "]" * 50_000 + "}", "nested more than 64"),
    "huge int": ('{"name": ' + "9" * 5_000 + "}", "5000 digits"),
    "NUL": ('{"name": "a\\u0000b"}', "NUL"),
    "not UTF-8": (b'{"name": "caf\xe9"}', "not UTF-8"),
}


@pytest.mark.parametrize("body,message", BODIES.values(), ids=BODIES.keys())
def test_api_bodies_are_parsed_strictly_with_a_message(api, body, message) -> None:
    response = api("post", "/api/rule-sets", body)
    assert response.status_code == 400, response.content
    detail = response.json()["detail"]
    assert detail.startswith("The request body is not usable: ") and message in detail


@pytest.mark.parametrize("url", ["/api/runs", "/api/audit"])
def test_api_query_strings_refuse_nul(api, url) -> None:
    response = api("get", f"{url}?q=a%00b")
    assert response.status_code == 400
    assert response.json()["detail"] == "q: Null characters are not allowed."


OFFSETS = {
    "offset +20:00": ("2024-01-01T00:00:00+20:00", "The UTC offset +20:00 is out of range"),
    "offset -23:59": ("2024-01-01T00:00:00-23:59", "The UTC offset -23:59 is out of range"),
    "before year 1 in UTC": ("0001-01-01T00:00:00+05:00", "years 1 to 9999"),
    "after year 9999 in UTC": ("9999-12-31T23:59:00-05:00", "years 1 to 9999"),
}


@pytest.mark.parametrize("url", ["/api/runs", "/api/audit"])
@pytest.mark.parametrize("value,message", OFFSETS.values(), ids=OFFSETS.keys())
def test_api_date_filters_check_the_offset_and_range(api, url, value, message) -> None:
    for name in ("since", "until"):
        response = api("get", f"{url}?{name}={quote(value)}")
        assert response.status_code == 422, response.content
        assert message in response.json()["detail"]
    assert api("get", f"{url}?since={quote('2024-01-01T00:00:00+15:59')}").status_code == 200


@pytest.mark.parametrize("page", ["agents:run_list", "rules:audit"])
@pytest.mark.parametrize("value,message", OFFSETS.values(), ids=OFFSETS.keys())
def test_page_date_filters_show_the_problem(viewer_client, page, value, message) -> None:
    response = viewer_client.get(reverse(page), {"since": value})
    # The run list refuses an invalid filter (422, never every run instead); the audit log shows it.
    assert response.status_code == (422 if page == "agents:run_list" else 200)
    assert message in response.content.decode()


def test_a_tester_form_with_nan_says_so(editor_client) -> None:
    from rules import services

    rule_set = services.rule_set_create(actor=None, name="hostile")
    url = reverse("rules:test", kwargs={"pk": rule_set.pk})
    for field, text in [("t-context", '{"a": NaN}'), ("t-data", '[{"a": ' + "9" * 5_000 + "}]")]:
        response = editor_client.post(url, {"t-query": "q", field: text}, HTTP_HX_REQUEST="true")
        assert response.status_code < 500
        html = response.content.decode()
        assert "NaN is not a JSON number" in html or "5000 digits; at most 100" in html, html


def test_json_keeps_its_key_order_through_the_database(make_user) -> None:
    """jsonb (PostgreSQL) sorts keys by length; the call form must list arguments as declared."""
    from agents.models import Agent, Run
    from servers.models import McpServer

    schema = {"type": "object", "properties": {"zeta_long_name": {}, "b": {}, "alpha": {}}}
    tools = [{"name": "t", "inputSchema": schema}]
    server = McpServer.objects.create(
        mcp_id="order", transport="http", url="http://127.0.0.1:9/mcp", tools=tools
    )
    context = {"userId": "C-1", "a": 1, "chatbotId": "b"}
    data = [{"zz": 1, "a": {"long_key": 1, "k": 2}}]
    agent = Agent.objects.create(name="order", system_prompt="p")
    run = Run.objects.create(agent=agent, agent_name="order", query="q", context=context, a2a_data=data)
    server.refresh_from_db()
    run.refresh_from_db()
    assert list(server.tools[0]["inputSchema"]["properties"]) == ["zeta_long_name", "b", "alpha"]
    assert json.dumps(run.context) == json.dumps(context) and json.dumps(run.a2a_data) == json.dumps(data)
    # A JSON string that itself looks like JSON stays a string.
    run.a2a_data = "123"
    run.save(update_fields=["a2a_data"])
    run.refresh_from_db()
    assert run.a2a_data == "123"


def test_a_page_post_with_a_nul_is_a_400_and_saves_nothing(editor_client) -> None:
    # Found by the form fuzzer on PostgreSQL: the save-case view read the name from request.POST
    # itself, and PostgreSQL refuses NUL in text (a 500). Every page refuses it now.
    from agents.models import Agent, Run
    from rules.models import RuleSet, TestCase

    rule_set = RuleSet.objects.create(name="nul-set")
    agent = Agent.objects.create(name="nul-agent", system_prompt="p", rule_set=rule_set)
    run = Run.objects.create(agent=agent, agent_name=agent.name, query="주문 조회", status="succeeded")
    response = editor_client.post(reverse("agents:run_save_case", args=[run.pk]), {"name": "case\x00one"})
    assert response.status_code == 400
    assert response.content.decode() == "name: Null characters are not allowed."
    assert not TestCase.objects.exists()


def test_a_page_query_string_with_a_nul_is_a_400(editor_client) -> None:
    response = editor_client.get(reverse("agents:run_list"), {"q": "a\x00b"})
    assert response.status_code == 400 and "Null characters are not allowed." in response.content.decode()


def test_a_case_name_with_a_nul_is_refused_by_the_service(make_user) -> None:
    from rules.cases import case_create
    from rules.errors import RuleError
    from rules.models import RuleSet

    rule_set = RuleSet.objects.create(name="nul-service")
    with pytest.raises(RuleError, match="null character"):
        case_create(
            actor=make_user("editor"), rule_set=rule_set, name="x\x00", input={"query": "q"}, expected={}
        )


HOSTILE_IDS = {
    "5,000 digits": "9" * 5_000,  # int() refuses past 4,300 digits
    "past bigint": str(2**63),
    "superscript digit": "²",  # isdigit() but not int()
    "zero": "0",
}


@pytest.mark.parametrize("value", HOSTILE_IDS.values(), ids=HOSTILE_IDS.keys())
@pytest.mark.parametrize("param", ["rule", "case"])
def test_the_editor_answers_a_hostile_id_with_a_404(viewer_client, param, value) -> None:
    from rules.models import RuleSet

    rule_set = RuleSet.objects.create(name="ids")
    response = viewer_client.get(reverse("rules:editor", args=[rule_set.pk]), {param: value})
    assert response.status_code == 404


@pytest.mark.parametrize("value", HOSTILE_IDS.values(), ids=HOSTILE_IDS.keys())
def test_the_run_list_poll_ignores_a_hostile_live_id(viewer_client, value) -> None:
    response = viewer_client.get(reverse("agents:run_list"), {"live": value}, headers={"HX-Request": "true"})
    assert response.status_code < 500


def test_db_id_accepts_only_what_a_bigint_key_can_be() -> None:
    from core.userinput import db_id

    assert [db_id(v) for v in ("1", "42", str(2**63 - 1))] == [1, 42, 2**63 - 1]
    assert all(db_id(v) is None for v in [*HOSTILE_IDS.values(), "", None, "-1", " 1", "1.0", "１"])


@pytest.mark.parametrize("value", HOSTILE_IDS.values(), ids=HOSTILE_IDS.keys())
def test_a_hostile_version_in_the_diff_api_is_a_4xx(api, value) -> None:
    from rules.models import RuleSet

    rule_set = RuleSet.objects.create(name="diff-ids")
    response = api("get", f"/api/rule-sets/{rule_set.pk}/diff?a={quote(value)}&b=draft")
    assert 400 <= response.status_code < 500


@pytest.mark.parametrize("value", HOSTILE_IDS.values(), ids=HOSTILE_IDS.keys())
def test_a_hostile_run_id_on_the_compare_page_goes_back_with_a_sentence(viewer_client, value) -> None:
    response = viewer_client.get(reverse("agents:run_compare"), {"a": value, "b": "1"})
    assert response.status_code == 302 and response.url == reverse("agents:run_list")
