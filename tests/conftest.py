"""Shared fixtures: a real redis-server, real Celery workers and a real Chromium, all on 127.0.0.1.

Nothing here skips: a missing redis-server or chromium fails the tests that need it with a
message naming the apt package to install.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

from tests.support.celery_publish import publishing_to
from tests.support.http_stub import http_stubs

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
DOCS_SCREENSHOTS = ROOT / "docs" / "screenshots"

# Bounded so that `make test` fits its budget; individual tests may ask for fewer or more.
hypothesis_settings.register_profile("llamon", max_examples=100, deadline=None, print_blob=True)
hypothesis_settings.load_profile("llamon")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, timeout_s: float = 20.0, proc: subprocess.Popen | None = None) -> None:
    """Block until something accepts connections on 127.0.0.1:port."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with status {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listened on 127.0.0.1:{port} within {timeout_s} s")


def require_executable(name: str, apt_package: str) -> str:
    """The executable's path, or a test failure naming the apt package to install."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name} is not installed: run `apt-get install {apt_package}` (see .ci/run)", pytrace=False
        )
    return path


class OutputCollector:
    """Drains a child's merged stdout/stderr so it never blocks, and lets tests wait for a line."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._drain, args=(proc,), daemon=True)
        self._thread.start()

    def _drain(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            with self._cond:
                self.lines.append(raw.rstrip("\n"))
                self._cond.notify_all()

    def wait_for(self, needle: str, timeout_s: float = 60.0) -> str:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                for line in self.lines:
                    if needle in line:
                        return line
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    tail = "\n".join(self.lines[-40:])
                    raise TimeoutError(
                        f"{needle!r} did not appear within {timeout_s} s; last output:\n{tail}"
                    )
                self._cond.wait(remaining)

    def text(self) -> str:
        with self._cond:
            return "\n".join(self.lines)


@pytest.fixture(scope="session")
def django_db_modify_db_settings() -> None:
    """No per-worker suffix from pytest-django: under xdist each worker's database (and var folder)
    is already its own, named by llamon_web/settings_test.py, which the Celery workers a test starts
    read too; pytest-django's suffix would give the test and its workers different databases."""


@contextmanager
def redis_server() -> Iterator[tuple[subprocess.Popen, int]]:
    """A private redis-server on a free loopback port, without persistence: (process, port); stopped after."""
    exe = require_executable("redis-server", "redis-server")
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="llamon-redis-")
    proc = subprocess.Popen(
        [
            exe,
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            workdir,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc=proc)
        yield proc, port
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """The test process's redis-server: its URL."""
    with redis_server() as (_, port):
        yield f"redis://127.0.0.1:{port}/0"


def worker_env(redis: str | None) -> dict[str, str]:
    """The environment of a worker that shares this test run's database file and var folder."""
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = "llamon_web.settings_test"
    env.pop("REDIS_URL", None)
    if redis:
        env["LLAMON_TEST_REDIS_URL"] = redis
    else:
        env.pop("LLAMON_TEST_REDIS_URL", None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@contextmanager
def celery_worker(
    redis: str | None, *, concurrency: int = 1, env: dict[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen, OutputCollector]]:
    """A real prefork Celery worker process on Redis (``redis`` URL) or on the embedded broker; ``env`` adds variables."""
    name = f"test-{uuid.uuid4().hex[:8]}@%h"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "llamon_web",
            "worker",
            "-P",
            "prefork",
            "-c",
            str(concurrency),
            "-l",
            "info",
            "-n",
            name,
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        cwd=ROOT,
        env={**worker_env(redis), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    output = OutputCollector(proc)
    try:
        output.wait_for("ready.", timeout_s=60)
        yield proc, output
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait(timeout=5)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """Debian's Chromium driven by Playwright (never a downloaded browser), one per test module.

    Playwright's sync API runs an event loop in this thread while it is open, which would break a
    later test that calls asyncio.run; closing it after each module (about a second to start
    again) lets browser tests run anywhere in the order, so parallel workers stay balanced."""
    if not Path(CHROMIUM).exists():
        pytest.fail(
            "chromium is not installed: run `apt-get install chromium fonts-nanum` (see .ci/run)",
            pytrace=False,
        )
    # Playwright's sync API runs an event loop in this thread; Django's ORM calls from the
    # test body are still synchronous and safe.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory) -> Path:
    """Where the browser tests' screenshots go: docs/screenshots/ (the docs link to them) only when
    asked (`LLAMON_SCREENSHOTS=1`, `make screenshots`); otherwise a temporary folder, so `make test`
    leaves the tree clean while a page that cannot be drawn still fails its test."""
    if os.environ.get("LLAMON_SCREENSHOTS") == "1":
        DOCS_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        return DOCS_SCREENSHOTS
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture
def page(browser, live_server, screenshots) -> Iterator[object]:
    """A fresh browser page; ``page.base_url`` is the live server's address."""
    # English pages: the interface follows Accept-Language, and the assertions read English text.
    # tests/e2e/test_users.py switches to Korean the way a person does.
    context = browser.new_context(
        base_url=live_server.url, viewport={"width": 1280, "height": 800}, locale="en-US"
    )
    context.set_default_timeout(15_000)
    pg = context.new_page()
    pg.screenshots_dir = screenshots
    # Every browser test is also a Content-Security-Policy test: Chromium reports each blocked
    # script, handler or style on the console, and any such report fails the test.
    pg.csp_violations = []
    pg.on("console", lambda m: "Content Security Policy" in m.text and pg.csp_violations.append(m.text))
    try:
        yield pg
    finally:
        context.close()
    assert not pg.csp_violations, f"Content-Security-Policy violations: {pg.csp_violations}"


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker) -> None:
    """The test database as migrate leaves it, but with no mask presets on: a new install turns them
    on (agents.0017, tested in tests/agents/test_privacy_defaults.py), while the suite's tests
    choose their masks (a transactional test's flush removes the row anyway: both start alike)."""
    with django_db_blocker.unblock():
        from agents.models import PrivacySettings

        PrivacySettings.objects.filter(pk=1).delete()


@pytest.fixture(autouse=True)
def _english_after_each_test() -> Iterator[None]:
    """A request in Korean leaves Korean active in its thread (LocaleMiddleware never resets it);
    the next test starts in the default language again."""
    yield
    from django.conf import settings
    from django.utils import translation

    if settings.configured:  # not under `make test-engine` (pytest -p no:django)
        translation.deactivate()


@pytest.fixture
def make_user(django_user_model):
    """``make_user("editor")`` -> a user holding exactly that role (None: no role), password 'pw'."""

    def make(role: str | None, username: str | None = None):
        from accounts.roles import role_set

        user = django_user_model.objects.create_user(
            username=username or f"{role or 'norole'}-{uuid.uuid4().hex[:6]}", password="pw"
        )
        role_set(user=user, role=role)
        return user

    return make


@pytest.fixture
def editor(make_user):
    return make_user("editor")


@pytest.fixture
def admin(make_user):
    return make_user("admin")


@pytest.fixture
def demo_servers(db) -> dict:
    """The three demo servers with discovered tools (never contacted: tests dry-run)."""
    from django.utils import timezone

    from servers.models import McpServer
    from tests.support.rule_sets import TOOLS  # the rules app: not for the engine's Django-free tests

    now = timezone.now()
    return {
        mcp_id: McpServer.objects.create(
            mcp_id=mcp_id, transport="http", url="http://127.0.0.1:9/mcp", tools=tools, tools_refreshed_at=now
        )
        for mcp_id, tools in TOOLS.items()
    }


@pytest.fixture
def redis_publisher(redis_url: str) -> Iterator[str]:
    """Tasks enqueued by services in this test go to the test run's real Redis."""
    with publishing_to(redis_url, {"visibility_timeout": 3600}):
        yield redis_url


@pytest.fixture
def sample_kwargs(make_user) -> dict[str, dict[str, object]]:
    """URL kwargs of real objects for the URL patterns that need them (tests/support/authz.py)."""
    from tests.support import authz  # Django's URL resolver: not for the engine's Django-free tests

    return authz.sample_kwargs(make_user)


@pytest.fixture
def http_stub() -> Iterator:
    """``http_stub(status, location)`` -> a loopback HTTP stub with ``.url`` and ``.hits`` (tests/support/http_stub.py)."""
    with http_stubs() as start:
        yield start


@pytest.fixture
def admin_client(client, make_user):
    client.force_login(make_user("admin"))
    return client


@pytest.fixture
def editor_client(client, make_user):
    client.force_login(make_user("editor"))
    return client


@pytest.fixture
def viewer_client(client, make_user):
    client.force_login(make_user("viewer"))
    return client


# Fixtures through which a test reaches the database (pytest-django blocks it otherwise).
_DB_FIXTURES = frozenset(
    {"db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback", "live_server"}
)


def uses_database(item: pytest.Item) -> bool:
    """Whether the test can reach the database: a django_db mark, a database fixture, or the
    `database` mark of a test whose subprocess connects to DATABASE_URL itself."""
    if item.get_closest_marker("django_db") or item.get_closest_marker("database"):
        return True
    return bool(_DB_FIXTURES & set(getattr(item, "fixturenames", ())))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slow tests first (pytest-xdist's `load` scheduling hands tests out in this order).

    With LLAMON_TEST_DATABASE_ONLY=1 (the PostgreSQL leg, `make test-postgres`) only the tests that
    can reach the database run: the others (the engine, which never imports Django, the settings
    checks, `make run` on its embedded SQLite) give the same result on every database and run once,
    in `make test`."""
    if os.environ.get("LLAMON_TEST_DATABASE_ONLY") == "1":
        kept = [item for item in items if uses_database(item)]
        dropped = [item for item in items if not uses_database(item)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept
    # The slow tests first (longest first is the classic way to make parallel workers end together:
    # pytest-xdist hands tests out in this order), the rest in collection order.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


# Cases per fuzzed form/endpoint, filled by tests/test_forms_fuzz.py: {"url (role)": [cases, fields]}.
FUZZ_COUNTS: dict[str, list[int]] = {}


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if not FUZZ_COUNTS:
        return
    from django.db import connection

    total = sum(cases for cases, _ in FUZZ_COUNTS.values())
    terminalreporter.section(
        f"form fuzz cases ({connection.vendor}): {total} in {len(FUZZ_COUNTS)} url/role pairs"
    )
    for key in sorted(FUZZ_COUNTS):
        cases, fields = FUZZ_COUNTS[key]
        terminalreporter.write_line(f"{cases:5d} cases  {fields:3d} fields  {key}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Close MCP pools while pytest's output capture still works (their last log lines need it)."""
    from llamon_agent.mcp.pool import close_all_pools

    close_all_pools()
