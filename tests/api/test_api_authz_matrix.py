"""Every API operation x {anonymous, session and token of each role} against an expected table.

The operations are read from the NinjaAPI's OpenAPI schema: an operation missing from EXPECTED
(or an entry without an operation) fails the test, so each new operation must declare who may use it.
A caller below the role gets 403, no credentials 401, and a caller with the role gets the table's
status for a valid sample request (its path parameters are real objects).
"""

from __future__ import annotations

from typing import Any

import pytest

from accounts.api_auth import SessionAuth, TokenAuth
from agents.api import IngestAuth
from llamon_web.api import api
from tests.api.conftest import PRINCIPALS

pytestmark = pytest.mark.django_db

RANK = {"viewer": 0, "editor": 1, "admin": 2}

# "METHOD /path" -> (role, status for a caller holding the role with the sample body, session only)
EXPECTED: dict[str, tuple[str, int, bool]] = {
    # Tokens: anyone with a role manages their own; making one needs the browser session.
    "GET /api/tokens": ("viewer", 200, False),
    "POST /api/tokens": ("viewer", 201, True),
    "DELETE /api/tokens/{token_id}": ("viewer", 200, False),
    # MCP servers: viewers read, editors call tools, admins change servers (stdio = a command).
    "GET /api/mcp-servers": ("viewer", 200, False),
    "POST /api/mcp-servers": ("admin", 201, False),
    "GET /api/mcp-servers/{server_id}": ("viewer", 200, False),
    "PATCH /api/mcp-servers/{server_id}": ("admin", 200, False),
    "DELETE /api/mcp-servers/{server_id}": ("admin", 204, False),
    # Nothing listens on the sample server's port: the refresh and the call fail with a readable 422.
    "POST /api/mcp-servers/{server_id}/refresh": ("admin", 422, False),
    "POST /api/mcp-servers/{server_id}/call": ("editor", 422, False),
    "GET /api/registry": ("viewer", 200, False),
    "GET /api/privacy": ("viewer", 200, False),
    "GET /api/registry/{mcp_id}": ("viewer", 200, False),
    # Rule sets: viewers read and dry-run, editors write.
    "GET /api/rule-sets": ("viewer", 200, False),
    "POST /api/rule-sets": ("editor", 201, False),
    "POST /api/rule-sets/import": ("editor", 201, False),
    # Without confirm, an app/tools.py is only previewed (200, nothing written).
    "POST /api/rule-sets/import/tools-py": ("editor", 200, False),
    "GET /api/rule-sets/{rule_set_id}": ("viewer", 200, False),
    "PATCH /api/rule-sets/{rule_set_id}": ("editor", 200, False),
    # The sample agent uses the sample rule set, so deleting it is refused.
    "DELETE /api/rule-sets/{rule_set_id}": ("editor", 422, False),
    "GET /api/rule-sets/{rule_set_id}/rules": ("viewer", 200, False),
    "GET /api/rule-sets/{rule_set_id}/checks": ("viewer", 200, False),
    "POST /api/rule-sets/{rule_set_id}/rules": ("editor", 201, False),
    "GET /api/rule-sets/{rule_set_id}/rules/{rule_id}": ("viewer", 200, False),
    "PATCH /api/rule-sets/{rule_set_id}/rules/{rule_id}": ("editor", 200, False),
    "DELETE /api/rule-sets/{rule_set_id}/rules/{rule_id}": ("editor", 204, False),
    "POST /api/rule-sets/{rule_set_id}/reorder": ("editor", 200, False),
    "POST /api/rule-sets/{rule_set_id}/publish": ("editor", 201, False),
    "GET /api/rule-sets/{rule_set_id}/versions": ("viewer", 200, False),
    "GET /api/rule-sets/{rule_set_id}/versions/{number}": ("viewer", 200, False),
    "POST /api/rule-sets/{rule_set_id}/versions/{number}/restore": ("editor", 200, False),
    "GET /api/rule-sets/{rule_set_id}/diff": ("viewer", 200, False),
    "GET /api/rule-sets/{rule_set_id}/export": ("viewer", 200, False),
    "GET /api/rule-sets/{rule_set_id}/export/tools-py": ("viewer", 200, False),
    "GET /api/rule-sets/{rule_set_id}/content": ("viewer", 200, False),
    "PUT /api/rule-sets/{rule_set_id}/content": ("editor", 200, False),
    "POST /api/rule-sets/{rule_set_id}/evaluate": ("viewer", 200, False),
    "GET /api/rule-sets/{rule_set_id}/cases": ("viewer", 200, False),
    "POST /api/rule-sets/{rule_set_id}/cases": ("editor", 201, False),
    "GET /api/rule-sets/{rule_set_id}/cases/{case_id}": ("viewer", 200, False),
    "PATCH /api/rule-sets/{rule_set_id}/cases/{case_id}": ("editor", 200, False),
    "DELETE /api/rule-sets/{rule_set_id}/cases/{case_id}": ("editor", 204, False),
    "POST /api/rule-sets/{rule_set_id}/cases/run": ("editor", 200, False),
    "GET /api/audit": ("viewer", 200, False),
    # Agents and runs: viewers read, editors write and start runs (served agents ingest with their
    # own credential: INGEST below).
    "GET /api/agents": ("viewer", 200, False),
    "POST /api/agents": ("editor", 201, False),
    "GET /api/agents/{agent_id}": ("viewer", 200, False),
    "PATCH /api/agents/{agent_id}": ("editor", 200, False),
    "DELETE /api/agents/{agent_id}": ("editor", 204, False),
    # Staged rollout and shadow mode: viewers read, editors change. The sample agent has no rollout
    # to promote or roll back: a readable 409.
    "GET /api/agents/{agent_id}/rollout": ("viewer", 200, False),
    # The sample agent follows "latest" with one published version: no earlier version to keep as
    # stable, so a rollout of v1 is refused (422) once the role is checked.
    "PUT /api/agents/{agent_id}/rollout": ("editor", 422, False),
    "POST /api/agents/{agent_id}/rollout/promote": ("editor", 409, False),
    "POST /api/agents/{agent_id}/rollout/rollback": ("editor", 409, False),
    "GET /api/agents/{agent_id}/shadow": ("viewer", 200, False),
    "PUT /api/agents/{agent_id}/shadow": ("editor", 200, False),
    # Model connections: viewers read them (to pick one), only admins define them (a key's endpoint).
    # The sample connection is unused, so deleting it is a 204.
    "GET /api/model-connections": ("viewer", 200, False),
    "POST /api/model-connections": ("admin", 201, False),
    "PATCH /api/model-connections/{connection_id}": ("admin", 200, False),
    "DELETE /api/model-connections/{connection_id}": ("admin", 204, False),
    "GET /api/runs": ("viewer", 200, False),
    "POST /api/runs": ("editor", 202, False),
    "GET /api/runs/{run_id}": ("viewer", 200, False),
    "GET /api/runs/export": ("viewer", 200, False),
    "GET /api/runs/{run_id}/export": ("viewer", 200, False),
    "GET /api/runs/{run_id}/steps": ("viewer", 200, False),
    "POST /api/runs/{run_id}/cancel": ("editor", 200, False),
    "POST /api/runs/{run_id}/rerun": ("editor", 202, False),
    # Impact analyses: viewers read them, editors start them.
    "POST /api/rule-sets/{rule_set_id}/impact": ("editor", 202, False),
    "GET /api/impact/{analysis_id}": ("viewer", 200, False),
    # Savings and suggestions: viewers read, editors mine and draft (the sample job has no suggestion: 422).
    "GET /api/agents/{agent_id}/savings": ("viewer", 200, False),
    "POST /api/agents/{agent_id}/suggestions": ("editor", 422, False),  # the sample agent has no finished run
    "GET /api/suggestions/{job_id}": ("viewer", 200, False),
    "POST /api/suggestions/{job_id}/{index}/draft": ("editor", 422, False),
    # Coverage and health per rule: viewers read it.
    "GET /api/rule-sets/{rule_set_id}/health": ("viewer", 200, False),
    # Change requests: viewers read them; reviewing needs the approver permission besides the role,
    # checked by the service after the state: the sample request is already decided (409).
    "GET /api/change-requests": ("viewer", 200, False),
    "GET /api/change-requests/{change_id}": ("viewer", 200, False),
    "POST /api/change-requests/{change_id}/approve": ("viewer", 409, False),
    "POST /api/change-requests/{change_id}/reject": ("viewer", 409, False),
    "PUT /api/agents/{agent_id}/protection": ("admin", 200, False),
    # The sample run is still queued: replaying it is refused (409) once the role is checked.
    "POST /api/runs/{run_id}/replay": ("editor", 409, False),
    # ... and has no steps yet: a part of a step's value is a 404 once the role is checked.
    "GET /api/runs/{run_id}/steps/{seq}/value": ("viewer", 404, False),
}


def api_operations() -> list[str]:
    """Every operation of the API as "METHOD /path", from its OpenAPI schema."""
    paths = api.get_openapi_schema()["paths"]
    return sorted(f"{method.upper()} {path}" for path, ops in paths.items() for method in ops)


def _request(key: str, sample: dict[str, Any], token_id: int) -> tuple[str, str, Any]:
    method, template = key.split(" ", 1)
    rule_set, rule = sample["rule_set"], sample["rule"]
    values = {
        "server_id": sample["server"].pk,
        "mcp_id": sample["server"].mcp_id,
        "rule_set_id": rule_set.pk,
        "rule_id": rule.pk,
        "number": sample["version"].number,
        "case_id": sample["case"].pk,
        "agent_id": sample["agent"].pk,
        "connection_id": sample["connection"].pk,
        "run_id": sample["run"].pk,
        "seq": 1,
        "change_id": sample["change"].pk,
        "token_id": token_id,
        "analysis_id": _impact_id(rule_set) if "{analysis_id}" in template else 0,
        "job_id": _job_id(sample["agent"]) if "{job_id}" in template else 0,
        "index": 0,
    }
    url = template.format(**values)
    bodies: dict[str, Any] = {
        "POST /api/tokens": {"name": "matrix"},
        "POST /api/mcp-servers": {
            "mcp_id": "matrix-new",
            "transport": "http",
            "url": "http://127.0.0.1:9/mcp",
        },
        "PATCH /api/mcp-servers/{server_id}": {"description": "changed"},
        "POST /api/mcp-servers/{server_id}/call": {"tool": "get_order", "arguments": {"query": "A-1001"}},
        "POST /api/rule-sets": {"name": "matrix-new"},
        "POST /api/rule-sets/import": {"data": _export(rule_set), "name": "matrix-imported"},
        "POST /api/rule-sets/import/tools-py": {"source": "DETERMINISTIC_TOOLS = []\n"},
        "PATCH /api/rule-sets/{rule_set_id}": {"revision": rule_set.revision, "description": "changed"},
        "PUT /api/rule-sets/{rule_set_id}/content": {
            "data": _export(rule_set),
            "revision": rule_set.revision,
        },
        "POST /api/rule-sets/{rule_set_id}/rules": {
            "name": "matrix_rule",
            "mcp_id": "order-service",
            "tool_name": "get_order",
            "when": "True",
        },
        "PATCH /api/rule-sets/{rule_set_id}/rules/{rule_id}": {"revision": rule.revision, "description": "x"},
        "POST /api/rule-sets/{rule_set_id}/reorder": {
            "order": list(reversed([r.pk for r in rule_set.rules.order_by("position")])),
            "revision": rule_set.revision,
        },
        "POST /api/rule-sets/{rule_set_id}/publish": {"message": "matrix"},
        "POST /api/rule-sets/{rule_set_id}/versions/{number}/restore": {},
        "POST /api/rule-sets/{rule_set_id}/evaluate": {"query": "주문 조회 A-1001"},
        "POST /api/rule-sets/{rule_set_id}/cases": {
            "name": "matrix case",
            "input": {"query": "hi"},
            "expected": {"must_fire": []},
        },
        "PATCH /api/rule-sets/{rule_set_id}/cases/{case_id}": {"name": "renamed"},
        "POST /api/agents": {"name": "matrix-agent", "rule_set": rule_set.pk},
        "PATCH /api/agents/{agent_id}": {"revision": sample["agent"].revision, "description": "x"},
        "POST /api/model-connections": {
            "name": "matrix-connection",
            "base_url": "http://127.0.0.1:9/v1",
            "model_names": ["m"],
        },
        "PATCH /api/model-connections/{connection_id}": {
            "revision": sample["connection"].revision,
            "max_tokens": 100,
        },
        "PUT /api/agents/{agent_id}/rollout": {"version": sample["version"].number, "percent": 10},
        "PUT /api/agents/{agent_id}/shadow": {"version": sample["version"].number},
        "PUT /api/agents/{agent_id}/protection": {"protected": True, "approvals_required": 2},
        "POST /api/change-requests/{change_id}/approve": {"comment": "ok"},
        "POST /api/change-requests/{change_id}/reject": {"comment": "no"},
        "POST /api/runs": {"agent": sample["agent"].pk, "query": "주문 조회"},
        "POST /api/runs/ingest": {"source": "served", "agent_name": "matrix", "request": {"query": "q"}},
        "POST /api/rule-sets/{rule_set_id}/impact": {"version": "draft", "days": 1},
        "POST /api/agents/{agent_id}/suggestions": {"days": 30},
    }
    return method, url, bodies.get(key)


def _impact_id(rule_set: Any) -> int:
    from governance.services import impact_start

    return impact_start(actor=None, enqueue=False, rule_set=rule_set, version="draft", days=1).pk


def _job_id(agent: Any) -> int:
    from governance.models import SuggestionJob

    now = agent.created_at
    return SuggestionJob.objects.create(
        agent=agent, days=1, since=now, until=now, status="succeeded", result={"suggestions": []}
    ).pk


def _call_isolated(who: Any, key: str, sample: dict[str, Any], token_id: int) -> Any:
    """One request in a savepoint that is rolled back, so each operation sees the same sample objects."""
    from django.db import transaction

    with transaction.atomic():
        for obj in (sample["rule_set"], sample["rule"], sample["agent"]):
            obj.refresh_from_db()
        method, url, body = _request(key, sample, token_id)
        response = who.call(method, url, json=body)
        transaction.set_rollback(True)
    return response


def _export(rule_set: Any) -> dict[str, Any]:
    from rules.exporting import rule_set_export_json

    return rule_set_export_json(rule_set)


def _own_token_id(caller: Any) -> int:
    from accounts.models import ApiToken
    from accounts.token_services import token_create

    if caller.user is None:
        return ApiToken.objects.order_by("pk").values_list("pk", flat=True).first() or 1
    return token_create(actor=caller.user, name="to revoke").token.pk


# Operations that take no person at all: a served agent's ingest credential (agents.api.IngestAuth).
INGEST = {"POST /api/runs/ingest"}


def test_every_api_operation_is_in_the_table() -> None:
    operations = set(api_operations())
    missing = sorted(operations - set(EXPECTED) - INGEST)
    stale = sorted(set(EXPECTED) - operations)
    assert not missing, f"add these API operations to EXPECTED with their role: {missing}"
    assert not stale, f"these EXPECTED entries have no API operation any more: {stale}"


def test_every_operation_declares_the_role_in_the_table() -> None:
    declared = {}
    for _prefix, router in api._routers:
        for path, path_view in router.path_operations.items():
            for operation in path_view.operations:
                for method in operation.methods:
                    key = f"{method} /api{_openapi_path(path)}"
                    callbacks = operation.auth_callbacks
                    if key in INGEST:
                        assert [type(c) for c in callbacks] == [IngestAuth], key
                        continue
                    assert callbacks and isinstance(callbacks[0], TokenAuth), f"{key} has no role check"
                    assert isinstance(callbacks[1], SessionAuth) and callbacks[1].role == callbacks[0].role
                    declared[key] = (callbacks[0].role, callbacks[0].session_only)
    assert declared == {key: (role, session_only) for key, (role, _status, session_only) in EXPECTED.items()}


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_no_person_ingests_whatever_their_role(principal: str, caller, sample) -> None:
    who = caller(principal)
    for key in INGEST:
        response = _call_isolated(who, key, sample, 0)
        # A person's token: 403 saying what ingest takes; a session or nothing: 401 (no credential).
        expected = 403 if principal.startswith("token:") else 401
        assert response.status_code == expected, (key, response.content)
        if expected == 403:
            assert "ingest credential" in response.json()["detail"]


def _openapi_path(path: str) -> str:
    import re

    return re.sub(r"\{\w+:(\w+)\}", r"{\1}", path)


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_each_caller_gets_the_expected_response(principal: str, caller, sample) -> None:
    who = caller(principal)
    token_id = _own_token_id(who)
    failures = []
    for key, (role, ok_status, session_only) in EXPECTED.items():
        response = _call_isolated(who, key, sample, token_id)
        if principal == "anonymous":
            expected = 401
        else:
            kind, held = principal.split(":")
            expected = 403 if RANK[held] < RANK[role] or session_only and kind == "token" else ok_status
        if response.status_code != expected:
            failures.append(
                f"{key} as {principal}: got {response.status_code}, expected {expected}: {response.content[:200]!r}"
            )
        elif response.status_code >= 400:
            assert set(response.json()) <= {"detail", "field", "errors"} and response.json()["detail"], key
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("kind", ["session", "token"])
def test_a_user_without_any_role_is_refused_everywhere(kind: str, caller, sample) -> None:
    who = caller(f"{kind}:none")
    token_id = _own_token_id(caller("anonymous"))
    for key in [*EXPECTED, *INGEST]:
        response = _call_isolated(who, key, sample, token_id)
        expected = 401 if key in INGEST and kind == "session" else 403
        assert response.status_code == expected, f"{key}: {response.status_code}"
