"""Hostile values into every page and htmx endpoint, as viewer, editor and admin: never a 5xx, and a
refused request (4xx) changes nothing that was saved before.

The API has its own fuzzer (tests/api/test_api_fuzz.py, schemathesis). This one walks every URL
pattern of the product (the table of tests/test_authz_matrix.py, which fails for a page missing
from it) and sends, per example, one POST and one GET whose fields are the names the page's own
forms use (read from its HTML; the union of all names for endpoints without a page of their own)
filled with hypothesis-drawn values: NaN and Infinity, JSON nested 100,000 deep, integers of
5,000 digits, NUL, 100,000-character strings, dates out of range and with +-24h offsets, bytes
that are not UTF-8, and ordinary text.

A role below the one the page declares (a viewer on an admin page) can only be refused: such a
pair gets one hostile POST and GET, which must be refused (a 4xx: the NUL's 400, the role's 403, the
method's 405) and change nothing. Every other pair: ``LLAMON_FUZZ_FORM_EXAMPLES`` drawn (default 6, as in
`make test-postgres`) and three explicit ones (NUL, a 30-digit integer and an out-of-range date in every field); the
counts, per URL, are printed at the end of the run ("form fuzz cases").
"""

from __future__ import annotations

import functools
import os
import re
from urllib.parse import quote_from_bytes

import pytest
from django.apps import apps
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import Resolver404, resolve, reverse
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.conftest import FUZZ_COUNTS
from tests.support.authz import EXPECTED, refused_only

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(900)]

EXAMPLES = int(os.environ.get("LLAMON_FUZZ_FORM_EXAMPLES", "6"))
ROLES = ("viewer", "editor", "admin")
# Logging out ends the session the fuzzer needs; the login page is fuzzed as a form all the same.
SKIP = {"logout"}
URL_NAMES = sorted(set(EXPECTED) - SKIP)

DEEP = "[" * 100_000 + "]" * 100_000
HOSTILE: list[str | bytes] = [
    "NaN",
    "Infinity",
    "-Infinity",
    '{"a": NaN}',
    "[1e999]",
    '{"x": -Infinity}',
    DEEP,
    '{"a":' * 5_000 + "1" + "}" * 5_000,
    "9" * 5_000,
    '{"n": ' + "9" * 5_000 + "}",
    "a\x00b",
    "\x00",
    '{"a": "\\u0000"}',
    '["\\u0000"]',
    "x" * 100_000,
    "2024-01-01T00:00+23:59",
    "2024-01-01T00:00-20:00",
    "0001-01-01T00:00",
    "9999-12-31T23:59",
    "0001-01-01T00:00+15:00",
    "9999-12-31T23:59-15:00",
    "2024-13-45",
    "-1",
    "0",
    "1" + "0" * 30,
    "",
    " ",
    "{}",
    "[]",
    "null",
    "true",
    '{"parts": [{"kind": "data", "data": {"a": NaN}}]}',
    b"\xff\xfe\xfd",
    b"caf\xe9",
    "\ud83d\udca5 주문",
    "<script>alert(1)</script>",
    "../../etc/passwd",
]
VALUES = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=30), st.integers().map(str))

_FORM = re.compile(r"<form\b(?P<attrs>[^>]*)>(?P<body>.*?)</form>", re.S)
_ACTION = re.compile(r'\b(?:action|hx-post|hx-get)="(?P<url>[^"]*)"')
_NAME = re.compile(r'<(?:input|textarea|select)\b[^>]*\bname="(?P<name>[^"]+)"')


_FIELDS_CACHE: dict[str, tuple[dict[str, set[str]], set[str]]] = {}


def _form_fields(client, role: str, pages: dict[str, str]) -> tuple[dict[str, set[str]], set[str]]:
    """{url name: field names its forms send}, read once per role from the GET pages, and their union."""
    if role in _FIELDS_CACHE:
        return _FIELDS_CACHE[role]
    by_name: dict[str, set[str]] = {}
    for page_path in pages.values():
        response = client.get(page_path)
        if response.status_code != 200 or "html" not in response.get("Content-Type", ""):
            continue
        html = response.content.decode()
        for form in _FORM.finditer(html):
            match = _ACTION.search(form["attrs"])
            path = ((match["url"] if match else "") or page_path).split("?")[0]
            try:
                target = resolve(path)
            except Resolver404:
                continue
            by_name.setdefault(target.view_name, set()).update(_NAME.findall(form["body"]))
    union = set().union(*by_name.values()) - {"csrfmiddlewaretoken"}
    _FIELDS_CACHE[role] = (by_name, union)
    return by_name, union


def _encode(fields: dict[str, str | bytes]) -> bytes:
    def part(value: str | bytes) -> str:
        raw = value if isinstance(value, bytes) else value.encode("utf-8", "surrogatepass")
        return quote_from_bytes(raw, safe="")

    return "&".join(f"{part(k)}={part(v)}" for k, v in fields.items()).encode("ascii")


def _product_models() -> list:
    """The product's models whose rows a refused request must leave alone (audit and sessions
    aside: logging in writes them)."""
    return [
        model
        for label in ("accounts", "servers", "rules", "agents", "governance")
        for model in apps.get_app_config(label).get_models()
        if model._meta.model_name not in {"auditevent", "worker"}
    ]


def _snapshot() -> dict[str, list[tuple]]:
    """Every row of the product's tables."""
    return {
        model._meta.label: sorted(
            tuple(str(v) for v in row) for row in model.objects.order_by("pk").values_list()
        )
        for model in _product_models()
    }


_WRITE = re.compile(r'^\s*(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+"?(\w+)"?', re.I)


@functools.cache
def _product_tables() -> frozenset[str]:
    return frozenset(model._meta.db_table for model in _product_models())


def _wrote(queries: CaptureQueriesContext) -> bool:
    """Whether the request sent a write to a product table (it may have been rolled back)."""
    return any((m := _WRITE.match(q["sql"])) and m[1] in _product_tables() for q in queries.captured_queries)


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("name", URL_NAMES)
def test_hostile_values_never_give_a_5xx_and_a_refusal_changes_nothing(
    name: str, role: str, client, make_user, sample_kwargs
) -> None:
    from agents.redaction import privacy_get

    privacy_get()  # the singleton is made with its defaults on first read, by any request
    client.force_login(make_user(role))
    path = reverse(name, kwargs=sample_kwargs.get(name))
    pages = {n: reverse(n, kwargs=sample_kwargs.get(n)) for n in URL_NAMES}
    by_name, union = _form_fields(client, role, pages)
    # A button-only form sends just the CSRF token: such endpoints get every name the site uses.
    names = sorted((by_name.get(name) or set()) - {"csrfmiddlewaretoken"}) or sorted(union)
    counts = FUZZ_COUNTS.setdefault(f"{name} ({role})", [0, 0])
    if refused_only(name, role):
        # A role below the page's own (a viewer on an admin page) is refused before any field is
        # read: drawing values cannot find anything there. One hostile request each way proves it.
        body = _encode(dict.fromkeys(names, "a\x00b"))
        before = _snapshot()
        for response in (
            client.generic("POST", path, body, content_type="application/x-www-form-urlencoded"),
            client.get(f"{path}?{body.decode()}", HTTP_HX_REQUEST="true"),
        ):
            assert 400 <= response.status_code < 500, f"{name} as {role}: {response.status_code}"
        assert _snapshot() == before, f"{name} refused {role} but changed saved rows"
        counts[:] = [1, len(names)]
        return

    # The rows as they are; read again only after a request that wrote (a full read per request
    # was a quarter of this fuzzer's time). A refused request that sent a write is compared row
    # for row: a write it rolled back changed nothing.
    known: list[dict[str, list[tuple]]] = []

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(
        fields=st.dictionaries(st.sampled_from(names), VALUES, min_size=1, max_size=len(names)),
        htmx=st.booleans(),
    )
    def one(fields: dict[str, str | bytes], htmx: bool) -> None:
        if not known:
            known.append(_snapshot())
        body = _encode(fields)
        headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
        with CaptureQueriesContext(connection) as queries:
            response = client.generic(
                "POST", path, body, content_type="application/x-www-form-urlencoded", **headers
            )
        assert response.status_code < 500, f"POST {path} {fields!r:.300}: {response.status_code}"
        if _wrote(queries):
            now = _snapshot()
            if 400 <= response.status_code < 500:
                assert now == known[0], f"POST {path} was refused but changed saved rows"
            known[0] = now
        with CaptureQueriesContext(connection) as queries:
            response = client.get(f"{path}?{body.decode()}", **headers)
        assert response.status_code < 500, f"GET {path} {fields!r:.300}: {response.status_code}"
        if _wrote(queries):
            known[0] = _snapshot()
        counts[0] += 1

    # Besides the drawn cases, every field at once with the values a database refuses in its own way
    # (NUL in PostgreSQL text, an integer past 64 bits, a date whose offset leaves the calendar's
    # range): always tried, on each database, however few cases are drawn.
    for value in ("a\x00b", "9" * 30, "9999-12-31T23:59-15:00"):
        one = example(fields=dict.fromkeys(names, value), htmx=False)(one)
    one()
    counts[1] = len(names)
