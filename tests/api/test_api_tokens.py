"""Personal API tokens and the two ways in: hashed at rest, shown once, revocable, last-used, audited; CSRF on sessions."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.models import ApiToken
from accounts.roles import role_set
from accounts.token_services import TokenError, token_authenticate, token_create, token_revoke
from core.models import AuditEvent

pytestmark = pytest.mark.django_db


def _bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def test_a_token_is_created_from_the_session_and_its_secret_is_shown_once(caller) -> None:
    me = caller("session:editor")
    response = me.post("/api/tokens", {"name": "ci-pipeline"})
    assert response.status_code == 201
    secret = response.json()["token"]
    assert secret.startswith("llamon_") and len(secret) > 50
    listed = me.get("/api/tokens").json()
    assert [t["name"] for t in listed] == ["ci-pipeline"]
    assert all("token" not in t and "token_hash" not in t for t in listed)  # never shown again
    assert Client().get("/api/rule-sets", headers=_bearer(secret)).status_code == 200


def test_only_a_hash_of_the_token_is_stored(make_user) -> None:
    created = token_create(actor=make_user("viewer"), name="x")
    row = ApiToken.objects.get(pk=created.token.pk)
    assert created.secret not in {row.token_hash, row.prefix, row.name}
    assert len(row.token_hash) == 64 and row.prefix in created.secret


def test_creating_a_token_with_a_token_is_refused(caller) -> None:
    # A leaked token must not be able to mint itself a successor that survives its revocation.
    response = caller("token:admin").post("/api/tokens", {"name": "successor"})
    assert response.status_code == 403
    assert "browser session" in response.json()["detail"]


def test_a_revoked_token_is_refused_at_once(caller) -> None:
    me = caller("token:editor")
    token_id = ApiToken.objects.get(user=me.user).pk
    assert me.get("/api/rule-sets").status_code == 200
    assert me.delete(f"/api/tokens/{token_id}").json()["active"] is False
    response = me.get("/api/rule-sets")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert "revoked" in response.json()["detail"]


def test_an_unknown_or_malformed_token_is_a_401_even_with_a_session(caller) -> None:
    me = caller("session:admin")
    for bad in ("llamon_00000000_" + "A" * 43, "nonsense", ""):
        response = me.get("/api/rule-sets", headers=_bearer(bad))
        assert response.status_code == 401, bad
        assert response.json()["detail"]


def test_last_used_time_is_recorded(caller) -> None:
    me = caller("token:viewer")
    token = ApiToken.objects.get(user=me.user)
    assert token.last_used_at is None
    me.get("/api/rule-sets")
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_a_token_acts_with_its_users_role_at_the_time_of_use(caller) -> None:
    me = caller("token:editor")
    body = {"name": "made-by-token"}
    assert me.post("/api/rule-sets", body).status_code == 201
    role_set(user=me.user, role="viewer")  # demoted: the token follows at once
    assert me.post("/api/rule-sets", {"name": "second"}).status_code == 403
    role_set(user=me.user, role=None)
    assert me.get("/api/rule-sets").status_code == 403
    me.user.is_active = False
    me.user.save()
    assert me.get("/api/rule-sets").status_code == 401


def test_max_role_caps_a_token_below_its_user(make_user) -> None:
    admin = make_user("admin")
    capped = token_create(actor=admin, name="read-only", max_role="viewer").secret
    client = Client()
    assert client.get("/api/registry", headers=_bearer(capped)).status_code == 200
    response = client.post(
        "/api/rule-sets", {"name": "x"}, content_type="application/json", headers=_bearer(capped)
    )
    assert response.status_code == 403
    assert "acts as viewer" in response.json()["detail"]


def test_others_tokens_are_listed_and_revoked_only_by_admins(caller, make_user) -> None:
    other = token_create(actor=make_user("editor"), name="someone else's").token
    editor = caller("token:editor")
    assert editor.delete(f"/api/tokens/{other.pk}").status_code == 404
    assert editor.get("/api/tokens?all=true").status_code == 403
    admin = caller("token:admin")
    assert other.pk in {t["id"] for t in admin.get("/api/tokens?all=true").json()}
    assert admin.delete(f"/api/tokens/{other.pk}").status_code == 200
    other.refresh_from_db()
    assert other.revoked_at is not None


def test_token_writes_are_audited_without_the_secret(make_user) -> None:
    user = make_user("editor")
    created = token_create(actor=user, name="audited")
    token_revoke(actor=user, token=created.token)
    events = AuditEvent.objects.filter(object_type="accounts.apitoken").order_by("id")
    assert [e.action for e in events] == ["api_token.create", "api_token.revoke"]
    assert all(
        created.secret not in str(e.after) and created.token.token_hash not in str(e.after) for e in events
    )


def test_token_authenticate_rejects_a_token_with_a_known_prefix_but_a_wrong_secret(make_user) -> None:
    created = token_create(actor=make_user("viewer"), name="x")
    forged = created.secret[:-4] + ("AAAA" if not created.secret.endswith("AAAA") else "BBBB")
    assert token_authenticate(forged) is None
    assert token_authenticate(created.secret)[0] == created.token.user


def test_session_writes_need_the_csrf_token_and_token_writes_do_not(make_user) -> None:
    user = make_user("editor")
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(user)
    assert browser.get("/api/rule-sets").status_code == 200  # reads need no CSRF token
    refused = browser.post("/api/rule-sets", {"name": "csrf"}, content_type="application/json")
    assert refused.status_code == 403
    assert "CSRF" in refused.json()["detail"]
    page = browser.get("/rules/")  # any page sets the csrftoken cookie
    csrf = page.cookies["csrftoken"].value
    accepted = browser.post(
        "/api/rule-sets", {"name": "csrf"}, content_type="application/json", headers={"X-CSRFToken": csrf}
    )
    assert accepted.status_code == 201
    program = Client(enforce_csrf_checks=True)
    secret = token_create(actor=user, name="prog").secret
    response = program.post(
        "/api/rule-sets", {"name": "by-token"}, content_type="application/json", headers=_bearer(secret)
    )
    assert response.status_code == 201


def test_the_tokens_page_shows_the_secret_once(client, make_user) -> None:
    client.force_login(make_user("viewer"))
    response = client.post("/tokens/new", {"name": "laptop", "max_role": ""})
    assert response.status_code == 201
    secret = ApiToken.objects.get(name="laptop")
    body = response.content.decode()
    assert 'id="token-secret"' in body and "llamon_" + secret.prefix in body
    again = client.get("/tokens/").content.decode()
    assert 'id="token-secret"' not in again and "laptop" in again
    client.post(f"/tokens/{secret.pk}/revoke")
    secret.refresh_from_db()
    assert secret.revoked_at is not None


def test_docs_and_schema_are_served_without_a_cdn(client) -> None:
    docs = client.get("/api/docs")
    assert docs.status_code == 200
    assert b"/static/ninja/swagger-ui-bundle.js" in docs.content and b"cdn." not in docs.content
    schema = client.get("/api/openapi.json").json()
    assert {"TokenAuth", "SessionAuth"} <= set(schema["components"]["securitySchemes"])


def test_the_openapi_schema_is_built_once_per_process(client, monkeypatch) -> None:
    """/api/openapi.json (what /api/docs loads) serves the first build instead of rebuilding each time."""
    import ninja.main

    from llamon_web.api import api

    api.__dict__.pop("_schema_cache", None)
    builds = []
    real = ninja.main.get_schema
    monkeypatch.setattr(ninja.main, "get_schema", lambda **kw: builds.append(1) or real(**kw))
    first = client.get("/api/openapi.json")
    second = client.get("/api/openapi.json")
    assert first.status_code == second.status_code == 200
    assert first.json() == second.json() and "/api/rule-sets" in str(first.json()["paths"])
    assert len(builds) == 1


def test_a_token_expires_after_the_sites_default_and_then_stops_working(make_user, settings) -> None:
    settings.LLAMON_API_TOKEN_DAYS, settings.LLAMON_API_TOKEN_MAX_DAYS = 30, 365
    user = make_user("editor")
    created = token_create(actor=user, name="ci")
    days = (created.token.expires_at - timezone.now()).total_seconds() / 86400
    assert 29.9 < days <= 30
    assert token_authenticate(created.secret) is not None
    ApiToken.objects.filter(pk=created.token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert token_authenticate(created.secret) is None
    response = Client().get("/api/rule-sets", headers={"Authorization": f"Bearer {created.secret}"})
    assert response.status_code == 401 and "expired" in response.json()["detail"]


@pytest.mark.parametrize(
    ("days", "maximum", "error"),
    [
        (400, 365, "at most 365 days"),
        (0, 365, "at most 365 days"),
        (-1, 0, "whole number"),
        (True, 0, "whole number"),
    ],
)
def test_a_lifetime_beyond_the_operators_limit_is_refused(make_user, settings, days, maximum, error) -> None:
    settings.LLAMON_API_TOKEN_MAX_DAYS = maximum
    with pytest.raises(TokenError, match=error) as info:
        token_create(actor=make_user("viewer"), name="long", expires_days=days)
    assert info.value.field == "expires_days"
    assert not ApiToken.objects.filter(name="long").exists()


def test_the_operator_may_let_tokens_live_forever(make_user, settings) -> None:
    settings.LLAMON_API_TOKEN_DAYS = settings.LLAMON_API_TOKEN_MAX_DAYS = 0
    assert token_create(actor=make_user("viewer"), name="forever").token.expires_at is None


def test_the_tokens_page_sets_and_shows_the_expiry(viewer_client, settings) -> None:
    settings.LLAMON_API_TOKEN_MAX_DAYS = 365
    response = viewer_client.post(reverse("token_create"), {"name": "weekly", "expires_days": "7"})
    assert response.status_code == 201
    token = ApiToken.objects.get(name="weekly")
    assert token.expires_at.strftime("%Y-%m-%d %H:%M") in response.content.decode()
    refused = viewer_client.post(reverse("token_create"), {"name": "long", "expires_days": "9999"})
    assert refused.status_code == 400 and "at most 365 days" in refused.content.decode()
