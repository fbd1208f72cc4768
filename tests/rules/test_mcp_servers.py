"""MCP server services and pages against the real demo servers (stdio, and streamable HTTP on 127.0.0.1).

Host names go through the fake resolver of tests/support/fake_dns.py (never real DNS); stdio commands are
limited by the test settings to examples/ and tests/servers/.
"""

from __future__ import annotations

import math
import sys

import pytest
from django.core.exceptions import PermissionDenied
from django.urls import reverse
from django.utils import timezone

from core.models import AuditEvent
from servers import pool as rules_pool
from servers.models import McpServer
from servers.pool import stdio_refusal
from servers.services import (
    McpServerError,
    mcp_server_call_tool,
    mcp_server_create,
    mcp_server_delete,
    mcp_server_refresh_tools,
    mcp_server_update,
    tools_diff,
)
from tests.conftest import free_port
from tests.support.fake_dns import FAKE_DNS
from tests.support.mcp_servers import (
    EXAMPLES,
    HTMX,
    KB_SCRIPT,
    ORDER_SCRIPT,
    ROOT,
    confirmed,
    kb_server,
    server_form,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fake_dns", "close_web_pool_after_module")]

# --------------------------------------------------------------------------- services


def test_create_stores_names_only_and_is_audited(admin) -> None:
    server = kb_server(
        admin, env_names=["LLAMON_MCP_KB_KEY", "LLAMON_MCP_KB_KEY"], description="help articles"
    )
    assert server.env_names == ["LLAMON_MCP_KB_KEY"]
    event = AuditEvent.objects.get(action="mcp_server.create", object_id=str(server.pk))
    assert event.actor == admin
    assert event.after["command"] == sys.executable and event.after["args"] == [KB_SCRIPT]


def test_refresh_tools_over_stdio_stores_tools_schema_and_hash(kb) -> None:
    kb.refresh_from_db()
    tool = next(t for t in kb.tools if t["name"] == "search_docs")
    assert tool["input_schema"]["required"] == ["q"]
    assert "limit" in tool["input_schema"]["properties"]
    assert "help articles" in tool["description"]
    assert len(kb.tools_hash) == 64 and kb.tools_refreshed_at is not None
    assert kb.healthy is True
    assert AuditEvent.objects.filter(action="mcp_server.refresh_tools", object_id=str(kb.pk)).count() == 1


def test_refresh_reports_the_first_refresh_and_then_no_change(admin) -> None:
    server = kb_server(admin)
    first = mcp_server_refresh_tools(actor=admin, server=server)
    assert first.first and first.added == ["search_docs"]
    again = mcp_server_refresh_tools(actor=admin, server=server)
    assert not again.first and again.unchanged


def test_refresh_tools_over_http(admin, order_http) -> None:
    server = mcp_server_create(actor=admin, mcp_id="orders-http", transport="http", url=order_http)
    diff = mcp_server_refresh_tools(actor=admin, server=server)
    assert diff.added == ["get_order", "list_orders"]


def test_changing_the_command_re_registers_and_the_diff_shows_it(kb, admin) -> None:
    kb = mcp_server_update(actor=admin, server=kb, args=[ORDER_SCRIPT])
    diff = mcp_server_refresh_tools(actor=admin, server=kb)
    assert rules_pool.web_pool().spec("knowledge-base").args == [ORDER_SCRIPT]
    assert diff.added == ["get_order", "list_orders"] and diff.removed == ["search_docs"]
    event = AuditEvent.objects.filter(action="mcp_server.update", object_id=str(kb.pk)).get()
    assert event.before["args"] == [KB_SCRIPT] and event.after["args"] == [ORDER_SCRIPT]


def test_tools_diff_names_each_schema_change() -> None:
    old = [
        {"name": "a", "description": "x", "input_schema": {"properties": {"q": {"type": "string"}}}},
        {"name": "gone", "description": "", "input_schema": {}},
        {"name": "same", "description": "s", "input_schema": {"type": "object"}},
    ]
    new = [
        {
            "name": "a",
            "description": "y",
            "input_schema": {"properties": {"q": {"type": "integer"}, "n": {}}, "required": ["q"]},
        },
        {"name": "fresh", "description": "", "input_schema": {}},
        {"name": "same", "description": "s", "input_schema": {"type": "object"}},
    ]
    diff = tools_diff(old, new)
    assert diff.added == ["fresh"] and diff.removed == ["gone"]
    assert diff.changed == {
        "a": ["parameter 'n' added", "parameter 'q' changed", "'q' is now required", "description changed"]
    }


def test_failed_refresh_keeps_the_tools_and_records_the_error(kb, admin) -> None:
    port = free_port()  # nothing listens there
    kb = mcp_server_update(actor=admin, server=kb, transport="http", url=f"http://127.0.0.1:{port}/mcp")
    tools_before = kb.tools
    with pytest.raises(McpServerError, match="Could not list the tools of knowledge-base"):
        mcp_server_refresh_tools(actor=admin, server=kb)
    kb.refresh_from_db()
    assert kb.tools == tools_before
    assert kb.healthy is False and kb.last_error
    assert AuditEvent.objects.filter(action="mcp_server.refresh_tools_failed").exists()


def test_call_tool_with_a_korean_query(kb, editor) -> None:
    call = mcp_server_call_tool(
        actor=editor, server=kb, tool_name="search_docs", arguments={"q": "환불 규정"}
    )
    assert call.result["count"] >= 1 and call.result["results"][0]["doc_id"].startswith("KB-")
    assert call.latency_ms > 0
    # The raw reply is what the server sent: content blocks and the structured content.
    assert call.raw["isError"] is False
    assert call.raw["structuredContent"] == call.result
    assert call.raw["content"][0]["type"] == "text"
    event = AuditEvent.objects.get(action="mcp_server.call_tool")
    assert event.after == {"tool": "search_docs", "argument_names": ["q"]}


def test_call_tool_checks_the_schema_before_calling(kb, editor) -> None:
    with pytest.raises(McpServerError) as info:
        mcp_server_call_tool(actor=editor, server=kb, tool_name="search_docs", arguments={"limit": "many"})
    assert "'q' is a required property" in info.value.message
    assert "limit: 'many' is not of type 'integer'" in info.value.message
    assert not AuditEvent.objects.filter(action="mcp_server.call_tool").exists()


def test_a_tool_error_is_reported_in_words(kb, editor) -> None:
    with pytest.raises(McpServerError, match="The tool reported an error: .*limit must be between 1 and 10"):
        mcp_server_call_tool(
            actor=editor, server=kb, tool_name="search_docs", arguments={"q": "refund", "limit": 11}
        )


def test_calling_an_unknown_tool_lists_the_known_ones(kb, editor) -> None:
    with pytest.raises(McpServerError, match="has no tool 'nope'.*its tools: search_docs"):
        mcp_server_call_tool(actor=editor, server=kb, tool_name="nope", arguments={})


def test_a_viewer_cannot_call_a_tool(kb, make_user) -> None:
    with pytest.raises(PermissionDenied):
        mcp_server_call_tool(
            actor=make_user("viewer"), server=kb, tool_name="search_docs", arguments={"q": "x"}
        )


@pytest.mark.parametrize("role", ["editor", "viewer", None])
def test_services_refuse_a_stdio_server_from_a_non_admin(make_user, role) -> None:
    actor = make_user(role) if role else None
    with pytest.raises(PermissionDenied, match="Only an admin"):
        mcp_server_create(
            actor=actor, mcp_id="rce", transport="stdio", command=sys.executable, args=[KB_SCRIPT]
        )
    assert not McpServer.objects.exists()


def test_services_refuse_an_update_or_delete_from_an_editor(kb, editor) -> None:
    with pytest.raises(PermissionDenied):
        mcp_server_update(actor=editor, server=kb, command="/bin/sh")
    with pytest.raises(PermissionDenied):
        mcp_server_delete(actor=editor, server=kb)
    kb.refresh_from_db()
    assert kb.command == sys.executable


def test_duplicate_mcp_id_is_refused(kb, admin) -> None:
    with pytest.raises(McpServerError, match="already exists") as info:
        kb_server(admin)
    assert info.value.field == "mcp_id"


@pytest.mark.parametrize(
    ("env_names", "phrase"),
    [
        (["MY KEY"], "not an environment variable name"),
        (["TOKEN=abc123"], "never values"),
        (["1ABC"], "not an environment variable name"),
        (["SECRET_KEY"], "this app's own configuration or secrets"),
        (["DATABASE_URL"], "this app's own configuration or secrets"),
        (["LLAMON_ANYTHING"], "this app's own configuration or secrets"),
        (["OPENAI_API_KEY"], "not a variable the operator allows"),
    ],
)
def test_bad_env_names_are_refused(admin, env_names, phrase) -> None:
    with pytest.raises(McpServerError, match=phrase) as info:
        kb_server(admin, env_names=env_names)
    assert info.value.field == "env_names"


@pytest.mark.parametrize("headers", [["Authorization=Bearer abc"], ["X Key=TOKEN"], ["X-Key=SECRET_KEY"]])
def test_bad_header_names_are_refused(admin, headers) -> None:
    with pytest.raises(McpServerError) as info:
        mcp_server_create(
            actor=admin, mcp_id="h", transport="http", url="https://mcp.example.com/mcp", header_names=headers
        )
    assert info.value.field == "header_names"


@pytest.mark.parametrize("timeout_s", [0, -1, 600.5, math.nan, math.inf, "soon"])
def test_timeout_out_of_range_is_refused(admin, timeout_s) -> None:
    with pytest.raises(McpServerError, match="timeout") as info:
        kb_server(admin, timeout_s=timeout_s)
    assert info.value.field == "timeout_s"


@pytest.mark.parametrize(
    ("command", "args", "phrase"),
    [
        ("/bin/sh", ["-c", "id"], "outside the folders"),
        (sys.executable, ["-c", "import os; os.system('id')"], "options such as -c or -m"),
        (sys.executable, ["-m", "http.server"], "options such as -c or -m"),
        (sys.executable, [], "first argument must be that script"),
        (sys.executable, [str(ROOT / "manage.py")], "outside the folders"),
        (sys.executable, [str(EXAMPLES / "nope.py")], "does not exist"),
        (sys.executable, [str(EXAMPLES / ".." / ".." / ".." / ".." / "manage.py")], "outside the folders"),
        ("no-such-program-xyz", [], "was not found"),
    ],
)
def test_stdio_commands_outside_the_allow_list_are_refused_when_saved(admin, command, args, phrase) -> None:
    with pytest.raises(McpServerError, match=phrase):
        kb_server(admin, command=command, args=args)
    assert not McpServer.objects.exists()


def test_the_allow_list_accepts_demo_and_test_servers(settings) -> None:
    dirs = settings.LLAMON_STDIO_ALLOWED_DIRS
    assert stdio_refusal(sys.executable, [KB_SCRIPT], dirs) is None
    assert stdio_refusal("python3", [str(ROOT / "tests" / "servers" / "misbehaving.py")], dirs) is None
    assert stdio_refusal("/bin/sh", [], None) is None  # no allow-list configured: any command


def test_the_pool_refuses_a_stdio_command_outside_the_allow_list_on_connect(admin) -> None:
    # Saved behind the services' back (as an old row or a manual edit would be): the pool still refuses.
    server = McpServer.objects.create(mcp_id="sneaky", transport="stdio", command="/bin/echo", args=["hi"])
    with pytest.raises(McpServerError, match="not allowed by this pool's stdio allow-list"):
        mcp_server_refresh_tools(actor=admin, server=server)


def test_urls_are_checked_when_saved(admin, settings) -> None:
    with pytest.raises(McpServerError, match="metadata") as info:
        mcp_server_create(actor=admin, mcp_id="meta", transport="http", url="http://169.254.169.254/")
    assert info.value.field == "url"
    settings.LLAMON_ALLOW_PRIVATE_MCP = False
    with pytest.raises(McpServerError, match="loopback"):
        mcp_server_create(actor=admin, mcp_id="loop", transport="http", url="http://2130706433:8765/mcp")
    with pytest.raises(McpServerError, match="private"):
        mcp_server_create(
            actor=admin, mcp_id="internal", transport="http", url="http://internal.example.com/mcp"
        )
    assert not McpServer.objects.exists()


def test_urls_are_checked_again_on_connect_after_resolution(admin, settings, monkeypatch) -> None:
    settings.LLAMON_ALLOW_PRIVATE_MCP = False
    monkeypatch.setitem(FAKE_DNS, "moving.example.com", ["93.184.216.34"])
    server = mcp_server_create(
        actor=admin, mcp_id="moving", transport="http", url="http://moving.example.com/mcp"
    )
    # The name now points inside (DNS rebinding, or a record changed after the check at save time).
    monkeypatch.setitem(FAKE_DNS, "moving.example.com", ["10.0.0.7"])
    with pytest.raises(McpServerError, match="refused to connect.*10.0.0.7.*private"):
        mcp_server_refresh_tools(actor=admin, server=server)


def test_delete_is_audited_and_forgets_the_session(kb, admin) -> None:
    mcp_server_delete(actor=admin, server=kb)
    assert not McpServer.objects.exists()
    assert AuditEvent.objects.filter(action="mcp_server.delete").exists()


# --------------------------------------------------------------------------- pages


def test_server_list_page_and_partial(admin_client, kb) -> None:
    page = admin_client.get(reverse("servers:list"))
    assert page.status_code == 200
    html = page.content.decode()
    assert "<html" in html and 'id="server-table"' in html and "knowledge-base" in html
    assert reverse("servers:create") in html  # admins see "Add a server"
    partial = admin_client.get(reverse("servers:list"), **HTMX).content.decode()
    assert partial.lstrip().startswith('<table class="table" id="server-table">') and "<html" not in partial


def test_viewers_see_the_list_and_details_without_write_buttons(viewer_client, kb) -> None:
    html = viewer_client.get(reverse("servers:list")).content.decode()
    assert "knowledge-base" in html and reverse("servers:create") not in html
    detail = viewer_client.get(reverse("servers:detail", args=[kb.pk])).content.decode()
    assert "search_docs" in detail
    assert "Refresh tools" not in detail and reverse("servers:edit", args=[kb.pk]) not in detail
    assert reverse("servers:call", args=[kb.pk]) not in detail


def test_add_form_shows_the_command_line_before_saving(admin_client) -> None:
    url = reverse("servers:create")
    data = server_form(args=f"{KB_SCRIPT}\n--label\nhello world <b>")
    first = admin_client.post(url, data)
    html = first.content.decode()
    assert first.status_code == 200 and not McpServer.objects.exists()
    assert "Press Save again" in html
    # shlex-quoted (the argument with a space) and HTML-escaped (the angle brackets).
    assert f"{sys.executable} {KB_SCRIPT} --label &#x27;hello world &lt;b&gt;&#x27;" in html
    second = admin_client.post(url, confirmed(data))
    server = McpServer.objects.get(mcp_id="kb-form")
    assert second.status_code == 302 and second["Location"] == reverse("servers:detail", args=[server.pk])
    assert server.args == [KB_SCRIPT, "--label", "hello world <b>"]


def test_command_preview_partial_for_htmx(admin_client) -> None:
    response = admin_client.post(reverse("servers:create"), server_form(action="preview", mcp_id=""), **HTMX)
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="command-preview"') and "<html" not in html
    assert f"{sys.executable} {KB_SCRIPT}" in html
    assert f'name="confirmed_command" value="{sys.executable} {KB_SCRIPT}"' in html
    assert not McpServer.objects.exists()


def test_a_changed_command_must_be_seen_again(admin_client) -> None:
    data = confirmed(server_form())
    data["args"] = ORDER_SCRIPT  # changed after the preview
    response = admin_client.post(reverse("servers:create"), data)
    assert "Press Save again" in response.content.decode() and not McpServer.objects.exists()


def test_add_an_http_server(admin_client, order_http) -> None:
    data = server_form(
        mcp_id="orders",
        transport="http",
        url=order_http,
        command="",
        args="",
        header_names="X-Api-Key=LLAMON_MCP_ORDER_KEY",
    )
    response = admin_client.post(reverse("servers:create"), data)
    server = McpServer.objects.get(mcp_id="orders")
    assert response.status_code == 302
    assert (
        server.url == order_http
        and server.header_names == ["X-Api-Key=LLAMON_MCP_ORDER_KEY"]
        and server.command == ""
    )


@pytest.mark.parametrize(
    ("overrides", "field", "phrase"),
    [
        ({"transport": "http", "url": "not a url"}, "url", "spaces"),
        ({"transport": "http", "url": "ftp://mcp.example.com/"}, "url", "Only http:// and https://"),
        (
            {"transport": "http", "url": "http://169.254.169.254/latest/"},
            "url",
            "metadata address; it is always refused",
        ),
        ({"transport": "http", "url": "http://nowhere.example.com/mcp"}, "url", "does not resolve"),
        ({"transport": "http", "url": ""}, "url", "Enter the server&#x27;s URL"),
        ({"command": ""}, "command", "Enter the command to run"),
        ({"command": "/bin/sh", "args": "-c\nid"}, "command", "outside the folders"),
        ({"env_names": "LLAMON_MCP_KEY, API KEY=secret"}, "env_names", "never values"),
        ({"env_names": "SECRET_KEY"}, "env_names", "own configuration or secrets"),
        ({"timeout_s": "0"}, "timeout_s", "between 0.1 and 600 seconds"),
        ({"timeout_s": "601"}, "timeout_s", "between 0.1 and 600 seconds"),
        ({"mcp_id": "Bad Id!"}, "mcp_id", "lowercase letters"),
    ],
)
def test_bad_input_is_explained_and_the_input_is_kept(admin_client, overrides, field, phrase) -> None:
    data = confirmed(server_form(description="kept text 설명", **overrides))
    response = admin_client.post(reverse("servers:create"), data)
    html = response.content.decode()
    assert response.status_code == 200
    assert phrase in html, html[html.find("errorlist") - 200 : html.find("errorlist") + 400]
    assert f'id="field-{field}"' in html
    assert "kept text 설명" in html  # nothing typed is lost
    assert not McpServer.objects.exists()


def test_duplicate_mcp_id_in_the_form(admin_client, kb) -> None:
    response = admin_client.post(reverse("servers:create"), confirmed(server_form(mcp_id="knowledge-base")))
    assert "An MCP server with the id &#x27;knowledge-base&#x27; already exists" in response.content.decode()
    assert McpServer.objects.count() == 1


def test_an_editor_posting_a_stdio_server_gets_403_and_nothing_is_saved(editor_client) -> None:
    response = editor_client.post(
        reverse("servers:create"), confirmed(server_form(command="/bin/sh", args="-c\ntouch /tmp/pwned"))
    )
    assert response.status_code == 403
    assert not McpServer.objects.exists()


def test_anonymous_posting_a_stdio_server_goes_to_login_and_nothing_is_saved(client) -> None:
    response = client.post(reverse("servers:create"), confirmed(server_form()))
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    assert not McpServer.objects.exists()


def test_edit_keeps_the_confirmed_command_and_saves(admin_client, kb) -> None:
    page = admin_client.get(reverse("servers:edit", args=[kb.pk])).content.decode()
    assert f"{sys.executable} {KB_SCRIPT}" in page
    data = confirmed(server_form(mcp_id="knowledge-base", timeout_s="12.5", description="new"))
    response = admin_client.post(reverse("servers:edit", args=[kb.pk]), data)
    assert response.status_code == 302
    kb.refresh_from_db()
    assert kb.timeout_s == 12.5 and kb.description == "new"


def test_edit_with_a_changed_command_is_not_saved_until_seen(admin_client, kb) -> None:
    data = confirmed(server_form(mcp_id="knowledge-base"))
    data["args"] = ORDER_SCRIPT
    admin_client.post(reverse("servers:edit", args=[kb.pk]), data)
    kb.refresh_from_db()
    assert kb.args == [KB_SCRIPT]


def test_tool_descriptions_are_escaped(viewer_client) -> None:
    server = McpServer.objects.create(
        mcp_id="evil",
        transport="http",
        url="http://127.0.0.1:9/mcp",
        tools=[
            {
                "name": "<img src=x onerror=alert(1)>",
                "description": "<script>alert('pwned')</script> {{ request.user }} {% csrf_token %}",
                "input_schema": {
                    "properties": {"<b>x</b>": {"type": "string", "description": "<script>s()</script>"}}
                },
            }
        ],
        tools_refreshed_at=timezone.now(),
    )
    html = viewer_client.get(reverse("servers:detail", args=[server.pk])).content.decode()
    assert "<script>alert" not in html and "<img src=x" not in html and "<b>x</b>" not in html
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt; {{ request.user }} {% csrf_token %}" in html


def test_the_call_form_escapes_parameter_descriptions(editor_client) -> None:
    tool = {
        "name": "t",
        "description": "<script>d()</script>",
        "input_schema": {
            "properties": {"<b>p</b>": {"type": "string", "description": "<script>s()</script> {{ x }}"}}
        },
    }
    server = McpServer.objects.create(
        mcp_id="evil2", transport="http", url="http://127.0.0.1:9/mcp", tools=[tool]
    )
    html = editor_client.get(reverse("servers:call", args=[server.pk]) + "?tool=t").content.decode()
    assert "<script>" not in html.split("</head>", 1)[1].replace("<script src", "")
    assert "&lt;script&gt;s()&lt;/script&gt; {{ x }}" in html and "&lt;b&gt;p&lt;/b&gt;" in html


def test_refresh_without_javascript_redirects_with_a_summary(admin_client, admin) -> None:
    server = kb_server(admin)
    response = admin_client.post(reverse("servers:refresh", args=[server.pk]), follow=True)
    html = response.content.decode()
    assert "Tools refreshed for the first time: 1 found." in html
    assert "search_docs" in html and "First refresh" in html


def test_refresh_with_htmx_returns_the_tools_partial_with_the_diff(admin_client, kb, admin) -> None:
    mcp_server_update(actor=admin, server=kb, args=[ORDER_SCRIPT])
    response = admin_client.post(reverse("servers:refresh", args=[kb.pk]), **HTMX)
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="server-tools"') and "<html" not in html
    assert 'class="diff-added">added <code>get_order</code>' in html
    assert 'class="diff-removed">removed <code>search_docs</code>' in html


def test_refresh_failure_is_shown_and_the_tools_are_kept(admin_client, kb, admin) -> None:
    mcp_server_update(actor=admin, server=kb, transport="http", url=f"http://127.0.0.1:{free_port()}/mcp")
    html = admin_client.post(reverse("servers:refresh", args=[kb.pk]), **HTMX).content.decode()
    assert 'id="refresh-error"' in html and "Could not list the tools of knowledge-base" in html
    assert "search_docs" in html


def test_detail_page_and_partial(viewer_client, kb) -> None:
    html = viewer_client.get(reverse("servers:detail", args=[kb.pk])).content.decode()
    assert "<html" in html and "search_docs" in html and "&quot;required&quot;" in html
    partial = viewer_client.get(reverse("servers:detail", args=[kb.pk]), **HTMX).content.decode()
    assert partial.lstrip().startswith('<section id="server-tools"') and "<html" not in partial


def test_the_call_form_is_generated_from_the_schema(editor_client) -> None:
    schema = {
        "type": "object",
        "properties": {
            "q": {"type": "string"},
            "limit": {"type": "integer", "default": 3},
            "ratio": {"type": "number"},
            "exact": {"type": "boolean"},
            "mode": {"enum": ["fast", "slow"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "filters": {"type": "object"},
            "maybe": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        },
        "required": ["q", "mode"],
    }
    server = McpServer.objects.create(
        mcp_id="gen",
        transport="http",
        url="http://127.0.0.1:9/mcp",
        tools=[{"name": "t", "description": "", "input_schema": schema}],
    )
    html = editor_client.get(reverse("servers:call", args=[server.pk]) + "?tool=t").content.decode()
    assert 'type="text" name="arg_0"' in html and "required" in html  # q
    assert 'type="number" name="arg_1" value="3"' in html  # limit, its default
    assert 'name="arg_2" value="" step="any"' in html or 'name="arg_2" step="any"' in html  # ratio
    assert '<select name="arg_3"' in html and '<select name="arg_4"' in html  # boolean, enum
    assert '<textarea name="arg_5"' in html and '<textarea name="arg_6"' in html  # array, object as JSON
    assert 'type="number" name="arg_7"' in html  # Optional[int]
    assert html.count('class="required"') >= 2


def test_call_tool_page_shows_result_and_latency(editor_client, kb) -> None:
    url = reverse("servers:call", args=[kb.pk])
    data = {"tool": "search_docs", "arg_0": "건강검진 예약", "arg_1": "2"}
    html = editor_client.post(url, data).content.decode()
    assert "<html" in html and 'id="call-latency"' in html and " ms" in html
    assert "KB-003" in html and "건강검진" in html
    partial = editor_client.post(url, data, **HTMX).content.decode()
    assert partial.lstrip().startswith('<section id="tool-call"') and "<html" not in partial
    assert 'id="result-json"' in partial


def test_call_with_invalid_json_in_an_argument_keeps_the_input(editor_client) -> None:
    schema = {"properties": {"filters": {"type": "object"}}}
    server = McpServer.objects.create(
        mcp_id="j",
        transport="http",
        url="http://127.0.0.1:9/mcp",
        tools=[{"name": "t", "description": "", "input_schema": schema}],
    )
    html = editor_client.post(
        reverse("servers:call", args=[server.pk]), {"tool": "t", "arg_0": '{"a": 1,'}
    ).content.decode()
    assert (
        "This is not valid JSON: Expecting property name enclosed in double quotes (line 1, column 9)."
        in html
    )
    assert "{&quot;a&quot;: 1," in html
    assert not AuditEvent.objects.filter(action="mcp_server.call_tool").exists()


def test_call_with_arguments_failing_the_schema(editor_client) -> None:
    schema = {
        "properties": {"n": {"type": "integer", "maximum": 5}, "tags": {"type": "array"}},
        "required": ["n"],
    }
    server = McpServer.objects.create(
        mcp_id="s",
        transport="http",
        url="http://127.0.0.1:9/mcp",
        tools=[{"name": "t", "description": "", "input_schema": schema}],
    )
    url = reverse("servers:call", args=[server.pk])
    html = editor_client.post(url, {"tool": "t", "arg_0": "9", "arg_1": '{"not": "a list"}'}).content.decode()
    assert "n: 9 is greater than the maximum of 5" in html
    assert "tags: {&#x27;not&#x27;: &#x27;a list&#x27;} is not of type &#x27;array&#x27;" in html
    html = editor_client.post(url, {"tool": "t", "arg_0": "nine"}).content.decode()
    assert "Enter a whole number." in html
    html = editor_client.post(url, {"tool": "t", "arg_0": ""}).content.decode()
    assert "This field is required." in html
    assert not AuditEvent.objects.filter(action="mcp_server.call_tool").exists()


def test_call_page_for_an_unknown_tool_is_404_with_the_choices(editor_client, kb) -> None:
    response = editor_client.get(reverse("servers:call", args=[kb.pk]) + "?tool=nope")
    assert response.status_code == 404 and "search_docs" in response.content.decode()


def test_delete_asks_first_then_deletes(admin_client, kb) -> None:
    confirm = admin_client.get(reverse("servers:delete", args=[kb.pk]))
    assert confirm.status_code == 200 and "Delete <code>knowledge-base</code>?" in confirm.content.decode()
    assert McpServer.objects.filter(pk=kb.pk).exists()
    response = admin_client.post(reverse("servers:delete", args=[kb.pk]))
    assert response.status_code == 302 and response["Location"] == reverse("servers:list")
    assert not McpServer.objects.filter(pk=kb.pk).exists()


def test_an_editor_cannot_delete_or_refresh(editor_client, kb) -> None:
    assert editor_client.post(reverse("servers:delete", args=[kb.pk])).status_code == 403
    assert editor_client.post(reverse("servers:refresh", args=[kb.pk])).status_code == 403
    assert McpServer.objects.filter(pk=kb.pk).exists()


# --------------------------------------------------------------------------- tool-list caps

MISBEHAVING = str(ROOT / "tests" / "servers" / "misbehaving.py")


@pytest.mark.parametrize(
    ("args", "limits", "phrase"),
    [
        (
            ["--extra-tools", "60"],
            {"LLAMON_MCP_MAX_TOOLS": 50},
            "lists 74 tools and the limit is 50",
        ),  # 60 + its own 14
        (
            ["--extra-tools", "3", "--tool-description-bytes", "4000"],
            {"LLAMON_MCP_MAX_TOOLS_BYTES": 8000},
            "bytes and the limit is 8,000",
        ),
    ],
)
def test_a_tool_list_over_the_caps_is_refused_and_the_stored_tools_kept(
    admin, settings, args, limits, phrase
) -> None:
    server = mcp_server_create(
        actor=admin, mcp_id="misbehaving", transport="stdio", command=sys.executable, args=[MISBEHAVING]
    )
    mcp_server_refresh_tools(actor=admin, server=server)
    server.refresh_from_db()
    tools_before, hash_before = server.tools, server.tools_hash
    assert 5 < len(tools_before) < 20
    for name, value in limits.items():
        setattr(settings, name, value)
    server = mcp_server_update(actor=admin, server=server, args=[MISBEHAVING, *args])
    with pytest.raises(McpServerError, match=f"Did not store the tools of misbehaving: .*{phrase}") as caught:
        mcp_server_refresh_tools(actor=admin, server=server)
    assert "the tools stored before are kept" in caught.value.message
    server.refresh_from_db()
    assert (server.tools, server.tools_hash) == (tools_before, hash_before)
    assert server.healthy is False and phrase in server.last_error
    assert AuditEvent.objects.filter(action="mcp_server.refresh_tools_failed").exists()


def test_the_default_caps_are_1000_tools_and_2_mb(settings) -> None:
    assert (settings.LLAMON_MCP_MAX_TOOLS, settings.LLAMON_MCP_MAX_TOOLS_BYTES) == (1000, 2 * 1024 * 1024)
