"""System checks of the kernel's settings (``manage.py check``, ``check --deploy``)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks


@checks.register(checks.Tags.security, deploy=True)
def signing_key_check(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """core.W001 (``check --deploy``): no LLAMON_CHAIN_SIGNING_KEY, so evidence is unsigned."""
    if getattr(settings, "LLAMON_CHAIN_SIGNING_KEY", None):
        return []
    return [
        checks.Warning(
            "LLAMON_CHAIN_SIGNING_KEY is not set: chain heads and evidence exports are unsigned, so "
            "anyone who can edit an exported file (or the database) can forge evidence that checks out.",
            hint="Make a key with `python manage.py chain_head --new-key`, set it on every web and worker "
            "machine and hand `python manage.py chain_head --public-key` to your auditors (docs/deploy.md).",
            id="core.W001",
        )
    ]
