from __future__ import annotations

import pytest
from django.core.management import call_command
from django.urls import reverse

pytestmark = pytest.mark.django_db


def test_home_shows_services_and_demo_servers(viewer_client) -> None:
    call_command("load_demo", verbosity=0)
    response = viewer_client.get(reverse("home"))
    html = response.content.decode()
    assert response.status_code == 200
    assert "order-service" in html and "knowledge-base" in html
    assert 'id="home-rule-sets"' in html and "seed-rules" in html
    assert 'id="home-agents"' in html and "seed-demo" in html
    assert 'id="home-runs"' in html and "주문 조회 부탁해 A-1001" in html  # the demo's queued runs
    assert "database" in html and "broker" in html
    assert 'hx-headers=\'{"x-csrftoken"' in html
    assert "htmx" in html  # the script tag from django-htmx


def test_healthz_reports_database_and_broker(client) -> None:
    response = client.get(reverse("healthz"))
    body = response.json()
    assert response.status_code == 200
    assert body["status"] == "ok"
    assert body["database"]["ok"] and body["broker"]["ok"]
    assert body["broker"]["detail"] == "embedded (filesystem)"


def test_healthz_is_503_when_the_broker_is_unreachable(client, settings) -> None:
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    response = client.get(reverse("healthz"))
    assert response.status_code == 503
    assert response.json()["broker"]["detail"].startswith("REDIS_URL: cannot reach Redis at 127.0.0.1:1")


def test_healthz_is_503_when_the_data_folder_is_nearly_full(client, settings) -> None:
    assert client.get(reverse("healthz")).json()["disk"]["ok"]
    settings.LLAMON_MIN_FREE_MB = 10**9  # more than any disk: the data folder counts as full
    response = client.get(reverse("healthz"))
    assert response.status_code == 503
    assert "under LLAMON_MIN_FREE_MB" in response.json()["disk"]["detail"]


def test_login_with_a_wrong_password_says_so_and_stays_on_the_page(client, make_user) -> None:
    user = make_user("viewer")
    response = client.post(reverse("login"), {"username": user.username, "password": "wrong"})
    assert response.status_code == 200
    assert "didn't match" in response.content.decode()


def test_logout_ends_the_session(viewer_client) -> None:
    response = viewer_client.post(reverse("logout"))
    assert response.status_code == 302
    assert viewer_client.get(reverse("home")).status_code == 302


def test_server_list_escapes_untrusted_text(viewer_client) -> None:
    from servers.models import McpServer

    McpServer.objects.create(
        mcp_id="evil", transport="http", url="http://127.0.0.1:1/<script>alert(1)</script>"
    )
    html = viewer_client.get(reverse("servers:list")).content.decode()
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;" in html


def test_htmx_responses_carry_pending_messages_out_of_band(editor_client) -> None:
    """A refused htmx action shows its message although only one region is swapped (and only once)."""
    from rules import services
    from servers.models import McpServer

    McpServer.objects.create(mcp_id="s", transport="http", url="http://127.0.0.1:9/mcp")
    rule_set = services.rule_set_create(actor=None, name="m")
    rule = services.rule_create(
        actor=None, rule_set=rule_set, name="r", mcp_id="s", tool_name="t", when="True", params="{}"
    )
    url = reverse("rules:rule_move", args=[rule_set.pk, rule.pk])
    html = editor_client.post(url, {"direction": "sideways"}, HTTP_HX_REQUEST="true").content.decode()
    assert 'id="messages" role="status" hx-swap-oob="true"' in html
    assert html.count("direction must be") == 1
    # Without htmx the message waits for the redirected full page, where base.html shows it.
    response = editor_client.post(url, {"direction": "sideways"}, follow=True)
    assert response.content.decode().count("direction must be") == 1
    assert 'hx-swap-oob="true"' not in response.content.decode().split('id="messages"')[1][:40]
