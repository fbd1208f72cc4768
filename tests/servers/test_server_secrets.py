"""Secrets out of sight (issue #45, point 3): a stdio server's arguments never show a secret.

A password written into a server's arguments (``--password=…``, the next argument after
``--password``, ``user:…@`` in a URL, ``PGPASSWORD=…``) reaches no viewer: not the server pages,
the API, the registry nor the audit log. A ``${NAME}`` placeholder is stored and shown as written
and expanded only in the process that starts the server, from a variable the server is given.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from llamon_agent.mcp import McpServerSpec
from llamon_agent.mcp.errors import McpConnectionError
from llamon_agent.mcp.pool import McpPool
from servers.errors import McpServerError
from servers.services import mcp_server_create, mcp_server_update
from tests.support.mcp_servers import KB_SCRIPT

pytestmark = pytest.mark.django_db

ARGV_SERVER = str(Path(__file__).with_name("argv_server.py"))
SECRETS = ["hunter2-pw", "s3cr3t-in-url", "next-arg-pw", "pg-env-pw", "tok_abcdef123456"]
ARGS = [
    KB_SCRIPT,
    f"--password={SECRETS[0]}",
    f"postgresql://app:{SECRETS[1]}@db.internal:5432/app",
    "--db-password",
    SECRETS[2],
    f"PGPASSWORD={SECRETS[3]}",
    f"--api-token={SECRETS[4]}",
]


def test_no_secret_in_a_servers_arguments_reaches_a_viewer(make_user) -> None:
    admin = make_user("admin", "secrets-admin")
    server = mcp_server_create(
        actor=admin, mcp_id="pg", transport="stdio", command=sys.executable, args=ARGS, timeout_s=30.0
    )
    mcp_server_update(actor=admin, server=server, args=[*ARGS, "--verbose"])
    assert server.args[1] == f"--password={SECRETS[0]}"  # stored as given: the worker starts it so
    for role in ("viewer", "editor", "admin"):
        client = Client()
        client.force_login(make_user(role, f"reader-{role}"))
        shown = {}
        for url in (
            reverse("servers:list"),
            reverse("servers:detail", args=[server.pk]),
            "/api/mcp-servers",
            f"/api/mcp-servers/{server.pk}",
            "/api/registry",
            "/api/registry/pg",
            reverse("rules:audit"),
            reverse("rules:audit") + "?action=mcp_server.update",
        ):
            response = client.get(url)
            assert response.status_code == 200, (role, url, response.status_code)
            shown[url] = response.content.decode()
        leaked = {url: [s for s in SECRETS if s in text] for url, text in shown.items()}
        assert not any(leaked.values()), (role, leaked)
        registry_args = client.get("/api/registry/pg").json()["args"]
        assert registry_args[2] == "postgresql://app:[비밀값]@db.internal:5432/app", registry_args
    from core.models import AuditEvent

    stored = " ".join(str([e.before, e.after]) for e in AuditEvent.objects.all())
    assert not [s for s in SECRETS if s in stored]


def test_a_placeholder_is_stored_and_shown_as_written_and_must_name_a_given_variable(make_user) -> None:
    admin = make_user("admin", "placeholder-admin")
    with pytest.raises(McpServerError) as refused:
        mcp_server_create(
            actor=admin,
            mcp_id="pg-missing",
            transport="stdio",
            command=sys.executable,
            args=[KB_SCRIPT, "postgresql://app:${LLAMON_MCP_PG_PW}@db/app"],
        )
    assert refused.value.field == "args" and "LLAMON_MCP_PG_PW" in str(refused.value)
    server = mcp_server_create(
        actor=admin,
        mcp_id="pg-ok",
        transport="stdio",
        command=sys.executable,
        args=[KB_SCRIPT, "postgresql://app:${LLAMON_MCP_PG_PW}@db/app"],
        env_names=["LLAMON_MCP_PG_PW"],
    )
    client = Client()
    client.force_login(make_user("viewer", "placeholder-viewer"))
    assert "${LLAMON_MCP_PG_PW}" in client.get("/api/registry/pg-ok").content.decode()
    assert server.args[1] == "postgresql://app:${LLAMON_MCP_PG_PW}@db/app"


def test_the_placeholder_is_expanded_only_in_the_process_that_starts_the_server(monkeypatch) -> None:
    monkeypatch.setenv("ARGV_SECRET", "expanded-at-start")
    spec = McpServerSpec(
        mcp_id="argv",
        transport="stdio",
        command=sys.executable,
        args=[ARGV_SERVER, "--dsn=postgresql://app:${ARGV_SECRET}@db/app"],
        env=["ARGV_SECRET"],
        timeout_s=30.0,
    )
    pool = McpPool()
    try:
        pool.register(spec)
        result = pool.call_tool_sync("argv", "argv", {})
        assert "--dsn=postgresql://app:expanded-at-start@db/app" in str(result)
        assert spec.args[1].endswith("${ARGV_SECRET}@db/app")  # the spec itself keeps the placeholder
        unknown = McpServerSpec(
            mcp_id="argv-unknown",
            transport="stdio",
            command=sys.executable,
            args=[ARGV_SERVER, "${NOT_GIVEN}"],
            timeout_s=30.0,
        )
        pool.register(unknown)
        with pytest.raises(McpConnectionError, match="NOT_GIVEN"):
            pool.call_tool_sync("argv-unknown", "argv", {})
    finally:
        pool.close()
