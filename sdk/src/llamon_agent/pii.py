"""Detectors of personal data and secrets that survive disguise (the mask presets of guardrails).

Masks look at a *folded* text: every character that NFKC turns into one other character
(fullwidth ``４``, ``＠``, mathematical ``𝟒``, circled ``④``), every decimal digit of any script
(``٤``, ``४``) as its ASCII digit, and every dash as ``-``. Folding maps one character to one
character, so a match's position is its position in the original text and the original is
replaced in place. Invisible characters (zero-width space, soft hyphen ...) are skipped by the
masks themselves (guardrails.INVISIBLE_CHARS).

Numbers are read as *digit chains*: runs of digit groups with only separators between them
(whitespace of any kind, invisible characters, dashes, dots, slashes, brackets, ``+``, ``_``, ``~``
and JSON punctuation; not a colon, which joins hours and minutes). A number of one kind is a
window of whole groups of a chain whose digits pass that kind's check:

* card numbers: 13-19 digits, an issuer's prefix for that length, Luhn;
* 주민등록번호 / 외국인등록번호: 13 digits, a real YYMMDD and the 7th digit 1-4 (citizens) or 5-8
  (foreign residents); since October 2020 the last digit is no checksum, so none is checked;
* Korean phone numbers: mobile (010 + 8 digits, 011/016-019 + 7-8), Seoul (02 + 7-8), the
  regional codes (031-033, 041-044, 051-055, 061-064 + 7-8), 070 + 8; ``+82`` (or ``82`` as a
  group of its own) for the first 0;
* account numbers: 10-14 digits either in a layout Korean banks print (``110-123-456789``,
  ``1002-123-456789`` ...: three or more groups, one separator throughout) or within 24 characters after a word that names
  an account or a bank (``계좌``, ``account``, ``입금``, ``신한`` ...): there is no checksum, and a
  bare 12-digit number is as often an order number.

Calendar dates (``2026-12-07``, ``2026.12.07``, ``2026/12/07``) are one token, never digit groups.

Why not ``phonenumbers`` (libphonenumber)? It is not in this project's lock, it matches one
plain text at a time (not digit groups split across JSON leaves and disguised separators, which
is the point here), and only the Korean plan is needed: its rules fit in a few lines below.
"""

from __future__ import annotations

import bisect
import functools
import re
import unicodedata
from collections.abc import Callable, Iterator, Sequence

Span = tuple[int, int]

INVISIBLE_CHARS = (
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b\u200c\u200d\u200e\u200f"
    "\u202a\u202b\u202c\u202d\u202e\u2060\u2061\u2062\u2063\u2064\u3164\ufeff\uffa0"
)
DASH_CHARS = "-\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d"
JSON_PUNCTUATION = "\"'[]{}:,\\"
# What may separate the digit groups of one number, after folding (a colon may not).
NUMBER_SEPARATORS = "./()+_~\u00b7\u30fb\u3002" + JSON_PUNCTUATION.replace(":", "")


@functools.cache
def _fold_table() -> dict[int, str]:
    table: dict[int, str] = {}
    ranges = (range(0x80, 0x10000), range(0x1D400, 0x1D800), range(0x1F100, 0x1F110))
    for cp in (cp for r in ranges for cp in r):
        char = chr(cp)
        if char in INVISIBLE_CHARS or 0xD800 <= cp < 0xE000:
            continue
        if char in DASH_CHARS:
            table[cp] = "-"
            continue
        decimal = unicodedata.decimal(char, None)
        if decimal is not None:
            table[cp] = str(decimal)
            continue
        folded = unicodedata.normalize("NFKC", char)
        if len(folded) == 1 and folded != char and not unicodedata.combining(folded):
            table[cp] = folded
    return table


@functools.lru_cache(maxsize=8)
def fold(text: str) -> str:
    """``text`` with each character NFKC folds to one character folded (digits of any script as
    ASCII digits, dashes as ``-``); same length, so positions stay."""
    if text.isascii():
        return text
    return text.translate(_fold_table())


@functools.cache
def _number_table() -> dict[int, str]:
    table = {ord(c): " " for c in INVISIBLE_CHARS + NUMBER_SEPARATORS + "-"}
    table.update({cp: " " for cp in range(0x10000) if chr(cp).isspace()})
    return table


# In JSON text written with escapes (ensure_ascii), a separator may come as \u00a0 or \n: read alike.
ESCAPED_SEPARATOR = re.compile(
    r"\\[nrtbf]|\\u(?:"
    + "|".join(
        sorted(
            {f"{ord(c):04x}" for c in map(chr, range(0x80, 0x10000)) if c.isspace()}
            | {f"{ord(c):04x}" for c in INVISIBLE_CHARS + DASH_CHARS if ord(c) >= 0x80}
        )
    )
    + ")",
    re.IGNORECASE,
)
CALENDAR_DATE = re.compile(
    r"(?<![\d.\-/])(?:19|20)\d\d([-./])(?:0?[1-9]|1[0-2])\1(?:0?[1-9]|[12]\d|3[01])(?![\d.\-/])"
)
_GROUPS = re.compile(r"[0-9]+")


@functools.lru_cache(maxsize=4)  # the number masks read the same text one after another
def number_view(text: str) -> str:
    """``text`` folded, with every separator a space and every calendar date letters (same length)."""
    text = fold(text)
    if "\\" in text:
        text = ESCAPED_SEPARATOR.sub(lambda m: " " * len(m.group()), text)
    if "-" in text or "." in text or "/" in text:
        text = CALENDAR_DATE.sub(lambda m: "d" * len(m.group()), text)
    return text.translate(_number_table())


def digit_chains(view: str) -> Iterator[list[Span]]:
    """The chains of digit groups of a :func:`number_view` (groups with only spaces between)."""
    chain: list[Span] = []
    for match in _GROUPS.finditer(view):
        if chain and view[chain[-1][1] : match.start()].strip(" "):
            yield chain
            chain = []
        chain.append(match.span())
    if chain:
        yield chain


Check = Callable[[str, Sequence[Span], str, int], bool]  # digits, groups, context, start -> a hit


@functools.lru_cache(maxsize=4)  # every number mask reads the same view's chains
def _chains(view: str) -> list[tuple[list[Span], list[int], str]]:
    """Each chain of ``view`` (with at least 9 digits: no kind is shorter) as its groups, the
    digit count before each group, and its digits."""
    out = []
    for groups in digit_chains(view):
        prefix = [0]
        for start, end in groups:
            prefix.append(prefix[-1] + end - start)
        if prefix[-1] >= 9:
            out.append((groups, prefix, "".join(view[start:end] for start, end in groups)))
    return out


def window_spans(
    view: str, lengths: range, check: Check, context: str | None = None, *, exclusive: bool = True
) -> list[Span]:
    """Windows of whole groups of each chain of ``view`` whose digit count is in ``lengths`` and
    which ``check`` accepts, the longest from each group, the next one after it. Not ``exclusive``
    (a check that reads words around, not the digits): every accepted window from every group,
    overlapping (the redactor merges them), so a window that reached too far (an account number
    and the next number, both after "계좌") hides neither the next one's start nor the account
    number's own extent (what a run's input teaches the redactor to follow)."""
    context = view if context is None else context
    found: list[Span] = []
    for groups, prefix, digits in _chains(view):
        if prefix[-1] < lengths.start:
            continue
        i = 0
        while i < len(groups):
            a = prefix[i]
            longest = bisect.bisect_right(prefix, a + lengths.stop - 1) - 2
            shortest = bisect.bisect_left(prefix, a + lengths.start) - 1
            for j in range(longest, max(shortest, i) - 1, -1):
                if check(digits[a : prefix[j + 1]], groups[i : j + 1], context, groups[i][0]):
                    found.append((groups[i][0], groups[j][1]))
                    if exclusive:
                        i = j
                        break
            i += 1
    return found


def _valid_yymmdd(digits: str) -> bool:
    month, day = int(digits[2:4]), int(digits[4:6])
    return 1 <= month <= 12 and 1 <= day <= (29 if month == 2 else 30 if month in (4, 6, 9, 11) else 31)


def _rrn(genders: str) -> Check:
    def check(digits: str, groups: Sequence[Span], context: str, start: int) -> bool:
        return len(digits) == 13 and digits[6] in genders and _valid_yymmdd(digits)

    return check


_PHONE = re.compile(
    r"010\d{8}|01[16789]\d{7,8}|02[2-9]\d{6,7}|0(?:3[1-3]|4[1-4]|5[1-5]|6[1-4])[2-9]\d{6,7}|070[2-9]\d{7}"
)


def _phone(digits: str, groups: Sequence[Span], context: str, start: int) -> bool:
    # +82 for the first 0: written "+82" or as a group of its own ("82 10 1234 5678"), not any
    # number that happens to start with 82 (a tracking number "821-1687-4068").
    international = groups[0][1] - groups[0][0] == 2 or (start > 0 and context[start - 1] == "+")
    if digits.startswith("82") and not digits.startswith("820") and international:
        digits = "0" + digits[2:]
    return _PHONE.fullmatch(digits) is not None


# Layouts Korean banks print account numbers in (digits per group, three or more groups).
ACCOUNT_LAYOUTS = frozenset(
    {
        (3, 2, 6),
        (3, 3, 6),
        (3, 6, 5),
        (3, 6, 3),
        (3, 2, 5),
        (4, 3, 6),
        (4, 2, 7),
        (6, 2, 6),
        (6, 2, 5),
        (3, 4, 4, 2),
        (3, 2, 4, 3),
        (3, 3, 2, 4),
        (3, 2, 2, 5),
        (3, 3, 4, 2),
    }
)
ACCOUNT_WORDS = re.compile(
    r"계좌|예금|입금|출금|이체|송금|은행|뱅크|농협|신한|국민|우리|하나|기업|카카오|토스|새마을|우체국|신협|수협"
    r"|account|acct|iban|bank|deposit|transfer",
    re.IGNORECASE,
)
ACCOUNT_CONTEXT = 24  # characters before the number where a word must stand


def _account(digits: str, groups: Sequence[Span], context: str, start: int) -> bool:
    # A bank's layout, written with one separator throughout ("352-1234-5678-93", "352.1234.5678.93"),
    # not numbers that happen to line up ("456-4857-1938 / 59").
    separators = {context[a[1] : b[0]] for a, b in zip(groups, groups[1:], strict=False)}
    if tuple(end - begin for begin, end in groups) in ACCOUNT_LAYOUTS and len(separators) == 1:
        return len(next(iter(separators))) <= 3
    return ACCOUNT_WORDS.search(context, max(0, start - ACCOUNT_CONTEXT), start) is not None


def _issued(digits: str) -> bool:
    """Whether a card of this length may start so (issuers' prefixes: Visa, Mastercard, Amex,
    Diners, JCB, Discover/UnionPay, Maestro, Korean domestic 9): an order number "20261207…"
    of 14 digits is none of them."""
    n, two, four = len(digits), int(digits[:2]), int(digits[:4])
    return (
        (digits[0] == "4")  # Visa: 13, 16 or 19 digits, and what a tool cut or padded
        or (51 <= two <= 55 and n == 16)
        or (2221 <= four <= 2720 and n == 16)
        or (two in (34, 37) and n == 15)
        or (two in (30, 36, 38) and n == 14)
        or (two == 35 and n == 16)
        or (digits[0] == "6" and 16 <= n <= 19)
        or (digits[0] == "9" and n == 16)
        or (two in (50, 56, 57, 58) and 13 <= n <= 19)
    )


def _luhn(digits: str, groups: Sequence[Span], context: str, start: int) -> bool:
    if not _issued(digits):
        return False
    total = 0
    for i, char in enumerate(reversed(digits)):
        value = int(char)
        if i % 2 == 1:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def number_scan(lengths: range, check: Check, *, exclusive: bool = True) -> Callable[..., list[Span]]:
    """A mask's ``scan``: the windows of ``text`` (folded and read as digit chains) ``check`` accepts;
    ``context`` (same positions) is where words around a number are read (JSON keys included)."""

    def scan(text: str, context: str | None = None) -> list[Span]:
        view = number_view(text)
        return window_spans(view, lengths, check, fold(context) if context else None, exclusive=exclusive)

    return scan


card_number_spans = number_scan(range(13, 20), _luhn)
kr_rrn_spans = number_scan(range(13, 14), _rrn("1234"))
kr_frn_spans = number_scan(range(13, 14), _rrn("5678"))
kr_phone_spans = number_scan(range(9, 13), _phone)
account_number_spans = number_scan(range(10, 15), _account, exclusive=False)

# Secrets written into command lines, URLs, environments and JSON: only the value is replaced.
# Every repetition before the value is bounded, so the search stays linear on hostile text.
_SECRET_WORD = (
    r"(?:password|passwd|pwd|passphrase|secret|token(?!s|_count|_usage)|api[_-]?key|access[_-]?key|private[_-]?key"
    r"|credentials?|auth|비밀번호|암호|패스워드)"
)
_SECRET_NAME = rf"{_SECRET_WORD}(?:[_-][A-Za-z0-9]+){{0,4}}"
CREDENTIAL = re.compile(
    # --password=VALUE, PGPASSWORD=VALUE, "api_key": "VALUE" (JSON text), {"PGPASSWORD": "VALUE"} (leaves)
    rf"{_SECRET_NAME}[\"']?[ \t]*(?:=|:|\x1e)[ \t]*[\"']?(?P<v>[^\s\"',;&\x1e\x1f]+)"
    # --password VALUE, --db-password VALUE (the next argument)
    rf"|(?<![A-Za-z0-9_-])--?[A-Za-z0-9_-]{{0,40}}?{_SECRET_NAME}[ \t\x1f]+(?P<w>[^\s\"',;&\x1e\x1f-][^\s\"',;&\x1e\x1f]*)"
    # scheme://user:VALUE@host
    r"|[A-Za-z][A-Za-z0-9+.\-]{0,30}://[^\s/?#@:\x1e\x1f\"']{0,256}:(?P<u>[^\s/?#@\x1e\x1f\"']+)@"
    # Authorization: Bearer VALUE
    r"|\b(?:bearer|basic)[ \t]+(?P<b>[A-Za-z0-9._~+/=-]{8,})",
    re.IGNORECASE,
)


PLACEHOLDER = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")  # a secret by name (mcp.transports)


def credential_spans(text: str, context: str | None = None) -> list[Span]:
    """The secret values of ``text``: passwords, tokens and keys after their name, in URLs, in bearer headers."""
    found: list[Span] = []
    # In JSON-like data the key names the secret: read the text with its keys (the context).
    for match in CREDENTIAL.finditer(fold(text if context is None else context)):
        for group in ("v", "w", "u", "b"):
            value = match.group(group)
            if value is not None and PLACEHOLDER.fullmatch(value) is None:  # ${NAME} is no secret
                found.append(match.span(group))
    return found
