"""The MCP URL guard: hostile URLs refused when saved and on connect; names resolved by a fake resolver only.

No test here uses real DNS: every host name goes through ``fake_resolver`` (tests/support/fake_dns.py), and
traffic stays on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llamon_agent.mcp import McpConnectionError, McpServerSpec
from llamon_agent.mcp.pool import McpPool
from servers.urlguard import UnsafeUrlError, check_mcp_url, configured_resolver, default_resolver
from tests.support.fake_dns import FAKE_RESOLVER, fake_resolver


def _refusal(url: str, *, allow_private: bool = False) -> str:
    with pytest.raises(UnsafeUrlError) as info:
        check_mcp_url(url, allow_private=allow_private, resolver=fake_resolver)
    return str(info.value)


# (url, a phrase the message must contain). Refused with LLAMON_ALLOW_PRIVATE_MCP off.
HOSTILE = [
    # loopback, in every spelling the C resolver accepts
    ("http://127.0.0.1:8765/mcp", "loopback"),
    ("http://127.8.9.10/mcp", "loopback"),
    ("http://2130706433/mcp", "loopback"),  # decimal
    ("http://0177.0.0.1/mcp", "loopback"),  # octal
    ("http://0x7f000001/mcp", "loopback"),  # hex
    ("http://0x7f.0.0.1/mcp", "loopback"),  # hex first part
    ("http://127.1/mcp", "loopback"),  # short form
    ("http://[::1]/mcp", "loopback"),
    ("http://[::ffff:127.0.0.1]/mcp", "loopback"),  # IPv4-mapped
    ("http://[::ffff:7f00:1]/mcp", "loopback"),  # IPv4-mapped, hex
    ("http://[64:ff9b::7f00:1]/mcp", "loopback"),  # NAT64
    ("http://0.0.0.0:8000/mcp", "loopback"),
    ("http://0/mcp", "loopback"),
    ("http://localhost:8765/mcp", "loopback"),
    ("http://api.localhost/mcp", "loopback"),
    ("http://127.0.0.1./mcp", "loopback"),  # trailing dot
    # link-local and metadata: refused in any mode (see ALWAYS_REFUSED)
    ("http://169.254.169.254/latest/meta-data/", "metadata"),
    ("http://169.254.1.1/", "link-local"),
    ("http://[fe80::1]/", "link-local"),
    ("http://[fd00:ec2::254]/", "metadata"),
    ("http://100.100.100.200/", "metadata"),
    ("http://metadata.google.internal/computeMetadata/v1/", "metadata"),
    ("http://METADATA.GOOGLE.INTERNAL./", "metadata"),
    ("http://[::ffff:169.254.169.254]/", "metadata"),
    ("http://0xa9fea9fe/", "metadata"),  # 169.254.169.254 in hex
    # private ranges
    ("http://10.1.2.3/mcp", "private"),
    ("http://172.16.0.1/mcp", "private"),
    ("http://172.31.255.254/mcp", "private"),
    ("http://192.168.0.10/mcp", "private"),
    ("http://100.64.0.1/mcp", "private"),  # CGNAT
    ("http://[fc00::1]/mcp", "private"),
    ("http://[fd12:3456:789a::1]/mcp", "private"),
    ("http://198.18.0.1/mcp", "private"),  # benchmarking range
    # schemes
    ("file:///etc/passwd", "Only http:// and https://"),
    ("gopher://127.0.0.1:6379/_INFO", "Only http:// and https://"),
    ("ftp://mcp.example.com/", "Only http:// and https://"),
    ("javascript:alert(1)", "Only http:// and https://"),
    ("dict://127.0.0.1:11211/stat", "Only http:// and https://"),
    ("//mcp.example.com/mcp", "has no scheme"),
    # user info and parser confusion
    ("http://127.0.0.1@evil.example.com/mcp", "user name or password"),
    ("http://user:pass@mcp.example.com/mcp", "user name or password"),
    ("http://mcp.example.com@169.254.169.254/", "user name or password"),
    ("http://mcp.example.com\\@127.0.0.1/", "backslashes"),
    ("http://mcp.example.com /mcp", "spaces"),
    ("http:///mcp", "no host"),
    ("http://1.2.3.999/", "not a valid one"),
    ("http://127.0.0.%31/", "percent-encoded"),
    ("http://１２７.０.０.１/", "loopback"),  # fullwidth digits, folded by IDNA
    ("http://ⓛⓞⓒⓐⓛⓗⓞⓢⓣ/", "loopback"),  # circled letters, folded by IDNA
    ("http://mcp.example.com:99999/", "not a valid URL"),
    # names that resolve to internal addresses, or do not resolve
    ("http://internal.example.com/mcp", "private"),
    ("http://rebind.example.com/mcp", "loopback"),
    ("http://loop.example.com/mcp", "loopback"),
    ("http://v6loop.example.com/mcp", "loopback"),
    ("http://meta.example.com/", "metadata"),
    ("http://meta6.example.com/", "metadata"),
    ("http://linklocal6.example.com/", "link-local"),
    ("http://cgnat.example.com/", "private"),
    ("http://ula.example.com/", "private"),
    ("http://mapped.example.com/", "private"),
    ("http://does-not-exist.example.com/mcp", "does not resolve"),
    ("http://empty.example.com/mcp", "does not resolve"),
    ("http://garbage.example.com/mcp", "not an IP address"),
]

ALWAYS_REFUSED = [
    "http://169.254.169.254/latest/meta-data/",
    "http://[fe80::1]/",
    "http://[fd00:ec2::254]/",
    "http://100.100.100.200/",
    "http://metadata.google.internal/",
    "http://[::ffff:169.254.169.254]/",
    "http://meta.example.com/",
    "http://linklocal6.example.com/",
    "file:///etc/passwd",
    "gopher://127.0.0.1:6379/_INFO",
    "http://127.0.0.1@evil.example.com/",
    "http://does-not-exist.example.com/",
    "http://224.0.0.1/",
]


def test_there_are_at_least_25_hostile_urls() -> None:
    assert len(HOSTILE) >= 25


@pytest.mark.parametrize(("url", "phrase"), HOSTILE)
def test_hostile_url_is_refused_with_a_readable_reason(url: str, phrase: str) -> None:
    message = _refusal(url)
    assert phrase.lower() in message.lower(), message


@pytest.mark.parametrize("url", ALWAYS_REFUSED)
def test_metadata_link_local_and_bad_schemes_are_refused_even_when_private_is_allowed(url: str) -> None:
    _refusal(url, allow_private=True)


def test_private_refusals_name_the_setting_that_allows_them() -> None:
    assert "LLAMON_ALLOW_PRIVATE_MCP" in _refusal("http://10.0.0.1/")


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8765/mcp",
        "http://2130706433/mcp",
        "http://[::1]:8765/mcp",
        "http://10.1.2.3/mcp",
        "http://192.168.0.10/mcp",
        "http://internal.example.com/mcp",
        "http://loop.example.com/mcp",
    ],
)
def test_loopback_and_private_are_allowed_with_the_flag(url: str) -> None:
    check_mcp_url(url, allow_private=True, resolver=fake_resolver)


@pytest.mark.parametrize(
    "url",
    [
        "https://mcp.example.com/mcp",
        "HTTP://MCP.EXAMPLE.COM:8080/mcp",
        "http://dual.example.com/",
        "https://93.184.216.34/mcp",
    ],
)
def test_public_urls_pass(url: str) -> None:
    check_mcp_url(url, allow_private=False, resolver=fake_resolver)


def test_every_resolved_address_is_checked_not_only_the_first() -> None:
    assert "127.0.0.1" in _refusal("http://rebind.example.com/")


def test_ip_literals_never_reach_the_resolver() -> None:
    def exploding(host: str, port: int) -> list[str]:
        raise AssertionError(f"resolver called for {host}")

    check_mcp_url("http://93.184.216.34/", allow_private=False, resolver=exploding)
    with pytest.raises(UnsafeUrlError):
        check_mcp_url("http://0x7f000001/", allow_private=False, resolver=exploding)


def test_the_resolver_gets_the_idna_name_and_the_default_port() -> None:
    seen: list[tuple[str, int]] = []

    def recording(host: str, port: int) -> list[str]:
        seen.append((host, port))
        return ["93.184.216.34"]

    check_mcp_url("https://Bücher.example/mcp", allow_private=False, resolver=recording)
    check_mcp_url("http://mcp.example.com:8443/", allow_private=False, resolver=recording)
    assert seen == [("xn--bcher-kva.example", 443), ("mcp.example.com", 8443)]


def test_configured_resolver_follows_the_settings_hook(settings) -> None:
    settings.LLAMON_URL_RESOLVER = FAKE_RESOLVER
    assert configured_resolver() is fake_resolver
    settings.LLAMON_URL_RESOLVER = None
    assert configured_resolver() is default_resolver


# --------------------------------------------------------------------------- on connect: the pool's guard


@pytest.fixture
def guarded_pool() -> Iterator:
    """``guarded_pool(allow_private)`` -> an McpPool whose http_guard is check_mcp_url with the fake resolver."""
    pools: list[McpPool] = []

    def make(allow_private: bool) -> McpPool:
        pool = McpPool(
            http_guard=lambda url: check_mcp_url(url, allow_private=allow_private, resolver=fake_resolver),
            connect_timeout_s=10,
        )
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        pool.close(timeout=10)


def _spec(url: str) -> McpServerSpec:
    return McpServerSpec(mcp_id="guarded", transport="http", url=url, timeout_s=10)


def test_the_pool_refuses_a_loopback_url_on_connect_without_sending_anything(http_stub, guarded_pool) -> None:
    target = http_stub(404)
    pool = guarded_pool(allow_private=False)
    pool.register(_spec(target.url))
    with pytest.raises(McpConnectionError, match="refused to connect.*loopback"):
        pool.list_tools_sync("guarded")
    assert target.hits == 0


def test_a_redirect_to_the_metadata_address_is_not_followed(http_stub, guarded_pool) -> None:
    # The loopback server itself is allowed (allow_private=True); the metadata address never is.
    redirector = http_stub(307, "http://169.254.169.254/latest/meta-data/iam/security-credentials/")
    pool = guarded_pool(allow_private=True)
    pool.register(_spec(redirector.url))
    with pytest.raises(McpConnectionError) as info:
        pool.list_tools_sync("guarded")
    assert "not followed" in str(info.value)
    assert redirector.hits >= 1


def test_a_redirect_to_another_host_is_never_followed(http_stub, guarded_pool) -> None:
    canary = http_stub(200)
    # Same machine, other origin (port): the MCP client must not follow it, so the canary stays silent.
    redirector = http_stub(307, canary.url)
    pool = guarded_pool(allow_private=True)
    pool.register(_spec(redirector.url))
    with pytest.raises(McpConnectionError, match="not followed"):
        pool.list_tools_sync("guarded")
    assert redirector.hits >= 1
    assert canary.hits == 0
