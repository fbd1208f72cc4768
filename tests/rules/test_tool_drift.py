"""Tool drift: a server's tool list changed under the rules that use it.

The checks read the servers' current tool lists, so the moment a refresh stores a new list
(the server's page, or the periodic check on the beat), a rule whose tool vanished, or whose
params no longer fit the tool's new input schema, is flagged on its rule set.
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from rules.checks import rule_set_problems
from servers.models import McpServer

pytestmark = pytest.mark.django_db

SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}, "limit": {"type": "integer", "maximum": 50}},
    "required": ["order_id"],
}


def _server(schema: dict, name: str = "get_order") -> McpServer:
    return McpServer.objects.create(
        mcp_id="orders",
        transport="http",
        url="http://127.0.0.1:9/mcp",
        tools=[{"name": name, "description": "", "input_schema": schema}],
        tools_refreshed_at=timezone.now(),
    )


def _problems(params: str, server: McpServer, tool: str = "get_order") -> list[tuple[str, str]]:
    rule = {"name": "r", "mcp_id": "orders", "tool_name": tool, "when": "True", "params": params}
    found = rule_set_problems([rule], {"orders": server}).get("r", [])
    return [(p.code, p.message) for p in found]


@pytest.mark.parametrize(
    "params",
    [
        '{"order_id": re_find("[0-9]+", query)}',
        '{"order_id": "A-1", "limit": 10}',
        '{"order_id": query, "limit": len(query)}',  # dynamic values are the tester's to check
        'data_get(a2a_data, "order")',  # not a dict literal: nothing to check statically
        '{**data_get(a2a_data, "order")}',  # keys unknown: required cannot be checked
    ],
)
def test_params_that_fit_the_schema_raise_nothing(params: str) -> None:
    assert _problems(params, _server(SCHEMA)) == []


@pytest.mark.parametrize(
    "params,reason",
    [
        ('{"limit": 5}', "'order_id' is required but the params do not set it"),
        ('{"order_id": 42}', "order_id: 42 is not of type 'string'"),
        ('{"order_id": "A", "limit": 500}', "limit: 500 is greater than the maximum of 50"),
        ('{"order_id": "A", "limit": [1, 2]}', "limit: [1, 2] is not of type 'integer'"),
    ],
)
def test_params_that_no_longer_fit_are_flagged_with_the_reason(params: str, reason: str) -> None:
    [(code, message)] = _problems(params, _server(SCHEMA))
    assert code == "params_mismatch"
    assert message == f"The params no longer fit the input schema of 'get_order': {reason}."


def test_a_closed_schema_flags_params_it_does_not_know() -> None:
    closed = {**SCHEMA, "additionalProperties": False}
    [(code, message)] = _problems('{"order_id": "A", "orderId": "A"}', _server(closed))
    assert code == "params_mismatch"
    assert "'orderId' is not a parameter of the tool" in message


def test_a_schema_change_on_refresh_flags_the_rule_and_a_vanished_tool_too() -> None:
    server = _server({"type": "object", "properties": {"query": {"type": "string"}}})
    params = '{"query": query}'
    assert _problems(params, server) == []
    # The server renamed the parameter: the next refresh stores the new schema.
    server.tools = [{"name": "get_order", "description": "", "input_schema": SCHEMA}]
    server.save()
    [(code, message)] = _problems(params, server)
    assert code == "params_mismatch" and "'order_id' is required" in message
    # Then the tool itself went away.
    server.tools = [{"name": "find_order", "description": "", "input_schema": SCHEMA}]
    server.save()
    assert [code for code, _ in _problems(params, server)] == ["tool_missing"]


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"order_id": {"type": "nonsense"}}},  # invalid schema
        {"type": "object", "properties": "not a mapping", "required": "order_id"},
        {"$ref": "#/$defs/missing"},
    ],
)
def test_a_broken_input_schema_is_reported_not_a_crash(schema: dict) -> None:
    found = _problems('{"order_id": "A"}', _server(schema))
    assert all(code == "params_mismatch" for code, _ in found)


def test_a_huge_or_deep_params_literal_is_checked_without_error() -> None:
    server = _server(SCHEMA)
    deep = "[" * 18 + "1" + "]" * 18
    assert _problems('{"order_id": "A", "limit": ' + deep + "}", server)[0][0] == "params_mismatch"
    many = "{" + ", ".join(f'"k{i}": {i}' for i in range(2000)) + ', "order_id": "A"}'
    assert _problems(many, server) == []


def test_the_api_lists_the_checks_rule_by_rule(client, make_user) -> None:
    from rules import services

    editor = make_user("editor")
    server = _server(SCHEMA)
    rule_set = services.rule_set_create(actor=editor, name="drift")
    for name, params in (("fits", '{"order_id": query}'), ("drifted", '{"limit": 5}')):
        services.rule_create(
            actor=editor,
            rule_set=rule_set,
            name=name,
            mcp_id="orders",
            tool_name="get_order",
            when="True",
            params=params,
        )
    client.force_login(make_user("viewer"))
    response = client.get(f"/api/rule-sets/{rule_set.pk}/checks")
    assert response.status_code == 200
    assert response.json() == [
        {
            "rule": "drifted",
            "level": "error",
            "code": "params_mismatch",
            "message": "The params no longer fit the input schema of 'get_order': "
            "'order_id' is required but the params do not set it.",
        }
    ]
    server.tools = []
    server.save()
    assert {p["code"] for p in client.get(f"/api/rule-sets/{rule_set.pk}/checks").json()} == {"tool_missing"}
    assert client.get("/api/rule-sets/999999/checks").status_code == 404
    assert client.get("/api/rule-sets/99999999999999999999999/checks").status_code in (404, 422)
