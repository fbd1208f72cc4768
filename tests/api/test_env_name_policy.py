"""No secret leaves the server through a variable name a user typed (issue 10, part 1).

A model connection's API key variable is sent to its endpoint as a bearer token, and an MCP
server's env names reach a child process: only names the operator allowed may be used, the
app's own settings never, at save time (page and API) and again at use time.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse

from agents.models import Agent, ModelConnection, Run
from agents.services import run_execute
from servers.models import McpServer
from tests.support.mcp_servers import confirmed, server_form
from tests.support.openai_fake import FakeOpenAI

pytestmark = pytest.mark.django_db

MISBEHAVING = str(Path(__file__).resolve().parents[1] / "servers" / "misbehaving.py")

FORBIDDEN_KEY_NAMES = [
    "SECRET_KEY",
    "DATABASE_URL",
    "REDIS_URL",
    "LLAMON_ADMIN_PASSWORD",
    "LLAMON_REGISTRY_TOKEN",
    "LLAMON_LLM_KEY_TOKEN",  # a prefix never admits TOKEN/PASSWORD/SECRET names
    "MY_TOKEN",
    "secret_key",
    "database_url",
    "openai_api_key",
    "DJANGO_SETTINGS_MODULE",
    "CELERY_BROKER_URL",
    "PATH",
    "HOME",
]
BAD_SHAPES = [" SECRET_KEY", "SECRET_KEY\n", "SECRET KEY", "sk-live-abc123", "A" * 101, "OPENAI_API_KEY;x"]


def _connection_body(**overrides: Any) -> dict[str, Any]:
    return {"name": "leaky", "base_url": "http://127.0.0.1:9/v1", "model_names": ["m"], **overrides}


def _connection_form(**overrides: Any) -> dict[str, Any]:
    return {
        "name": "leaky",
        "provider": "openai-compatible",
        "base_url": "http://127.0.0.1:9/v1",
        "api_key_env": "",
        "model_names": "m",
        "max_tokens": "",
        **overrides,
    }


def test_a_bad_allow_list_setting_stops_the_app_with_its_name(monkeypatch) -> None:
    from llamon_web.config import ConfigError, env_names

    monkeypatch.setenv("LLAMON_LLM_KEY_ENVS", "OPENAI_API_KEY,SECRET_KEY")
    with pytest.raises(ConfigError, match="LLAMON_LLM_KEY_ENVS: 'SECRET_KEY'"):
        env_names("LLAMON_LLM_KEY_ENVS", [])


# --- model connections: refused at save (API and page) ----------------------------------------------


@pytest.mark.parametrize("name", FORBIDDEN_KEY_NAMES)
def test_the_api_refuses_a_key_variable_the_operator_did_not_allow(caller, name) -> None:
    response = caller("token:admin").post("/api/model-connections", _connection_body(api_key_env=name))
    assert response.status_code == 422, response.content
    body = response.json()
    assert body["field"] == "api_key_env"
    assert (
        "allowed: OPENAI_API_KEY, LLAMON_LLM_KEY_* (the operator sets LLAMON_LLM_KEY_ENVS)" in body["detail"]
    )
    assert not ModelConnection.objects.exists()


@pytest.mark.parametrize("name", BAD_SHAPES)
def test_the_api_refuses_whitespace_tricks_and_overlong_names(caller, name) -> None:
    response = caller("token:admin").post("/api/model-connections", _connection_body(api_key_env=name))
    assert response.status_code == 422, response.content
    assert response.json()["field"].endswith("api_key_env"), response.json()
    assert not ModelConnection.objects.exists()


def test_a_patch_cannot_switch_a_connection_to_a_forbidden_variable(caller) -> None:
    admin = caller("token:admin")
    created = admin.post("/api/model-connections", _connection_body(api_key_env="LLAMON_LLM_KEY_OLLAMA"))
    assert created.status_code == 201, created.content
    connection = created.json()
    patched = admin.patch(
        f"/api/model-connections/{connection['id']}",
        {"revision": connection["revision"], "api_key_env": "SECRET_KEY"},
    )
    assert patched.status_code == 422 and patched.json()["field"] == "api_key_env"
    assert ModelConnection.objects.get(pk=connection["id"]).api_key_env == "LLAMON_LLM_KEY_OLLAMA"


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "LLAMON_LLM_KEY_VLLM"])
def test_allowed_key_variables_are_saved(caller, name) -> None:
    response = caller("token:admin").post("/api/model-connections", _connection_body(api_key_env=name))
    assert response.status_code == 201, response.content
    assert ModelConnection.objects.get().api_key_env == name


@pytest.mark.parametrize(
    "name", ["SECRET_KEY", "LLAMON_ADMIN_PASSWORD", "MY_TOKEN", "database_url", "A" * 101]
)
def test_the_connection_page_refuses_a_forbidden_key_variable_and_keeps_the_input(admin_client, name) -> None:
    response = admin_client.post(
        reverse("agents:connection_create"), _connection_form(api_key_env=name, name="kept-설명")
    )
    html = response.content.decode()
    assert response.status_code == 400
    assert "errorlist" in html and "kept-설명" in html
    assert "API key variable is refused" in html or "at most 100 characters" in html
    assert not ModelConnection.objects.exists()


def test_the_refusal_is_the_same_whether_the_variable_is_set_or_not(caller, monkeypatch) -> None:
    admin = caller("token:admin")
    monkeypatch.delenv("SOME_OTHER_KEY", raising=False)
    unset = admin.post("/api/model-connections", _connection_body(api_key_env="SOME_OTHER_KEY")).json()
    monkeypatch.setenv("SOME_OTHER_KEY", "sk-live-value-1")
    is_set = admin.post("/api/model-connections", _connection_body(api_key_env="SOME_OTHER_KEY")).json()
    assert unset == is_set and "sk-live-value-1" not in str(is_set)


# --- agents: refused again when a run starts -----------------------------------------------------


def _queued_run(agent: Agent) -> Run:
    return Run.objects.create(agent=agent, agent_name=agent.name, query="hello", status=Run.Status.QUEUED)


def _agent_on(base_url: str, api_key_env: str) -> Agent:
    # Written straight to the database: a connection saved before the allow-list existed (or narrowed).
    connection = ModelConnection.objects.create(
        name="old", base_url=base_url, api_key_env=api_key_env, model_names=["m"]
    )
    return Agent.objects.create(
        name="old",
        system_prompt="Be helpful.",
        model_provider="openai-compatible",
        model_name="m",
        model_connection=connection,
    )


def test_a_run_of_an_agent_saved_with_a_forbidden_variable_fails_and_sends_nothing(monkeypatch) -> None:
    monkeypatch.setenv("SECRET_KEY", "the-django-secret-1234567890")
    with FakeOpenAI() as listener:
        run = _queued_run(_agent_on(listener.base_url, "SECRET_KEY"))
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        assert run.status == Run.Status.FAILED and run.error_kind == "config"
        assert "API key variable is refused" in run.error and "SECRET_KEY" in run.error
        assert "the-django-secret" not in run.error
        assert listener.headers == []  # no request reached the listener, so no bearer token either


def test_a_run_with_an_allowed_variable_sends_its_value_to_the_endpoint(monkeypatch) -> None:
    # The control for the test above: the same listener does see the key when the name is allowed.
    monkeypatch.setenv("LLAMON_LLM_KEY_TEST", "sk-allowed-42")
    with FakeOpenAI() as listener:
        run = _queued_run(_agent_on(listener.base_url, "LLAMON_LLM_KEY_TEST"))
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        assert run.status == Run.Status.SUCCEEDED, run.error
        assert listener.headers[0]["authorization"] == "Bearer sk-allowed-42"


# --- MCP servers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env_names",
    [
        ["SECRET_KEY"],
        ["LLAMON_ADMIN_PASSWORD"],
        ["MY_TOKEN"],
        ["secret_key"],
        ["A" * 101],
        ["OPENAI_API_KEY"],
    ],
)
def test_the_api_refuses_forbidden_mcp_env_names(caller, env_names) -> None:
    response = caller("token:admin").post(
        "/api/mcp-servers",
        {
            "mcp_id": "leak",
            "transport": "stdio",
            "command": sys.executable,
            "args": [MISBEHAVING],
            "env_names": env_names,
        },
    )
    assert response.status_code == 422 and response.json()["field"] == "env_names", response.content
    assert not McpServer.objects.exists()


@pytest.mark.parametrize(
    "header", ["SECRET_KEY", "X-Api-Key=DATABASE_URL", "Authorization=LLAMON_REGISTRY_TOKEN"]
)
def test_the_api_refuses_forbidden_header_variables(caller, header) -> None:
    response = caller("token:admin").post(
        "/api/mcp-servers",
        {"mcp_id": "leak", "transport": "http", "url": "http://127.0.0.1:9/mcp", "header_names": [header]},
    )
    assert response.status_code == 422 and response.json()["field"] == "header_names", response.content


def test_the_server_page_refuses_a_forbidden_env_name(admin_client) -> None:
    response = admin_client.post(reverse("servers:create"), confirmed(server_form(env_names="DATABASE_URL")))
    assert response.status_code == 200 and "own configuration or secrets" in response.content.decode()
    assert not McpServer.objects.exists()


def test_a_stdio_server_saved_with_a_forbidden_name_does_not_get_the_value(caller, monkeypatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgres://user:hunter2@db/llamon")
    monkeypatch.setenv("LLAMON_MCP_FINE", "fine-value")
    admin = caller("token:admin")
    created = admin.post(
        "/api/mcp-servers",
        {
            "mcp_id": "old",
            "transport": "stdio",
            "command": sys.executable,
            "args": [MISBEHAVING],
            "env_names": ["LLAMON_MCP_FINE"],
            "timeout_s": 20,
        },
    )
    assert created.status_code == 201, created.content
    server_id = created.json()["id"]
    assert admin.post(f"/api/mcp-servers/{server_id}/refresh").status_code == 200
    # A server saved before the allow-list: the forbidden name is written straight to the database.
    McpServer.objects.filter(pk=server_id).update(env_names=["LLAMON_MCP_FINE", "DATABASE_URL"])
    called = admin.post(f"/api/mcp-servers/{server_id}/call", {"tool": "whoami", "arguments": {}})
    assert called.status_code != 200
    assert "DATABASE_URL" in called.json()["detail"] and "hunter2" not in called.content.decode()
    # The control: without the forbidden name the same server starts and gets the allowed variable.
    McpServer.objects.filter(pk=server_id).update(env_names=["LLAMON_MCP_FINE"])
    called = admin.post(f"/api/mcp-servers/{server_id}/call", {"tool": "whoami", "arguments": {}})
    assert called.status_code == 200, called.content
    assert (
        "LLAMON_MCP_FINE" in called.json()["result"]["env"]
        and "DATABASE_URL" not in called.json()["result"]["env"]
    )
