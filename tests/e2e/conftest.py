from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import Client

from servers import pool as web_pool


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
def logged_in(page, make_user, live_server):
    """Log a fresh user with the given role in; returns the page, on the home page.

    The session is Django's own (``Client.force_login``) handed to the browser as its cookie, the way
    Playwright's ``storage_state`` hands over a saved login: a login through the real form in every
    test cost two page loads each. The form itself is tested in test_users.py and test_security.py."""

    def login(role: str = "admin"):
        user = make_user(role)
        client = Client()
        client.force_login(user)
        cookie = client.cookies[settings.SESSION_COOKIE_NAME]
        page.context.add_cookies([{"name": cookie.key, "value": cookie.value, "url": live_server.url}])
        page.goto("/")
        assert "/accounts/login" not in page.url
        return page

    return login


def screenshot(page, name: str, *, element=None) -> Path:
    """Take a screenshot of the page (or of one element of it) into the session's screenshot folder."""
    path = page.screenshots_dir / f"{name}.png"
    if element is None:
        page.screenshot(path=str(path), full_page=True)
    else:
        element.screenshot(path=str(path))
    return path


def fill_expression(page, field: str, text: str) -> None:
    """Replace a rule's `when` or `params` in its expression editor (the textarea under it is hidden)."""
    page.locator(f".expr-editor-host[data-expr-field='{field}'] .cm-content").fill(text)
