"""Masking as a property (issue #40, point 6): no disguise or split of a seeded value leaks.

Each example seeds one value of a kind the presets cover, disguises it (other digit scripts,
zero-width characters, separators of every kind) and splits it across JSON (array items, keys,
nesting, JSON written into strings, twice); the redactor of the presets must leave nothing a
reader can put back together, in the data and in the OTel content a span would carry.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llamon_agent.guardrails import MASK_PRESETS, Redactor, as_masks, preview
from tests.support.disguise import Seeded, disguised, leaks, placed, seeded, values_text

PRESETS = list(MASK_PRESETS)


@st.composite
def shapes(draw):
    value = draw(seeded())
    text = draw(disguised(value))
    return value, text, draw(placed(value, text))


# derandomize: the same examples on every run, so a gap found once is a test, never a flaky CI
@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(shapes())
def test_no_disguise_or_split_of_a_seeded_value_leaks(shape) -> None:
    value, text, data = shape
    assert leaks(value, values_text(data)), "the generator must hide nothing itself"
    masked = Redactor(as_masks(PRESETS))(data)
    assert not leaks(value, values_text(masked)), (value, data, masked)


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(shapes(), min_size=2, max_size=6))
def test_values_masked_in_the_input_stay_hidden_where_a_tool_echoes_them_in_pieces(shapes_) -> None:
    # A run's input holds several values next to each other (as the web app seeds its redactor);
    # a tool then echoes each one alone, in pieces with spaces between (a search tool's terms).
    redactor = Redactor(as_masks(PRESETS))
    redactor.learn([{f"c{i}": data for i, (_, _, data) in enumerate(shapes_)}, [d for _, _, d in shapes_]])
    for value, _, data in shapes_:
        echoed = {"query": values_text(data), "terms": values_text(data).split()}
        assert not leaks(value, values_text(redactor(echoed))), (value, data, redactor(echoed))


@pytest.mark.parametrize(
    ("given", "value"),
    [
        # Glued to the next input value's digits, then to letters of a third ("…com" "0" "kim.aa"):
        # the match ran over all of them and its end, inside "aa0", was no token edge.
        ([["0", "00101-1000000"], ["kim.aa0", "@example.com"]], "kim.aa0@example.com"),
        # A piece after the value still matches without it ("…co" + "m").
        ([["kim.abc@example.co", "m"], "고객 900101-1234567 확인"], "kim.abc@example.com"),
    ],
)
def test_an_email_given_in_pieces_among_other_values_is_followed_as_itself(given, value: str) -> None:
    redactor = Redactor(as_masks(PRESETS))
    redactor.learn([{f"c{i}": data for i, data in enumerate(given)}, given])
    seeded_ = Seeded("email", value, value)
    for echoed in (value.replace("@", " @"), value.replace("@", "@ "), " ".join(value.split("."))):
        shown = values_text(redactor({"query": echoed, "terms": echoed.split()}))
        assert not leaks(seeded_, shown), (echoed, shown)


@pytest.mark.parametrize(
    ("text", "mask"),
    [
        ("주민번호 ９００１０１－１２３４５６７", "kr_rrn"),
        ("외국인등록번호 900101.5234567", "kr_frn"),
        ("연락처 ０１０.１２３４.５６７８", "kr_phone"),
        ("대표번호 +82 2 2345 6789", "kr_phone"),
        ("지역 031/234/5678", "kr_phone"),
        ("국민 123456-01-123456", "account_number"),
        ("입금 계좌 1234567890123", "account_number"),
        ("카드 4111.1111.1111.1111", "card_number"),
        ("메일 홍길동@예시.한국", "email"),
        ("메일 ｋｉｍ＠ｅｘａｍｐｌｅ．ｃｏｍ", "email"),
        ("여권 M123A4567", "passport"),
        ("--password=hunter2", "credential"),
        ("postgresql://app:s3cr3t@db.internal/app", "credential"),
    ],
)
def test_each_preset_finds_its_kind_in_disguise(text: str, mask: str) -> None:
    found = preview(text, PRESETS).matches
    assert mask in {m.mask for m in found}, found


@pytest.mark.parametrize(
    "text",
    [
        "2026-12-07 10:30 주문 ORD-20261207-000123 결제 12,345,000원",
        "2026.12.07, 2026/12/08 배송 예정, 수량 3개, 합계 1,234,567원",
        "고객센터 운영시간은 평일 09:00-18:00 입니다",
        "주문번호 20261207000123 의 배송이 시작되었습니다",
        "input_tokens: 1234, author: 김민지, tokens 3",
    ],
)
def test_ordinary_korean_text_dates_amounts_and_order_numbers_are_left_alone(text: str) -> None:
    assert preview(text, PRESETS).matches == []
