"""What a protected agent uses changes only by a change request (issue 41): an MCP server its rules
call or its LLM is offered, and its model connection. The walk changes every setting of both models
through every write route (the service, the REST API, the page) and fails on any that changes one
without a request; a field nobody classified fails it too.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from agents import services
from agents.errors import ChangeRequested
from agents.models import Agent, ChangeRequest, ModelConnection
from core.audit import snapshot
from servers.models import McpServer
from servers.services import MCP_SERVER_FIELDS, UNGATED_SERVER_FIELDS, mcp_server_delete, mcp_server_update

pytestmark = pytest.mark.django_db

# Written by the server's own bookkeeping (tool refreshes, health checks, the save), never by an edit.
SERVER_BOOKKEEPING = {
    "id",
    "tools",
    "tools_hash",
    "tools_refreshed_at",
    "last_error",
    "last_checked_at",
    "created_at",
    "updated_at",
}
CONNECTION_BOOKKEEPING = {"id", "revision", "created_at", "updated_at"}

# A new value for every setting of a server (an http one: the demo servers).
SCRIPT = str(Path(__file__).resolve().parents[2] / "tests" / "servers" / "misbehaving.py")
STDIO = {"transport": "stdio", "command": sys.executable, "args": [SCRIPT], "url": "", "header_names": []}
SERVER_CHANGES: dict[str, dict[str, Any]] = {
    "mcp_id": {"mcp_id": "renamed-kb"},
    "transport": STDIO,
    "command": STDIO,
    "args": {**STDIO, "args": [SCRIPT, "--quiet"]},
    "env_names": {**STDIO, "env_names": ["LLAMON_MCP_CRM_KEY"]},
    "url": {"url": "http://127.0.0.1:10/mcp"},
    "header_names": {"header_names": ["LLAMON_MCP_KB_KEY"]},
    "timeout_s": {"timeout_s": 12.5},
    "enabled": {"enabled": False},
}
CONNECTION_CHANGES: dict[str, dict[str, Any]] = {
    "name": {"name": "renamed"},
    "provider": {"provider": "anthropic"},  # not a choice: refused, nothing changes either
    "base_url": {"base_url": "http://127.0.0.1:10/v1"},
    "api_key_env": {"api_key_env": "OPENAI_API_KEY"},
    "model_names": {"model_names": ["m1", "m2"]},
    "max_tokens": {"max_tokens": 512},
}


@pytest.fixture
def admin(make_user):
    return make_user("admin")


@pytest.fixture
def connection() -> ModelConnection:
    return ModelConnection.objects.create(name="c", base_url="http://127.0.0.1:9/v1", model_names=["m1"])


@pytest.fixture
def protected(agent, admin, demo_servers, connection) -> Agent:
    """v1's rules call knowledge-base and customer-crm; its LLM is offered order-service."""
    Agent.objects.filter(pk=agent.pk).update(
        model_provider="openai-compatible", model_name="m1", model_connection=connection
    )
    agent.refresh_from_db()
    agent.react_servers.set([demo_servers["order-service"]])
    return services.agent_protect(actor=admin, agent=agent, protected=True, approvals_required=2)


def _server(mcp_id: str) -> dict[str, Any]:
    return snapshot(McpServer.objects.get(pk=_pk(mcp_id)), MCP_SERVER_FIELDS)


def _pk(mcp_id: str) -> int:
    return int(McpServer.objects.filter(mcp_id=mcp_id).values_list("pk", flat=True).get())


def test_every_setting_of_a_server_a_protected_agent_uses_is_a_change_request(
    protected, admin, demo_servers
) -> None:
    fields = {f.name for f in McpServer._meta.concrete_fields}
    unclassified = fields - set(MCP_SERVER_FIELDS) - SERVER_BOOKKEEPING
    assert not unclassified, f"classify {unclassified}: a setting (MCP_SERVER_FIELDS) or bookkeeping"
    gated = set(MCP_SERVER_FIELDS) - set(UNGATED_SERVER_FIELDS)
    assert gated - set(SERVER_CHANGES) == set(), "the walk changes every gated setting"
    client = Client()
    client.force_login(admin)
    for mcp_id in ("knowledge-base", "order-service"):  # used by a rule; offered to the LLM
        before = _server(mcp_id)
        for field, change in SERVER_CHANGES.items():
            server = McpServer.objects.get(pk=_pk(mcp_id))
            with pytest.raises(ChangeRequested) as asked:
                mcp_server_update(actor=admin, server=server, **change)
            assert ChangeRequest.objects.get(pk=asked.value.change_request_id).agent_id == protected.pk
            response = client.patch(f"/api/mcp-servers/{server.pk}", change, content_type="application/json")
            assert response.status_code == 202, (mcp_id, field, response.content)
            assert "change request #" in response.json()["detail"]
            assert _server(mcp_id) == before, (mcp_id, field)
        # Deleting it: a request on every route too.
        server = McpServer.objects.get(pk=_pk(mcp_id))
        with pytest.raises(ChangeRequested):
            mcp_server_delete(actor=admin, server=server)
        assert client.delete(f"/api/mcp-servers/{server.pk}").status_code == 202
        response = client.post(reverse("servers:delete", args=[server.pk]))
        assert response.status_code == 302 and "/agents/changes/" in response["Location"]
        assert _server(mcp_id) == before
    # The page: the edit form goes to the request.
    server = McpServer.objects.get(pk=_pk("knowledge-base"))
    form = {**_server_form(server), "timeout_s": "12"}
    response = client.post(reverse("servers:edit", args=[server.pk]), form)
    assert response.status_code == 302 and "/agents/changes/" in response["Location"], response.content[-800:]
    # The description is a note: at once. A server no protected agent uses: at once.
    mcp_server_update(actor=admin, server=server, description="the FAQ")
    assert _server("knowledge-base")["description"] == "the FAQ"
    Agent.objects.filter(pk=protected.pk).update(protected=False)
    mcp_server_update(actor=admin, server=server, timeout_s=12.5)
    assert _server("knowledge-base")["timeout_s"] == 12.5


def _server_form(server: McpServer) -> dict[str, Any]:
    return {
        "mcp_id": server.mcp_id,
        "description": server.description,
        "transport": server.transport,
        "command": server.command,
        "args": "\n".join(server.args),
        "env_names": "\n".join(server.env_names),
        "url": server.url,
        "header_names": "\n".join(server.header_names),
        "timeout_s": str(server.timeout_s),
        "enabled": "on" if server.enabled else "",
        "action": "save",
    }


def test_every_setting_of_a_protected_agents_model_connection_is_a_change_request(
    protected, admin, connection, settings
) -> None:
    settings.LLAMON_LLM_KEY_ENVS = ["OPENAI_API_KEY", "LLAMON_LLM_KEY_*"]
    fields = {f.name for f in ModelConnection._meta.concrete_fields}
    unclassified = fields - set(services.CONNECTION_FIELDS) - CONNECTION_BOOKKEEPING
    assert not unclassified, f"classify {unclassified}"
    assert set(services.CONNECTION_FIELDS) == set(CONNECTION_CHANGES)
    before = services.connection_values(ModelConnection.objects.get(pk=connection.pk))
    client = Client()
    client.force_login(admin)
    for field, change in CONNECTION_CHANGES.items():
        current = ModelConnection.objects.get(pk=connection.pk)
        with pytest.raises(Exception) as refused:  # a request, or a refused value: nothing changes
            services.connection_save(
                actor=admin, connection=current, values={**services.connection_values(current), **change}
            )
        assert refused.type is ChangeRequested or field == "provider", (field, refused.value)
        current = ModelConnection.objects.get(pk=connection.pk)
        response = client.patch(
            f"/api/model-connections/{current.pk}",
            {**change, "revision": current.revision},
            content_type="application/json",
        )
        assert response.status_code in (202, 422), (field, response.content)
        assert services.connection_values(ModelConnection.objects.get(pk=connection.pk)) == before, field
    current = ModelConnection.objects.get(pk=connection.pk)
    form = {**before, "model_names": "m1\nm2", "max_tokens": "", "revision": current.revision}
    response = client.post(reverse("agents:connection_edit", args=[current.pk]), form)
    assert response.status_code == 302 and "/agents/changes/" in response["Location"], response.content[-800:]
    assert services.connection_values(ModelConnection.objects.get(pk=connection.pk)) == before


def test_an_approved_server_change_applies_as_asked_and_a_stale_one_is_refused(
    protected, admin, make_user, demo_servers
) -> None:
    from accounts.roles import approver_set

    reviewers = []
    for _n in range(2):
        user = make_user("viewer")
        approver_set(user=user, approver=True)
        reviewers.append(user)
    server = McpServer.objects.get(pk=_pk("knowledge-base"))
    with pytest.raises(ChangeRequested) as asked:
        mcp_server_update(actor=admin, server=server, timeout_s=12.5)
    change = ChangeRequest.objects.get(pk=asked.value.change_request_id)
    for reviewer in reviewers:
        change = services.change_request_review(actor=reviewer, change_request=change, decision="approve")
    assert change.state == "applied" and _server("knowledge-base")["timeout_s"] == 12.5
    # Asked, then the server changed by another approved request: applying the first is refused.
    with pytest.raises(ChangeRequested) as first:
        mcp_server_update(actor=admin, server=server, timeout_s=20)
    McpServer.objects.filter(pk=server.pk).update(timeout_s=30)  # as a second, approved request would
    first_change = ChangeRequest.objects.get(pk=first.value.change_request_id)
    services.change_request_review(actor=reviewers[0], change_request=first_change, decision="approve")
    with pytest.raises(Exception, match="changed since it was asked"):
        services.change_request_review(actor=reviewers[1], change_request=first_change, decision="approve")
    assert _server("knowledge-base")["timeout_s"] == 30
