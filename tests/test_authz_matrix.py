"""Every URL pattern x {anonymous, viewer, editor, admin} against an expected table.

A URL pattern missing from EXPECTED (tests/support/authz.py) fails the test: each new page must
declare who may see it.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.support.authz import EXPECTED, LOGIN, POST_ROLES, RANK, ROLES, product_patterns

pytestmark = pytest.mark.django_db


def test_every_url_pattern_is_in_the_table() -> None:
    names = {name for name, _ in product_patterns()}
    missing = sorted(names - set(EXPECTED))
    stale = sorted(set(EXPECTED) - names)
    assert not missing, f"add these URL patterns to EXPECTED with their role: {missing}"
    assert not stale, f"these EXPECTED entries have no URL pattern any more: {stale}"


def test_every_view_declares_the_role_in_the_table() -> None:
    for name, pattern in product_patterns():
        declared = getattr(pattern.callback, "required_role", None)
        assert declared == EXPECTED[name][0], (
            f"{name}: view declares {declared!r}, table says {EXPECTED[name][0]!r}"
        )


@pytest.mark.parametrize("role", ROLES)
def test_each_role_gets_the_expected_response(role: str, client, make_user, sample_kwargs) -> None:
    if role != "anonymous":
        client.force_login(make_user(role))
    failures = []
    for name, _ in product_patterns():
        url = reverse(name, kwargs=sample_kwargs.get(name))
        response = client.get(url)
        expected = EXPECTED[name][1][role]
        if expected == LOGIN:
            ok = response.status_code == 302 and response["Location"].startswith(reverse("login"))
        else:
            ok = response.status_code == expected
        if not ok:
            failures.append(f"{name} as {role}: got {response.status_code}, expected {expected}")
    assert not failures, "\n".join(failures)


def test_a_user_without_any_role_is_refused_everywhere_but_public_pages(
    client, make_user, sample_kwargs
) -> None:
    client.force_login(make_user(None))
    for name, _ in product_patterns():
        if EXPECTED[name][0] == "public":
            continue
        url = reverse(name, kwargs=sample_kwargs.get(name))
        response = client.post(url) if name in POST_ROLES else client.get(url)
        assert response.status_code == 403, name


@pytest.mark.parametrize("role", ROLES)
def test_post_only_pages_refuse_roles_below_their_own(role: str, client, make_user, sample_kwargs) -> None:
    if role != "anonymous":
        client.force_login(make_user(role))
    failures = []
    for name, needed in POST_ROLES.items():
        response = client.post(reverse(name, kwargs=sample_kwargs.get(name)))
        if role == "anonymous":
            ok = response.status_code == 302 and response["Location"].startswith(reverse("login"))
        elif RANK[role] < RANK[needed]:
            ok = response.status_code == 403
        else:
            ok = response.status_code not in (
                302,
                403,
                405,
            )  # allowed in: validation or a redirect of its own
            ok = ok or (response.status_code == 302 and not response["Location"].startswith(reverse("login")))
        if not ok:
            failures.append(f"POST {name} as {role}: got {response.status_code}")
    assert not failures, "\n".join(failures)
