"""Which URLs an MCP server (or an agent's LLM endpoint) may have, with this project's settings.

The guard itself is the engine's (:mod:`llamon_agent.urlguard`, re-exported here); this module
adds what comes from Django settings: ``LLAMON_ALLOW_PRIVATE_MCP`` and ``LLAMON_URL_RESOLVER``.
URLs are checked when saved and again on connect; the clients of :mod:`llamon_agent.net`
connect only to the addresses checked and follow no redirect off the configured server.
"""

from __future__ import annotations

from llamon_agent.urlguard import (
    LINK_LOCAL,
    MAX_URL_LENGTH,
    METADATA_ADDRESSES,
    METADATA_HOSTS,
    PRIVATE_HINT,
    IPAddress,
    Resolver,
    UnsafeUrlError,
    UrlPolicy,
    check_mcp_url,
    default_resolver,
    parse_host_address,
)

__all__ = [
    "LINK_LOCAL",
    "MAX_URL_LENGTH",
    "METADATA_ADDRESSES",
    "METADATA_HOSTS",
    "PRIVATE_HINT",
    "IPAddress",
    "Resolver",
    "UnsafeUrlError",
    "UrlPolicy",
    "check_mcp_url",
    "check_mcp_url_configured",
    "configured_policy",
    "configured_resolver",
    "default_resolver",
    "parse_host_address",
]


def configured_resolver() -> Resolver:
    """The resolver named by ``settings.LLAMON_URL_RESOLVER`` (a dotted path; tests name a fake), else the system one."""
    from django.conf import settings
    from django.utils.module_loading import import_string

    dotted = getattr(settings, "LLAMON_URL_RESOLVER", None)
    return import_string(dotted) if dotted else default_resolver


def check_mcp_url_configured(url: str) -> list[str]:
    """:func:`check_mcp_url` with the project's settings (``LLAMON_ALLOW_PRIVATE_MCP``, ``LLAMON_URL_RESOLVER``)."""
    from django.conf import settings

    return check_mcp_url(
        url, allow_private=bool(settings.LLAMON_ALLOW_PRIVATE_MCP), resolver=configured_resolver()
    )


def configured_policy() -> UrlPolicy:
    """The project's :class:`UrlPolicy`: what outbound clients built for the web app and its workers obey."""
    from django.conf import settings

    return UrlPolicy(allow_private=bool(settings.LLAMON_ALLOW_PRIVATE_MCP), resolver=configured_resolver())
