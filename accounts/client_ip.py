"""Which address a request comes from, through the proxies the operator trusts.

Behind the documented reverse proxy every request's REMOTE_ADDR is the proxy's, so login
throttling keyed on it locked a username for every client at once. The proxies named in
``FORWARDED_ALLOW_IPS`` (the same setting gunicorn trusts for ``X-Forwarded-Proto``) append
the address they saw to ``X-Forwarded-For``; walking that list from the right, the first
address that is not a trusted proxy is the client. Entries a client wrote itself are to its
left and never reached; a request that did not come through a trusted proxy is its REMOTE_ADDR.
"""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpRequest


def _trusted(address: str) -> bool:
    proxies = settings.LLAMON_TRUSTED_PROXIES
    if "*" in proxies:
        return True
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    for entry in proxies:
        try:
            if ip in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False


def client_ip(request: HttpRequest) -> str | None:
    """The client's address (django-axes' AXES_CLIENT_IP_CALLABLE)."""
    remote = request.META.get("REMOTE_ADDR") or None
    if remote is None or not _trusted(remote):
        return remote
    forwarded = [a.strip() for a in request.headers.get("x-forwarded-for", "").split(",") if a.strip()]
    for address in reversed(forwarded):
        if not _trusted(address):
            try:
                return str(ipaddress.ip_address(address))
            except ValueError:
                return remote  # not an address: a proxy we trust would not write that
    return forwarded[0] if forwarded else remote
