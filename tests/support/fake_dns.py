"""The only "DNS" the tests use: FAKE_DNS through ``fake_resolver``, set as the app's resolver by
``settings.LLAMON_URL_RESOLVER = FAKE_RESOLVER``. Public-looking answers use global addresses; no
test reaches a real name server."""

from __future__ import annotations

FAKE_RESOLVER = "tests.support.fake_dns.fake_resolver"

FAKE_DNS: dict[str, list[str]] = {
    "mcp.example.com": ["93.184.216.34"],
    "dual.example.com": ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"],
    "internal.example.com": ["10.0.0.5"],
    "rebind.example.com": ["93.184.216.34", "127.0.0.1"],  # one good address is not enough
    "loop.example.com": ["127.0.0.1"],
    "v6loop.example.com": ["::1"],
    "meta.example.com": ["169.254.169.254"],
    "meta6.example.com": ["fd00:ec2::254"],
    "linklocal6.example.com": ["fe80::1%eth0"],
    "cgnat.example.com": ["100.64.12.34"],
    "ula.example.com": ["fd12:3456:789a::1"],
    "mapped.example.com": ["::ffff:192.168.1.10"],
    "empty.example.com": [],
    "garbage.example.com": ["not-an-ip"],
}


def fake_resolver(host: str, port: int) -> list[str]:
    """FAKE_DNS as a resolver; an unknown name does not resolve (like NXDOMAIN)."""
    if host not in FAKE_DNS:
        raise OSError(f"[Errno -2] Name or service not known: {host}")
    return list(FAKE_DNS[host])
