"""Login throttling behind the reverse proxy: one client's failures lock that client, not everyone."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

pytestmark = pytest.mark.django_db

PROXY = "127.0.0.1"


def _login(username: str, password: str, **addresses: str) -> int:
    return (
        Client().post(reverse("login"), {"username": username, "password": password}, **addresses).status_code
    )


@pytest.fixture
def kim(make_user, settings):
    settings.LLAMON_TRUSTED_PROXIES = [PROXY]
    return make_user("viewer", "kim").get_username()


def test_one_clients_failures_behind_the_proxy_do_not_lock_another(kim) -> None:
    alice = {"REMOTE_ADDR": PROXY, "HTTP_X_FORWARDED_FOR": "198.51.100.7"}
    bob = {"REMOTE_ADDR": PROXY, "HTTP_X_FORWARDED_FOR": "203.0.113.9"}
    for _ in range(5):
        _login(kim, "wrong", **alice)
    assert _login(kim, "pw", **alice) == 429  # alice's address is locked for kim ...
    assert _login(kim, "pw", **bob) == 302  # ... bob, behind the same proxy, logs in


def test_addresses_a_client_writes_itself_do_not_escape_the_lock(kim) -> None:
    # Through the proxy: forged entries are left of the one the proxy appended, which decides.
    for i in range(5):
        _login(kim, "wrong", REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR=f"10.9.9.{i}, 198.51.100.7")
    assert _login(kim, "pw", REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR="10.9.9.99, 198.51.100.7") == 429
    # Straight to the server (not a trusted proxy): the header is ignored, its own address counts.
    for i in range(5):
        _login(kim, "wrong", REMOTE_ADDR="192.0.2.50", HTTP_X_FORWARDED_FOR=f"198.51.100.{i}")
    assert _login(kim, "pw", REMOTE_ADDR="192.0.2.50", HTTP_X_FORWARDED_FOR="198.51.100.200") == 429
    assert _login(kim, "pw", REMOTE_ADDR="192.0.2.51") == 302


def test_a_chain_of_trusted_proxies_is_walked_from_the_right(kim, settings) -> None:
    settings.LLAMON_TRUSTED_PROXIES = [PROXY, "10.0.0.0/8"]
    for _ in range(5):
        _login(kim, "wrong", REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR="198.51.100.7, 10.1.2.3")
    assert _login(kim, "pw", REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR="198.51.100.7, 10.4.5.6") == 429
    assert _login(kim, "pw", REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR="203.0.113.9, 10.1.2.3") == 302
