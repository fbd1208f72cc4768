"""Which environment variables a user-chosen *name* may read: the operator's allow-list.

An agent's key variable (``api_key_env``) and an MCP server's ``env``/``headers`` names are
typed by users, and the value of the variable they name leaves the process (as a bearer token
or in a child's environment). So a name is used only when the operator allowed it, and never
when it is one of the app's own settings, whatever the allow-list says.

An allow-list entry is an exact name (``OPENAI_API_KEY``) or a prefix ending in ``*``
(``LLAMON_LLM_KEY_*``). A prefix never admits a name containing SECRET, PASSWORD or TOKEN:
such a variable must be listed by its exact name. Names are compared case-sensitively, as the
environment does on Linux; the reserved checks ignore case.

The check looks at the name only, never at the environment: the answer (and its message) is
the same whether the variable is set or not, so it tells nobody what the server holds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

MAX_NAME_CHARS = 100
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
PATTERN_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\*?")

# The app's own configuration: never handed to a model endpoint or an MCP server.
RESERVED_NAMES = frozenset({"SECRET_KEY", "DATABASE_URL", "REDIS_URL"})
RESERVED_PREFIXES = ("DJANGO_", "CELERY_", "LLAMON_")
# Inside LLAMON_, the two families the operator fills with keys for models and MCP servers.
OPERATOR_PREFIXES = ("LLAMON_LLM_KEY_", "LLAMON_MCP_")
SENSITIVE_WORDS = ("SECRET", "PASSWORD", "TOKEN")


def reserved(name: str) -> bool:
    """True for the app's own settings: SECRET_KEY, DATABASE_URL, REDIS_URL, DJANGO_*, CELERY_*, LLAMON_*.

    LLAMON_LLM_KEY_* and LLAMON_MCP_* are the operator's, except names with SECRET, PASSWORD or
    TOKEN in them (LLAMON_ADMIN_PASSWORD and LLAMON_REGISTRY_TOKEN look alike to a typo).
    """
    upper = name.upper()
    if upper in RESERVED_NAMES:
        return True
    if upper.startswith(OPERATOR_PREFIXES):
        return any(word in upper for word in SENSITIVE_WORDS)
    return upper.startswith(RESERVED_PREFIXES)


def parse_patterns(entries: Iterable[str], *, setting: str) -> tuple[str, ...]:
    """Allow-list entries, checked; ValueError (naming ``setting``) for an entry that is not a name or PREFIX*."""
    out: list[str] = []
    for entry in entries:
        entry = entry.strip()
        if not entry:
            continue
        if not PATTERN_RE.fullmatch(entry) or len(entry) > MAX_NAME_CHARS:
            raise ValueError(
                f"{setting}: {entry!r} is not a variable name or a prefix ending in * (like LLAMON_LLM_KEY_*)"
            )
        if entry.endswith("*") and len(entry) < 4:
            raise ValueError(
                f"{setting}: the prefix {entry!r} is too broad; use at least 3 characters before *"
            )
        if reserved(entry.rstrip("*")):
            raise ValueError(f"{setting}: {entry!r} is one of this app's own settings and cannot be allowed")
        out.append(entry)
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class EnvNamePolicy:
    """The names one kind of field may use: ``allowed`` entries from the operator's ``setting``."""

    setting: str
    allowed: tuple[str, ...]
    what: str = "this field"

    def refusal(self, name: object) -> str | None:
        """Why ``name`` may not be used (a sentence), or None when it may. Never reads the environment."""
        if not isinstance(name, str) or len(name) > MAX_NAME_CHARS or not NAME_RE.fullmatch(name):
            # Not echoed: the usual mistake is pasting the value (a key) itself.
            return (
                f"{self.what} takes the NAME of an environment variable (letters, digits and '_', "
                f"at most {MAX_NAME_CHARS} characters), never its value"
            )
        shown = f"allowed: {', '.join(self.allowed) or '(none)'} (the operator sets {self.setting})"
        if reserved(name):
            return f"{name} holds this app's own configuration or secrets and is never used for {self.what}; {shown}"
        if not self.allows(name):
            return f"{name} is not a variable the operator allows for {self.what}; {shown}"
        return None

    def allows(self, name: str) -> bool:
        """Whether ``name`` is admitted (well-formed, not reserved, on the allow-list)."""
        if len(name) > MAX_NAME_CHARS or not NAME_RE.fullmatch(name) or reserved(name):
            return False
        for entry in self.allowed:
            if entry.endswith("*"):
                if name.startswith(entry[:-1]) and not any(w in name.upper() for w in SENSITIVE_WORDS):
                    return True
            elif name == entry:
                return True
        return False

    def first_refusal(self, names: Iterable[str]) -> str | None:
        """The refusal of the first name in ``names`` that may not be used, or None."""
        for name in names:
            reason = self.refusal(name)
            if reason is not None:
                return reason
        return None


def header_env_name(entry: str) -> str:
    """The variable named by an MCP ``headers`` entry (``Header-Name=ENV_NAME`` or ``ENV_NAME``)."""
    return entry.rpartition("=")[2]
