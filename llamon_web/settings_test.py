"""Test settings: the normal settings plus a shared test database, short periods and a stdio allow-list.

The test database is a SQLite *file* (``LLAMON_TEST_DB``) so that Celery worker processes started by
the tests see the same rows, or, when ``DATABASE_URL`` names PostgreSQL, the database
``test_<name>`` on that server (never ``<name>`` itself). Both the test process and the workers
use that name as ``NAME``: pytest-django creates it, and workers, which get the same variables from
the fixtures but never run test setup, connect to it too.

Under pytest-xdist each test process is a world of its own (docs/development.md): its var folder
(and so its SQLite file and embedded-broker folder), its PostgreSQL database ``test_<name>_gw<N>``.
The xdist worker id is in ``PYTEST_XDIST_WORKER``; the first import in that process makes the world
and records it in ``LLAMON_TEST_WORLD``, so the Celery workers and other subprocesses a test starts,
which inherit the environment, land in the same world.
"""

import os
import tempfile
from pathlib import Path

from llamon_agent import demo_servers

os.environ.setdefault("LLAMON_ENV", "dev")
# The outer environment's Redis is never used by tests: workers and tests that need Redis get
# the private redis-server of the test run through LLAMON_TEST_REDIS_URL.
os.environ.pop("REDIS_URL", None)
if os.environ.get("LLAMON_TEST_REDIS_URL"):
    os.environ["REDIS_URL"] = os.environ["LLAMON_TEST_REDIS_URL"]
_WORLD = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORLD and os.environ.get("LLAMON_TEST_WORLD") != _WORLD:
    # A fresh xdist worker: the controller's folder (inherited) is not ours.
    os.environ["LLAMON_TEST_WORLD"] = _WORLD
    os.environ["LLAMON_VAR_DIR"] = tempfile.mkdtemp(prefix=f"llamon-test-{_WORLD}-")
    os.environ.pop("LLAMON_TEST_DB", None)
_RUN_DIR = Path(os.environ.setdefault("LLAMON_VAR_DIR", tempfile.mkdtemp(prefix="llamon-test-")))
os.environ.setdefault("LLAMON_TEST_DB", str(_RUN_DIR / "test.sqlite3"))

from llamon_web.config import sqlite_config  # noqa: E402
from llamon_web.settings import *  # noqa: E402,F403
from llamon_web.settings import BASE_DIR, DATABASES  # noqa: E402

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    _TEST_DB = Path(os.environ["LLAMON_TEST_DB"])
    DATABASES["default"] = sqlite_config(_TEST_DB)
    DATABASES["default"]["TEST"] = {"NAME": str(_TEST_DB)}
else:
    _TEST_NAME = DATABASES["default"]["NAME"]
    if not _TEST_NAME.startswith("test_"):
        _TEST_NAME = f"test_{_TEST_NAME}"
    if _WORLD and not _TEST_NAME.endswith(f"_{_WORLD}"):
        _TEST_NAME = f"{_TEST_NAME}_{_WORLD}"
    DATABASES["default"]["NAME"] = _TEST_NAME
    DATABASES["default"]["TEST"] = {"NAME": _TEST_NAME}

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins in tests
LLAMON_ALLOW_PRIVATE_MCP = True
# Under test, stdio servers may only run executables from examples/, the SDK's demo servers and
# tests/servers/.
LLAMON_STDIO_ALLOWED_DIRS = [
    BASE_DIR / "examples",
    Path(demo_servers.__file__).parent,
    BASE_DIR / "tests" / "servers",
]
CELERY_WORKER_HEARTBEAT_S = 1
LLAMON_RUN_HEARTBEAT_S = 1
LLAMON_RUN_STALE_AFTER_S = 4
# A worker started by a test may get shorter limits (tests/agents/test_run_limits.py).
LLAMON_RUN_SOFT_LIMIT_S = int(os.environ.get("LLAMON_TEST_RUN_SOFT_LIMIT_S", "60"))
LLAMON_RUN_HARD_LIMIT_S = int(os.environ.get("LLAMON_TEST_RUN_HARD_LIMIT_S", "90"))
