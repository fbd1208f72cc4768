"""Things that leaked or over-reached (issue 10, part 5): tokens in the log, a capped superuser
token, other users' served runs, empty ingested runs, a stdio server's stderr."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from accounts.token_services import token_create
from agents.models import Run
from servers.models import McpServer
from tests.servers.leaky_stderr import FAKE_TOKEN

pytestmark = pytest.mark.django_db


# --- a token sent with the wrong scheme never reaches the log ------------------------------------


@pytest.mark.parametrize("scheme", ["Token {}", "Basic {}", "{}", "bearer: {}", "Bearer{}"])
def test_a_token_with_a_wrong_scheme_is_refused_and_never_logged(make_user, caplog, settings, scheme) -> None:
    settings.DEBUG = True  # django-ninja logs the whole header only with DEBUG on
    secret = token_create(actor=make_user("viewer"), name="t").secret
    django_logger = logging.getLogger("django")
    django_logger.addHandler(caplog.handler)  # "django" may not propagate to the root logger
    try:
        with caplog.at_level(logging.DEBUG):
            response = Client().get("/api/registry", headers={"Authorization": scheme.format(secret)})
    finally:
        django_logger.removeHandler(caplog.handler)
    assert response.status_code == 401
    assert secret not in caplog.text and secret[8:] not in caplog.text
    assert secret not in response.content.decode()


def test_a_bearer_token_still_works(make_user) -> None:
    secret = token_create(actor=make_user("viewer"), name="t").secret
    assert Client().get("/api/registry", headers={"Authorization": f"Bearer {secret}"}).status_code == 200


# --- a token's cap governs, a superuser's included -----------------------------------------------


def test_a_superusers_viewer_token_cannot_list_everyones_tokens(django_user_model, make_user) -> None:
    root = django_user_model.objects.create_superuser("root", password="pw")
    other = token_create(actor=make_user("editor"), name="someone else's").token
    capped = token_create(actor=root, name="read-only", max_role="viewer").secret
    full = token_create(actor=root, name="full").secret
    client = Client()
    listed = client.get("/api/tokens?all=true", headers={"Authorization": f"Bearer {capped}"})
    assert listed.status_code == 403, listed.content
    assert "admin" in listed.json()["detail"]
    revoked = client.delete(f"/api/tokens/{other.pk}", headers={"Authorization": f"Bearer {capped}"})
    assert revoked.status_code in (403, 404)
    other.refresh_from_db()
    assert other.revoked_at is None
    # The control: the same superuser's uncapped token may.
    everyone = client.get("/api/tokens?all=true", headers={"Authorization": f"Bearer {full}"})
    assert everyone.status_code == 200 and other.pk in {t["id"] for t in everyone.json()}


# --- only the credential that started a served run adds to or finishes it; no person ingests ------

FINISH = {"status": "succeeded", "answer": "done by someone else"}


def _served_run(api) -> int:
    created = api.post("/api/runs/ingest", {"request": {"query": "hi"}})
    assert created.status_code == 201, created.content
    return created.json()["run_id"]


def test_another_credential_cannot_add_to_or_finish_a_served_run(ingest_caller) -> None:
    owner, other = ingest_caller("served-bot"), ingest_caller("other-bot")
    run_id = _served_run(owner)
    refused = other.post("/api/runs/ingest", {"run_id": run_id, "events": [], "finish": FINISH})
    assert refused.status_code == 403 and "this ingest credential" in refused.json()["detail"]
    run = Run.objects.get(pk=run_id)
    assert run.status == Run.Status.RUNNING and run.answer == ""
    assert owner.post("/api/runs/ingest", {"run_id": run_id, "finish": FINISH}).status_code == 200


@pytest.mark.parametrize("role", ["editor", "admin"])
def test_a_persons_token_is_refused_by_ingest_whatever_the_role(caller, ingest_caller, role) -> None:
    owner = ingest_caller("served-bot")
    run_id = _served_run(owner)
    person = caller(f"token:{role}")
    for body in (
        {"agent_name": "served-bot", "request": {"query": "x"}},
        {"run_id": run_id, "finish": FINISH},
    ):
        refused = person.post("/api/runs/ingest", body)
        assert refused.status_code == 403 and "not a person's API token" in refused.json()["detail"]
    assert Run.objects.count() == 1 and Run.objects.get().status == Run.Status.RUNNING


def test_a_made_up_run_under_a_worker_agent_is_impossible(ingest_caller, sample, admin) -> None:
    """The forgery of issue 40: an approve_transfer call posted under a (protected) worker agent."""
    from agents.errors import AgentConflictError
    from agents.services import ingest_credential_issue

    agent = sample["agent"]
    runs_before = Run.objects.count()
    agent.protected = True
    agent.save(update_fields=["protected"])
    forged = {
        "agent": agent.pk,
        "request": {"query": "transfer"},
        "events": [{"id": "r", "kind": "rule", "name": "approve_transfer", "phase": "start", "start": 0}],
        "finish": {"status": "succeeded", "answer": "approved"},
    }
    refused = ingest_caller("served-bot").post("/api/runs/ingest", forged)
    assert refused.status_code == 403 and agent.name in refused.json()["detail"]
    # Nor can an admin issue a credential under a workbench agent's name.
    with pytest.raises(AgentConflictError, match="cannot be ingested"):
        ingest_credential_issue(actor=admin, agent_name=agent.name)
    assert Run.objects.count() == runs_before


# --- nonsense ingest bodies create nothing -------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "events"),
        ({"events": []}, "events"),
        ({"agent_name": "   "}, "events"),
        ({"agent_name": "bot"}, "events"),
        ({"agent_name": "bot", "events": []}, "events"),
        ({"source": "flow", "agent_name": "bot"}, "events"),
    ],
)
def test_an_ingest_body_with_nothing_to_record_is_refused(ingest_caller, body, field) -> None:
    response = ingest_caller("bot").post("/api/runs/ingest", body)
    assert response.status_code == 422, response.content
    assert response.json()["field"] == field and "ingested run" in response.json()["detail"]
    assert not Run.objects.exists()


# --- a stdio server's stderr: admins only, and redacted ------------------------------------------

LEAKY = str(Path(__file__).resolve().parents[1] / "servers" / "leaky_stderr.py")
CHILD_SECRET = "child-secret-value-77"


@pytest.fixture
def crashed_server(caller, monkeypatch) -> dict[str, Any]:
    """A stdio server whose child printed its secret and a token to stderr, then died during a call."""
    monkeypatch.setenv("LLAMON_MCP_LEAKY_KEY", CHILD_SECRET)
    admin = caller("token:admin")
    created = admin.post(
        "/api/mcp-servers",
        {
            "mcp_id": "leaky",
            "transport": "stdio",
            "command": sys.executable,
            "args": [LEAKY],
            "env_names": ["LLAMON_MCP_LEAKY_KEY"],
            "timeout_s": 20,
        },
    )
    assert created.status_code == 201, created.content
    server_id = created.json()["id"]
    assert admin.post(f"/api/mcp-servers/{server_id}/refresh").status_code == 200
    editor = caller("token:editor")
    called = editor.post(f"/api/mcp-servers/{server_id}/call", {"tool": "leak", "arguments": {}})
    return {"id": server_id, "admin": admin, "editor": editor, "called": called}


def test_an_editor_calling_a_crashing_tool_does_not_see_its_stderr(crashed_server) -> None:
    called = crashed_server["called"]
    assert called.status_code == 422, called.content
    body = called.content.decode()
    assert "stderr-canary" not in body and CHILD_SECRET not in body and FAKE_TOKEN not in body
    assert "shown to admins only" in called.json()["detail"]
    assert "stderr-canary" in McpServer.objects.get(pk=crashed_server["id"]).last_error  # kept for admins


@pytest.mark.parametrize("role", ["viewer", "editor"])
def test_viewers_and_editors_see_no_stderr_on_the_server_pages_or_in_the_api(
    caller, crashed_server, role
) -> None:
    server_id = crashed_server["id"]
    api = caller(f"token:{role}")
    listed = api.get("/api/mcp-servers")
    assert listed.status_code == 200
    (server,) = [s for s in listed.json() if s["id"] == server_id]
    assert server["last_error"] and "stderr-canary" not in server["last_error"]
    session = caller(f"session:{role}")
    for url in (reverse("servers:detail", args=[server_id]), reverse("servers:list")):
        page = session.get(url)
        assert page.status_code == 200
        html = page.content.decode()
        assert "stderr-canary" not in html and CHILD_SECRET not in html and FAKE_TOKEN not in html


def test_admins_see_the_stderr_with_given_values_and_tokens_redacted(caller, crashed_server) -> None:
    (server,) = [
        s for s in crashed_server["admin"].get("/api/mcp-servers").json() if s["id"] == crashed_server["id"]
    ]
    error = server["last_error"]
    assert "stderr-canary" in error and "[redacted]" in error
    assert CHILD_SECRET not in error and FAKE_TOKEN not in error
    html = (
        caller("session:admin").get(reverse("servers:detail", args=[crashed_server["id"]])).content.decode()
    )
    assert "stderr-canary" in html and CHILD_SECRET not in html and FAKE_TOKEN not in html


def test_a_revoked_ingest_credential_is_refused_at_once(capsys) -> None:
    from django.core.management import call_command
    from django.test import Client

    call_command("ingest_credential", "issue", "served-bot")
    secret = capsys.readouterr().out.strip()
    bot = Client(headers={"Authorization": f"Bearer {secret}"})
    body = {"request": {"query": "hi"}}
    assert bot.post("/api/runs/ingest", body, content_type="application/json").status_code == 201
    call_command("ingest_credential", "revoke", secret.split("_")[2])
    refused = bot.post("/api/runs/ingest", body, content_type="application/json")
    assert refused.status_code == 401 and "unknown or revoked" in refused.json()["detail"]
    call_command("ingest_credential", "list")
    assert "served-bot" in capsys.readouterr().out
