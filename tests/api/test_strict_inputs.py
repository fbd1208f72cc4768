"""Strict inputs (issue 43): every write operation of the REST API and every tool of the MCP endpoint
refuses a field it does not read, naming it and the closest valid one, in English and Korean.

The operations and tools are enumerated from the OpenAPI schema and the endpoint's tool list, so a
new one is covered without touching this file."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import pytest
from django.test import Client
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from ninja import Schema

from accounts.token_services import token_create
from agents.services import ingest_credential_issue
from core.api import StrictIn, unknown_field_message
from rules.models import RuleSet
from tests.api.conftest import Caller

WRITES = ("post", "put", "patch", "delete")


def _misspelt(name: str) -> str:
    """A typo of ``name`` that difflib still finds close: one letter dropped (a2a_data -> a2a_dta)."""
    if len(name) < 4:
        return name + "x"
    middle = len(name) // 2
    return name[:middle] + name[middle + 1 :]


def _body_fields(schema: dict[str, Any], operation: dict[str, Any]) -> list[str]:
    ref = (
        operation.get("requestBody", {})
        .get("content", {})
        .get("application/json", {})
        .get("schema", {})
        .get("$ref")
    )
    if not ref:
        return []
    body = schema["components"]["schemas"][ref.rsplit("/", 1)[-1]]
    return sorted(body.get("properties") or {})


def _write_operations(schema: dict[str, Any]) -> list[tuple[str, str, list[str]]]:
    return [
        (method, path, _body_fields(schema, operation))
        for path, item in schema["paths"].items()
        for method, operation in item.items()
        if method in WRITES
    ]


@pytest.mark.django_db
def test_every_write_operation_refuses_an_unknown_field_and_names_the_closest(admin_api, caller) -> None:
    session = caller("session:admin")  # the operations a token may not call (making tokens)
    # ingest takes a served agent's own credential, never a person's token
    served = Caller(
        Client(), {"Authorization": f"Bearer {ingest_credential_issue(actor=None, agent_name='strict')[1]}"}
    )
    schema = admin_api.get("/api/openapi.json").json()
    operations = _write_operations(schema)
    assert len(operations) >= 40  # the whole API, not a sample
    for method, path, fields in operations:
        url = re.sub(r"\{[^}]+\}", "1", path)
        wrong = _misspelt(fields[0]) if fields else "confirm_delete"
        api = served if path.startswith("/api/runs/ingest") else admin_api
        response = api.call(method, url, json={wrong: 1})
        if response.status_code == 403:
            response = session.call(method, url, json={wrong: 1})
        body = response.json()
        assert response.status_code == 422, (method, path, response.status_code, body)
        assert body["field"].endswith(wrong), (method, path, body)
        assert f"Unknown field `{wrong}`" in body["detail"] or "takes no fields" in body["detail"], (
            path,
            body,
        )
        if fields and wrong != "confirm_delete":
            assert "did you mean `" in body["detail"], (method, path, body)


@pytest.mark.django_db
def test_a_misspelt_a2a_data_is_refused_in_english_and_korean(admin_api, demo_servers) -> None:
    rule_set = RuleSet.objects.create(name="s")
    url = f"/api/rule-sets/{rule_set.pk}/evaluate"
    english = admin_api.post(url, {"query": "q", "a2a_data": [{"spo2": 86}]})
    assert english.status_code == 422
    # The name the tester's answer (and a run) uses: pointed to the name this operation reads.
    assert english.json()["detail"] == "payload.a2a_data: Unknown field `a2a_data`; did you mean `data`?"
    assert english.json()["field"] == "payload.a2a_data"
    runs = admin_api.post("/api/runs", {"agent": 1, "query": "q", "a2a_dta": [{}]})
    assert "Unknown field `a2a_dta`; did you mean `data`?" in runs.json()["detail"]
    korean = admin_api.post(url, {"query": "q", "a2a_dta": [{}]}, headers={"Accept-Language": "ko"})
    assert "알 수 없는 필드 `a2a_dta`" in korean.json()["detail"]
    # Nested schemas too: the unsaved rule edit of the tester.
    nested = admin_api.post(url, {"query": "q", "draft_rule": {"name": "r", "whn": "True"}})
    assert nested.status_code == 422 and nested.json()["field"].endswith("draft_rule.whn")
    assert "did you mean `when`?" in nested.json()["detail"]


def test_the_message_names_the_closest_field_or_lists_them() -> None:
    assert unknown_field_message("a2a_dta", ["a2a_data", "query"]) == (
        "Unknown field `a2a_dta`; did you mean `a2a_data`?"
    )
    assert unknown_field_message("zzz", ["query", "context"]) == (
        "Unknown field `zzz`; the fields are `context`, `query`."
    )
    assert unknown_field_message("zzz", []) == "Unknown field `zzz`; this takes no fields."


class LooseIn(Schema):
    name: str


class StrictOuterIn(StrictIn):
    inner: list[LooseIn]


def _loose_handler(request: Any, payload: LooseIn) -> None:
    return None


def _nested_handler(request: Any, payload: StrictOuterIn) -> None:
    return None


@pytest.mark.parametrize("handler", [_loose_handler, _nested_handler])
def test_an_operation_whose_body_is_not_strict_stops_the_api_from_starting(handler) -> None:
    from django.core.exceptions import ImproperlyConfigured
    from ninja import NinjaAPI, Router

    from llamon_web.api import strict_inputs

    router = Router()
    router.post("/x")(handler)
    api = NinjaAPI(urls_namespace=f"strict-{handler.__name__}")
    api.add_router("", router)
    with pytest.raises(ImproperlyConfigured, match="LooseIn"):
        strict_inputs(api)


# --- the MCP endpoint -------------------------------------------------------------------------------


async def _every_tool_with_an_extra_argument(url: str, secret: str, korean: bool) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {secret}"}
    if korean:
        headers["Accept-Language"] = "ko"
    answers: dict[str, str] = {}
    async with (
        httpx.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tools = (await session.list_tools()).tools
        for tool in tools:
            names = sorted((tool.inputSchema or {}).get("properties") or {})
            wrong = _misspelt(names[0]) if names else "rule_set_idd"
            result = await session.call_tool(tool.name, {wrong: 1})
            assert result.isError, (tool.name, result)
            answers[tool.name] = result.content[0].text
    return answers


@pytest.mark.django_db(transaction=True)
def test_every_mcp_tool_refuses_an_unknown_argument(live_server, make_user) -> None:
    secret = token_create(actor=make_user("admin"), name="mcp").secret
    url = f"{live_server.url}/api/mcp"
    answers = asyncio.run(_every_tool_with_an_extra_argument(url, secret, korean=False))
    assert len(answers) >= 10
    for tool, text in answers.items():
        assert text.startswith("Unknown field `"), (tool, text)
        assert "did you mean `" in text or "this takes no fields" in text, (tool, text)
    korean = asyncio.run(_every_tool_with_an_extra_argument(url, secret, korean=True))
    assert all(text.startswith("알 수 없는 필드") for text in korean.values()), korean
