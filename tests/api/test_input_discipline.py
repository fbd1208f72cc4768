"""One input discipline for every route: null, booleans, NUL in the URL, a database that is down."""

from __future__ import annotations

import pytest
from django.db import OperationalError
from django.db.backends.base.base import BaseDatabaseWrapper

from llamon_web.demo import SEED_RULES
from rules.models import Rule
from tests.support.rule_sets import build_rule_set

pytestmark = pytest.mark.django_db


@pytest.fixture
def rule(api_servers, make_user) -> Rule:
    return build_rule_set(make_user("editor"), "discipline", SEED_RULES[:1]).rules.get()


@pytest.mark.parametrize("field", ["stop", "enabled", "description", "name", "when"])
def test_patch_with_null_is_a_422_naming_the_field_and_changes_nothing(editor_api, rule, field) -> None:
    url = f"/api/rule-sets/{rule.rule_set_id}/rules/{rule.pk}"
    response = editor_api.patch(url, {"revision": rule.revision, field: None})
    assert response.status_code == 422, response.content
    body = response.json()
    assert field in str(body) and "null is not a value" in str(body)
    assert Rule.objects.get(pk=rule.pk).revision == rule.revision


def test_a_patch_that_leaves_a_field_out_still_keeps_it(editor_api, rule) -> None:
    url = f"/api/rule-sets/{rule.rule_set_id}/rules/{rule.pk}"
    response = editor_api.patch(url, {"revision": rule.revision, "description": "kept the rest"})
    assert response.status_code == 200 and response.json()["stop"] == rule.stop


def test_an_agent_patch_may_still_clear_its_rule_set(editor_api, make_user) -> None:
    created = editor_api.post("/api/agents", {"name": "nullable"}).json()
    response = editor_api.patch(
        f"/api/agents/{created['id']}", {"revision": created["revision"], "rule_set": None}
    )
    assert response.status_code == 200 and response.json()["rule_set"] is None


@pytest.mark.parametrize("body", [{"agent": True, "query": "q"}, {"agent": False, "query": "q"}])
def test_a_boolean_is_not_an_id_in_a_body(editor_api, body) -> None:
    response = editor_api.post("/api/runs", body)
    assert response.status_code == 422 and "not true or false" in str(response.json())


@pytest.mark.parametrize("path", ["/api/registry/a%00b", "/api/registry/%00", "/api/rule-sets/%00/rules"])
def test_a_nul_in_an_api_path_is_a_400(viewer_api, path) -> None:
    response = viewer_api.get(path)
    assert response.status_code == 400 and "Null characters" in response.json()["detail"]


@pytest.mark.parametrize("path", ["/rules/%00/", "/agents/runs/%00", "/mcp/a%00b/"])
def test_a_nul_in_a_page_path_is_a_400(viewer_client, path) -> None:
    assert viewer_client.get(path).status_code == 400


@pytest.fixture
def database_down(monkeypatch) -> None:
    """Every new query fails the way a stopped server makes it fail (connection refused)."""

    def refuse(self, *args, **kwargs):
        raise OperationalError('connection to server at "127.0.0.1", port 5432 failed: Connection refused')

    monkeypatch.setattr(BaseDatabaseWrapper, "_cursor", refuse)


@pytest.mark.parametrize("debug", [False, True])
def test_a_database_outage_answers_503_on_pages_api_and_mcp_never_a_traceback(
    viewer_client, viewer_api, settings, database_down, debug
) -> None:
    settings.DEBUG = debug
    # What a server does: answer; Django's test client would re-raise the exception instead.
    viewer_client.raise_request_exception = viewer_api.client.raise_request_exception = False
    for client, path in [
        (viewer_client, "/rules/"),
        (viewer_client, "/agents/runs/"),
        (viewer_api, "/api/runs"),
    ]:
        response = client.get(path)
        assert response.status_code == 503, (path, response.status_code)
        text = response.content.decode()
        assert "database is not answering" in text and "Traceback" not in text and "5432" not in text
        assert response["Retry-After"] == "5"


def test_a_query_error_is_a_500_not_an_outage(viewer_client, viewer_api, monkeypatch) -> None:
    # SQLite reports a missing table (a migration not applied) as an OperationalError as well: telling
    # the user to wait for the database would send them the wrong way.
    def missing(self, *args, **kwargs):
        raise OperationalError("no such table: agents_run")

    monkeypatch.setattr(BaseDatabaseWrapper, "_cursor", missing)
    viewer_client.raise_request_exception = viewer_api.client.raise_request_exception = False
    for client, path in [(viewer_client, "/agents/runs/"), (viewer_api, "/api/runs")]:
        response = client.get(path)
        assert response.status_code == 500, (path, response.status_code)
        assert "database is not answering" not in response.content.decode()


def test_what_counts_as_the_database_not_answering() -> None:
    from django.db import InterfaceError

    from core.errors import database_unavailable

    assert database_unavailable(OperationalError("connection to server failed: Connection refused"))
    assert database_unavailable(OperationalError("database is locked"))
    assert database_unavailable(InterfaceError("connection already closed"))
    assert not database_unavailable(OperationalError("no such column: agents_run.foo"))
    assert not database_unavailable(OperationalError('near "SELEC": syntax error'))
    assert not database_unavailable(OperationalError("LIKE or GLOB pattern too complex"))
    assert not database_unavailable(ValueError("connection refused"))
