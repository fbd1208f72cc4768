"""Personal data in disguise, for the masking property tests (issue #40, point 6).

``seeded()`` draws a real-looking value of each kind the mask presets cover (주민등록번호,
외국인등록번호, Korean mobile and landline numbers, account numbers, card numbers, ASCII and
internationalised e-mails, passport numbers); ``disguised()`` writes it as an adversary would
hand it back (other digit scripts, zero-width characters, separators of every kind) and
``placed()`` splits it across JSON: array items, values under separate keys, nesting and JSON
written into a string (twice). ``leaks()`` is the reader: whether the value can be put back
together from a text shown to a viewer.
"""

from __future__ import annotations

import datetime
import html
import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

ZERO_WIDTH = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad"]
SEPARATORS = [
    " ",
    "-",
    ".",
    "/",
    "\u00a0",
    "\u3000",
    "\u2013",
    "\u2014",
    "\u2212",
    "\uff0d",
    " - ",
    "\u2009",
    "_",
]
# Digit scripts a reader still reads as digits: fullwidth, Arabic-Indic, Devanagari, mathematical bold.
DIGIT_BASES = [0xFF10, 0x0660, 0x0966, 0x1D7CE]
LEAF_KEYS = ["part", "value", "조각", "data", "x"]


@dataclass(frozen=True)
class Seeded:
    kind: str
    text: str  # as written plainly
    core: str  # what a reader needs to recover: the digits, or the letters and digits (e-mail)
    lead: str = ""  # words that must stand before it (an account number's "계좌")


def _digits(draw: Any, n: int) -> str:
    return "".join(draw(st.lists(st.sampled_from("0123456789"), min_size=n, max_size=n)))


def _luhn_complete(body: str) -> str:
    for check in "0123456789":
        total = 0
        for i, char in enumerate(reversed(body + check)):
            value = int(char) * (2 if i % 2 else 1)
            total += value - 9 if value > 9 else value
        if total % 10 == 0:
            return body + check
    raise AssertionError("unreachable")


@st.composite
def seeded(draw: Any) -> Seeded:
    kind = draw(
        st.sampled_from(
            ["rrn", "frn", "mobile", "landline", "account", "card", "email", "email_intl", "passport"]
        )
    )
    if kind in ("rrn", "frn"):
        day = draw(st.dates(min_value=datetime.date(1930, 1, 1), max_value=datetime.date(2025, 12, 31)))
        gender = draw(st.sampled_from("1234" if kind == "rrn" else "5678"))
        digits = day.strftime("%y%m%d") + gender + _digits(draw, 6)
        return Seeded(kind, f"{digits[:6]}-{digits[6:]}", digits)
    if kind == "mobile":
        digits = "010" + _digits(draw, 8)
        return Seeded(kind, f"{digits[:3]}-{digits[3:7]}-{digits[7:]}", digits)
    if kind == "landline":
        area = draw(st.sampled_from(["02", "031", "032", "042", "051", "053", "062", "064"]))
        digits = area + draw(st.sampled_from("23456789")) + _digits(draw, draw(st.sampled_from([6, 7])))
        return Seeded(kind, f"{area}-{digits[len(area) : -4]}-{digits[-4:]}", digits)
    if kind == "account":
        layout = draw(st.sampled_from([(3, 2, 6), (3, 3, 6), (4, 3, 6), (6, 2, 6), (3, 6, 5)]))
        groups = [draw(st.sampled_from("123456789")) + _digits(draw, n - 1) for n in layout]
        return Seeded(
            kind,
            "-".join(groups),
            "".join(groups),
            lead=draw(st.sampled_from(["계좌번호 ", "입금 계좌: ", "account "])),
        )
    if kind == "card":
        prefix = draw(st.sampled_from(["4", "51", "6011", "9410"]))
        digits = _luhn_complete(prefix + _digits(draw, 15 - len(prefix)))
        return Seeded(kind, " ".join(digits[i : i + 4] for i in range(0, 16, 4)), digits)
    if kind == "passport":
        letter = draw(st.sampled_from("MSROD"))
        middle = draw(st.sampled_from("0123456789ABCDEFGHJKLNPQRTUVWXYZ"))
        value = letter + _digits(draw, 3) + middle + _digits(draw, 4)
        return Seeded(kind, value, value)
    local = draw(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=3, max_size=10))
    if kind == "email":
        domain = draw(st.sampled_from(["example.com", "bank.co.kr", "mail.example.org"]))
        local = draw(st.sampled_from(["", "kim.", "lee_"])) + local
        value = f"{local}@{domain}"
    else:
        local = draw(st.sampled_from(["홍길동", "김민지", "ユーザー", "josé"])) + local
        domain = draw(st.sampled_from(["예시.한국", "example.com", "例え.jp", "bücher.de"]))
        value = f"{local}@{domain}"
    return Seeded(kind, value, value)


def _script(char: str, base: int) -> str:
    return chr(base + int(char)) if char.isdigit() and char.isascii() else char


@st.composite
def disguised(draw: Any, value: Seeded) -> str:
    """``value`` written with other digits, separators and invisible characters (still readable)."""
    text = value.text
    if value.kind in ("email", "email_intl"):
        if draw(st.booleans()):  # fullwidth letters and ＠
            text = "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)
    elif draw(st.booleans()):
        separator = draw(st.sampled_from(SEPARATORS))
        text = re.sub(r"[- ]", lambda _: separator, text)
    if value.kind not in ("email", "email_intl", "passport") and draw(st.booleans()):
        base = draw(st.sampled_from(DIGIT_BASES))
        text = "".join(_script(c, base) if draw(st.booleans()) else c for c in text)
    if draw(st.booleans()):
        at = draw(st.lists(st.integers(1, max(1, len(text) - 1)), max_size=3, unique=True))
        for i in sorted(at, reverse=True):
            text = text[:i] + draw(st.sampled_from(ZERO_WIDTH)) + text[i:]
    return text


@st.composite
def placed(draw: Any, value: Seeded, text: str) -> Any:
    """``text`` (a disguised value) split and placed in JSON-like data as a tool might return it."""
    shape = draw(st.sampled_from(["text", "array", "keys", "nested", "string_json", "twice_encoded"]))
    lead = value.lead
    if shape == "text":
        return f"{lead or '고객 '}{text} 확인 부탁드립니다"
    cuts = sorted(draw(st.lists(st.integers(1, len(text) - 1), min_size=1, max_size=3, unique=True)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    if shape == "array":
        data: Any = [*([lead.strip()] if lead else []), *pieces]
    elif shape == "keys":
        key = draw(st.sampled_from(LEAF_KEYS))
        data = {f"{key}{chr(ord('a') + i)}": piece for i, piece in enumerate(pieces)}
        data = {lead.strip(): data} if lead else data
    else:
        data = {"고객": {"정보": [{"조각": piece} for piece in pieces]}}
        data = {lead.strip(): data} if lead else data
    if shape == "string_json":
        return {"result": json.dumps(data, ensure_ascii=draw(st.booleans()))}
    if shape == "twice_encoded":
        return json.dumps({"content": json.dumps(data, ensure_ascii=False)}, ensure_ascii=False)
    return data


def _fold(text: str) -> str:
    return "".join(
        str(unicodedata.decimal(c))
        if unicodedata.decimal(c, None) is not None
        else unicodedata.normalize("NFKC", c)
        for c in text
    )


_ESCAPE = re.compile(r"\\u[0-9a-fA-F]{4}|\\[nrtbf\\/\"]")
_TAG = re.compile(r"<[^>]+>")


def readings(text: str) -> list[str]:
    """The ways a reader reads ``text``: as is, without HTML tags, with JSON escapes decoded (thrice)."""
    forms = [text, html.unescape(_TAG.sub(" ", text))]
    for _ in range(3):
        forms += [_ESCAPE.sub(lambda m: json.loads(f'"{m.group()}"'), form) for form in forms[-2:]]
    return forms


def values_text(data: Any) -> str:
    """The texts and numbers of JSON-like ``data`` in order (keys left out, JSON in strings read as data)."""
    if isinstance(data, str):
        try:
            inner = json.loads(data)
        except ValueError:
            return data
        return values_text(inner) if isinstance(inner, dict | list) else data
    if isinstance(data, dict):
        return " ".join(values_text(v) for v in data.values())
    if isinstance(data, list):
        return " ".join(values_text(v) for v in data)
    return "" if data is None or isinstance(data, bool | float) else str(data)


def leaks(value: Seeded, shown: str, ignore: tuple[str, ...] = ()) -> bool:
    """Whether a reader can put ``value`` back together from ``shown`` (anything between its pieces,
    and the words of ``ignore`` such as the keys the pieces were put under, ignored)."""
    core = _fold(value.core).casefold()
    for word in sorted(ignore, key=len, reverse=True):
        shown = shown.replace(word, " ")
    for form in readings(shown):
        folded = _fold(form).casefold()
        if value.kind in ("email", "email_intl", "passport"):
            stream = "".join(re.findall(r"[^\W_]+", folded))
            if "".join(re.findall(r"[^\W_]+", core)) in stream:
                return True
        elif core in "".join(re.findall(r"\d", folded)):
            return True
    return False
