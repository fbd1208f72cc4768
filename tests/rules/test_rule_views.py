"""The rule workbench pages, full and as htmx partials, including their bad-input paths."""

from __future__ import annotations

import html as html_lib
import json

import pytest
from django.urls import reverse
from django.utils import timezone

from core.models import AuditEvent
from rules import services
from rules.models import Rule, RuleSet
from servers.models import McpServer
from tests.support.tester import execute_confirmed

pytestmark = pytest.mark.django_db
HX = {"HTTP_HX_REQUEST": "true"}

ORDER_TOOLS = [
    {
        "name": "get_order",
        "description": "Find an <b>order</b>",
        "input_schema": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
        },
    },
]


@pytest.fixture
def rule_set(make_user):
    McpServer.objects.create(
        mcp_id="order-service",
        transport="http",
        url="http://127.0.0.1:9/mcp",
        tools=ORDER_TOOLS,
        tools_refreshed_at=timezone.now(),
    )
    author = make_user("editor")
    rs = services.rule_set_create(actor=author, name="orders", description="Order routing")
    services.rule_create(
        actor=author,
        rule_set=rs,
        name="route_order_lookup",
        mcp_id="order-service",
        tool_name="get_order",
        when='"주문" in ctx.query and "조회" in ctx.query',
        params='{"query": ctx.query}',
    )
    rs.refresh_from_db()
    return rs


def _rule_post(rule: Rule | None = None, **overrides) -> dict:
    data = {
        "rule-name": "route_order_lookup",
        "rule-mcp_id": "order-service",
        "rule-tool_name": "get_order",
        "rule-when": '"주문" in query',
        "rule-params": '{"query": query}',
        "rule-enabled": "on",
        "rule-description": "",
        "rule-revision": str(rule.revision) if rule else "",
    }
    data.update(overrides)
    return data


def test_editor_page_shows_rules_edit_panel_and_tester(editor_client, rule_set) -> None:
    rule = rule_set.rules.get()
    html = editor_client.get(
        reverse("rules:editor", args=[rule_set.pk]) + f"?rule={rule.pk}"
    ).content.decode()
    for region in ('id="rule-list"', 'id="rule-editor"', 'id="tester-form"', 'id="rule-form"'):
        assert region in html
    assert "route_order_lookup" in html
    assert "Find an &lt;b&gt;order&lt;/b&gt;" in html  # tool descriptions are untrusted text


def test_viewer_sees_the_editor_read_only(viewer_client, rule_set) -> None:
    html = viewer_client.get(reverse("rules:editor", args=[rule_set.pk])).content.decode()
    assert 'id="rule-form"' not in html and "Execute" not in html
    assert 'id="tester-form"' in html


def test_saving_a_rule_with_a_typo_keeps_the_input_and_shows_line_and_column(editor_client, rule_set) -> None:
    rule = rule_set.rules.get()
    response = editor_client.post(
        reverse("rules:rule_update", args=[rule_set.pk, rule.pk]),
        _rule_post(rule, **{"rule-when": '"주문" in queyr'}),
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert "line 1, column" in html and "queyr" in html
    assert Rule.objects.get(pk=rule.pk).when == '"주문" in ctx.query and "조회" in ctx.query'


def test_validate_partial_reports_errors_as_you_type(editor_client, rule_set) -> None:
    response = editor_client.post(
        reverse("rules:validate", args=[rule_set.pk]), _rule_post(**{"rule-params": "[1,"}), **HX
    )
    html = response.content.decode()
    assert response.status_code == 200 and "<html" not in html
    assert 'id="rule-errors"' in html and "Params" in html
    assert "rule-edited" in json.loads(response["HX-Trigger"])
    ok = editor_client.post(
        reverse("rules:validate", args=[rule_set.pk]), _rule_post(), **HX
    ).content.decode()
    assert "The rule compiles." in ok


def test_a_stale_save_is_refused_with_409_and_nothing_is_overwritten(
    editor_client, make_user, rule_set
) -> None:
    rule = rule_set.rules.get()
    services.rule_update(
        actor=make_user("editor", username="park"), rule=rule, revision=rule.revision, description="theirs"
    )
    response = editor_client.post(
        reverse("rules:rule_update", args=[rule_set.pk, rule.pk]),
        _rule_post(rule, **{"rule-description": "mine"}),
    )
    assert response.status_code == 409
    assert "was changed by park" in response.content.decode()
    assert Rule.objects.get(pk=rule.pk).description == "theirs"


def test_a_duplicate_name_on_create_is_refused_on_the_name_field(editor_client, rule_set) -> None:
    response = editor_client.post(reverse("rules:rule_create", args=[rule_set.pk]), _rule_post())
    assert response.status_code == 400
    assert "already exists" in response.content.decode()
    assert rule_set.rules.count() == 1


def test_creating_a_rule_redirects_to_it_and_is_audited(editor_client, rule_set) -> None:
    response = editor_client.post(
        reverse("rules:rule_create", args=[rule_set.pk]), _rule_post(**{"rule-name": "second"})
    )
    rule = rule_set.rules.get(name="second")
    assert response.status_code == 302 and response["Location"].endswith(f"?rule={rule.pk}")
    assert AuditEvent.objects.filter(action="rule.create", object_id=str(rule.pk)).exists()


def test_tester_dry_run_on_a_korean_query_shows_the_match_and_the_block(viewer_client, rule_set) -> None:
    response = viewer_client.post(
        reverse("rules:test", args=[rule_set.pk]),
        {"t-query": "주문 조회 부탁해", "t-context": '{"userId": "C-1001"}'},
        **HX,
    )
    html = response.content.decode()
    assert response.status_code == 200 and "<html" not in html
    assert 'data-rule="route_order_lookup"' in html and "status-fired" in html
    assert "확정 호출 결과" in html
    assert "주문 조회 부탁해" in html
    assert "valid" in html


def test_tester_uses_the_unsaved_edit(editor_client, rule_set) -> None:
    rule = rule_set.rules.get()
    data = {
        "t-query": "order please",
        **_rule_post(rule, **{"rule-when": '"order" in query', "rule-original": "route_order_lookup"}),
    }
    html = editor_client.post(reverse("rules:test", args=[rule_set.pk]), data, **HX).content.decode()
    assert "Includes your unsaved edit" in html and "status-fired" in html
    assert Rule.objects.get(pk=rule.pk).when.startswith('"주문"')


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("t-context", "{not json", "Context is not valid JSON"),
        ("t-context", "[1, 2]", "Context must be a JSON object"),
        ("t-data", '"text"', "DataParts must be a JSON object, a list of objects"),
        ("t-data", '{"parts": [{"kind": "nope"}]}', "Not a valid A2A message"),
        ("t-files", '[{"name": "a", "path": "/etc/passwd"}]', "unknown field(s) path"),
    ],
)
def test_tester_rejects_bad_input_with_a_readable_message(
    viewer_client, rule_set, field, value, message
) -> None:
    response = viewer_client.post(
        reverse("rules:test", args=[rule_set.pk]), {"t-query": "x", field: value}, **HX
    )
    assert response.status_code == 422
    assert message in response.content.decode()


def test_tester_accepts_a_whole_a2a_message_in_dataparts(viewer_client, rule_set) -> None:
    message = {
        "kind": "message",
        "role": "user",
        "messageId": "m1",
        "contextId": "s-1",
        "parts": [
            {"kind": "text", "text": "주문 조회"},
            {"kind": "data", "data": {"chatbotId": "premium-support"}},
        ],
    }
    html = viewer_client.post(
        reverse("rules:test", args=[rule_set.pk]), {"t-data": json.dumps(message)}, **HX
    ).content.decode()
    assert "status-fired" in html
    # The page shows what it took from the message: its text, its contextId, its parts.
    assert '<dd id="tester-a2a-query">주문 조회</dd>' in html
    assert '"sessionId": "s-1"' in html_lib.unescape(html) and "1 DataParts, 0 FileParts" in html
    html = viewer_client.post(
        reverse("rules:test", args=[rule_set.pk]),
        {"t-data": json.dumps(message), "t-query": "환불", "t-context": '{"sessionId": "mine"}'},
        **HX,
    ).content.decode()
    assert "(the Query box wins)" in html and "(the Context box wins for sessionId)" in html


def test_tester_without_javascript_renders_a_full_page(viewer_client, rule_set) -> None:
    html = viewer_client.post(
        reverse("rules:test", args=[rule_set.pk]), {"t-query": "주문 조회"}
    ).content.decode()
    assert "<html" in html and "확정 호출 결과" in html


def test_execute_needs_the_editor_role(viewer_client, rule_set) -> None:
    response = viewer_client.post(
        reverse("rules:test", args=[rule_set.pk]), {"t-query": "주문 조회", "execute": "1"}, **HX
    )
    assert response.status_code == 403


def test_move_without_javascript_redirects_and_with_htmx_returns_the_list(
    editor_client, rule_set, make_user
) -> None:
    second = services.rule_create(
        actor=make_user("editor"),
        rule_set=rule_set,
        name="second",
        mcp_id="order-service",
        tool_name="get_order",
        when="True",
        params='{"query": query}',
    )
    rule_set.refresh_from_db()
    response = editor_client.post(
        reverse("rules:rule_move", args=[rule_set.pk, second.pk]),
        {"direction": "up", "revision": rule_set.revision},
    )
    assert response.status_code == 302
    assert list(rule_set.rules.order_by("position").values_list("name", flat=True)) == [
        "second",
        "route_order_lookup",
    ]
    rule_set.refresh_from_db()
    partial = editor_client.post(
        reverse("rules:rule_move", args=[rule_set.pk, second.pk]),
        {"direction": "down", "revision": rule_set.revision},
        **HX,
    )
    html = partial.content.decode()
    assert 'id="rule-list"' in html and "<html" not in html
    assert html.index("route_order_lookup") < html.index("second")


def test_drag_and_drop_reorder_with_a_stale_revision_changes_nothing(
    editor_client, rule_set, make_user
) -> None:
    second = services.rule_create(
        actor=make_user("editor"),
        rule_set=rule_set,
        name="second",
        mcp_id="order-service",
        tool_name="get_order",
        when="True",
        params='{"query": query}',
    )
    first = rule_set.rules.get(name="route_order_lookup")
    html = editor_client.post(
        reverse("rules:reorder", args=[rule_set.pk]), {"order": [second.pk, first.pk], "revision": 1}, **HX
    ).content.decode()
    assert "while you were editing" in html
    assert list(rule_set.rules.order_by("position").values_list("name", flat=True)) == [
        "route_order_lookup",
        "second",
    ]


def test_publish_diff_and_restore_through_the_pages(editor_client, rule_set) -> None:
    response = editor_client.post(
        reverse("rules:publish", args=[rule_set.pk]), {"message": "first", "revision": rule_set.revision}
    )
    assert response.status_code == 302
    rule = rule_set.rules.get()
    editor_client.post(
        reverse("rules:rule_update", args=[rule_set.pk, rule.pk]),
        _rule_post(rule, **{"rule-when": '"order" in query'}),
    )
    rule_set.refresh_from_db()
    editor_client.post(
        reverse("rules:publish", args=[rule_set.pk]), {"message": "english", "revision": rule_set.revision}
    )
    versions = editor_client.get(reverse("rules:versions", args=[rule_set.pk])).content.decode()
    assert "v1" in versions and "v2" in versions and "english" in versions
    diff = editor_client.get(reverse("rules:diff", args=[rule_set.pk]), {"a": "1", "b": "2"}).content.decode()
    assert "changed" in diff and '"order" in query' in diff.replace("&quot;", '"')
    missing = editor_client.get(reverse("rules:diff", args=[rule_set.pk]), {"a": "9", "b": "2"})
    assert missing.status_code == 302
    rule_set.refresh_from_db()
    editor_client.post(reverse("rules:restore", args=[rule_set.pk, 1]), {"revision": rule_set.revision})
    assert rule_set.rules.get().when == '"주문" in ctx.query and "조회" in ctx.query'


def test_publishing_an_unchanged_draft_says_so(editor_client, rule_set) -> None:
    editor_client.post(reverse("rules:publish", args=[rule_set.pk]), {"revision": rule_set.revision})
    rule_set.refresh_from_db()
    response = editor_client.post(
        reverse("rules:publish", args=[rule_set.pk]), {"revision": rule_set.revision}, follow=True
    )
    assert "Nothing changed since v1" in response.content.decode()


def test_audit_page_filters_and_returns_a_partial_for_htmx(viewer_client, rule_set) -> None:
    html = viewer_client.get(reverse("rules:audit"), {"action": "rule.create"}).content.decode()
    assert "rule.create" in html and "rule_set.create" not in html
    partial = viewer_client.get(reverse("rules:audit"), {"action": "rule_set"}, **HX).content.decode()
    assert 'id="audit-table"' in partial and "<html" not in partial and "rule_set.create" in partial


@pytest.mark.parametrize("field", ["query", "actor", "object_type", "action"])
def test_an_audit_filter_longer_than_its_column_is_refused_not_sent_to_the_database(
    viewer_client, rule_set, field
) -> None:
    # 100,000 characters in a LIKE made SQLite fail ("LIKE or GLOB pattern too complex"): a 5xx.
    response = viewer_client.get(reverse("rules:audit"), {field: "%" * 100_000})
    assert response.status_code == 200 and "rule_set.create" in response.content.decode()
    api = viewer_client.get("/api/audit", {"q" if field == "query" else field: "x" * 201})
    assert api.status_code == 422  # the API's bound is the same column length


def test_a_rule_on_an_unknown_server_or_tool_is_refused_by_the_form(editor_client, rule_set) -> None:
    response = editor_client.post(
        reverse("rules:rule_create", args=[rule_set.pk]),
        _rule_post(**{"rule-name": "x", "rule-mcp_id": "nowhere"}),
    )
    assert (
        response.status_code == 400
        and "No MCP server &#x27;nowhere&#x27; is registered" in response.content.decode()
    )
    response = editor_client.post(
        reverse("rules:rule_create", args=[rule_set.pk]),
        _rule_post(**{"rule-name": "x", "rule-tool_name": "cancel_order"}),
    )
    assert (
        response.status_code == 400
        and "order-service has no tool &#x27;cancel_order&#x27;" in response.content.decode()
    )
    assert list(rule_set.rules.values_list("name", flat=True)) == ["route_order_lookup"]


@pytest.mark.django_db(transaction=True)
def test_execute_really_calls_the_tool_on_the_demo_server(make_user, client) -> None:
    """The tester's "execute" goes through the pooled session to the real stdio demo server."""
    from django.core.management import call_command

    from servers.pool import web_pool_close

    call_command("load_demo", "--no-runs", verbosity=0)
    client.force_login(make_user("editor"))
    rule_set = RuleSet.objects.get(name="seed-rules")
    try:
        response = execute_confirmed(  # Execute names the live call first; confirmed here
            client, reverse("rules:test", args=[rule_set.pk]), {"t-query": "주문 조회 부탁해 A-1001"}, **HX
        )
    finally:
        web_pool_close()
    html = response.content.decode()
    assert response.status_code == 200
    assert "Executed: 1 call" in html
    text = html.replace("&quot;", '"')
    assert '"found": true' in text and '"order_id": "A-1001"' in text  # the real server's answer
    assert "(dry run: not called)" not in html
