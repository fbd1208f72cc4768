"""Checks of what the product needs: the database, the broker and free disk (one line each)."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings
from django.db import connection
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

LABELS = {
    "database": gettext_lazy("database"),
    "broker": gettext_lazy("broker"),
    "disk": gettext_lazy("disk"),
}


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str

    @property
    def label(self) -> str:
        """The name as the home page shows it (in the reader's language); ``name`` is the JSON key."""
        return str(LABELS.get(self.name, self.name))


def check_database() -> Check:
    """Run a trivial query on the default database."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return Check("database", True, connection.vendor)
    except Exception as exc:
        return Check("database", False, f"DATABASE_URL: cannot use the database ({_one_line(exc)})")


def check_broker(timeout_s: float = 1.0) -> Check:
    """PING Redis when REDIS_URL is set, else check that the embedded broker's folder is writable."""
    url = settings.REDIS_URL
    if url:
        import redis

        try:
            client = redis.Redis.from_url(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
            client.ping()
            client.close()
            return Check("broker", True, "redis")
        except Exception as exc:
            where = urlsplit(url)
            target = where.path if where.scheme == "unix" else f"{where.hostname}:{where.port or 6379}"
            return Check("broker", False, f"REDIS_URL: cannot reach Redis at {target} ({_one_line(exc)})")
    folder = settings.BROKER_DIR / "queue"
    if folder.is_dir() and os.access(folder, os.W_OK):
        return Check("broker", True, str(_("embedded (filesystem)")))
    return Check("broker", False, f"embedded broker folder {folder} is not writable")


def check_disk() -> Check:
    """Free space in the data folder (SQLite, the embedded broker, exports): a full disk fails every
    write, so the health check says so before users do (``LLAMON_MIN_FREE_MB``)."""
    folder = settings.VAR_DIR
    try:
        usage = shutil.disk_usage(folder)
    except OSError as exc:
        return Check("disk", False, f"data folder {folder}: {_one_line(exc)}")
    free_mb = usage.free // 2**20
    if free_mb < settings.LLAMON_MIN_FREE_MB:
        return Check(
            "disk",
            False,
            f"data folder {folder}: {free_mb} MB free, under LLAMON_MIN_FREE_MB={settings.LLAMON_MIN_FREE_MB}",
        )
    return Check("disk", True, _("%(mb)s MB free") % {"mb": f"{free_mb:,}"})


def service_checks() -> list[Check]:
    """Every check, as the home page, /healthz and manage.py check_services run them."""
    return [check_database(), check_broker(), check_disk()]


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
