"""Checks of the services the product needs: the database and the broker (one line each)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings
from django.db import connection


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


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
        return Check("broker", True, "embedded (filesystem)")
    return Check("broker", False, f"embedded broker folder {folder} is not writable")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
