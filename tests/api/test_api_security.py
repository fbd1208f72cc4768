"""Security through the API: replays of MCP-dashboard RCE requests, stdio child env, hostile MCP URLs.

Host names resolve only through the fake resolver (FAKE_DNS of tests/support/fake_dns.py);
all traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import os
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from servers import pool as rules_pool
from servers.models import McpServer
from tests.support.fake_dns import FAKE_DNS

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
MISBEHAVING = str(ROOT / "tests" / "servers" / "misbehaving.py")


@pytest.fixture(autouse=True)
def _close_pool_after() -> Iterator[None]:
    yield
    rules_pool.web_pool_close()  # stop any stdio child a test started


def _children() -> set[int]:
    """The pids of this process's child processes (read from /proc)."""
    me, found = os.getpid(), set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                found.add(int(entry.name))
    return found


# --- Replays of the published MCP-dashboard RCE request shapes --------------------------------


@pytest.fixture
def marker(tmp_path) -> Path:
    return tmp_path / "pwned"


def _stdio_body(marker: Path, mcp_id: str = "pwn") -> dict[str, Any]:
    return {"mcp_id": mcp_id, "transport": "stdio", "command": "/bin/sh", "args": ["-c", f"touch {marker}"]}


@pytest.mark.parametrize(
    "principal", ["anonymous", "session:viewer", "session:editor", "token:viewer", "token:editor"]
)
def test_a_stdio_command_from_a_non_admin_is_refused_and_nothing_runs(
    principal, caller, marker, sample
) -> None:
    who = caller(principal)
    expected = 401 if principal == "anonymous" else 403
    before = _children()
    server = sample["server"]
    attempts = [
        who.post("/api/mcp-servers", _stdio_body(marker)),
        # Turn an existing http server into the command, then ask for its tools / call a tool.
        who.patch(
            f"/api/mcp-servers/{server.pk}",
            {"transport": "stdio", "command": "/bin/sh", "args": ["-c", f"touch {marker}"]},
        ),
        who.post(f"/api/mcp-servers/{server.pk}/refresh"),
        who.post(f"/api/mcp-servers/{server.pk}/call", {"tool": "get_order", "arguments": {"query": "x"}})
        if principal in ("anonymous", "session:viewer", "token:viewer")
        else None,
    ]
    for response in filter(None, attempts):
        assert response.status_code == expected, response.content
        assert response.json()["detail"]
    assert not McpServer.objects.filter(transport="stdio").exists()
    assert not marker.exists()
    assert _children() <= before


def test_an_editor_calling_a_tool_cannot_turn_it_into_a_command(caller, marker, sample) -> None:
    editor = caller("token:editor")
    before = _children()
    response = editor.post(
        f"/api/mcp-servers/{sample['server'].pk}/call", {"tool": "sh", "arguments": {"c": f"touch {marker}"}}
    )
    assert response.status_code == 422  # no such tool; nothing is started for an unknown tool
    assert "order-service has no tool 'sh' (its tools: " in response.json()["detail"]
    assert not marker.exists() and _children() <= before


def test_a_cross_site_request_riding_an_admin_session_is_refused(make_user, marker) -> None:
    # The drive-by shape: an admin's browser visits a hostile page that POSTs to the dashboard.
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(make_user("admin"))
    before = _children()
    response = browser.post("/api/mcp-servers", _stdio_body(marker), content_type="application/json")
    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]
    assert not McpServer.objects.exists() and not marker.exists() and _children() <= before


def test_an_admin_stdio_command_outside_the_allow_list_is_refused(caller, marker) -> None:
    before = _children()
    response = caller("token:admin").post("/api/mcp-servers", _stdio_body(marker))
    assert response.status_code == 422
    assert response.json()["field"] == "command" and "outside the folders" in response.json()["detail"]
    assert not marker.exists() and _children() <= before


@pytest.mark.parametrize("principal", ["anonymous", "session:editor", "token:editor"])
def test_mcp_inspector_proxy_shapes_are_not_served(principal, caller, marker) -> None:
    # MCP Inspector's proxy (CVE-2025-49596) spawned `command` from a GET; llamon-web has no such
    # endpoint: every shape is refused before anything could look at its parameters.
    who = caller(principal)
    query = urllib.parse.urlencode(
        {"transportType": "stdio", "command": "/bin/sh", "args": f"-c touch {marker}"}
    )
    before = _children()
    for method, path in [
        ("get", f"/stdio?{query}"),
        ("get", f"/sse?{query}"),
        ("post", f"/message?sessionId=1&{query}"),
        ("get", f"/api/stdio?{query}"),
        ("get", f"/api/sse?{query}"),
        ("post", f"/api/mcp?{query}"),
        ("post", f"/api/mcp-servers?{query}"),
    ]:
        response = who.call(method, path, json={} if method == "post" else None)
        # /api/mcp is the workbench's own MCP endpoint (docs/mcp-endpoint.md): it spawns nothing and
        # ignores the query; a token without the MCP Accept header gets 406 Not Acceptable.
        refused = (
            (401, 403, 404, 405, 422, 406) if path.startswith("/api/mcp?") else (401, 403, 404, 405, 422)
        )
        assert response.status_code in refused, (path, response.status_code)
        if path.startswith("/api/mcp-servers"):
            assert response.status_code == (401 if principal == "anonymous" else 403)
    assert not marker.exists() and _children() <= before
    assert not McpServer.objects.exists()


def test_the_server_page_refuses_a_non_admin_stdio_post(client, make_user, marker) -> None:
    form = {
        "mcp_id": "pwn",
        "transport": "stdio",
        "command": "/bin/sh",
        "args": f"-c\ntouch {marker}",
        "timeout_s": "30",
        "enabled": "on",
        "confirmed_command": f"/bin/sh -c 'touch {marker}'",
    }
    assert client.post("/mcp/new/", form).status_code == 302  # anonymous: to the login page
    client.force_login(make_user("editor"))
    assert client.post("/mcp/new/", form).status_code == 403
    assert not McpServer.objects.exists() and not marker.exists()


def test_a_stdio_child_gets_only_the_env_vars_its_server_names(caller, monkeypatch) -> None:
    monkeypatch.setenv("SECRET_KEY", "s" * 60)
    monkeypatch.setenv("DATABASE_URL", "postgres://user:secret@db/llamon")
    monkeypatch.setenv("LLAMON_MCP_ORDER_API_KEY", "k-123")
    admin = caller("token:admin")
    created = admin.post(
        "/api/mcp-servers",
        {
            "mcp_id": "envcheck",
            "transport": "stdio",
            "command": sys.executable,
            "args": [MISBEHAVING],
            "env_names": ["LLAMON_MCP_ORDER_API_KEY"],
            "timeout_s": 20,
        },
    )
    assert created.status_code == 201, created.content
    server_id = created.json()["id"]
    assert admin.post(f"/api/mcp-servers/{server_id}/refresh").status_code == 200
    called = admin.post(f"/api/mcp-servers/{server_id}/call", {"tool": "whoami", "arguments": {}})
    assert called.status_code == 200, called.content
    names = set(called.json()["result"]["env"])
    assert "LLAMON_MCP_ORDER_API_KEY" in names
    assert not names & {"SECRET_KEY", "DATABASE_URL", "DJANGO_SETTINGS_MODULE", "LLAMON_VAR_DIR"}
    # Python itself may set LC_CTYPE when it coerces the C locale.
    assert names - {"PATH", "HOME", "LLAMON_MCP_ORDER_API_KEY", "LC_CTYPE"} == set()


def test_an_app_secret_cannot_be_named_for_a_stdio_child(caller) -> None:
    response = caller("token:admin").post(
        "/api/mcp-servers",
        {
            "mcp_id": "leak",
            "transport": "stdio",
            "command": sys.executable,
            "args": [MISBEHAVING],
            "env_names": ["SECRET_KEY"],
        },
    )
    assert response.status_code == 422 and response.json()["field"] == "env_names"


# --- Hostile MCP URLs through the API (LLAMON_ALLOW_PRIVATE_MCP off) ------------------------------

HOSTILE_URLS: list[tuple[str, str]] = [
    # loopback spellings
    ("http://127.0.0.1:8765/mcp", "loopback"),
    ("http://127.1/mcp", "loopback"),
    ("http://2130706433/mcp", "loopback"),
    ("http://0177.0.0.1/mcp", "loopback"),
    ("http://0x7f000001/mcp", "loopback"),
    ("http://[::1]/mcp", "loopback"),
    ("http://[::ffff:127.0.0.1]/mcp", "loopback"),
    ("http://0.0.0.0:8000/mcp", "loopback"),
    ("http://localhost:8765/mcp", "loopback"),
    ("http://api.localhost/mcp", "loopback"),
    ("http://loop.example.com/mcp", "loopback"),  # a name that resolves to 127.0.0.1
    ("http://rebind.example.com/mcp", "loopback"),  # one public and one loopback address
    ("http://v6loop.example.com/mcp", "loopback"),
    # metadata and link-local
    ("http://169.254.169.254/latest/meta-data/", "metadata"),
    ("http://[fd00:ec2::254]/", "metadata"),
    ("http://100.100.100.200/", "metadata"),
    ("http://metadata.google.internal/computeMetadata/v1/", "metadata"),
    ("http://meta.example.com/", "metadata"),
    ("http://169.254.1.1/", "link-local"),
    ("http://[fe80::1]/", "link-local"),
    # private ranges
    ("http://10.0.0.5/mcp", "private"),
    ("http://192.168.1.10/mcp", "private"),
    ("http://172.16.0.1/mcp", "private"),
    ("http://internal.example.com/mcp", "private"),
    ("http://cgnat.example.com/mcp", "private"),
    ("http://ula.example.com/mcp", "private"),
    ("http://mapped.example.com/mcp", "private"),
    # other schemes, credentials, names that do not resolve
    ("file:///etc/passwd", "Only http"),
    ("gopher://127.0.0.1:6379/_FLUSHALL", "Only http"),
    ("ftp://mcp.example.com/mcp", "Only http"),
    ("dict://127.0.0.1:11211/stat", "Only http"),
    ("//mcp.example.com/mcp", "no scheme"),
    ("http://admin:pw@mcp.example.com/mcp", "user name or password"),
    ("http://nx.example.com/mcp", "does not resolve"),
    ("http://empty.example.com/mcp", "does not resolve"),
]


def test_there_are_at_least_25_hostile_urls() -> None:
    assert len(HOSTILE_URLS) >= 25


@pytest.fixture
def private_off(settings) -> None:
    settings.LLAMON_ALLOW_PRIVATE_MCP = False


@pytest.mark.parametrize(("url", "phrase"), HOSTILE_URLS)
def test_a_hostile_url_is_refused_on_create_and_update(
    url: str, phrase: str, private_off, caller, api_servers
) -> None:
    admin = caller("token:admin")
    created = admin.post("/api/mcp-servers", {"mcp_id": "hostile", "transport": "http", "url": url})
    assert created.status_code == 422, created.content
    body = created.json()
    assert body["field"] == "url" and phrase.lower() in body["detail"].lower(), body
    server = api_servers["order-service"]
    updated = admin.patch(f"/api/mcp-servers/{server.pk}", {"url": url})
    assert updated.status_code == 422 and updated.json()["field"] == "url"
    server.refresh_from_db()
    assert server.url == "http://127.0.0.1:9/mcp"  # unchanged
    assert not McpServer.objects.filter(mcp_id="hostile").exists()


def test_a_public_name_that_later_resolves_to_loopback_is_refused_on_connect(
    private_off, caller, monkeypatch
) -> None:
    admin = caller("token:admin")
    created = admin.post(
        "/api/mcp-servers", {"mcp_id": "rebinding", "transport": "http", "url": "http://mcp.example.com/mcp"}
    )
    assert created.status_code == 201
    monkeypatch.setitem(FAKE_DNS, "mcp.example.com", ["127.0.0.1"])  # DNS rebinding after the save
    refreshed = admin.post(f"/api/mcp-servers/{created.json()['id']}/refresh")
    assert refreshed.status_code == 422
    assert "loopback" in refreshed.json()["detail"]


def test_a_redirect_to_an_internal_host_is_not_followed(caller, http_stub) -> None:
    internal = http_stub(200)  # stands for an internal service the MCP URL redirects to
    redirector = http_stub(307, internal.url)
    admin = caller("token:admin")
    created = admin.post(
        "/api/mcp-servers",
        {"mcp_id": "redirecting", "transport": "http", "url": redirector.url, "timeout_s": 10},
    )
    assert created.status_code == 201  # loopback is allowed under test settings; the redirect is the test
    refreshed = admin.post(f"/api/mcp-servers/{created.json()['id']}/refresh")
    assert refreshed.status_code == 422 and "not followed" in refreshed.json()["detail"]
    assert redirector.hits >= 1 and internal.hits == 0
