"""Reading settings from the environment: small typed helpers that fail with one clear line.

Every helper raises :class:`ConfigError` (an ``ImproperlyConfigured``) whose message starts
with the variable's name; the entry points (manage.py, the Celery app) print that message
alone, never a traceback.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off", ""}


class ConfigError(ImproperlyConfigured):
    """A bad or missing environment variable; the message names it."""


def env_str(name: str, default: str | None = None, *, required: bool = False) -> str | None:
    """The variable's value (stripped), the default, or ConfigError when required and unset."""
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        if required:
            raise ConfigError(f"{name} is required but not set")
        return default
    return value.strip()


def env_ed25519_seed(name: str) -> bytes | None:
    """An Ed25519 private key as the 32 bytes of its seed, from base64 (None when unset)."""
    value = env_str(name)
    if value is None:
        return None
    try:
        seed = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (ValueError, binascii.Error):
        seed = b""
    if len(seed) != 32:
        raise ConfigError(
            f"{name} must be the base64 of a 32-byte Ed25519 key (make one with: manage.py chain_head --new-key)"
        )
    return seed


def env_bool(name: str, default: bool) -> bool:
    """A yes/no variable (1/0, true/false, yes/no, on/off)."""
    value = os.environ.get(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in TRUE:
        return True
    if lowered in FALSE:
        return False
    raise ConfigError(f"{name} must be true or false (1/0, yes/no, on/off), got {value!r}")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    """A whole-number variable, optionally with a lower bound."""
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    try:
        number = int(value.strip())
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, got {value!r}") from None
    if minimum is not None and number < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {number}")
    return number


def env_list(name: str, default: list[str]) -> list[str]:
    """A comma-separated list."""
    value = os.environ.get(name)
    if value is None:
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]


def env_names(name: str, default: list[str]) -> tuple[str, ...]:
    """A comma-separated allow-list of variable names or PREFIX* patterns (see llamon_agent.envnames)."""
    from llamon_agent.envnames import parse_patterns

    try:
        return parse_patterns(env_list(name, default), setting=name)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    """One of a fixed set of values."""
    value = (os.environ.get(name) or default).strip()
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def database_config(url: str | None, *, sqlite_default: Path) -> dict[str, Any]:
    """DATABASES['default'] from DATABASE_URL, or the embedded SQLite file (WAL, IMMEDIATE, busy timeout)."""
    if url is None:
        return sqlite_config(sqlite_default)
    import dj_database_url

    if "://" not in url:
        raise ConfigError(
            f"DATABASE_URL must look like sqlite:////path/to/file.sqlite3 or postgres://user@host/db, got {_redact(url)}"
        )
    try:
        config = dj_database_url.parse(url)
    except Exception as exc:  # dj-database-url raises several unrelated types
        reason = str(exc).split(". ")[0]
        raise ConfigError(f"DATABASE_URL is not a valid database URL ({reason}): {_redact(url)}") from None
    if config["ENGINE"] == "django.db.backends.sqlite3":
        if not config.get("NAME"):
            raise ConfigError(f"DATABASE_URL names no SQLite file: {_redact(url)}")
        return sqlite_config(Path(config["NAME"]))
    if not config.get("NAME"):
        raise ConfigError(f"DATABASE_URL names no database: {_redact(url)}")
    config["CONN_HEALTH_CHECKS"] = True
    return config


def sqlite_config(path: Path) -> dict[str, Any]:
    """SQLite tuned for a web process and workers sharing one file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        "OPTIONS": {
            # IMMEDIATE takes the write lock at BEGIN, so concurrent writers wait (busy timeout)
            # instead of failing with "database is locked" when a read transaction upgrades.
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
    }


def redis_url(name: str = "REDIS_URL") -> str | None:
    """A redis://, rediss:// or unix:// URL, checked for shape (not reachability)."""
    value = env_str(name)
    if value is None:
        return None
    try:
        parts = urlsplit(value)
        port = parts.port  # raises ValueError on a non-numeric port
    except ValueError as exc:
        raise ConfigError(f"{name} is not a valid Redis URL ({exc}): {_redact(value)}") from None
    if parts.scheme not in {"redis", "rediss", "unix"}:
        raise ConfigError(f"{name} must start with redis://, rediss:// or unix://, got {_redact(value)}")
    if parts.scheme != "unix" and not parts.hostname:
        raise ConfigError(f"{name} names no host: {_redact(value)}")
    if parts.scheme == "unix" and not parts.path:
        raise ConfigError(f"{name} names no socket path: {_redact(value)}")
    del port
    return value


def dev_key_file(path: Path, make: Callable[[], str]) -> str:
    """A key for development, made once by ``make`` into a git-ignored file of mode 0600.

    The file is written under a temporary name with mode 0600 from its creation and linked into
    place only when whole, so the web server, the worker and beat, starting together, all read
    the one key that won (never a half-written file, never two keys)."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(make())
        try:
            os.link(temporary, path)  # fails if another process linked its key first: read that one
        except FileExistsError:
            pass
    finally:
        temporary.unlink()
    return path.read_text().strip()


def dev_secret_key(path: Path) -> str:
    """A secret generated once for development and kept in a git-ignored file."""
    return dev_key_file(path, lambda: secrets.token_urlsafe(50))


def dev_signing_key(path: Path) -> bytes:
    """The evidence chain's Ed25519 key for development (the 32 bytes of its seed), generated once
    into a git-ignored file, so that a fresh ``make run`` signs its exports as production does."""
    text = dev_key_file(path, lambda: base64.urlsafe_b64encode(secrets.token_bytes(32)).decode())
    try:
        seed = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, binascii.Error):
        seed = b""
    if len(seed) != 32:
        raise ConfigError(f"{path} is not the base64 of a 32-byte Ed25519 key: delete it to make a new one")
    return seed


def _redact(url: str) -> str:
    """The URL without its password, for error messages."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable>"
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return parts._replace(netloc=netloc).geturl()
    return url


# Variables that only a deployment sets: when any is present, manage.py never assumes development.
PRODUCTION_SIGNS = ("SECRET_KEY", "DATABASE_URL", "REDIS_URL", "ALLOWED_HOSTS", "CSRF_TRUSTED_ORIGINS")


def manage_env_default(base_dir: Path, environ: Mapping[str, str]) -> str | None:
    """The LLAMON_ENV that ``manage.py`` assumes when none is set, or None to keep the prod default.

    Development is assumed only when all three hold: LLAMON_ENV is unset (in the environment and
    in ``.env``, which the caller has loaded), the command runs from a git checkout (``.git`` next to
    ``manage.py``) and none of the production variables (:data:`PRODUCTION_SIGNS`) is set. Anything
    else keeps ``prod``, whose settings refuse to start without a real ``SECRET_KEY``: a deployment
    is never turned into development by accident, at worst a developer is asked to say ``dev``.
    """
    if (environ.get("LLAMON_ENV") or "").strip():
        return None
    if any((environ.get(name) or "").strip() for name in PRODUCTION_SIGNS):
        return None
    if not (base_dir / ".git").exists():
        return None
    return "dev"
