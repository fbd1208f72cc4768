"""The MCP inspector parts of the server pages, against the real demo servers (stdio and streamable HTTP).

Tools listed as soon as a server is saved; raw-JSON arguments beside the schema form; each
person's call history with the JSON-RPC messages; the stdio server's stderr for admins only.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from django.core.exceptions import PermissionDenied
from django.urls import reverse

from servers import services
from servers.models import McpServer, ToolCallRecord
from servers.services import mcp_server_call_tool, mcp_server_create, mcp_server_refresh_tools
from tests.conftest import free_port
from tests.support.mcp_servers import HTMX, confirmed, server_form

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fake_dns", "close_web_pool_after_module")]

MISBEHAVING = str(Path(__file__).resolve().parents[1] / "servers" / "misbehaving.py")
LEAKY = str(Path(__file__).resolve().parents[1] / "servers" / "leaky_stderr.py")


def _call_url(server: McpServer, tool: str = "search_docs") -> str:
    return reverse("servers:call", args=[server.pk]) + f"?tool={tool}"


def _post_call(client, server: McpServer, **data: str):
    return client.post(reverse("servers:call", args=[server.pk]), {"tool": "search_docs", **data})


# --------------------------------------------------------------------------- 1. tools listed on save


def test_saving_an_http_server_lists_its_tools_at_once(admin_client, order_http) -> None:
    data = server_form(mcp_id="orders", transport="http", url=order_http, command="", args="")
    response = admin_client.post(reverse("servers:create"), data, follow=True)
    server = McpServer.objects.get(mcp_id="orders")
    assert [t["name"] for t in server.tools] == ["get_order", "list_orders"]
    html = response.content.decode()
    assert "Saved orders: it offers 2 tools." in html and 'class="tool-name">get_order<' in html


def test_saving_a_stdio_server_lists_its_tools_at_once(admin_client) -> None:
    response = admin_client.post(reverse("servers:create"), confirmed(server_form()), follow=True)
    server = McpServer.objects.get(mcp_id="kb-form")
    assert [t["name"] for t in server.tools] == ["search_docs"] and server.healthy is True
    assert "it offers 1 tool." in response.content.decode()


def test_an_unreachable_server_is_saved_with_why_and_how_to_retry(admin_client) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"  # nothing listens there
    data = server_form(mcp_id="down", transport="http", url=url, command="", args="")
    response = admin_client.post(reverse("servers:create"), data, follow=True)
    assert response.status_code == 200
    server = McpServer.objects.get(mcp_id="down")
    assert server.tools == [] and server.healthy is False
    html = response.content.decode()
    assert "Saved down, but its tools could not be listed. Could not list the tools of down:" in html
    assert "All connection attempts failed. Once the server is running and reachable, " in html
    assert "press &quot;Refresh tools&quot; on this page to try again" in html


def test_editing_a_server_lists_the_tools_of_its_new_target(admin_client, admin, order_http) -> None:
    server = mcp_server_create(
        actor=admin, mcp_id="orders", transport="http", url=f"http://127.0.0.1:{free_port()}/mcp"
    )
    data = server_form(mcp_id="orders", transport="http", url=order_http, command="", args="")
    admin_client.post(reverse("servers:edit", args=[server.pk]), data)
    server.refresh_from_db()
    assert [t["name"] for t in server.tools] == ["get_order", "list_orders"]


# --------------------------------------------------------------------------- 2. raw JSON arguments


def test_raw_json_arguments_are_sent_in_the_order_typed(editor_client, kb) -> None:
    raw = '{"limit": 1, "q": "환불 규정"}'
    response = _post_call(editor_client, kb, mode="json", arguments_raw=raw)
    html = response.content.decode()
    assert response.status_code == 200 and 'id="result-json"' in html and "KB-" in html
    record = ToolCallRecord.objects.get(server=kb)
    request = record.messages[0]["text"]
    assert request.index('"limit"') < request.index('"q"')  # the typed order, not the schema's (q, limit)
    assert 'name="mode" value="json" id="mode-json" checked' in html  # the page stays in JSON mode


@pytest.mark.parametrize(
    ("raw", "phrase"),
    [
        (
            '{"q": "환불", ',
            "This is not valid JSON: Expecting property name enclosed in double quotes (line 1",
        ),
        ('{"limit": "two"}', "These arguments do not fit the tool&#x27;s input schema:"),
        ('{"q": 5}', "q: 5 is not of type &#x27;string&#x27;"),
        ("[1, 2]", "The arguments must be a JSON object ({...}), not an array."),
        ("   ", "Type the arguments as a JSON object"),
        ('{"q": NaN}', "NaN is not a JSON number"),
    ],
)
def test_bad_raw_json_is_explained_in_place_and_kept(editor_client, kb, raw, phrase) -> None:
    response = _post_call(editor_client, kb, mode="json", arguments_raw=raw, arg_0="typed in the form")
    html = response.content.decode()
    assert response.status_code == 200
    assert phrase in html, html[html.find("json-errors") - 100 : html.find("json-errors") + 600]
    assert 'id="json-errors"' in html
    from django.utils.html import escape

    assert f">\n{escape(raw)}</textarea>" in html  # the JSON as typed
    assert 'value="typed in the form"' in html  # and what was typed in the other mode
    assert not ToolCallRecord.objects.exists()  # nothing was called


def test_the_schema_check_names_a_missing_required_argument(editor_client, kb) -> None:
    html = _post_call(editor_client, kb, mode="json", arguments_raw='{"limit": 2}').content.decode()
    assert "&#x27;q&#x27; is a required property" in html


def test_form_mode_ignores_the_json_box_and_keeps_it(editor_client, kb) -> None:
    response = _post_call(editor_client, kb, mode="form", arg_0="환불", arguments_raw="{not json")
    html = response.content.decode()
    assert 'id="result-json"' in html and 'id="json-errors"' not in html
    assert ">\n{not json</textarea>" in html


# --------------------------------------------------------------------------- 3. call history


def test_each_call_from_the_page_is_kept_with_its_json_rpc_messages(editor_client, kb) -> None:
    _post_call(editor_client, kb, arg_0="환불")
    record = ToolCallRecord.objects.get(server=kb)
    assert record.ok and record.tool_name == "search_docs" and record.latency_ms > 0
    assert [m["direction"] for m in record.messages] == ["sent", "received"]
    assert '"method": "tools/call"' in record.messages[0]["text"]
    assert '"jsonrpc": "2.0"' in record.messages[1]["text"] and '"result"' in record.messages[1]["text"]
    html = editor_client.get(_call_url(kb)).content.decode()
    assert f'id="history-{record.pk}"' in html and "→ sent" in html and "← received" in html


def test_the_htmx_answer_also_refreshes_the_history(editor_client, kb) -> None:
    html = _post_call(editor_client, kb, arg_0="환불", **{}).content.decode()  # full page first
    assert 'id="call-history"' in html
    partial = editor_client.post(
        reverse("servers:call", args=[kb.pk]), {"tool": "search_docs", "arg_0": "배송"}, **HTMX
    ).content.decode()
    assert partial.lstrip().startswith('<section id="tool-call"')
    assert 'id="call-history" class="card call-history" hx-swap-oob="true"' in partial
    assert partial.count('class="history-entry"') == 2


def test_history_is_newest_first_bounded_and_per_person(client, make_user, kb, monkeypatch) -> None:
    monkeypatch.setattr(services, "HISTORY_MAX_ENTRIES", 3)
    alice, bob = make_user("editor"), make_user("editor")
    for query in ("one", "two", "three", "four"):
        mcp_server_call_tool(
            actor=alice, server=kb, tool_name="search_docs", arguments={"q": query}, record=True
        )
    mcp_server_call_tool(
        actor=bob, server=kb, tool_name="search_docs", arguments={"q": "bob-only"}, record=True
    )
    kept = ToolCallRecord.objects.filter(user=alice).order_by("-created_at", "-id")
    assert ['"q": "four"' in r.messages[0]["text"] for r in kept] == [True, False, False]
    assert len(kept) == 3 and not any('"one"' in r.messages[0]["text"] for r in kept)
    client.force_login(alice)
    html = client.get(_call_url(kb)).content.decode()
    assert html.index("&quot;four&quot;") < html.index("&quot;three&quot;") < html.index("&quot;two&quot;")
    assert "bob-only" not in html  # another person's calls (and arguments) are never shown
    client.force_login(bob)
    assert "four" not in client.get(_call_url(kb)).content.decode()


def test_long_messages_are_cut_and_say_so(editor_client, kb, monkeypatch) -> None:
    monkeypatch.setattr(services, "HISTORY_MAX_MESSAGE_CHARS", 60)
    _post_call(editor_client, kb, arg_0="환불")
    reply = ToolCallRecord.objects.get().messages[1]
    assert reply["truncated"] and len(reply["text"]) == 60 and reply["chars"] > 60
    html = editor_client.get(_call_url(kb)).content.decode()
    assert f"(first 60 of {reply['chars']} characters)" in html


def test_secret_values_never_reach_the_history(admin, editor, monkeypatch) -> None:
    secret = "hunter2-secret-value-77"
    monkeypatch.setenv("LLAMON_MCP_INSPECT_KEY", secret)
    server = mcp_server_create(
        actor=admin,
        mcp_id="mis",
        transport="stdio",
        command=sys.executable,
        args=[MISBEHAVING],
        env_names=["LLAMON_MCP_INSPECT_KEY"],
    )
    mcp_server_refresh_tools(actor=admin, server=server)
    # A server that sends back what it was given: the value shows on neither side of the exchange.
    mcp_server_call_tool(
        actor=editor, server=server, tool_name="echo", arguments={"value": f"key={secret}"}, record=True
    )
    record = ToolCallRecord.objects.get()
    texts = " ".join(m["text"] for m in record.messages)
    assert secret not in texts and texts.count("[redacted]") >= 2


def test_failed_calls_are_kept_with_the_error_and_the_reply(admin, editor) -> None:
    server = mcp_server_create(
        actor=admin, mcp_id="mis", transport="stdio", command=sys.executable, args=[MISBEHAVING]
    )
    mcp_server_refresh_tools(actor=admin, server=server)
    with pytest.raises(services.McpServerError):
        mcp_server_call_tool(
            actor=editor, server=server, tool_name="fail", arguments={"message": "kaputt"}, record=True
        )
    record = ToolCallRecord.objects.get()
    assert not record.ok and "The tool reported an error" in record.error
    assert '"isError": true' in record.messages[1]["text"] and "kaputt" in record.messages[1]["text"]


def test_calls_outside_the_page_are_not_kept(kb, editor) -> None:
    mcp_server_call_tool(actor=editor, server=kb, tool_name="search_docs", arguments={"q": "x"})
    assert not ToolCallRecord.objects.exists()


# --------------------------------------------------------------------------- 4. stderr for admins


@pytest.fixture
def noisy(admin, editor) -> McpServer:
    server = mcp_server_create(
        actor=admin, mcp_id="mis", transport="stdio", command=sys.executable, args=[MISBEHAVING]
    )
    mcp_server_refresh_tools(actor=admin, server=server)
    mcp_server_call_tool(actor=editor, server=server, tool_name="stderr_noise", arguments={"lines": 3})
    return server


def _wait_for_stderr(admin, server: McpServer, needle: str) -> None:
    from tests.engine.conftest import wait_until

    wait_until(
        lambda: any(
            needle in line for line in services.mcp_server_stderr_tail(actor=admin, server=server) or []
        )
    )


def test_an_admin_sees_the_stdio_servers_stderr(admin_client, admin, noisy) -> None:
    _wait_for_stderr(admin, noisy, "noise line 2")
    html = admin_client.get(reverse("servers:detail", args=[noisy.pk])).content.decode()
    assert 'id="server-stderr"' in html and "noise line 2 " in html


@pytest.mark.parametrize("role", ["editor", "viewer"])
def test_editors_and_viewers_never_see_the_stderr(client, make_user, admin, noisy, role) -> None:
    _wait_for_stderr(admin, noisy, "noise line 2")
    client.force_login(make_user(role))
    html = client.get(reverse("servers:detail", args=[noisy.pk])).content.decode()
    assert "noise line" not in html and 'id="server-stderr"' not in html
    with pytest.raises(PermissionDenied):
        services.mcp_server_stderr_tail(actor=make_user(role), server=noisy)


def test_the_stderr_shown_is_redacted(admin_client, admin, editor, monkeypatch) -> None:
    secret = "leaked-value-0042xyz"
    monkeypatch.setenv("LLAMON_MCP_LEAK_KEY", secret)
    server = mcp_server_create(
        actor=admin,
        mcp_id="leaky",
        transport="stdio",
        command=sys.executable,
        args=[LEAKY],
        env_names=["LLAMON_MCP_LEAK_KEY"],
    )
    mcp_server_refresh_tools(actor=admin, server=server)
    with pytest.raises(services.McpServerError):
        mcp_server_call_tool(actor=editor, server=server, tool_name="leak", arguments={})
    _wait_for_stderr(admin, server, "stderr-canary")
    html = admin_client.get(reverse("servers:detail", args=[server.pk])).content.decode()
    assert "stderr-canary" in html and "[redacted]" in html
    assert secret not in html and "sk-live-0123456789abcdefFAKE" not in html


def test_an_http_server_has_no_stderr_section(admin_client, admin, order_http) -> None:
    server = mcp_server_create(actor=admin, mcp_id="orders", transport="http", url=order_http)
    html = admin_client.get(reverse("servers:detail", args=[server.pk])).content.decode()
    assert 'id="server-stderr"' not in html


def test_a_result_over_the_cap_is_shown_cut_with_its_full_size(admin, editor_client) -> None:
    server = mcp_server_create(
        actor=admin, mcp_id="mis", transport="stdio", command=sys.executable, args=[MISBEHAVING]
    )
    mcp_server_refresh_tools(actor=admin, server=server)
    data = {"tool": "flood_text", "mode": "json", "arguments_raw": '{"n_bytes": 5000000}'}
    response = editor_client.post(reverse("servers:call", args=[server.pk]), data)
    html = response.content.decode()
    assert response.status_code == 200 and 'id="result-json"' in html
    assert len(response.content) < 1024 * 1024, len(response.content)  # result and raw reply, both cut
    assert "The tool returned 5,000,000 bytes: only the first 262,144 were kept" in html
    korean = editor_client.post(reverse("servers:call", args=[server.pk]), data, HTTP_ACCEPT_LANGUAGE="ko")
    assert "도구가 5,000,000바이트를 반환했습니다" in korean.content.decode()


# --------------------------------------------------------------------------- 5. output schemas


def test_output_schemas_are_stored_shown_and_a_result_off_its_schema_is_a_warning(
    admin, admin_client, editor_client
) -> None:
    server = mcp_server_create(
        actor=admin, mcp_id="mis", transport="stdio", command=sys.executable, args=[MISBEHAVING]
    )
    mcp_server_refresh_tools(actor=admin, server=server)
    server.refresh_from_db()
    tools = {t["name"]: t for t in server.tools}
    assert tools["off_schema"]["output_schema"]["properties"] == {
        "total": {"title": "Total", "type": "integer"}
    }
    assert "output_schema" not in tools["echo_text"]  # no schema declared: none stored
    detail = admin_client.get(reverse("servers:detail", args=[server.pk])).content.decode()
    assert detail.count('class="output-schema"') == sum(1 for t in server.tools if t.get("output_schema"))

    url = reverse("servers:call", args=[server.pk])
    page = editor_client.get(url, {"tool": "off_schema"}).content.decode()
    assert 'id="output-schema"' in page and "&quot;total&quot;" in page
    data = {"tool": "off_schema", "mode": "json", "arguments_raw": "{}"}
    html = editor_client.post(url, data).content.decode()
    assert (
        'id="result-warnings"' in html
        and "total: &#x27;twelve&#x27; is not of type &#x27;integer&#x27;" in html
    )
    assert "&quot;twelve&quot;" in html  # the result is shown as sent, not refused
    korean = editor_client.post(url, data, HTTP_ACCEPT_LANGUAGE="ko").content.decode()
    assert 'id="result-warnings"' in korean and "출력 스키마" in korean
    scalar = editor_client.post(url, {"tool": "count", "mode": "json", "arguments_raw": '{"n": 7}'})
    assert '<pre class="code result" id="result-json">7</pre>' in scalar.content.decode()
