"""Outbound HTTP that goes only where the URL guard said it may (SSRF, redirects, DNS rebinding).

Every HTTP client the product owns (the LLM client, MCP streamable HTTP, the registry client,
the trace exporter) is built here, on a transport bound to ONE server: the origin of the URL
it was configured with. For each request the transport

1. refuses it unless it goes to that server (same scheme, host and port; or the https upgrade
   of an http URL on the default ports): a redirect elsewhere, whoever follows it (httpx, the
   openai SDK, which turns ``follow_redirects`` on per request), never reaches an address
   nobody checked;
2. checks the server's address with the :class:`~llamon_agent.urlguard.UrlPolicy` (or takes the
   addresses a caller already checked), and
3. connects to those checked addresses themselves, keeping the name as the Host header and the
   TLS server name, so the name is never resolved a second time (DNS rebinding).

A refusal raises :class:`DestinationRefused`, an ``httpx.ConnectError``: every client already
reports those as "could not reach ...", and nothing was sent.

Proxies from the environment are not used (``trust_env=False``): the guard checks the server's
address, not a proxy's, and a proxy would resolve the name again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import anyio.to_thread
import httpx

from llamon_agent.urlguard import UnsafeUrlError, UrlPolicy

# url -> the addresses it may be reached at (all checked); [] when the URL's host is an address.
Check = Callable[[str], Sequence[str]]

DEFAULT_POLICY = UrlPolicy()
_DEFAULT_PORTS = {"http": 80, "https": 443}


class DestinationRefused(httpx.ConnectError):
    """A request the guard refused before any connection was made; ``str()`` says why."""


def _origin(url: httpx.URL) -> tuple[str, str, int]:
    scheme = url.scheme.lower()
    return scheme, url.host.lower().rstrip("."), url.port or _DEFAULT_PORTS.get(scheme, 0)


def _show(origin: tuple[str, str, int]) -> str:
    scheme, host, port = origin
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}:{port}"


class _Binding:
    """The one server a client may talk to, and how its addresses are checked."""

    def __init__(self, url: str, check: Check, pinned: Sequence[str] | None) -> None:
        self.url = httpx.URL(url)
        self.origin = _origin(self.url)
        self.check = check
        self.pinned = list(pinned) if pinned is not None else None

    def admit(self, request: httpx.Request) -> None:
        """Refuse a request that does not go to the bound server (a redirect, a link, a mistake)."""
        origin = _origin(request.url)
        if origin == self.origin:
            return
        scheme, host, port = self.origin
        upgrade = scheme == "http" and port == 80 and origin == ("https", host, 443)
        if not upgrade:
            raise DestinationRefused(
                f"refused to send a request to {_show(origin)}: this client may only reach {_show(self.origin)} "
                "(the server it was configured with), so a redirect to another host or port is not followed",
                request=request,
            )

    def addresses(self, request: httpx.Request) -> list[str]:
        """The checked addresses to connect to, in order ([] when the URL's host is an address)."""
        if self.pinned is not None:
            return self.pinned
        scheme, host, port = _origin(request.url)
        # Only the origin: the path and query are not the guard's business (nor its length limit).
        target = str(httpx.URL(scheme=scheme, host=host, port=port, path="/"))
        try:
            return list(self.check(target))
        except UnsafeUrlError as exc:
            raise DestinationRefused(
                f"refused to connect to {_show((scheme, host, port))}: {exc}", request=request
            ) from None


def _pinned_requests(request: httpx.Request, addresses: Sequence[str]) -> list[httpx.Request]:
    """One copy of ``request`` per checked address; the Host header and TLS name stay the name.

    Copies, not the request itself: httpx builds a redirect from ``response.request.url``, which
    must keep the name.
    """
    if not addresses:
        return [request]
    host = request.url.host
    out = []
    for address in addresses:
        out.append(
            httpx.Request(
                request.method,
                request.url.copy_with(host=address),
                headers=request.headers,  # holds Host: the name, set from the original URL
                stream=request.stream,
                extensions={**request.extensions, "sni_hostname": host},
            )
        )
    return out


class GuardedTransport(httpx.BaseTransport):
    """Sync transport bound to one server; see the module doc."""

    def __init__(self, url: str, check: Check, *, pinned: Sequence[str] | None = None, **kwargs: Any) -> None:
        self._binding = _Binding(url, check, pinned)
        self._inner = httpx.HTTPTransport(**kwargs)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self._binding.admit(request)
        attempts = _pinned_requests(request, self._binding.addresses(request))
        for n, attempt in enumerate(attempts):
            try:
                return self._inner.handle_request(attempt)
            except httpx.ConnectError:
                # Nothing was sent yet: the next checked address (a name with IPv6 and IPv4) may answer.
                if n == len(attempts) - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        self._inner.close()


class AsyncGuardedTransport(httpx.AsyncBaseTransport):
    """Async transport bound to one server; the guard's resolution runs in a worker thread."""

    def __init__(self, url: str, check: Check, *, pinned: Sequence[str] | None = None, **kwargs: Any) -> None:
        self._binding = _Binding(url, check, pinned)
        self._inner = httpx.AsyncHTTPTransport(**kwargs)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self._binding.admit(request)
        if self._binding.pinned is not None:
            addresses = self._binding.pinned
        else:
            addresses = await anyio.to_thread.run_sync(self._binding.addresses, request)
        attempts = _pinned_requests(request, addresses)
        for n, attempt in enumerate(attempts):
            try:
                return await self._inner.handle_async_request(attempt)
            except httpx.ConnectError:
                if n == len(attempts) - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def aclose(self) -> None:
        await self._inner.aclose()


def _check_of(policy: UrlPolicy | Check | None) -> Check:
    if policy is None:
        return DEFAULT_POLICY.check
    if isinstance(policy, UrlPolicy):
        return policy.check
    return policy


def guarded_client(url: str, policy: UrlPolicy | Check | None = None, **kwargs: Any) -> httpx.Client:
    """An ``httpx.Client`` that reaches only ``url``'s server, at addresses ``policy`` checked.

    ``policy`` is a :class:`UrlPolicy` (None: :data:`DEFAULT_POLICY`) or any ``url -> addresses``
    check. Other keyword arguments go to ``httpx.Client``; redirects are not followed unless the
    caller asks (and then only on the same server).
    """
    kwargs.setdefault("follow_redirects", False)
    return httpx.Client(transport=GuardedTransport(url, _check_of(policy)), trust_env=False, **kwargs)


def guarded_async_client(
    url: str,
    policy: UrlPolicy | Check | None = None,
    *,
    pinned: Sequence[str] | None = None,
    transport: Callable[[httpx.AsyncBaseTransport], httpx.AsyncBaseTransport] | None = None,
    **kwargs: Any,
) -> httpx.AsyncClient:
    """Async :func:`guarded_client`. ``pinned``: addresses the caller already checked (not checked again).

    ``transport`` may wrap the guarded transport (the MCP pool tags failed requests that way).
    """
    kwargs.setdefault("follow_redirects", False)
    inner: httpx.AsyncBaseTransport = AsyncGuardedTransport(url, _check_of(policy), pinned=pinned)
    if transport is not None:
        inner = transport(inner)
    return httpx.AsyncClient(transport=inner, trust_env=False, **kwargs)
