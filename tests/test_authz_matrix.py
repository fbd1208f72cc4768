"""Every URL pattern x {anonymous, viewer, editor, admin} against an expected table.

A URL pattern missing from EXPECTED fails the test: each new page must declare who may see it.
Values: the status for a GET by that role ("login" = redirect to the login page).
"""

from __future__ import annotations

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse

pytestmark = pytest.mark.django_db

ROLES = ("anonymous", "viewer", "editor", "admin")
LOGIN = "login"

# url name -> (role declared on the view, {role: expected GET status})
EXPECTED: dict[str, tuple[str, dict[str, int | str]]] = {
    "home": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "healthz": ("public", {"anonymous": 200, "viewer": 200, "editor": 200, "admin": 200}),
    # An authenticated user asking for the login page is sent on to the home page.
    "login": ("public", {"anonymous": 200, "viewer": 302, "editor": 302, "admin": 302}),
    "logout": ("public", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "servers:list": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
}
# Django's own admin is guarded by is_staff and is not part of the product's pages.
IGNORED_PREFIXES = ("admin:",)
SAMPLE_KWARGS: dict[str, dict[str, object]] = {}


def _patterns(resolver: URLResolver, namespace: str = "") -> list[tuple[str, URLPattern]]:
    found = []
    for entry in resolver.url_patterns:
        if isinstance(entry, URLResolver):
            inner = f"{namespace}{entry.namespace}:" if entry.namespace else namespace
            found.extend(_patterns(entry, inner))
        elif entry.name:
            found.append((f"{namespace}{entry.name}", entry))
        else:
            found.append((f"{namespace}<unnamed {entry.pattern}>", entry))
    return found


def _product_patterns() -> list[tuple[str, URLPattern]]:
    return [(name, p) for name, p in _patterns(get_resolver()) if not name.startswith(IGNORED_PREFIXES)]


def test_every_url_pattern_is_in_the_table() -> None:
    names = {name for name, _ in _product_patterns()}
    missing = sorted(names - set(EXPECTED))
    stale = sorted(set(EXPECTED) - names)
    assert not missing, f"add these URL patterns to EXPECTED with their role: {missing}"
    assert not stale, f"these EXPECTED entries have no URL pattern any more: {stale}"


def test_every_view_declares_the_role_in_the_table() -> None:
    for name, pattern in _product_patterns():
        declared = getattr(pattern.callback, "required_role", None)
        assert declared == EXPECTED[name][0], f"{name}: view declares {declared!r}, table says {EXPECTED[name][0]!r}"


@pytest.mark.parametrize("role", ROLES)
def test_each_role_gets_the_expected_response(role: str, client, make_user) -> None:
    if role != "anonymous":
        client.force_login(make_user(role))
    failures = []
    for name, _ in _product_patterns():
        url = reverse(name, kwargs=SAMPLE_KWARGS.get(name))
        response = client.get(url)
        expected = EXPECTED[name][1][role]
        if expected == LOGIN:
            ok = response.status_code == 302 and response["Location"].startswith(reverse("login"))
        else:
            ok = response.status_code == expected
        if not ok:
            failures.append(f"{name} as {role}: got {response.status_code}, expected {expected}")
    assert not failures, "\n".join(failures)


def test_a_user_without_any_role_is_refused_everywhere_but_public_pages(client, make_user) -> None:
    client.force_login(make_user(None))
    for name, _ in _product_patterns():
        if EXPECTED[name][0] == "public":
            continue
        response = client.get(reverse(name, kwargs=SAMPLE_KWARGS.get(name)))
        assert response.status_code == 403, name
