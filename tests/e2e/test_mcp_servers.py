"""MCP server pages in a real browser: add the knowledge-base server, refresh its tools, call search_docs."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from accounts.services import language_set
from servers import pool as rules_pool
from servers.models import McpServer
from tests.e2e.conftest import screenshot

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

KB_SCRIPT = str(
    Path(__file__).resolve().parents[2]
    / "sdk"
    / "src"
    / "llamon_agent"
    / "demo_servers"
    / "knowledge_base.py"
)


@pytest.fixture(autouse=True)
def _fresh_pool() -> Iterator[None]:
    yield
    rules_pool.web_pool_close()  # stop the stdio child now, not at interpreter exit


def test_admin_adds_refreshes_and_calls_the_knowledge_base(page, logged_in) -> None:
    logged_in("admin")
    page.goto("/mcp/")
    page.click("text=Add a server")
    page.wait_for_url("**/mcp/new/")

    page.fill("#id_mcp_id", "knowledge-base")
    page.fill("#id_description", "Help articles in Korean and English (stdio demo).")
    page.check("input[name=transport][value=stdio]")
    page.fill("#id_command", sys.executable)
    page.fill("#id_args", KB_SCRIPT)
    # The full command line appears (htmx preview) before anything is saved.
    preview = page.locator("#command-line")
    preview.wait_for()
    page.wait_for_function(
        "script => document.querySelector('#command-line')?.textContent.includes(script)", arg=KB_SCRIPT
    )
    assert preview.inner_text() == f"{sys.executable} {KB_SCRIPT}"
    assert not McpServer.objects.exists()
    screenshot(page, "mcp-add-server")

    page.click("button[name=action][value=save]")
    page.wait_for_url("**/mcp/*/")
    server = McpServer.objects.get(mcp_id="knowledge-base")
    assert server.args == [KB_SCRIPT]

    # Saving listed the tools already ("First refresh"); a second refresh finds no change. Wait for
    # that answer: the section is swapped when it lands, closing any details opened before.
    assert "First refresh" in page.locator("#refresh-diff").inner_text()
    page.click("#refresh-tools")
    page.locator("#refresh-diff .diff-none").wait_for()
    assert page.locator(".tool-name").first.inner_text() == "search_docs"
    page.locator("#server-tools details summary").first.click()
    schema = page.locator("#server-tools pre.schema").first.inner_text()
    assert '"q"' in schema and '"required"' in schema
    screenshot(page, "mcp-server-detail")
    # The tool's declared result shape (outputSchema), shown before anything is called.
    output = page.locator("#server-tools details.output-schema").first
    output.locator("summary").click()
    assert '"doc_id"' in output.locator("pre.schema").inner_text()
    screenshot(page, "mcp-tool-output-schema", element=page.locator("#server-tools article").first)

    page.click("#server-tools a:has-text('Call')")
    page.wait_for_url("**/call/?tool=search_docs")
    page.get_by_label("q").fill("환불 규정 알려줘")
    page.get_by_label("limit").fill("2")
    page.click("#call-tool")
    result = page.locator("#result-json")
    result.wait_for()
    text = result.inner_text()
    assert '"doc_id": "KB-001"' in text and "환불" in text
    assert page.locator("#call-latency").inner_text().endswith(" ms")
    page.get_by_text("Raw reply").click()
    assert '"structuredContent"' in page.locator("#raw-json").inner_text()
    screenshot(page, "mcp-call-tool")
    assert page.locator("#output-schema summary").inner_text() == "Output schema (the shape of its result)"

    language_set(user=get_user_model().objects.get(username__startswith="admin-"), language="ko")
    page.reload()
    assert page.locator("#output-schema summary").inner_text() == "출력 스키마 (결과의 형태)"
    page.locator("#output-schema summary").click()
    assert '"doc_id"' in page.locator("#output-schema pre.schema").inner_text()


def test_inspector_lists_tools_on_save_and_calls_with_raw_json_and_history(page, logged_in) -> None:
    logged_in("admin")
    page.goto("/mcp/new/")
    page.fill("#id_mcp_id", "kb-inspect")
    page.check("input[name=transport][value=stdio]")
    page.fill("#id_command", sys.executable)
    page.fill("#id_args", KB_SCRIPT)
    page.wait_for_function(
        "script => document.querySelector('#command-line')?.textContent.includes(script)", arg=KB_SCRIPT
    )
    page.click("button[name=action][value=save]")
    page.wait_for_url("**/mcp/*/")
    # The tools are there at once: no "Refresh tools" needed.
    assert page.locator(".tool-name").first.inner_text() == "search_docs"
    assert "it offers 1 tool." in page.locator("#messages").inner_text()
    assert page.locator("#server-stderr").is_visible()  # an admin sees the stdio server's stderr box

    page.click("#server-tools a:has-text('Call')")
    page.wait_for_url("**/call/?tool=search_docs")
    page.get_by_label("q").fill("환불")
    page.get_by_label("limit").fill("2")
    box = page.locator("#id_arguments_raw")
    assert not box.is_visible()
    page.check("#mode-json")  # the JSON box opens with what the form held, in the schema's order
    assert box.is_visible() and not page.get_by_label("q").is_visible()
    assert json.loads(box.input_value()) == {"q": "환불", "limit": 2}

    broken = '{"limit": 1, "q": "환불",'
    box.fill(broken)
    page.click("#call-tool")
    errors = page.locator("#json-errors")
    errors.wait_for()
    assert "This is not valid JSON" in errors.inner_text()
    assert page.locator("#id_arguments_raw").input_value() == broken  # kept as typed
    page.check("#mode-form")  # invalid JSON leaves the form as it was
    assert page.get_by_label("q").input_value() == "환불"
    page.check("#mode-json")
    assert page.locator("#id_arguments_raw").input_value() == broken  # and the JSON as typed

    page.locator("#id_arguments_raw").fill('{"limit": "two", "q": "환불"}')
    page.click("#call-tool")
    expect(page.locator("#json-errors")).to_contain_text("do not fit the tool's input schema")
    assert "limit: 'two' is not of type 'integer'" in page.locator("#json-errors").inner_text()

    page.locator("#id_arguments_raw").fill('{"limit": 1, "q": "환불"}')
    page.click("#call-tool")
    page.locator("#result-json").wait_for()
    assert '"doc_id": "KB-001"' in page.locator("#result-json").inner_text()
    entry = page.locator("#call-history .history-entry").first
    entry.wait_for()
    entry.locator("summary").click()
    wire = entry.locator("pre.wire")
    request, reply = wire.nth(0).inner_text(), wire.nth(1).inner_text()
    assert '"method": "tools/call"' in request and request.index('"limit"') < request.index('"q"')
    assert '"result"' in reply and "KB-001" in reply
    page.check("#mode-form")  # valid JSON fills the form
    assert page.get_by_label("limit").input_value() == "1"
    page.check("#mode-json")
    screenshot(page, "mcp-inspector")
