"""Model connections (issue 28, part 1): a key goes only to the endpoint an admin paired it with.

Before, an editor could save an agent with ``model_api_key_env=OPENAI_API_KEY`` and a base URL of
their own listener, and the worker sent ``Authorization: Bearer <the operator's key>`` there. Now
an agent names a connection (an admin's base URL + key variable) and one of its models; the worker
reads the URL and the key variable from the connection only. Each route an editor has is tried
with a hostile listener on 127.0.0.1 that counts every TCP connection it accepts: it gets none.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from django.urls import reverse
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from accounts.token_services import token_create
from agents import services
from agents.models import Agent, ModelConnection, Run
from agents.services import run_execute
from core.models import AuditEvent
from tests.support.openai_fake import FakeOpenAI
from tests.support.outbound import Listener

OPERATOR_KEY = "sk-operator-secret-0123456789"


@pytest.fixture
def operator_key(monkeypatch) -> str:
    monkeypatch.setenv("OPENAI_API_KEY", OPERATOR_KEY)
    return OPERATOR_KEY


@pytest.fixture
def endpoints(operator_key):
    """The admin's endpoint (a fake OpenAI server) and the editor's listener, both on 127.0.0.1."""
    with FakeOpenAI() as corp, Listener() as hostile:
        yield corp, hostile


def _connection(base_url: str, **overrides: Any) -> ModelConnection:
    values = {
        "name": "corp",
        "base_url": base_url,
        "api_key_env": "OPENAI_API_KEY",
        "model_names": ["corp-model"],
        **overrides,
    }
    return services.connection_save(actor=None, connection=ModelConnection(), values=values)


def _run(agent: Agent) -> Run:
    run = Run.objects.create(agent=agent, agent_name=agent.name, query="hello", status=Run.Status.QUEUED)
    run_execute(run_id=run.pk)  # the worker task's body, in this process
    run.refresh_from_db()
    return run


def _agent_form(**overrides: Any) -> dict[str, Any]:
    return {
        "name": "mine",
        "description": "",
        "system_prompt": "Be helpful.",
        "rule_set": "",
        "rule_set_mode": "latest",
        "pinned_version": "",
        "model_provider": "openai-compatible",
        "model_connection": "",
        "model_name": "corp-model",
        "model_script": "",
        "temperature": "0",
        "input_max_chars": "4000",
        "input_blocked_patterns": "",
        "output_blocked_patterns": "",
        "max_iterations": "6",
        **overrides,
    }


# --- the page ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_through_the_page_an_editor_cannot_point_the_key_at_their_listener(editor_client, endpoints) -> None:
    corp, hostile = endpoints
    connection = _connection(corp.base_url)
    # The old fields, and the stored legacy ones, are posted beside a real connection: all ignored.
    response = editor_client.post(
        reverse("agents:create"),
        _agent_form(
            model_connection=str(connection.pk),
            model_base_url=hostile.url + "/v1",
            model_api_key_env="OPENAI_API_KEY",
            legacy_base_url=hostile.url + "/v1",
            legacy_api_key_env="OPENAI_API_KEY",
        ),
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    agent = Agent.objects.get(name="mine")
    assert (agent.model_connection, agent.legacy_base_url, agent.legacy_api_key_env) == (connection, "", "")
    run = _run(agent)
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert hostile.connections == 0
    assert corp.headers[0]["authorization"] == f"Bearer {OPERATOR_KEY}"  # the control: the admin's endpoint


@pytest.mark.django_db
def test_the_page_needs_a_connection_and_one_of_its_models(editor_client, endpoints) -> None:
    corp, _ = endpoints
    connection = _connection(corp.base_url)
    without = editor_client.post(reverse("agents:create"), _agent_form(description="kept 설명"))
    assert without.status_code == 400 and "model connection" in without.content.decode()
    assert "kept 설명" in without.content.decode()
    other = editor_client.post(
        reverse("agents:create"), _agent_form(model_connection=str(connection.pk), model_name="gpt-4o")
    )
    assert other.status_code == 400 and "Choose one of the models of connection" in other.content.decode()
    assert not Agent.objects.exists()


@pytest.mark.django_db
def test_editors_cannot_define_or_change_connections(editor_client, caller, endpoints) -> None:
    corp, hostile = endpoints
    connection = _connection(corp.base_url)
    assert editor_client.get(reverse("agents:connection_create")).status_code == 403
    page = editor_client.post(
        reverse("agents:connection_edit", args=[connection.pk]),
        {
            "name": "corp",
            "provider": "openai-compatible",
            "base_url": hostile.url,
            "model_names": "corp-model",
        },
    )
    assert page.status_code == 403
    editor = caller("token:editor")
    created = editor.post(
        "/api/model-connections",
        {"name": "mine", "base_url": hostile.url, "api_key_env": "OPENAI_API_KEY", "model_names": ["m"]},
    )
    patched = editor.patch(
        f"/api/model-connections/{connection.pk}", {"revision": connection.revision, "base_url": hostile.url}
    )
    assert (created.status_code, patched.status_code) == (403, 403)
    assert ModelConnection.objects.get().base_url == corp.base_url


# --- the API -------------------------------------------------------------------------------------


def _agent_body(**overrides: Any) -> dict[str, Any]:
    return {
        "name": "mine",
        "system_prompt": "Be helpful.",
        "model_provider": "openai-compatible",
        "model_name": "corp-model",
        **overrides,
    }


@pytest.mark.django_db
@pytest.mark.parametrize(
    "smuggled",
    [
        {"model_base_url": "HOSTILE"},
        {"model_api_key_env": "OPENAI_API_KEY"},
        {"legacy_base_url": "HOSTILE", "legacy_api_key_env": "OPENAI_API_KEY"},
        {"base_url": "HOSTILE"},
    ],
)
def test_through_the_api_an_agent_holds_no_url_or_key_variable(caller, endpoints, smuggled) -> None:
    corp, hostile = endpoints
    connection = _connection(corp.base_url)
    smuggled = {k: (hostile.url + "/v1" if v == "HOSTILE" else v) for k, v in smuggled.items()}
    editor = caller("token:editor")
    created = editor.post("/api/agents", _agent_body(model_connection=connection.pk, **smuggled))
    assert created.status_code == 422, created.content
    assert created.json()["field"].endswith(next(iter(smuggled))), created.json()
    ok = editor.post("/api/agents", _agent_body(model_connection=connection.pk))
    assert ok.status_code == 201, ok.content
    body = ok.json()
    assert body["model_connection"] == connection.pk and body["model_problem"] is None
    patched = editor.patch(f"/api/agents/{body['id']}", {"revision": body["revision"], **smuggled})
    assert patched.status_code == 422, patched.content
    run = _run(Agent.objects.get(pk=body["id"]))
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert hostile.connections == 0 and len(corp.requests) == 1


@pytest.mark.django_db
def test_the_api_refuses_a_model_the_connection_does_not_name_and_an_unknown_connection(
    caller, endpoints
) -> None:
    corp, _ = endpoints
    connection = _connection(corp.base_url)
    editor = caller("token:editor")
    other_model = editor.post("/api/agents", _agent_body(model_connection=connection.pk, model_name="gpt-4o"))
    assert other_model.status_code == 422 and other_model.json()["field"] == "model_name"
    unknown = editor.post("/api/agents", _agent_body(model_connection=connection.pk + 99))
    assert unknown.status_code == 422 and unknown.json()["field"] == "model_connection"
    none = editor.post("/api/agents", _agent_body())
    assert none.status_code == 422 and none.json()["field"] == "model_connection"
    assert not Agent.objects.exists()


# --- the worker: whatever the database holds -----------------------------------------------------


@pytest.mark.django_db
def test_a_legacy_pair_that_no_connection_pairs_cannot_run_and_says_why(endpoints) -> None:
    corp, hostile = endpoints
    _connection(corp.base_url)
    # An agent saved before connections (or written straight to the database) with the attack.
    agent = Agent.objects.create(
        name="old",
        system_prompt="p",
        model_provider=Agent.Provider.OPENAI,
        model_name="corp-model",
        legacy_base_url=hostile.url + "/v1",
        legacy_api_key_env="OPENAI_API_KEY",
    )
    run = _run(agent)
    assert run.status == Run.Status.FAILED and run.error_kind == "config"
    assert "cannot run: its model has no connection" in run.error and hostile.url in run.error
    assert OPERATOR_KEY not in run.error
    assert hostile.connections == 0 and corp.requests == []


@pytest.mark.django_db
def test_a_connection_that_no_longer_names_the_model_stops_its_agents(caller, endpoints) -> None:
    corp, _ = endpoints
    connection = _connection(corp.base_url, model_names=["corp-model", "old-model"])
    agent = services.agent_save_values(
        actor=None,
        agent=Agent(),
        values={**_agent_body(model_name="old-model"), "model_connection": connection.pk},
    )
    services.connection_save(
        actor=None,
        connection=connection,
        values={**services.connection_values(connection), "model_names": ["corp-model"]},
    )
    run = _run(agent)
    assert run.status == Run.Status.FAILED and "is not one of the models of connection 'corp'" in run.error
    assert corp.requests == []


@pytest.mark.django_db
def test_an_admin_connection_with_the_same_pair_adopts_a_waiting_agent(caller, endpoints) -> None:
    corp, hostile = endpoints
    waiting = Agent.objects.create(
        name="waiting",
        system_prompt="p",
        model_provider=Agent.Provider.OPENAI,
        model_name="corp-model",
        legacy_base_url=corp.base_url,
        legacy_api_key_env="OPENAI_API_KEY",
    )
    other_key = Agent.objects.create(
        name="other-key",
        system_prompt="p",
        model_provider=Agent.Provider.OPENAI,
        model_name="corp-model",
        legacy_base_url=corp.base_url,
        legacy_api_key_env="LLAMON_LLM_KEY_OTHER",
    )
    shown = caller("token:viewer").get(f"/api/agents/{waiting.pk}").json()
    assert "an admin must assign a connection" in shown["model_problem"]
    created = caller("token:admin").post(
        "/api/model-connections",
        {
            "name": "corp",
            "base_url": corp.base_url,
            "api_key_env": "OPENAI_API_KEY",
            "model_names": ["corp-model"],
        },
    )
    assert created.status_code == 201, created.content
    waiting.refresh_from_db()
    other_key.refresh_from_db()
    assert waiting.model_connection_id == created.json()["id"] and waiting.legacy_base_url == ""
    assert other_key.model_connection is None  # another key variable: not the admin's pairing
    assert AuditEvent.objects.filter(action="agent.connection_assign", object_id=str(waiting.pk)).exists()
    assert AuditEvent.objects.filter(action="connection.create").exists()
    assert _run(waiting).status == Run.Status.SUCCEEDED
    assert hostile.connections == 0


@pytest.mark.django_db
@pytest.mark.parametrize(
    "name", ["SECRET_KEY", "DATABASE_URL", "LLAMON_ADMIN_PASSWORD", "MY_TOKEN", "sk-live-abc"]
)
def test_a_connection_takes_only_a_key_variable_the_operator_allows(caller, name) -> None:
    response = caller("token:admin").post(
        "/api/model-connections",
        {"name": "c", "base_url": "http://127.0.0.1:9/v1", "api_key_env": name, "model_names": ["m"]},
    )
    assert response.status_code == 422 and response.json()["field"] == "api_key_env", response.content
    assert not ModelConnection.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "changes, field",
    [
        ({"base_url": "http://169.254.169.254/v1"}, "base_url"),
        ({"base_url": "file:///etc/passwd"}, "base_url"),
        ({"model_names": []}, "model_names"),
        ({"model_names": ["a\nb"]}, "model_names"),
        ({"model_names": [" padded"]}, "model_names"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"provider": "anthropic"}, "provider"),
    ],
)
def test_a_connection_refuses_hostile_values(caller, changes, field) -> None:
    body = {"name": "c", "base_url": "http://127.0.0.1:9/v1", "model_names": ["m"], **changes}
    response = caller("token:admin").post("/api/model-connections", body)
    assert response.status_code == 422, response.content
    assert response.json()["field"].removeprefix("payload.").split(".")[0] == field, response.json()
    assert not ModelConnection.objects.exists()


@pytest.mark.django_db
def test_a_connection_in_use_cannot_be_deleted(caller, endpoints) -> None:
    corp, _ = endpoints
    connection = _connection(corp.base_url)
    services.agent_save_values(
        actor=None, agent=Agent(), values={**_agent_body(), "model_connection": connection.pk}
    )
    admin = caller("token:admin")
    refused = admin.delete(f"/api/model-connections/{connection.pk}")
    assert refused.status_code == 409 and "mine" in refused.json()["detail"]
    Agent.objects.all().delete()
    assert admin.delete(f"/api/model-connections/{connection.pk}").status_code == 204


# --- the MCP endpoint ----------------------------------------------------------------------------


async def _mcp(url: str, secret: str, calls: list[tuple[str, dict[str, Any]]]) -> tuple[list[Any], list[Any]]:
    headers = {"Authorization": f"Bearer {secret}"}
    async with (
        httpx.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tools = (await session.list_tools()).tools
        return tools, [await session.call_tool(name, args) for name, args in calls]


@pytest.mark.django_db(transaction=True)
def test_through_the_mcp_endpoint_a_run_sends_the_key_nowhere_unpaired(
    live_server, make_user, endpoints
) -> None:
    corp, hostile = endpoints
    _connection(corp.base_url)
    agent = Agent.objects.create(
        name="old",
        system_prompt="p",
        model_provider=Agent.Provider.OPENAI,
        model_name="corp-model",
        legacy_base_url=hostile.url + "/v1",
        legacy_api_key_env="OPENAI_API_KEY",
    )
    secret = token_create(actor=make_user("editor"), name="mcp").secret
    tools, (listed, started) = asyncio.run(
        _mcp(
            f"{live_server.url}/api/mcp",
            secret,
            [("list_agents", {}), ("start_run", {"run": {"agent": agent.pk, "query": "hi"}})],
        )
    )
    # No tool of the endpoint takes an endpoint or a key variable.
    schemas = json.dumps([t.inputSchema for t in tools])
    assert "base_url" not in schemas and "api_key_env" not in schemas
    (shown,) = [a for a in listed.structuredContent["agents"] if a["id"] == agent.pk]
    assert "an admin must assign a connection" in shown["model_problem"]
    assert not started.isError, started.content[0].text
    run = Run.objects.get(pk=started.structuredContent["id"])
    run_execute(run_id=run.pk)  # the worker task's body, in this process
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and "has no connection" in run.error
    assert hostile.connections == 0 and corp.requests == []


HOSTILE_NAMES = {
    "right-to-left override": "corp\u202egnp.exe",
    "bidi isolate": "corp\u2067x\u2069",
    "line feed": "corp\nadmin",
    "carriage return": "corp\rforged",
    "tab": "corp\tx",
    "bell": "corp\x07",
    "escape": "corp\x1b[31m",
    "zero-width space": "co\u200brp",
    "line separator": "corp\u2028x",
    "private use": "corp\ue000",
    "Hebrew": "\u05e9\u05dc\u05d5\u05dd",
    "Arabic": "\u0645\u0631\u062d\u0628\u0627",
}


@pytest.mark.django_db
@pytest.mark.parametrize("kind", sorted(HOSTILE_NAMES))
def test_a_connection_name_is_plain_printable_text_on_every_route(caller, admin_client, kind) -> None:
    """The API's create and change and the admin's page refuse the name with the character named,
    in English and Korean; nothing is saved."""
    name = HOSTILE_NAMES[kind]
    admin = caller("token:admin")
    body = {"name": name, "base_url": "http://127.0.0.1:9/v1", "model_names": ["m"]}
    refused = admin.post("/api/model-connections", body)
    assert refused.status_code == 422 and refused.json()["field"] == "name", refused.content
    assert "plain printable text on one line" in refused.json()["detail"]
    korean = admin.post("/api/model-connections", body, headers={"Accept-Language": "ko"})
    assert korean.status_code == 422 and "한 줄" in korean.json()["detail"], korean.json()
    assert not ModelConnection.objects.exists()

    kept = _connection("http://127.0.0.1:9/v1", name="운영 연결 (prod-1)")  # Korean and punctuation pass
    changed = admin.patch(f"/api/model-connections/{kept.pk}", {"revision": kept.revision, "name": name})
    assert changed.status_code == 422 and changed.json()["field"] == "name", changed.content
    page = admin_client.post(
        reverse("agents:connection_create"),
        {
            "name": name,
            "provider": "openai-compatible",
            "base_url": "http://127.0.0.1:9/v1",
            "model_names": "m",
        },
    )
    assert "plain printable text on one line" in page.content.decode()
    assert list(ModelConnection.objects.values_list("name", flat=True)) == ["운영 연결 (prod-1)"]
