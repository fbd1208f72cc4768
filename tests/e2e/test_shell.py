"""The page shell in a real browser: login, navigation, logout."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from tests.e2e.conftest import screenshot

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_login_shows_the_home_page_and_keeps_a_screenshot(page, logged_in) -> None:
    call_command("load_demo", verbosity=0)
    logged_in("admin")
    assert page.locator("h1").inner_text() == "Workbench"
    assert page.locator(".account .who").inner_text().endswith("· admin")
    assert page.get_by_text("order-service", exact=True).first.is_visible()
    path = screenshot(page, "home")
    assert path.stat().st_size > 10_000


def test_wrong_password_keeps_the_user_on_the_login_page(page, make_user) -> None:
    user = make_user("viewer")
    page.goto("/accounts/login/")
    page.fill("#id_username", user.username)
    page.fill("#id_password", "nope")
    page.click("button[type=submit]")
    assert page.get_by_role("alert").inner_text().startswith("Your username and password didn't match")


def test_navigation_reaches_the_server_list_and_logout_returns_to_login(page, logged_in) -> None:
    call_command("load_demo", verbosity=0)
    logged_in("viewer")
    page.click("nav >> text=MCP servers")
    page.wait_for_url("**/mcp/")
    assert page.locator("#server-table").get_by_text("knowledge-base").is_visible()
    page.click("text=Log out")
    page.wait_for_url("**/accounts/login/")
    page.goto("/")
    assert "/accounts/login/" in page.url
