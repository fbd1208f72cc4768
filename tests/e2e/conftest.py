from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import call_command

from servers import pool as web_pool

SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


@pytest.fixture
def demo() -> Iterator[None]:
    """The demo without runs: its MCP servers with their real tool lists, rule sets and agents.

    The web process's MCP sessions opened by the test are closed after it.
    """
    call_command("load_demo", "--no-runs", verbosity=0)
    yield
    web_pool.web_pool_close()


@pytest.fixture
def worker(demo) -> Iterator[None]:
    """The demo and a real Celery worker on the embedded broker (what `make run` uses by default)."""
    from tests.conftest import celery_worker

    with celery_worker(None):
        yield


@pytest.fixture
def logged_in(page, make_user):
    """Log a fresh user with the given role in through the real login form; returns the page."""

    def login(role: str = "admin"):
        user = make_user(role)
        page.goto("/accounts/login/")
        page.fill("#id_username", user.username)
        page.fill("#id_password", "pw")
        page.click("button[type=submit]")
        page.wait_for_url(lambda url: "/accounts/login" not in url)
        return page

    return login


def screenshot(page, name: str) -> Path:
    """Keep a screenshot under docs/screenshots/ (the docs link to them)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def fill_expression(page, field: str, text: str) -> None:
    """Replace a rule's `when` or `params` in its expression editor (the textarea under it is hidden)."""
    page.locator(f".expr-editor-host[data-expr-field='{field}'] .cm-content").fill(text)
