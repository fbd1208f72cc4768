"""Masking that holds on split and derived values (issue #27, part 3).

A card number, an e-mail address or an admin's own pattern must stay hidden when a tool (or the
model) hands it back in pieces: split across JSON strings, array items and nesting, with whitespace
of any kind, invisible characters or dashes between the pieces, or as JSON text inside a string.
The property tests build such outputs and then look for the value in every form a reader could
put back together: the digits in order with only separators between them, the tokens in order.
"""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from llamon_agent.guardrails import (
    CALENDAR_DATE,
    DASH_CHARS,
    INVISIBLE_CHARS,
    JSON_PUNCTUATION,
    Redactor,
    as_masks,
    card_number_spans,
    luhn_valid,
    mask_preset,
    redact,
)

PRESETS = ["card_number", "email"]
UNICODE_SPACES = "\u00a0\u2002\u2003\u2009\u202f\u3000"
SEPARATORS = [
    " ",
    "  ",
    "-",
    "\u2013",
    "\u2212",
    "\n",
    "\t",
    *UNICODE_SPACES,
    *INVISIBLE_CHARS[:6],
    "\u200b\u200b",
]
# Everything a reader skips when reading digits in order off a page.
_SKIPPED = re.compile("[\\s" + re.escape(INVISIBLE_CHARS + DASH_CHARS + JSON_PUNCTUATION) + "]+")


def readable_digits(value: Any) -> list[str]:
    """Every rendering a viewer could see, each with the separators a reader skips taken out."""
    texts = [
        json.dumps(value, ensure_ascii=False),
        json.dumps(value, ensure_ascii=False, indent=2),
        json.dumps(value, ensure_ascii=True).encode().decode("unicode_escape"),  # escapes read as chars
    ]
    return [_SKIPPED.sub("", text) for text in texts]


def readable_tokens(value: Any) -> list[str]:
    text = re.sub(f"[{INVISIBLE_CHARS}]", "", json.dumps(value, ensure_ascii=False))
    return [t.casefold() for t in re.findall(r"[^\W_]+", text)]


def luhn_complete(body: str) -> str:
    """``body`` plus the check digit that makes it pass Luhn."""
    for check in "0123456789":
        if luhn_valid(body + check):
            return body + check
    raise AssertionError("unreachable")


pans = st.builds(
    luhn_complete, st.text(alphabet="0123456789", min_size=12, max_size=18).map(lambda d: "4" + d[1:])
)


@st.composite
def split(draw: Any, value: str, min_parts: int = 2) -> list[str]:
    """``value`` cut at 1-5 random places (no empty piece)."""
    cuts = draw(
        st.lists(st.integers(1, len(value) - 1), min_size=min_parts - 1, max_size=5, unique=True).map(sorted)
    )
    bounds = [0, *cuts, len(value)]
    return [value[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


@st.composite
def laid_out(draw: Any, pieces: list[str], *, numbers: bool = False) -> Any:
    """``pieces`` in order, as a search tool or a model might give them back."""
    pieces = [
        p + draw(st.sampled_from(["", *SEPARATORS])) if i < len(pieces) - 1 else p
        for i, p in enumerate(pieces)
    ]
    items: list[Any] = list(pieces)
    if numbers:  # a piece without a leading zero or separator may come back as a JSON number
        items = [
            int(p) if p.isdigit() and not p.startswith("0") and draw(st.booleans()) else p for p in items
        ]
    shape = draw(st.sampled_from(["flat", "nested", "deep", "text", "json_text", "json_text_ascii"]))
    words_before, words_after = ["카드", "search"], ["검색", "done"]
    if shape == "flat":
        data: Any = {"terms": [*words_before, *items, *words_after]}
    elif shape == "nested":
        data = {
            "terms": [words_before, [[item] if i % 2 else item for i, item in enumerate(items)], words_after]
        }
    elif shape == "deep":
        inner: Any = items[-1]
        for item in reversed(items[:-1]):
            inner = [item, [inner]]
        data = {"result": {"hits": [{"terms": inner}]}}
    elif shape == "text":
        data = {"snippet": "카드 " + "".join(str(item) for item in items) + " 검색"}
    else:
        structure = {"terms": [*words_before, *items, *words_after]}
        content = json.dumps(structure, ensure_ascii=shape == "json_text_ascii")
        data = [{"role": "tool", "content": content}]
    return data


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), pans)
def test_a_card_number_split_any_way_is_masked(data: Any, pan: str) -> None:
    pieces = data.draw(split(pan))
    output = data.draw(laid_out(pieces, numbers=True))
    assume(CALENDAR_DATE.search(json.dumps(output)) is None)  # "...2019-05-12..." reads as a date: one token
    masked = redact(output, PRESETS)
    for text in readable_digits(masked):
        assert pan not in text, (output, masked)
    assert "[카드번호]" in json.dumps(masked, ensure_ascii=False)


@settings(max_examples=150, deadline=None)
@given(st.data(), pans)
def test_a_number_that_fails_luhn_stays_however_it_is_split(data: Any, pan: str) -> None:
    wrong = pan[:-1] + str((int(pan[-1]) + 1) % 10)
    pieces = data.draw(split(wrong))
    # Luhn decides for each run of whole pieces ("4", "0000000000000", "7": the middle one passes).
    runs = ["".join(pieces[i:j]) for i in range(len(pieces)) for j in range(i + 1, len(pieces) + 1)]
    assume(not any(13 <= len(run) <= 19 and luhn_valid(run) for run in runs))
    output = {"terms": ["주문", *pieces, "조회"]}
    assert redact(output, PRESETS) == output


@st.composite
def emails(draw: Any) -> tuple[str, list[str]]:
    word = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=8)
    local, domain = draw(word), draw(word)
    tld = draw(st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=2, max_size=4))
    return f"{local}@{domain}.{tld}", [local, domain, tld]


@settings(max_examples=200, deadline=None)
@given(st.data(), emails())
def test_an_email_from_the_input_echoed_as_tokens_is_masked(data: Any, email: tuple[str, list[str]]) -> None:
    address, tokens = email
    shown = address.upper() if data.draw(st.booleans()) else address
    redactor = Redactor(as_masks(PRESETS))
    redactor.learn({"query": f"내 메일 {shown} 로 보내줘", "context": {}})
    output = data.draw(laid_out(tokens))
    masked = redactor(output)
    seen = readable_tokens(masked)
    wanted = [t.casefold() for t in tokens]
    assert not any(seen[i : i + len(wanted)] == wanted for i in range(len(seen))), (output, masked)
    assert "[이메일]" in json.dumps(masked, ensure_ascii=False)


@settings(max_examples=200, deadline=None)
@given(st.data(), emails())
def test_an_email_split_across_array_items_is_masked(data: Any, email: tuple[str, list[str]]) -> None:
    address, _ = email
    pieces = data.draw(split(address))
    hidden = data.draw(
        st.lists(st.sampled_from(["", "\u200b", "\u2060"]), min_size=len(pieces), max_size=len(pieces))
    )
    items = [p + h for p, h in zip(pieces, hidden, strict=True)]
    shape = data.draw(st.sampled_from(["flat", "nested", "json_text"]))
    if shape == "flat":
        output: Any = {"to": ["보낸이:", *items, "끝"]}
    elif shape == "nested":
        output = {"to": [items[0], [items[1:]]]}
    else:
        output = {"content": json.dumps({"to": items}, ensure_ascii=False)}
    masked = redact(output, PRESETS)
    flat = "".join(re.findall(r"[^\s\"\[\],{}:\u200b\u2060]+", json.dumps(masked, ensure_ascii=False)))
    assert address not in flat, (output, masked)


@settings(max_examples=150, deadline=None)
@given(st.data(), st.integers(0, 9999))
def test_an_admin_pattern_matches_across_joins(data: Any, number: int) -> None:
    value = f"C-{number:04d}"
    pieces = data.draw(split(value))
    output = {"parts": ["고객", *pieces, "조회"]}
    masked = redact(output, [r"C-\d{4}"])
    assert value not in "".join(x for x in masked["parts"] if isinstance(x, str)), masked
    assert masked["parts"][0] == "고객" and masked["parts"][-1] == "조회"


# --------------------------------------------------------------------------- the case


def test_the_search_tools_echo_of_a_masked_query_is_masked() -> None:
    query = "카드 4111 1111 1111 1111 결제 내역 검색해줘 (Kim@Example.com)"
    redactor = Redactor(as_masks(PRESETS))
    redactor.learn({"query": query})
    echoed = {
        "query": query,
        "terms": ["카드", "4111", "1111", "1111", "1111", "결제", "내역", "kim", "example", "com"],
        "count": 0,
    }
    masked = redactor(echoed)
    assert masked["terms"] == ["카드", *["[카드번호]"] * 4, "결제", "내역", *["[이메일]"] * 3]
    assert masked["query"] == "카드 [카드번호] 결제 내역 검색해줘 ([이메일])"
    message = redactor([{"role": "tool", "content": json.dumps(echoed, ensure_ascii=False)}])
    assert "4111" not in message[0]["content"] and "kim" not in message[0]["content"]
    # A text holding JSON is read as the data it holds: masked as the data itself is.
    assert json.loads(message[0]["content"]) == masked


def test_ordinary_numbers_and_words_are_left_alone() -> None:
    redactor = Redactor(as_masks(PRESETS))
    redactor.learn({"query": "kim@example.com"})
    data = {
        "order": "A-1001",
        "phone": "010-1234-5678",
        "amounts": [1200, 3400],
        "id": "4111111111111112",  # 16 digits, not Luhn
        "words": ["kim", "example", "shop"],  # not the e-mail's tokens in order
        "note": "example.com is our site",
    }
    assert redactor(data) == data


def test_dates_and_times_are_not_card_numbers() -> None:
    # Two dates whose 16 digits pass Luhn, in a list and in text; a timestamp with 14 that pass.
    days = [f"2026-{m:02d}-{d:02d}" for m in range(1, 13) for d in range(1, 29)]
    first, second = next((a, b) for a in days for b in days if luhn_valid((a + b).replace("-", "")))
    stamp = next(
        f"2026-12-02 {h:02d}:{m:02d}:13"
        for h in range(24)
        for m in range(60)
        if luhn_valid(f"2026120{h:02d}{m:02d}13")
    )
    clock = next(
        f"{h:02d}:{m:02d}:{sec:02d}"
        for h in range(24)
        for m in range(60)
        for sec in range(60)
        if luhn_valid(f"12345678{h:02d}{m:02d}{sec:02d}")
    )
    data = {"orders": [first, second], "text": f"{first}, {second}", "at": stamp, "log": f"12345678 {clock}"}
    assert redact(data, PRESETS) == data
    assert redact(["4111-1111", "1111-1111"], PRESETS) == ["[카드번호]", "[카드번호]"]


def test_keys_and_non_text_values_are_kept_and_integers_become_text() -> None:
    masked = redact({"4111": [1111, 1111, "1111"], "ok": True, "score": 1.5, "none": None}, PRESETS)
    assert masked == {
        "4111": ["[카드번호]", "[카드번호]", "[카드번호]"],
        "ok": True,
        "score": 1.5,
        "none": None,
    }


def test_card_numbers_in_any_script_and_with_escaped_separators() -> None:
    assert card_number_spans("４１１１ １１１１ １１１１ １１１１") == [(0, 19)]
    assert redact("4111\\u00a01111\\n1111\\u200b1111", PRESETS) == "[카드번호]"


def test_a_short_or_derived_nothing_input_is_not_followed() -> None:
    redactor = Redactor(as_masks([r"\d{3}"]))
    redactor.learn({"query": "room 123"})
    assert redactor.derived == 0  # three characters: too short to follow across outputs
    assert redactor({"rooms": "1 2 3"}) == {"rooms": "1 2 3"}
    assert redactor({"rooms": ["1", "23"]}) == {"rooms": ["[REDACTED]", "[REDACTED]"]}  # the pattern, joined


def test_an_anchored_admin_pattern_still_matches_each_leaf_on_its_own() -> None:
    assert redact(["x", "abc", "abcd"], [r"^abc$"]) == ["x", "[REDACTED]", "abcd"]


def test_redaction_keeps_deep_and_cyclic_data_bounded() -> None:
    deep: Any = "4111111111111111"
    for _ in range(100):
        deep = [deep]
    assert "4111111111111111" not in json.dumps(redact(deep, PRESETS))
    cyclic: list[Any] = ["4111 1111 1111 1111"]
    cyclic.append(cyclic)
    assert "4111 1111" not in str(redact(cyclic, PRESETS))


def test_a_cut_never_halves_a_number() -> None:
    from llamon_agent.guardrails import safe_cut
    from llamon_agent.react import _truncate

    text = "결제 카드 4111 1111 1111 1111, 감사합니다"
    for limit in range(len(text) + 1):
        kept = text[: safe_cut(text, limit)]
        assert len(kept) <= limit
        assert "4111" not in kept or "4111 1111 1111 1111" in kept, kept
    assert _truncate(text, 12) == "결제 카드… [truncated: 27 more characters]"


def test_values_glued_in_one_match_are_each_hidden_as_themselves() -> None:
    # Two e-mails and the numbers between them glue into one match ("…com" + "0" + … + "kim.aa"):
    # each e-mail is hidden, and the pieces between them are not taken for an e-mail.
    data = ["kim.aa0", "@example.com", "0", "00101-1000000", "kim.aa0", "@example.com"]
    assert redact(data, ["email"]) == ["[이메일]", "[이메일]", "0", "00101-1000000", "[이메일]", "[이메일]"]


def test_a_match_over_very_many_pieces_is_hidden_whole() -> None:
    # Hostile: hundreds of one-letter items make one e-mail; past MAX_VALUE_JOINS the match is not
    # searched piece by piece for the values it holds but hidden whole (bounded work, nothing shown).
    letters = [chr(ord("a") + i % 26) for i in range(300)]
    assert set(redact([*letters, "@", "example", ".com"], ["email"])) == {"[이메일]"}


def test_a_value_after_an_email_that_still_matches_with_it_is_a_value_of_its_own() -> None:
    # "kim@example.com" + "premium" glued still reads as an e-mail ("...compremium"), but the next
    # value is whole and long enough to be one: a chatbotId stays shown, the e-mail is hidden; a
    # one-letter piece after it ("kim@example.co" + "m") is still read as the e-mail's.
    redactor = Redactor(as_masks([]) + [mask_preset("email")])
    masked = redactor({"userId": "kim@example.com", "chatbotId": "premium"})
    assert masked == {"userId": "[이메일]", "chatbotId": "premium"}
    redactor = Redactor(as_masks([]) + [mask_preset("email")])
    redactor.learn(["kim@example.co", "m"])
    assert "kim" not in redactor("the address was kim @example.com")
