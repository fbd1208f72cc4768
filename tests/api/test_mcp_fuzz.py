"""Hostile input on the routes the REST fuzzer does not walk: every MCP tool, every path segment.

Each MCP tool gets ``LLAMON_FUZZ_EXAMPLES // 10`` argument sets (10 by default; more with the knob) (Hypothesis: nulls, booleans,
64-bit-plus integers, floats, NUL and long text, nested lists and objects, and the parameter
names left out or unknown ones added), sent as JSON-RPC ``tools/call`` by an editor's token.
Every answer must be a result or a clear error: no HTTP 5xx, no JSON-RPC -32603, no traceback or
database driver text. Every path parameter of every REST operation and of the pages gets hostile
segments the same way.
"""

from __future__ import annotations

import json
import os
import re
from urllib.parse import quote

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accounts.token_services import token_create
from llamon_web.api import api
from llamon_web.demo import SEED_RULES
from tests.support.rule_sets import build_rule_set

pytestmark = pytest.mark.django_db

EXAMPLES = max(5, int(os.environ.get("LLAMON_FUZZ_EXAMPLES", "50")) // 10)
TOOLS = [
    "list_rule_sets",
    "get_rule_set",
    "test_rule_set",
    "create_rule",
    "update_rule",
    "delete_rule",
    "run_cases",
    "publish_rule_set",
    "list_agents",
    "start_run",
    "get_run",
    "list_runs",
    "export_runs",
    "list_change_requests",
    "get_change_request",
    "review_change_request",
    "get_agent_savings",
    "find_rules",
    "get_suggestions",
    "draft_suggested_rule",
]
LEAKS = ("Traceback", "IntegrityError", "NOT NULL", "psycopg", "sqlite3", "OperationalError", "DataError")
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=0, max_value=5),  # ids that exist
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    st.sampled_from(["", "\x00", "a\x00b", "x" * 5000, "ctx.query +", "[카드번호]", "../..", "%00"]),
)
value = st.recursive(
    scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=15,
)


@pytest.fixture
def editor(make_user, api_servers) -> tuple[Client, dict[str, str]]:
    user = make_user("editor")
    build_rule_set(user, "fuzz", SEED_RULES[:2])
    headers = {
        "Authorization": f"Bearer {token_create(actor=user, name='fuzz').secret}",
        "Accept": "application/json, text/event-stream",
    }
    return Client(raise_request_exception=False), headers


def _rpc(client: Client, headers: dict[str, str], method: str, params: dict) -> tuple[int, dict]:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    response = client.post("/api/mcp", data=body, content_type="application/json", headers=headers)
    return response.status_code, response.json()


def _schema(client: Client, headers: dict[str, str], name: str) -> dict:
    _, listed = _rpc(client, headers, "tools/list", {})
    return next(t["inputSchema"] for t in listed["result"]["tools"] if t["name"] == name)


def test_the_fuzzer_knows_every_tool(editor) -> None:
    _, listed = _rpc(*editor, "tools/list", {})
    assert sorted(t["name"] for t in listed["result"]["tools"]) == sorted(TOOLS)


@pytest.mark.parametrize("tool", TOOLS)
def test_a_tool_answers_hostile_arguments_without_a_server_error(editor, tool) -> None:
    client, headers = editor
    names = list(_schema(client, headers, tool).get("properties", {}))
    arguments = st.one_of(
        st.fixed_dictionaries(dict.fromkeys(names, value)),
        st.dictionaries(
            st.sampled_from([*names, "unknown"]) if names else st.just("unknown"), value, max_size=4
        ),
    )

    @FUZZ
    @given(args=arguments)
    def check(args: dict) -> None:
        status, body = _rpc(client, headers, "tools/call", {"name": tool, "arguments": args})
        assert status in (200, 400), (status, body)
        assert body.get("error", {}).get("code") != -32603, body
        text = json.dumps(body, ensure_ascii=False)
        assert not any(leak in text for leak in LEAKS), text[:500]

    check()


def _operations() -> list[tuple[str, str]]:
    schema = api.get_openapi_schema()
    return [
        (method.upper(), path)
        for path, item in schema["paths"].items()
        if "{" in path
        for method in item
        if method in ("get", "post", "patch", "delete")
    ]


segment = st.one_of(
    st.text(min_size=1, max_size=30),
    st.integers(min_value=-(2**80), max_value=2**80).map(str),
    st.sampled_from(["\x00", "a\x00b", "%00", "true", "null", "1e309", "..", "💥", " ", "0x10", "٣"]),
)


@pytest.mark.parametrize(("method", "path"), _operations())
def test_hostile_path_segments_get_a_clear_answer(editor, method, path) -> None:
    client, headers = editor

    @FUZZ
    @given(parts=st.lists(segment, min_size=3, max_size=3))
    def check(parts: list[str]) -> None:
        it = iter(parts)
        url = re.sub(r"\{[^}]+\}", lambda _m: quote(next(it), safe=""), path)
        response = client.generic(method, url, data="{}", content_type="application/json", headers=headers)
        assert response.status_code < 500, (url, response.status_code, response.content[:300])

    check()


@FUZZ
@given(secret=segment)
def test_hostile_page_path_segments_get_a_clear_answer(secret) -> None:
    response = Client(raise_request_exception=False).get(f"/accounts/invite/{quote(secret, safe='')}/")
    assert response.status_code < 500
