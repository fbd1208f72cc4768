"""The workbench's MCP endpoint (/api/mcp) through the official MCP client against a live server.

Every call goes over real HTTP (pytest-django's live server, WSGI) with ``streamable_http_client``
and a ClientSession, authenticated with personal API tokens of each role.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from accounts.token_services import token_create
from agents import services as run_services
from agents.models import Agent, Run
from llamon_web.demo import SEED_RULES
from rules import cases
from rules.models import Rule, RuleSet
from tests.support.rule_sets import build_rule_set
from tests.support.side_venvs import MCP_2

pytestmark = pytest.mark.django_db(transaction=True)


def _url(live_server) -> str:
    return f"{live_server.url}/api/mcp"


async def _session_call(url: str, secret: str | None, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    async with (
        httpx.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        return [await session.call_tool(name, args) for name, args in calls]


def call(live_server, secret: str | None, *calls: tuple[str, dict[str, Any]]) -> list[Any]:
    return asyncio.run(_session_call(_url(live_server), secret, list(calls)))


def data(result: Any) -> Any:
    assert not result.isError, result.content[0].text
    assert result.structuredContent == json.loads(result.content[0].text)  # both forms, same data
    return result.structuredContent


def error(result: Any) -> str:
    assert result.isError, result
    return result.content[0].text


@pytest.fixture
def secrets_by_role(make_user) -> dict[str, str]:
    return {role: token_create(actor=make_user(role), name="mcp").secret for role in ("viewer", "editor")}


@pytest.fixture
def rule_set(api_servers, make_user) -> RuleSet:
    author = make_user("editor")
    rule_set = build_rule_set(author, "mcp-set", SEED_RULES[:2])
    cases.case_create(
        actor=author,
        rule_set=rule_set,
        name="order lookup",
        input={"query": "주문 조회 A-1001"},
        expected={"must_fire": [{"tool_name": "get_order"}]},
    )
    return rule_set


def _state(rule_set: RuleSet) -> tuple[int, list[tuple[str, str, int]]]:
    rule_set.refresh_from_db()
    return rule_set.revision, list(
        rule_set.rules.order_by("position").values_list("name", "when", "revision")
    )


def test_without_a_valid_token_the_endpoint_refuses(live_server, client, make_user) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    accept = {"Accept": "application/json, text/event-stream"}
    response = httpx.post(_url(live_server), json=body, headers=accept, timeout=30)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert "Authorization: Bearer" in response.json()["detail"]
    bad = httpx.post(
        _url(live_server), json=body, headers={**accept, "Authorization": "Bearer llamon_x_y"}, timeout=30
    )
    assert bad.status_code == 401 and "unknown, revoked" in bad.json()["detail"]
    # The same sentence as a JSON-RPC error for the request's id: what an MCP client shows (mcp 2,
    # fastmcp and the TypeScript SDK read a JSON-RPC error at a non-2xx status).
    parsed = subprocess.run(
        [
            str(MCP_2.python()),
            "-c",
            "import sys; from mcp.types import jsonrpc_message_adapter as a; "
            "m = a.validate_json(sys.stdin.buffer.read(), by_name=False); "
            "print(type(m).__name__, m.id, m.error.code, m.error.message)",
        ],
        input=bad.content,
        capture_output=True,
        check=True,
    )
    assert parsed.stdout.decode().startswith("JSONRPCError 1 -32001 The API token is unknown, revoked"), (
        parsed
    )
    # A browser session is not a credential here (no CSRF exposure): the cookie alone is refused.
    client.force_login(make_user("admin"))
    cookie = client.cookies["sessionid"].value
    with_cookie = httpx.post(
        _url(live_server), json=body, headers=accept, cookies={"sessionid": cookie}, timeout=30
    )
    assert with_cookie.status_code == 401
    # The official client gets no session either.
    with pytest.raises(Exception):  # noqa: B017  # the SDK wraps the 401 in an ExceptionGroup
        call(live_server, None, ("list_rule_sets", {}))


def test_a_get_or_delete_is_refused_at_once_instead_of_holding_a_stream_open(
    live_server, secrets_by_role
) -> None:
    headers = {"Authorization": f"Bearer {secrets_by_role['viewer']}", "Accept": "text/event-stream"}
    for method in ("GET", "DELETE"):
        response = httpx.request(method, _url(live_server), headers=headers, timeout=30)
        assert response.status_code == 405 and response.headers["Allow"] == "POST"
        assert "stateless" in response.json()["detail"]


def test_a_body_that_is_not_json_rpc_is_a_json_rpc_error(live_server, secrets_by_role) -> None:
    headers = {
        "Authorization": f"Bearer {secrets_by_role['viewer']}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    response = httpx.post(_url(live_server), content=b"{not json", headers=headers, timeout=30)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32700  # parse error, from the SDK's transport


def test_a_viewer_reads_and_tests_but_cannot_edit(live_server, secrets_by_role, rule_set) -> None:
    before = _state(rule_set)
    listed, read, tested, everything, bad_detail, create, publish = call(
        live_server,
        secrets_by_role["viewer"],
        ("list_rule_sets", {}),
        ("get_rule_set", {"rule_set_id": rule_set.pk}),
        ("test_rule_set", {"rule_set_id": rule_set.pk, "sample": {"query": "주문 조회 A-1001"}}),
        ("test_rule_set", {"rule_set_id": rule_set.pk, "sample": {"query": "주문", "detail": "all"}}),
        ("test_rule_set", {"rule_set_id": rule_set.pk, "sample": {"query": "주문", "detail": "every"}}),
        ("create_rule", {"rule_set_id": rule_set.pk, "rule": {**SEED_RULES[2]}}),
        ("publish_rule_set", {"rule_set_id": rule_set.pk, "publish": {"message": "v1"}}),
    )
    assert [s["name"] for s in data(listed)["rule_sets"]] == ["mcp-set"]
    detail = data(read)
    assert [r["name"] for r in detail["rules"]] == [SEED_RULES[0]["name"], SEED_RULES[1]["name"]]
    assert all("revision" in r and "problems" in r for r in detail["rules"])
    fired = [r for r in data(tested)["records"] if r["status"] == "fired"]
    assert [r["rule"] for r in fired] == [SEED_RULES[0]["name"]]
    # The REST API's answer (rules.engine.records_shown): counts of every status, the opt-in, its refusal.
    assert data(tested)["counts"] == {"fired": 1, "skipped": 1, "error": 0, "not_reached": 0}
    assert (data(everything)["detail"], data(everything)["next_offset"]) == ("all", None)
    assert "'summary' or 'all'" in error(bad_detail)
    assert "needs the editor role" in error(create)
    assert "needs the editor role" in error(publish)
    assert _state(rule_set) == before
    assert not rule_set.versions.exists()


def test_a_token_capped_at_viewer_cannot_edit_for_its_editor(live_server, make_user, rule_set) -> None:
    capped = token_create(actor=make_user("editor"), name="ro", max_role="viewer").secret
    before = _state(rule_set)
    (result,) = call(
        live_server,
        capped,
        ("delete_rule", {"rule_set_id": rule_set.pk, "rule_id": rule_set.rules.first().pk}),
    )
    assert "acts as viewer" in error(result)
    assert _state(rule_set) == before


def test_an_editor_edits_runs_the_cases_and_publishes(live_server, secrets_by_role, rule_set) -> None:
    first = rule_set.rules.order_by("position").first()
    created, updated, stale, suite, published = call(
        live_server,
        secrets_by_role["editor"],
        ("create_rule", {"rule_set_id": rule_set.pk, "rule": {**SEED_RULES[2]}}),
        (
            "update_rule",
            {
                "rule_set_id": rule_set.pk,
                "rule_id": first.pk,
                "changes": {"revision": first.revision, "stop": True},
            },
        ),
        (
            "update_rule",
            {
                "rule_set_id": rule_set.pk,
                "rule_id": first.pk,
                "changes": {"revision": first.revision, "when": "False"},
            },
        ),
        ("run_cases", {"rule_set_id": rule_set.pk}),
        ("publish_rule_set", {"rule_set_id": rule_set.pk, "publish": {"message": "from an IDE"}}),
    )
    assert data(created)["name"] == SEED_RULES[2]["name"]
    assert data(updated)["stop"] is True
    assert "revision" in error(stale).lower()  # the stale write is refused ...
    first.refresh_from_db()
    assert first.stop is True and first.when == SEED_RULES[0]["when"]  # ... and overwrote nothing
    assert data(suite)["total"] == 1 and data(suite)["ok"] is True
    assert data(published)["number"] == 1
    assert rule_set.versions.get().message == "from an IDE"
    (deleted,) = call(
        live_server,
        secrets_by_role["editor"],
        ("delete_rule", {"rule_set_id": rule_set.pk, "rule_id": first.pk}),
    )
    assert data(deleted) == {"deleted": first.pk}
    assert not Rule.objects.filter(pk=first.pk).exists()


@pytest.mark.parametrize(
    ("tool", "arguments", "expected"),
    [
        # An expression that does not compile: the service's message, naming the field.
        ("create_rule", {"rule": {**SEED_RULES[2], "when": "ctx.query +"}}, "when"),
        # A field over its length limit, caught by the API's own schema.
        ("create_rule", {"rule": {**SEED_RULES[2], "name": "x" * 101}}, "name"),
        # A required field missing.
        ("create_rule", {"rule": {"name": "only a name"}}, "mcp_id"),
        # A tool the server does not offer (the service's check, as on the page).
        (
            "create_rule",
            {"rule": {**SEED_RULES[0], "name": "typo", "tool_name": "get_ordr"}},
            "did you mean 'get_order'",
        ),
        # A server that is not registered (the service's check, as on the page).
        (
            "create_rule",
            {"rule": {**SEED_RULES[0], "name": "typo", "mcp_id": "order-servce"}},
            "did you mean 'order-service'",
        ),
        # Ids must be database ids.
        ("get_rule_set", {"rule_set_id": 0}, "rule_set_id"),
        ("delete_rule", {"rule_id": 2**70}, "rule_id"),
        # A boolean is no id (pydantic alone takes true as 1).
        ("get_rule_set", {"rule_set_id": True}, "not true or false"),
        ("delete_rule", {"rule_id": True}, "not true or false"),
        # null for a field that cannot be empty: refused by the REST API's PATCH schema, naming it.
        ("update_rule", {"changes": {"revision": 1, "stop": None}}, "stop"),
        ("update_rule", {"changes": {"revision": 1, "enabled": None}}, "null is not a value"),
        ("update_rule", {"changes": {"revision": 1, "description": None}}, "description"),
        # An unknown rule set or rule.
        ("delete_rule", {"rule_set_id": 999_999, "rule_id": 999_999}, "There is no rule"),
        # A sample the tester's form refuses.
        ("test_rule_set", {"sample": {"query": "q", "data": "not a list"}}, "data"),
    ],
)
def test_bad_arguments_are_a_clear_tool_error_and_change_nothing(
    live_server, secrets_by_role, rule_set, tool, arguments, expected
) -> None:
    ids = {"rule_set_id": rule_set.pk}
    if tool in ("update_rule", "delete_rule"):  # an argument a tool does not take is refused
        ids["rule_id"] = rule_set.rules.first().pk
    arguments = {**ids, **arguments}
    before = _state(rule_set)
    (result,) = call(live_server, secrets_by_role["editor"], (tool, arguments))
    message = error(result)
    assert expected in message, message
    assert "Traceback" not in message
    assert _state(rule_set) == before


def test_an_editor_starts_a_run_and_reads_its_trace(live_server, secrets_by_role, make_user) -> None:
    agent = Agent.objects.create(
        name="mcp-agent",
        system_prompt="Be brief.",
        model_provider=Agent.Provider.SCRIPTED,
        model_script=[
            {"content": "Hello from the script.", "usage": {"input_tokens": 7, "output_tokens": 3}}
        ],
    )
    viewer_try, started = [
        call(live_server, secrets_by_role[role], ("start_run", {"run": {"agent": agent.pk, "query": "hi"}}))[
            0
        ]
        for role in ("viewer", "editor")
    ]
    assert "needs the editor role" in error(viewer_try)
    run_id = data(started)["id"]
    assert Run.objects.filter(agent=agent).count() == 1
    run_services.run_execute(run_id=run_id)  # the worker task's body, in this process
    (trace,) = call(live_server, secrets_by_role["viewer"], ("get_run", {"run_id": run_id}))
    body = data(trace)
    assert body["run"]["status"] == "succeeded" and body["run"]["answer"] == "Hello from the script."
    assert body["finished"] is True
    kinds = [s["kind"] for s in body["steps"]]
    assert "llm" in kinds and "guardrail" in kinds
    llm = next(s for s in body["steps"] if s["kind"] == "llm")
    assert llm["tokens"]["input_tokens"] == 7


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        # NaN in a run's context: the SDK's parser turned it into null and queued the run.
        (
            b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "start_run", '
            b'"arguments": {"run": {"agent": 1, "query": "q", "context": {"a": NaN}}}}}',
            "NaN",
        ),
        # A NUL in a version message: stored on SQLite, raw driver text on PostgreSQL.
        (
            b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "publish_rule_set", '
            b'"arguments": {"rule_set_id": 1, "publish": {"message": "a\\u0000b"}}}}',
            "NUL",
        ),
        # A 5,000-digit JSON-RPC id and a 100,000-deep body: a -32603 (500) before.
        (b'{"jsonrpc": "2.0", "method": "tools/list", "id": ' + b"9" * 5000 + b"}", "digits"),
        (b"[" * 100_000 + b"]" * 100_000, "deep"),
        (
            b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "test_rule_set", '
            b'"arguments": {"rule_set_id": 1, "sample": {"query": "q", "context": '
            + b'{"a": ' * 5000
            + b"1"
            + b"}" * 5000
            + b"}}}}",
            "deep",
        ),
    ],
)
def test_the_endpoint_reads_messages_with_the_apis_parser_and_runs_nothing_it_refuses(
    live_server, secrets_by_role, body, reason
) -> None:
    headers = {
        "Authorization": f"Bearer {secrets_by_role['editor']}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    response = httpx.post(_url(live_server), content=body, headers=headers, timeout=30)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32700 and reason in error["message"], error
    assert Run.objects.count() == 0
