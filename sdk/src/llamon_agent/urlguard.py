"""Which URLs outbound HTTP may reach: the SSRF guard (engine-owned; no Django).

Rules (issue 6): http and https only, no user info, a host is required; link-local and cloud
metadata addresses are always refused; loopback and private ranges are refused unless
``allow_private`` (``LLAMON_ALLOW_PRIVATE_MCP`` in the web app). Host names are resolved through
an injectable resolver and *every* address must pass; a name that does not resolve is refused.
IPv4 literals are read the way the C resolver reads them (``2130706433``, ``0177.0.0.1``,
``0x7f000001`` and ``127.1`` all mean 127.0.0.1), so odd spellings cannot sneak past.

:func:`check_mcp_url` returns the addresses it checked; :mod:`llamon_agent.net` connects to
exactly those (never a second lookup) and refuses any request, redirects included, that leaves
the configured server. :class:`UrlPolicy` bundles a policy with its resolver for the clients.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

# host, port -> the addresses it resolves to (strings). Raise OSError when it does not resolve.
Resolver = Callable[[str, int], Iterable[str]]
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_URL_LENGTH = 2000
PRIVATE_HINT = "loopback and private addresses are refused unless LLAMON_ALLOW_PRIVATE_MCP is set"

# Names of cloud metadata services: refused before any resolution, whatever they resolve to.
METADATA_HOSTS = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.azure.com",
        "metadata.tencentyun.com",
        "metadata.platformequinix.com",
    }
)
# Metadata addresses outside the link-local ranges (which are refused as a whole).
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, Oracle, DigitalOcean
        "169.254.170.2",  # AWS ECS task metadata
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "168.63.129.16",  # Azure wire server
        "192.0.0.192",  # Oracle Cloud (classic)
    )
)
LINK_LOCAL = (ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fe80::/10"))
# IPv6 prefixes that carry an IPv4 address in their last 32 bits.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_V4_COMPATIBLE = ipaddress.ip_network("::/96")  # deprecated "::127.0.0.1" form; :: and ::1 excluded
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")


class UnsafeUrlError(ValueError):
    """An MCP URL was refused; ``str()`` says why in words a person can act on."""


def default_resolver(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to, through the system resolver (``socket.getaddrinfo``)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def check_mcp_url(url: str, *, allow_private: bool, resolver: Resolver | None = None) -> list[str]:
    """Raise UnsafeUrlError unless ``url`` is an http(s) URL whose host and every resolved address are allowed.

    Returns the addresses a host name resolved to (all checked; empty for an address literal):
    the pool connects to them rather than resolving the name again.
    """
    if not isinstance(url, str) or not url:
        raise UnsafeUrlError("Enter the server's URL, like https://mcp.example.com/mcp.")
    if len(url) > MAX_URL_LENGTH:
        raise UnsafeUrlError(f"The URL is longer than {MAX_URL_LENGTH} characters.")
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url) or "\\" in url:
        # Parsers disagree about spaces and backslashes ("http://a\@b"): refuse rather than guess.
        raise UnsafeUrlError("The URL contains spaces, backslashes or control characters.")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UnsafeUrlError(f"This is not a valid URL ({exc}).") from None
    scheme = parts.scheme.lower()
    if scheme not in {"http", "https"}:
        shown = f"starts with {scheme}:" if scheme else "has no scheme"
        raise UnsafeUrlError(f"Only http:// and https:// URLs can be MCP servers (this one {shown}).")
    if "@" in parts.netloc:
        raise UnsafeUrlError(
            "The URL must not contain a user name or password (the part before '@'); "
            "send credentials as a header whose value comes from an environment variable."
        )
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise UnsafeUrlError("The URL has no host name.")
    port = port or (443 if scheme == "https" else 80)

    address = parse_host_address(host)
    if address is not None:
        _check_address(address, shown=host, allow_private=allow_private)
        return []

    if "%" in host:
        raise UnsafeUrlError(f"The host name {host!r} is percent-encoded; write it plainly.")
    try:
        name = host.encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise UnsafeUrlError(f"The host name {host!r} is not a valid domain name.") from None
    # IDNA folds look-alikes ("１２７.０.０.１", "ⓛⓞⓒⓐⓛⓗⓞⓢⓣ") into ASCII: check what it became.
    address = parse_host_address(name)
    if address is not None:
        _check_address(address, shown=f"{host} ({name})", allow_private=allow_private)
        return []
    if name in METADATA_HOSTS:
        raise UnsafeUrlError(f"{name} is a cloud metadata service; it is always refused.")
    if (name == "localhost" or name.endswith(".localhost")) and not allow_private:
        raise UnsafeUrlError(f"{name} is a loopback name; {PRIVATE_HINT}.")
    return _check_resolved(name, port, allow_private=allow_private, resolver=resolver or default_resolver)


def parse_host_address(host: str) -> IPAddress | None:
    """The IP address a URL host stands for (IPv6, dotted IPv4 or a legacy IPv4 spelling), else None.

    Raises UnsafeUrlError for a host that looks numeric but is not a valid address (``1.2.3.999``),
    because resolvers disagree about such names.
    """
    text = host.strip("[]").lower()
    if ":" in text:
        try:
            return ipaddress.IPv6Address(text)
        except ValueError:
            raise UnsafeUrlError(f"{host!r} is not a valid IPv6 address.") from None
    labels = text.split(".")
    if labels and labels[-1] == "":
        labels = labels[:-1]
    # As in browsers (WHATWG "ends in a number"): a host whose last label is numeric is an IPv4 address.
    if not labels or not _NUMERIC_LABEL.match(labels[-1]):
        return None
    value = _legacy_ipv4(labels)
    if value is None:
        raise UnsafeUrlError(f"{host!r} looks like an IP address but is not a valid one.")
    return ipaddress.IPv4Address(value)


def _legacy_ipv4(labels: list[str]) -> int | None:
    """inet_aton's reading: 1-4 parts, each decimal, 0x-hex or 0-octal; the last fills the rest."""
    if len(labels) > 4:
        return None
    numbers: list[int] = []
    for label in labels:
        try:
            if label.startswith("0x"):
                numbers.append(int(label[2:] or "0", 16))
            elif len(label) > 1 and label.startswith("0"):
                numbers.append(int(label, 8))
            else:
                numbers.append(int(label, 10))
        except ValueError:
            return None
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (4 - len(head)):
        return None
    value = 0
    for n in head:
        value = value * 256 + n
    return value * int(256 ** (4 - len(head))) + last  # int ** int is typed Any (could be a float)


def _check_resolved(name: str, port: int, *, allow_private: bool, resolver: Resolver) -> list[str]:
    try:
        raw = list(resolver(name, port))
    except (OSError, UnicodeError) as exc:
        raise UnsafeUrlError(f"The host name {name} does not resolve ({exc}).") from None
    if not raw:
        raise UnsafeUrlError(f"The host name {name} does not resolve to any address.")
    checked: list[str] = []
    for item in raw:
        try:
            # A scope id ("fe80::1%eth0") is not part of the address.
            address = ipaddress.ip_address(str(item).split("%", 1)[0])
        except ValueError:
            raise UnsafeUrlError(
                f"The host name {name} resolves to {item!r}, which is not an IP address."
            ) from None
        _check_address(address, shown=f"{name} (resolves to {address})", allow_private=allow_private)
        checked.append(str(address))
    return checked


def _embedded_v4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, 6to4, Teredo, NAT64, IPv4-compatible), if any."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64 or (address in _V4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _check_address(address: IPAddress, *, shown: str, allow_private: bool) -> None:
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id:
            address = ipaddress.IPv6Address(str(address).split("%", 1)[0])
        inner = _embedded_v4(address)
        if inner is not None:
            _check_address(inner, shown=f"{shown} (an IPv6 form of {inner})", allow_private=allow_private)
    if address in METADATA_ADDRESSES:
        raise UnsafeUrlError(f"{shown} is a cloud metadata address; it is always refused.")
    if any(address in net for net in LINK_LOCAL if net.version == address.version):
        raise UnsafeUrlError(
            f"{shown} is a link-local address (where cloud metadata services live); it is always refused."
        )
    if address.is_multicast or (
        isinstance(address, ipaddress.IPv4Address) and address == ipaddress.IPv4Address("255.255.255.255")
    ):
        raise UnsafeUrlError(f"{shown} is a multicast or broadcast address, not a server.")
    if address.is_global:
        return
    if allow_private:
        return
    if (
        address.is_loopback
        or address.is_unspecified
        or (isinstance(address, ipaddress.IPv4Address) and address in ipaddress.ip_network("0.0.0.0/8"))
    ):
        raise UnsafeUrlError(f"{shown} is a loopback address (this machine); {PRIVATE_HINT}.")
    raise UnsafeUrlError(f"{shown} is a private or reserved address; {PRIVATE_HINT}.")


@dataclass(frozen=True)
class UrlPolicy:
    """Where outbound HTTP may go: the address policy and the resolver that names are looked up with.

    ``UrlPolicy()`` is the engine's default for URLs an operator configured (``LLAMON_*_URL``):
    private and loopback addresses are allowed (llamon-web, vLLM and Ollama usually run there),
    cloud metadata and link-local addresses never are.
    """

    allow_private: bool = True
    resolver: Resolver | None = None

    def check(self, url: str) -> list[str]:
        """:func:`check_mcp_url` under this policy: the checked addresses, or UnsafeUrlError."""
        return check_mcp_url(url, allow_private=self.allow_private, resolver=self.resolver)
