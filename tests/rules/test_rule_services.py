"""Rule sets, rules and versions through their services: validation, revisions, publish, restore, checks."""

from __future__ import annotations

import pytest
from django.utils import timezone

from core.models import AuditEvent
from llamon_agent.tools import AgentRequest
from rules import engine, services
from rules.checks import rule_set_problems
from rules.errors import RuleError, StaleEditError
from rules.models import Rule, RuleSetVersion
from rules.selectors import version_diff
from servers.models import McpServer

pytestmark = pytest.mark.django_db

ORDER_TOOLS = [
    {
        "name": "get_order",
        "description": "Find an order",
        "input_schema": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "order_id": {"type": "string"}},
        },
    },
    {
        "name": "list_orders",
        "description": "List orders",
        "input_schema": {
            "type": "object",
            "properties": {"customer_id": {"type": "string"}},
            "required": ["customer_id"],
        },
    },
]


@pytest.fixture
def order_server() -> McpServer:
    return McpServer.objects.create(
        mcp_id="order-service",
        transport="http",
        url="http://127.0.0.1:9/mcp",
        tools=ORDER_TOOLS,
        tools_refreshed_at=timezone.now(),
    )


@pytest.fixture
def editor(make_user):
    return make_user("editor")


@pytest.fixture
def rule_set(editor, order_server):
    rs = services.rule_set_create(actor=editor, name="orders")
    services.rule_create(
        actor=editor,
        rule_set=rs,
        name="route_order_lookup",
        mcp_id="order-service",
        tool_name="get_order",
        when='"주문" in ctx.query and "조회" in ctx.query',
        params='{"query": ctx.query}',
    )
    return rs


def test_a_rule_with_a_syntax_error_is_refused_with_line_and_column(editor, rule_set) -> None:
    with pytest.raises(RuleError) as info:
        services.rule_create(
            actor=editor,
            rule_set=rule_set,
            name="broken",
            mcp_id="order-service",
            tool_name="get_order",
            when='"주문" in ctx.query and',
            params="{}",
        )
    assert info.value.field == "when"
    assert "line 1, column" in info.value.message
    assert not Rule.objects.filter(name="broken").exists()


def test_params_that_are_not_a_dict_are_refused(editor, rule_set) -> None:
    with pytest.raises(RuleError) as info:
        services.rule_create(
            actor=editor,
            rule_set=rule_set,
            name="listy",
            mcp_id="order-service",
            tool_name="get_order",
            when="True",
            params="[1, 2]",
        )
    assert info.value.field == "params"
    assert "dict" in info.value.message


def test_a_duplicate_rule_name_is_refused(editor, rule_set) -> None:
    with pytest.raises(RuleError, match="already exists") as info:
        services.rule_create(
            actor=editor,
            rule_set=rule_set,
            name="route_order_lookup",
            mcp_id="order-service",
            tool_name="get_order",
            when="True",
            params="{}",
        )
    assert info.value.field == "name"
    assert rule_set.rules.count() == 1


@pytest.mark.parametrize("name", ["1abc", "class", "has space", "", "x" * 101])
def test_rule_names_must_be_identifiers(editor, rule_set, name) -> None:
    with pytest.raises(RuleError) as info:
        services.rule_create(
            actor=editor,
            rule_set=rule_set,
            name=name,
            mcp_id="order-service",
            tool_name="get_order",
            when="True",
            params="{}",
        )
    assert info.value.field == "name"


def test_a_concurrent_edit_is_refused_and_nothing_is_overwritten(editor, make_user, rule_set) -> None:
    rule = rule_set.rules.get()
    other = make_user("editor", username="kim")
    services.rule_update(actor=other, rule=rule, revision=rule.revision, when='"주문" in query')
    with pytest.raises(StaleEditError) as info:
        services.rule_update(actor=editor, rule=rule, revision=rule.revision, when='"order" in query')
    assert "was changed by kim" in info.value.message
    assert "Nothing was overwritten" in info.value.message
    assert Rule.objects.get(pk=rule.pk).when == '"주문" in query'


def test_an_update_bumps_the_rule_and_the_set_revision_and_is_audited(editor, rule_set) -> None:
    rule = rule_set.rules.get()
    rule_set.refresh_from_db()
    set_revision = rule_set.revision
    updated = services.rule_update(actor=editor, rule=rule, revision=rule.revision, stop=True)
    rule_set.refresh_from_db()
    assert updated.revision == rule.revision + 1
    assert rule_set.revision == set_revision + 1
    event = AuditEvent.objects.filter(action="rule.update").get()
    assert event.before["stop"] is False and event.after["stop"] is True
    assert event.actor == editor


def test_reorder_and_move(editor, rule_set) -> None:
    second = services.rule_create(
        actor=editor,
        rule_set=rule_set,
        name="second",
        mcp_id="order-service",
        tool_name="list_orders",
        when="True",
        params='{"customer_id": "C-1"}',
    )
    first = rule_set.rules.get(name="route_order_lookup")
    rule_set.refresh_from_db()
    services.rule_move(actor=editor, rule=second, direction="up", revision=rule_set.revision)
    assert list(rule_set.rules.order_by("position").values_list("name", flat=True)) == [
        "second",
        "route_order_lookup",
    ]
    rule_set.refresh_from_db()
    with pytest.raises(RuleError, match="every rule"):
        services.rule_set_reorder(
            actor=editor, rule_set=rule_set, order=[first.pk], revision=rule_set.revision
        )
    with pytest.raises(StaleEditError):
        services.rule_set_reorder(
            actor=editor, rule_set=rule_set, order=[first.pk, second.pk], revision=rule_set.revision - 1
        )


def test_publish_freezes_an_immutable_version_and_refuses_an_unchanged_draft(editor, rule_set) -> None:
    version = services.rule_set_publish(actor=editor, rule_set=rule_set, message="first")
    assert version.number == 1 and len(version.content_hash) == 64 and len(version.tool_schema_hash) == 64
    assert version.content[0]["when"] == '"주문" in ctx.query and "조회" in ctx.query'
    with pytest.raises(RuleError, match="Nothing changed since v1"):
        services.rule_set_publish(actor=editor, rule_set=rule_set)
    version.message = "rewritten"
    with pytest.raises(ValueError, match="immutable"):
        version.save()
    assert RuleSetVersion.objects.get(pk=version.pk).message == "first"


def test_restore_puts_a_version_back_into_the_draft(editor, rule_set) -> None:
    v1 = services.rule_set_publish(actor=editor, rule_set=rule_set)
    rule = rule_set.rules.get()
    services.rule_update(actor=editor, rule=rule, revision=rule.revision, when='"x" in query')
    services.rule_create(
        actor=editor,
        rule_set=rule_set,
        name="extra",
        mcp_id="order-service",
        tool_name="get_order",
        when="True",
        params="{}",
    )
    rule_set.refresh_from_db()
    services.rule_set_restore(actor=editor, rule_set=rule_set, version=v1, revision=rule_set.revision)
    assert engine.rule_set_snapshot(rule_set) == v1.content


def test_version_diff_reports_added_removed_changed_and_moved() -> None:
    a = {"name": "a", "when": "True", "params": "{}"}
    b = {"name": "b", "when": "True", "params": "{}"}
    c = {"name": "c", "when": "False", "params": "{}"}
    rows = version_diff(
        old=[a, b, c], new=[b, {**a, "when": '"x" in query'}, {"name": "d", "when": "True", "params": "{}"}]
    )
    by_name = {r["name"]: r for r in rows}
    assert by_name["a"]["change"] == "changed" and by_name["a"]["fields"] == [
        {"field": "when", "before": "True", "after": '"x" in query'}
    ]
    assert by_name["b"]["change"] == "moved"
    assert by_name["c"]["change"] == "removed"
    assert by_name["d"]["change"] == "added"


def test_static_checks(order_server) -> None:
    disabled = McpServer.objects.create(
        mcp_id="crm", transport="http", url="http://127.0.0.1:9/mcp", enabled=False
    )
    snapshot = [
        {
            "name": "a",
            "mcp_id": "order-service",
            "tool_name": "get_order",
            "when": '"주문" in query',
            "params": "{}",
            "stop": True,
            "enabled": True,
        },
        {
            "name": "b",
            "mcp_id": "order-service",
            "tool_name": "list_orders",
            "when": '"주문"  in  query',
            "params": "{}",
            "stop": False,
            "enabled": True,
        },
        {
            "name": "c",
            "mcp_id": "order-service",
            "tool_name": "cancel_order",
            "when": "True",
            "params": "{}",
            "stop": False,
            "enabled": True,
        },
        {
            "name": "d",
            "mcp_id": "nowhere",
            "tool_name": "x",
            "when": "False",
            "params": "{}",
            "stop": False,
            "enabled": True,
        },
        {
            "name": "e",
            "mcp_id": "crm",
            "tool_name": "x",
            "when": "False",
            "params": "{}",
            "stop": False,
            "enabled": True,
        },
        {
            "name": "f",
            "mcp_id": "order-service",
            "tool_name": "cancel_order",
            "when": "True",
            "params": "{}",
            "stop": False,
            "enabled": True,
        },
        {
            "name": "g",
            "mcp_id": "nowhere",
            "tool_name": "x",
            "when": "False",
            "params": "{}",
            "stop": False,
            "enabled": False,
        },
    ]
    problems = rule_set_problems(snapshot, {"order-service": order_server, "crm": disabled})
    codes = {name: [p.code for p in found] for name, found in problems.items()}
    assert codes == {
        "b": ["params_mismatch", "unreachable"],
        "c": ["tool_missing"],
        "d": ["server_unknown"],
        "e": ["server_disabled"],
        "f": ["tool_missing", "duplicate"],
    }
    assert problems["d"][0].message.startswith("MCP 'nowhere'의 tool이 로드되지 않음")


def test_dry_run_evaluation_checks_params_against_the_tool_schema(editor, rule_set, order_server) -> None:
    services.rule_create(
        actor=editor,
        rule_set=rule_set,
        name="list_mine",
        mcp_id="order-service",
        tool_name="list_orders",
        when='"내 주문" in query',
        params='{"customer_id": context.get("userId")}',
    )
    snapshot = engine.rule_set_snapshot(rule_set)
    result = engine.evaluate(snapshot, AgentRequest(query="내 주문 조회", context={}))
    statuses = {r.rule: str(r.status) for r in result.outcome.records}
    assert statuses == {"route_order_lookup": "fired", "list_mine": "fired"}
    assert result.outcome.calls == 0  # dry run: nothing called
    assert result.schema_errors == {"list_mine": ["customer_id: None is not of type 'string'"]}
    assert result.block.startswith("확정 호출 결과") or "확정 호출 결과" in result.block
    assert engine.DRY_RUN_RESULT in result.block


def test_a_disabled_server_fails_the_pre_step_with_the_contract_message(
    editor, rule_set, order_server
) -> None:
    McpServer.objects.filter(pk=order_server.pk).update(enabled=False)
    result = engine.evaluate(engine.rule_set_snapshot(rule_set), AgentRequest(query="주문 조회"))
    assert not result.outcome.ok
    assert result.outcome.error == "MCP 'order-service'의 tool이 로드되지 않음"
