"""Guardrails around an agent run, and redaction of personal data in stored traces.

* :class:`InputGuardrail` refuses a request before anything runs: a query over
  ``max_chars`` or one that matches a blocked pattern.
* :class:`OutputGuardrail` checks the final answer: a blocked pattern refuses it; masks
  (card numbers, resident registration numbers, e-mail addresses, your own) rewrite it.
* :func:`redact` applies masks to JSON-like data (what the web app stores in run steps) as one
  text: a value split across strings, array items and nesting is found as it would be in the
  joined text (see :class:`Redactor`); :func:`preview` shows what a set of masks would change.

Every pattern is RE2 (``google-re2``): linear time whatever the pattern and the input,
so a pattern typed into the browser cannot stall a worker. RE2 has no look-around and no
backreferences; a pattern that does not compile is a :class:`ValueError` that says so.
"""

from __future__ import annotations

import bisect
import functools
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import re2

from llamon_agent import pii
from llamon_agent.pii import (
    CALENDAR_DATE as CALENDAR_DATE,  # re-exported: the masks' shared vocabulary
)
from llamon_agent.pii import (
    DASH_CHARS,
    ESCAPED_SEPARATOR,
    INVISIBLE_CHARS,
    JSON_PUNCTUATION,
    card_number_spans,
    fold,
)

MAX_PATTERN_CHARS = 2000
REDACTED = "[REDACTED]"

_RE_OPTIONS = re2.Options()
_RE_OPTIONS.log_errors = False  # compile errors become ValueError; RE2's stderr logging is noise


def compile_pattern(pattern: str, *, what: str = "pattern") -> Any:
    """``pattern`` compiled by RE2; ``ValueError`` with a readable reason when it is invalid."""
    if not isinstance(pattern, str) or not pattern:
        raise ValueError(f"{what} must be a non-empty text")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"{what} is longer than {MAX_PATTERN_CHARS:,} characters")
    try:
        return re2.compile(pattern, _RE_OPTIONS)
    except re2.error as exc:
        raw = exc.args[0] if exc.args else exc
        detail = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        raise ValueError(
            f"invalid {what} {pattern!r}: {detail} (RE2 syntax: no look-around or backreferences)"
        ) from None


def luhn_valid(text: str) -> bool:
    """True when the digits of ``text`` pass the Luhn checksum (card numbers)."""
    digits = [int(c) for c in text if c.isdecimal()]
    if len(digits) < 2:
        return False
    total = 0
    for i, digit in enumerate(reversed(digits)):
        if i % 2 == 1:
            digit *= 2
            if digit > 9:
                digit -= 9
        total += digit
    return total % 10 == 0


Span = tuple[int, int]

# Characters that show nothing, dashes, JSON punctuation: shared with the detectors (llamon_agent.pii).
# Between two leaves of JSON-like data (see Redactor): SOFT joins two array items, HARD stands
# next to a dict key or a value that is not text (null, true, a float); both are "JSON punctuation".
SOFT, HARD = "\x1f", "\x1e"
_INVISIBLE = re.compile(f"[{INVISIBLE_CHARS}]")
# Where two pieces of text join into one when matching across joins: a leaf boundary between array
# items, or (inside a text that holds JSON) the end of one string item and the start of the next.
_JOIN = re.compile(SOFT + r'|\\*"[\s,\[\]{}]*\\*"')
_JOIN_OR_INVISIBLE = re.compile(f"{_JOIN.pattern}|[{INVISIBLE_CHARS}]+")
_TOKEN = re.compile(r"[^\W_]+")  # letters and digits of any script
_PIECE = re.compile(r"[ 0-9]*")  # a piece of a number, as pii.number_view shows it
MIN_DERIVED_CHARS = 4  # a masked input value shorter than this (letters and digits) is not followed
MAX_VALUE_JOINS = 24  # joins inside one match searched for the values it holds (_Joined._values)


@dataclass(frozen=True)
class Mask:
    """A named RE2 pattern and the text that replaces each match.

    ``validate`` (optional) gets each match and says whether it really is what the mask is
    for; matches it rejects are left alone. ``select`` (optional, instead) returns the
    ``(start, end)`` spans *inside* a match to replace. ``scan`` (optional) replaces the
    pattern search altogether: it returns the spans of a whole text to replace (card numbers,
    whose digit groups may be separated by anything a join leaves between them).
    ``replacement`` is literal text: no group references. ``derive`` (default on): what the
    mask hides in a run's input is also hidden where it reappears re-tokenised (Redactor.learn).
    """

    name: str
    pattern: str
    replacement: str = REDACTED
    validate: Callable[[str], bool] | None = field(default=None, compare=False)
    select: Callable[[str], Sequence[Span]] | None = field(default=None, compare=False)
    scan: Callable[..., Sequence[Span]] | None = field(default=None, compare=False)  # (text, context)
    derive: bool = field(default=True, compare=False)
    _compiled: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a mask needs a name")
        object.__setattr__(self, "_compiled", compile_pattern(self.pattern, what=f"mask {self.name!r}"))

    def _inner(self, matched: str) -> Sequence[Span]:
        if self.select is not None:
            return self.select(matched)
        if self.validate is not None and not self.validate(matched):
            return ()
        return ((0, len(matched)),)

    def _pattern_spans(self, text: str) -> list[Span]:
        found: list[Span] = []
        for match in self._compiled.finditer(text):
            base = match.start()
            found.extend((base + start, base + end) for start, end in self._inner(match.group(0)))
        return found

    def spans(self, text: str, context: str | None = None) -> list[Span]:
        """``(start, end)`` of each part of ``text`` the mask replaces. The pattern sees the text
        folded (pii.fold: fullwidth and other digits and letters as ASCII, dashes as ``-``) and
        without invisible characters, so neither hides a value. ``context`` (a scan's): the same
        text with what it must not match across (JSON keys) kept, for words around a value."""
        if self.scan is not None:
            return sorted(self.scan(text) if context is None else self.scan(text, context))
        text = fold(text)
        if _INVISIBLE.search(text) is None:
            return self._pattern_spans(text)
        shown, at = _without_invisibles(text)
        return [(at[start], at[end - 1] + 1) for start, end in self._pattern_spans(shown) if end > start]

    def apply(self, text: str) -> tuple[str, int]:
        """``text`` with each masked part replaced, and how many were replaced."""
        spans = _merged([(start, end, self.replacement) for start, end in self.spans(text)])
        return _replaced(text, spans), len(spans)


def _without_invisibles(text: str) -> tuple[str, list[int]]:
    """``text`` without its invisible characters, and each kept character's index in ``text``."""
    at = [i for i, char in enumerate(text) if _INVISIBLE.match(char) is None]
    return "".join(text[i] for i in at), at


Labelled = tuple[int, int, str]


def _merged(spans: Iterable[Labelled]) -> list[Labelled]:
    """Overlapping spans as one (the replacement of the first, longest first), sorted; empty ones dropped."""
    out: list[Labelled] = []
    for start, end, label in sorted(spans, key=lambda span: (span[0], -span[1], span[2])):
        if end <= start:
            continue
        if out and start < out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end, out[-1][2])
            continue
        out.append((start, end, label))
    return out


def _replaced(text: str, spans: Sequence[Labelled]) -> str:
    out, at = [], 0
    for start, end, label in spans:
        out.append(text[at:start])
        out.append(label)
        at = end
    out.append(text[at:])
    return "".join(out)


_CHAIN_END = re.compile(
    "[\\d\\s" + re.escape(INVISIBLE_CHARS + DASH_CHARS + JSON_PUNCTUATION) + "]{1,256}\\Z"
)
_CHAIN_START = re.compile("[\\s" + re.escape(INVISIBLE_CHARS + DASH_CHARS + JSON_PUNCTUATION) + "]{0,256}\\d")


def safe_cut(text: str, limit: int) -> int:
    """Where to cut ``text`` to keep at most ``limit`` characters without cutting a run of digit
    groups in two: cut before the run instead. A card number cut in half is no longer a card for
    the masks, and its first half (more than the first six digits) would be shown."""
    if limit >= len(text):
        return len(text)
    if limit <= 0 or _CHAIN_START.match(text, limit) is None:
        return max(limit, 0)
    tail = _CHAIN_END.search(text[max(0, limit - 256) : limit])
    if tail is None or not any(char.isdecimal() for char in tail.group()):
        return limit
    return limit - len(tail.group())


# Numbers (llamon_agent.pii): digit groups split by any separator, across strings, array items,
# JSON keys and nesting, in any script's digits; each kind's check decides (Luhn for cards).
CARD_NUMBER = Mask(
    name="card_number", pattern=r"\b\d(?:[ -]?\d){12,}\b", replacement="[카드번호]", scan=card_number_spans
)
# 주민등록번호 and 외국인등록번호: YYMMDD-GNNNNNN, G 1-4 for citizens, 5-8 for foreign residents.
KR_RRN = Mask(name="kr_rrn", pattern=r"\d{6}-[1-4]\d{6}", replacement="[주민등록번호]", scan=pii.kr_rrn_spans)
KR_FRN = Mask(
    name="kr_frn", pattern=r"\d{6}-[5-8]\d{6}", replacement="[외국인등록번호]", scan=pii.kr_frn_spans
)
KR_PHONE = Mask(
    name="kr_phone", pattern=r"0\d{1,2}-\d{3,4}-\d{4}", replacement="[전화번호]", scan=pii.kr_phone_spans
)
ACCOUNT_NUMBER = Mask(
    name="account_number",
    pattern=r"\d{3,6}-\d{2,6}-\d{2,7}",
    replacement="[계좌번호]",
    scan=pii.account_number_spans,
)
# E-mail addresses, internationalised ones too (홍길동@예시.한국, user@xn--...); on the folded text.
EMAIL = Mask(
    name="email",
    pattern=(
        r"[\p{L}\p{N}\p{M}._%+-]+@[\p{L}\p{N}\p{M}-]+(?:\.[\p{L}\p{N}\p{M}-]+)*"
        r"\.(?:[A-Za-z]{2,63}\b|xn--[A-Za-z0-9-]{2,59}|\p{L}[\p{L}\p{M}]+)"
    ),
    replacement="[이메일]",
)
# Korean passport numbers: a letter (M, S, R, O, D, G) and 8 characters, the 5th a digit or a
# letter since 2021 (M12345678, M123A4567); separators inside are read through.
PASSPORT = Mask(
    name="passport",
    pattern=r"\b[MSRODG](?:[ ./-]?[0-9]){3}[ ./-]?[A-Z0-9](?:[ ./-]?[0-9]){4}\b",
    replacement="[여권번호]",
)
# Passwords, tokens and keys: --password=..., PGPASSWORD=..., scheme://user:...@host, Bearer ...
CREDENTIAL = Mask(
    name="credential", pattern=r"password=\S+", replacement="[비밀값]", scan=pii.credential_spans
)
MASK_PRESETS: dict[str, Mask] = {
    m.name: m for m in (KR_RRN, KR_FRN, KR_PHONE, ACCOUNT_NUMBER, CARD_NUMBER, EMAIL, PASSPORT, CREDENTIAL)
}


def mask_preset(name: str) -> Mask:
    """A built-in mask by name (a key of ``MASK_PRESETS``: ``card_number``, ``kr_rrn``, ``email`` ...)."""
    try:
        return MASK_PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown mask preset {name!r}: use one of {', '.join(MASK_PRESETS)}") from None


@dataclass(frozen=True)
class Verdict:
    """A guardrail's answer: allowed or not (and why), the text after masking, what matched."""

    allowed: bool
    reason: str | None
    text: str
    matched: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The verdict without the text (which may be long or personal): for trace events."""
        return {"allowed": self.allowed, "reason": self.reason, "matched": list(self.matched)}


class _Blocklist:
    """Compiled blocked patterns, in the order given."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns: list[str] = list(patterns)
        self._compiled = [compile_pattern(p, what="blocked pattern") for p in self.patterns]

    def matching(self, text: str) -> list[str]:
        return [p for p, c in zip(self.patterns, self._compiled, strict=True) if c.search(text) is not None]


class InputGuardrail:
    """Refuses a request whose query is too long or matches a blocked pattern."""

    def __init__(self, max_chars: int | None = None, blocked_patterns: Sequence[str] = ()) -> None:
        if max_chars is not None and max_chars <= 0:
            raise ValueError("max_chars must be a positive number of characters")
        self.max_chars = max_chars
        self._blocked = _Blocklist(blocked_patterns)

    @property
    def blocked_patterns(self) -> list[str]:
        return list(self._blocked.patterns)

    def check(self, text: str) -> Verdict:
        """Allowed, or refused with the reason (length first: no pattern runs on an oversized input)."""
        if self.max_chars is not None and len(text) > self.max_chars:
            return Verdict(
                allowed=False,
                reason=f"the request is {len(text):,} characters long; the limit is {self.max_chars:,}",
                text=text,
                matched=["max_chars"],
            )
        hits = self._blocked.matching(text)
        if hits:
            return Verdict(
                allowed=False,
                reason=f"the request matches a blocked pattern: {hits[0]}",
                text=text,
                matched=hits,
            )
        return Verdict(allowed=True, reason=None, text=text)

    def to_json(self) -> dict[str, Any]:
        return {"max_chars": self.max_chars, "blocked_patterns": self.blocked_patterns}


class OutputGuardrail:
    """Refuses an answer that matches a blocked pattern; masks personal data in the rest."""

    def __init__(self, blocked_patterns: Sequence[str] = (), masks: Sequence[Mask] = ()) -> None:
        self._blocked = _Blocklist(blocked_patterns)
        self.masks: list[Mask] = list(masks)

    @property
    def blocked_patterns(self) -> list[str]:
        return list(self._blocked.patterns)

    def check(self, text: str) -> Verdict:
        """Blocked patterns are searched in the raw answer; masks are applied to an allowed one."""
        hits = self._blocked.matching(text)
        if hits:
            return Verdict(
                allowed=False,
                reason=f"the answer matches a blocked pattern: {hits[0]}",
                text=text,
                matched=hits,
            )
        masked, applied = mask_text(text, self.masks)
        return Verdict(allowed=True, reason=None, text=masked, matched=applied)

    def to_json(self) -> dict[str, Any]:
        return {"blocked_patterns": self.blocked_patterns, "masks": [m.name for m in self.masks]}


def mask_text(text: str, masks: Sequence[Mask]) -> tuple[str, list[str]]:
    """``text`` with every mask applied in order, and the names of the masks that changed it."""
    applied: list[str] = []
    for mask in masks:
        text, count = mask.apply(text)
        if count:
            applied.append(mask.name)
    return text, applied


def as_masks(patterns: Sequence[Mask | str]) -> list[Mask]:
    """Masks from masks, preset names or plain RE2 patterns (replaced by ``[REDACTED]``)."""
    masks: list[Mask] = []
    for item in patterns:
        if isinstance(item, Mask):
            masks.append(item)
        elif item in MASK_PRESETS:
            masks.append(MASK_PRESETS[item])
        else:
            masks.append(_pattern_mask(item))
    return masks


@functools.lru_cache(maxsize=256)
def _pattern_mask(pattern: str) -> Mask:
    # redact() runs on every stored step; compile each configured pattern once.
    return Mask(name=pattern, pattern=pattern)


def redact(value: Any, patterns: Sequence[Mask | str]) -> Any:
    """A copy of JSON-like ``value`` masked as one text (see :class:`Redactor`; dict keys are kept)."""
    masks = as_masks(patterns)
    return Redactor(masks)(value) if masks else value


MAX_DEPTH = 64  # tool results are arbitrary data; deeper than this (or a cycle) is read as its text


class Redactor:
    """Masks applied to JSON-like data as one text, and to what they hid in a run's input.

    The strings and integers of the data (its leaves, with its dict keys among them) are read in
    order as one text, each pair of neighbours separated by a boundary character that counts as
    JSON punctuation. Then:

    * card numbers (a mask with a ``scan``) are searched in that text: digit groups split across
      strings, array items, nesting, whitespace of any kind, invisible characters and dashes are
      one number when Luhn says so;
    * pattern masks run on each leaf, then once more on the text with the joins taken out (the
      boundary between array items and, inside a text holding JSON, the ``", "`` between string
      items); a match that crosses a join is read as the values it holds (``_Joined._values``);
    * what the masks hid in the run's input (:meth:`learn`) is hidden wherever its letters and
      digits reappear as consecutive tokens, in any case and with any separators between them
      ("kim", "example", "com" echoed by a tool after "kim@example.com" was masked in the query).

    Each leaf that a found span touches has that part replaced by the mask's text; dict keys and
    values that are not text (null, booleans, floats) are kept. An integer touched becomes text.
    """

    def __init__(self, masks: Sequence[Mask]) -> None:
        self.masks = list(masks)
        self._scans = [m for m in self.masks if m.scan is not None]
        self._patterns = [m for m in self.masks if m.scan is None]
        self._derived: dict[str, str] = {}  # casefolded letters and digits -> replacement

    def learn(self, value: Any) -> None:
        """Remember what the masks hide in ``value`` (a run's input) to hide it where it reappears."""
        leaves = _Leaves(value)
        texts = leaves.texts_only(fold(leaves.text))  # a value split across keys: its keys are not part of it
        for start, end, label, mask in self._found(leaves):
            if mask is not None and mask.derive:
                key = "".join(token.casefold() for token in _TOKEN.findall(texts, start, end))
                if len(key) >= MIN_DERIVED_CHARS:
                    self._derived.setdefault(key, label)

    @property
    def derived(self) -> int:
        """How many input values are followed (for tests and diagnostics; never the values)."""
        return len(self._derived)

    def __call__(self, value: Any) -> Any:
        if not self.masks and not self._derived:
            return value
        leaves = _Leaves(value)
        spans = _merged((start, end, label) for start, end, label, _ in self._found(leaves))
        return leaves.rebuild(spans)

    def _found(self, leaves: _Leaves) -> list[tuple[int, int, str, Mask | None]]:
        text = fold(leaves.text)  # one character for one: positions stay
        found: list[tuple[int, int, str, Mask | None]] = []
        if self._scans:
            # Numbers are read in the values only (JSON keys, null, booleans are separators between
            # them: a card split over {"a": "4111", "b": "1111", ...} is one); words around a value
            # (an account's "계좌", a secret's key) are read in the whole text.
            values = leaves.values_only(text)
            for mask in self._scans:
                found.extend((start, end, mask.replacement, mask) for start, end in mask.spans(values, text))
        if self._patterns:
            for mask in self._patterns:
                found.extend((start, end, mask.replacement, mask) for start, end in _leaf_spans(mask, leaves))
            joined = _Joined(text, leaves.hidden())
            if joined.joins:
                for mask in self._patterns:
                    found.extend((start, end, mask.replacement, mask) for start, end in joined.crossing(mask))
        if self._derived:
            found.extend((start, end, label, None) for start, end, label in self._derived_spans(text))
        return found

    def _derived_spans(self, text: str) -> list[Labelled]:
        starts: dict[int, int] = {}  # position in the token stream -> start in text
        ends: dict[int, int] = {}
        parts: list[str] = []
        at = 0
        # Invisible characters and (in JSON text with escapes) escaped separators separate tokens,
        # as a reader sees them; a key only has to start and end on token edges.
        text = _INVISIBLE.sub(" ", text)
        if "\\" in text:
            text = ESCAPED_SEPARATOR.sub(lambda m: " " * len(m.group()), text)
        for match in _TOKEN.finditer(text):
            token = match.group().casefold()
            starts[at] = match.start()
            at += len(token)
            ends[at] = match.end()
            parts.append(token)
        stream = "".join(parts)
        spans: list[Labelled] = []
        for key, label in self._derived.items():
            at = stream.find(key)
            while at != -1:
                start, end = starts.get(at), ends.get(at + len(key))
                if start is not None and end is not None:  # whole tokens only
                    spans.append((start, end, label))
                at = stream.find(key, at + 1)
        return spans


def _leaf_spans(mask: Mask, leaves: _Leaves) -> list[Span]:
    """The spans (in the leaves' text) ``mask`` finds on each leaf on its own.

    One search of the whole text stands for a search of each leaf when the pattern has no
    anchors (the boundaries between leaves act as the ends of a text for ``\\b``); a match that
    crosses a boundary sends the leaves it touches to a search of their own.
    """
    if _anchored(mask.pattern):
        return [(base + s, base + e) for base, leaf in leaves.writable() for s, e in mask.spans(leaf)]
    text = leaves.text
    found: list[Span] = []
    again: set[int] = set()
    for start, end in mask.spans(text):
        if SOFT in text[start:end] or HARD in text[start:end]:
            again.update(range(leaves.index(start), leaves.index(end - 1) + 1))
        elif leaves.writable_at(start):
            found.append((start, end))
    for i in sorted(again):
        base, leaf, writable = leaves.items[i]
        if writable:
            found.extend((base + s, base + e) for s, e in mask.spans(leaf))
    return found


@functools.lru_cache(maxsize=256)
def _anchored(pattern: str) -> bool:
    """Whether ``pattern`` may hold ``^``, ``$``, ``\\A`` or ``\\z`` (what differs between one text and many)."""
    if re.search(r"\\[Az]", pattern):
        return True
    plain = re.sub(r"\[[^\]]*\]", "", re.sub(r"\\.", "", pattern))
    return "^" in plain or "$" in plain


class _Leaves:
    """The leaves of JSON-like data in order, as one text, and the data rebuilt with them replaced."""

    def __init__(self, value: Any) -> None:
        self.value = value
        self.items: list[tuple[int, str, bool]] = []  # (start in text, text, writable)
        parts: list[str] = []
        at = 0
        last_writable = False
        self._texts: list[bool] = []  # per leaf: a text (not a number, key or constant)
        for leaf, writable, is_text in _walk(value, 0):
            self._texts.append(is_text)
            if self.items:
                boundary = SOFT if writable and last_writable else HARD
                parts.append(boundary)
                at += 1
            self.items.append((at, leaf, writable))
            parts.append(leaf)
            at += len(leaf)
            last_writable = writable
        self.text = "".join(parts)
        self._starts = [start for start, _, _ in self.items]

    def index(self, position: int) -> int:
        """The leaf at ``position`` of the text (the one before, on a boundary)."""
        return max(bisect.bisect_right(self._starts, position) - 1, 0)

    def writable_at(self, position: int) -> bool:
        return bool(self.items) and self.items[self.index(position)][2]

    def writable(self) -> Iterable[tuple[int, str]]:
        return ((start, leaf) for start, leaf, writable in self.items if writable)

    def hidden(self) -> list[Span]:
        """Each leaf that is not text (a key, null, a boolean), with the boundaries around it."""
        return [
            (max(start - 1, 0), min(start + len(leaf) + 1, len(self.text)))
            for start, leaf, writable in self.items
            if not writable
        ]

    def texts_only(self, text: str) -> str:
        """``text`` (this text, folded) with every leaf that is not text (keys ...) blanked."""
        chars = list(text)
        for start, leaf, writable in self.items:
            if not writable:
                chars[start : start + len(leaf)] = " " * len(leaf)
        return "".join(chars)

    def values_only(self, text: str) -> str:
        """``text`` (this text, folded) with the keys between two pieces of a number blanked.

        A piece is a text (at most 64 characters) of only digits and separators: a card or
        주민등록번호 written as ``{"a": "4111", "b": "1111", ...}`` is one number; a number next
        to an amount (``{"phone": "010-...", "amount": 1200}``: not a text) or to words is not.
        The digits of a key before a piece (``"p1"``) are never read as digits of the number.
        """
        if all(writable for _, _, writable in self.items):
            return text
        pieces = [
            is_text and len(leaf) <= 64 and _PIECE.fullmatch(pii.number_view(leaf)) is not None
            for (_, leaf, _), is_text in zip(self.items, self._texts, strict=True)
        ]
        after = [False] * len(self.items)  # per leaf: the next writable leaf is a piece
        for i in range(len(self.items) - 2, -1, -1):
            after[i] = pieces[i + 1] if self.items[i + 1][2] else after[i + 1]
        chars: list[str] | None = None
        before = False  # the last writable leaf was a piece
        for i, (start, leaf, writable) in enumerate(self.items):
            if writable:
                before = pieces[i]
            elif after[i]:  # a key before a piece: never digits of the number; between two, a separator
                chars = list(text) if chars is None else chars
                chars[start : start + len(leaf)] = (" " if before else "x") * len(leaf)
        return text if chars is None else "".join(chars)

    def rebuild(self, spans: Sequence[Labelled]) -> Any:
        replaced: list[str | None] = []  # per leaf: its new text, None when unchanged
        k = 0
        for start, leaf, writable in self.items:
            end = start + len(leaf)
            while k < len(spans) and spans[k][1] <= start:
                k += 1
            inside: list[Labelled] = []
            j = k
            while j < len(spans) and spans[j][0] < end:
                inside.append((max(spans[j][0], start) - start, min(spans[j][1], end) - start, spans[j][2]))
                j += 1
            replaced.append(_replaced(leaf, inside) if writable and inside else None)
        leaves = iter(replaced)
        return _rebuild(self.value, leaves, 0)


MAX_EMBEDDED_CHARS = 1_000_000  # a longer text holding JSON is read as text, not parsed


MAX_EMBEDDED_TRIES = 16  # places in one text where JSON is tried (bounded work on hostile text)
_DECODER = json.JSONDecoder()
_OPENING = re.compile(r"[\[{]")


def _embedded(value: str, depth: int) -> list[str | tuple[Any, str]] | None:
    """The JSON objects and arrays a text holds (a tool's result as JSON text, JSON quoted in a
    sentence), as the text's pieces in order: plain text, or (the data, its original text). None
    when it holds none."""
    if depth > MAX_DEPTH or len(value) > MAX_EMBEDDED_CHARS or ("{" not in value and "[" not in value):
        return None
    stripped = value.strip()
    if len(stripped) > 2 and stripped[0] == stripped[-1] == '"':  # JSON text of a JSON text
        try:
            inner = json.loads(stripped)
        except (ValueError, RecursionError):
            inner = None
        if isinstance(inner, str) and _embedded(inner, depth + 1) is not None:
            start = value.index('"')
            return [value[:start], (inner, stripped), value[start + len(stripped) :]]
    segments: list[str | tuple[Any, str]] = []
    at = tries = 0
    for opening in _OPENING.finditer(value):
        if opening.start() < at:
            continue
        if tries == MAX_EMBEDDED_TRIES:
            break
        tries += 1
        try:
            parsed, end = _DECODER.raw_decode(value, opening.start())
        except (ValueError, RecursionError):
            continue
        if not isinstance(parsed, dict | list) or not parsed:
            continue
        if opening.start() > at:
            segments.append(value[at : opening.start()])
        segments.append((parsed, value[opening.start() : end]))
        at = end
    if not segments:
        return None
    if at < len(value):
        segments.append(value[at:])
    return segments


def _walk(value: Any, depth: int) -> Iterable[tuple[str, bool, bool]]:
    if isinstance(value, str):
        embedded = _embedded(value, depth)
        if embedded is not None:  # JSON in it is read as the data it holds: keys, items, nesting
            for segment in embedded:
                if isinstance(segment, str):
                    yield segment, True, True
                else:
                    yield from _walk(segment[0], depth + 1)
        else:
            yield value, True, True
    elif value is None:
        yield "null", False, False
    elif isinstance(value, bool):
        yield str(value).lower(), False, False
    elif isinstance(value, float):
        yield repr(value), False, False
    elif isinstance(value, int) or (depth > MAX_DEPTH and isinstance(value, Mapping | list | tuple)):
        yield str(value), True, False
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key), False, False
            yield from _walk(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _walk(item, depth + 1)
    else:
        yield "", False, False


def _rebuild(value: Any, leaves: Iterator[str | None], depth: int) -> Any:
    if isinstance(value, str) and (embedded := _embedded(value, depth)) is not None:
        parts, changed = [], False
        for segment in embedded:
            if isinstance(segment, str):
                new = next(leaves)
                parts.append(segment if new is None else new)
                changed = changed or new is not None
            else:
                rebuilt = _rebuild(segment[0], leaves, depth + 1)
                same = rebuilt == segment[0]
                parts.append(segment[1] if same else json.dumps(rebuilt, ensure_ascii=False))
                changed = changed or not same
        return "".join(parts) if changed else value
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        new = next(leaves)
        return value if new is None else new
    if depth > MAX_DEPTH and isinstance(value, Mapping | list | tuple):
        new = next(leaves)
        return str(value) if new is None else new
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            next(leaves)  # the key: kept
            out[key] = _rebuild(item, leaves, depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [_rebuild(item, leaves, depth + 1) for item in value]
    next(leaves)
    return value


@functools.lru_cache(maxsize=256)
def _unbounded(pattern: str) -> tuple[bool, Any]:
    """``pattern`` without a leading and a trailing ``\\b`` (compiled), and whether it had one."""
    inner = pattern.removeprefix(r"\b")
    inner = inner.removesuffix(r"\b") if not inner.endswith(r"\\b") else inner
    if inner == pattern or not inner:
        return False, compile_pattern(pattern)
    return True, compile_pattern(inner)


class _Joined:
    """A text with its joins taken out, and where they were (see Redactor).

    ``hidden``: more spans to take out as joins (the JSON keys between two values).
    """

    def __init__(self, text: str, hidden: Sequence[Span] = ()) -> None:
        self.joins: list[int] = []  # positions in self.text where a join was taken out
        self._starts: list[int] = []  # piece starts in self.text
        self._origins: list[int] = []  # the same pieces' starts in the original text
        parts: list[str] = []
        at = kept = 0
        self.key_joins: set[int] = set()  # joins where a key (or null, a boolean) was taken out
        cuts = [
            (m.start(), m.end(), m.group()[0] not in INVISIBLE_CHARS)
            for m in _JOIN_OR_INVISIBLE.finditer(text)
        ]
        hidden_set = set(hidden)
        if hidden:
            cuts = sorted(cuts + [(start, end, True) for start, end in hidden])
        for start, end, is_join in cuts:
            if end <= at:  # inside what was taken out already
                continue
            start = max(start, at)
            if start > at:
                self._starts.append(kept)
                self._origins.append(at)
                parts.append(text[at:start])
                kept += start - at
            if is_join and (not self.joins or self.joins[-1] != kept):
                self.joins.append(kept)
            if is_join and (start, end) in hidden_set:
                self.key_joins.add(kept)
            at = end
        if at < len(text):
            self._starts.append(kept)
            self._origins.append(at)
            parts.append(text[at:])
        self.text = "".join(parts)

    def _origin(self, position: int) -> int:
        i = bisect.bisect_right(self._starts, position) - 1
        return self._origins[i] + position - self._starts[i]

    def _joins_within(self, start: int, end: int) -> list[int]:
        return self.joins[bisect.bisect_right(self.joins, start) : bisect.bisect_left(self.joins, end)]

    def crossing(self, mask: Mask) -> list[Span]:
        """Spans (in the original text) of ``mask``'s matches that cross a join, each the value
        itself (:meth:`_values`), not the neighbours a match glued to it."""
        spans: list[Span] = []
        # Pieces are glued where a join was: "…9370" + "M859…" has no word boundary between them,
        # so a pattern's outer \b is dropped for the search and checked on whole pieces instead.
        _, search = _unbounded(mask.pattern)
        at = 0
        while (match := search.search(self.text, at)) is not None:
            at = max(match.end(), match.start() + 1)
            for inner_start, inner_end in mask._inner(match.group(0)):
                start, end = match.start() + inner_start, match.start() + inner_end
                if not self._joins_within(start, end):
                    continue  # inside one piece: found on the leaf already
                values = self._values(mask, start, end)
                for a, b, reach in values:  # (a value within one piece was found on the leaf already)
                    spans.extend(
                        (self._origin(a), self._origin(z - 1) + 1)
                        for z in {b, reach}
                        if self._joins_within(a, z)
                    )
                # A value that starts after the last one found here may run past this match
                # ("…com" + "0" + "kim.aa" glued, then "0" + "@example.com"): search on from there.
                if values and match.start() < values[-1][1] < at:
                    at = values[-1][1]
        return spans

    def _values(self, mask: Mask, start: int, end: int) -> list[tuple[int, int, int]]:
        """The values in the match ``[start, end)``: its windows that still match on their own,
        each starting and ending at a join or at the match's own ends, with no smaller one inside
        (a value within one piece among them, which the leaf's own search finds), as ``(start,
        end, reach)``: ``reach`` is the end of the longest run of whole pieces after it that still
        matches from its start, ending where a piece ends (``end`` when none does).

        A match glued over several neighbouring values (an e-mail's pieces, then the next input
        value's, up to letters of a third: "kim.aa0" + "@example.com" + "0" + "…" + "kim.aa") is
        the values it holds, so each is hidden, and learnt (Redactor.learn), as itself. Across a
        key only whole values are one ("SKU-46782-G" then a date is no passport). A match over
        more than MAX_VALUE_JOINS joins (hostile, thousands of one-letter items) is hidden whole."""
        joins = self._joins_within(start, end)
        if len(joins) > MAX_VALUE_JOINS:
            return [(start, end, end)] if self._allowed(start, end) else []
        starts, ends = [start, *joins], [*joins, end]
        found: list[tuple[int, int, int]] = []
        for i, e in enumerate(ends):
            for s in reversed(starts):  # the fewest pieces first
                if s < e and self._whole(mask, s, e) and self._allowed(s, e):
                    if not found or s > found[-1][0]:  # else it holds the last value found
                        # The pieces after it may still be its own ("kim@example.co" + "m"): its
                        # reach is the longest run of them that still matches (both are hidden).
                        # Only over pieces too short to be values of their own (MIN_DERIVED_CHARS):
                        # "kim@example.com" + "premium" (a chatbotId) still matches, and is two values.
                        reach = []
                        for x in ends[i + 1 :]:
                            if len("".join(_TOKEN.findall(self.text[e:x]))) >= MIN_DERIVED_CHARS:
                                break
                            if (
                                (x in self._join_set or x == len(self.text))
                                and self._whole(mask, s, x)
                                and self._allowed(s, x)
                            ):
                                reach.append(x)
                        found.append((s, e, reach[-1] if reach else e))
                    break
        return found

    def _allowed(self, start: int, end: int) -> bool:
        """A window across a key (or null, a boolean) is one value only from edge to edge."""
        return not self.key_joins.intersection(self._joins_within(start, end)) or self._on_edges(start, end)

    @functools.cached_property
    def _join_set(self) -> set[int]:
        return set(self.joins)

    def _on_edges(self, start: int, end: int) -> bool:
        """Whether ``start`` and ``end`` fall where values begin and end (a join or the text's ends)."""
        edges = self._join_set
        return (start == 0 or start in edges) and (end == len(self.text) or end in edges)

    def _whole(self, mask: Mask, start: int, end: int) -> bool:
        part = self.text[start:end]
        return mask._compiled.fullmatch(part) is not None and bool(mask._inner(part))


@dataclass(frozen=True)
class MaskMatch:
    """One place a mask would change: which mask, where, and the original text."""

    mask: str
    start: int
    end: int
    original: str

    def to_json(self) -> dict[str, Any]:
        return {"mask": self.mask, "start": self.start, "end": self.end, "original": self.original}


@dataclass(frozen=True)
class RedactionPreview:
    """What a set of masks does to a sample text: the result and each match found."""

    text: str
    matches: list[MaskMatch]

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "matches": [m.to_json() for m in self.matches]}


def preview(text: str, patterns: Sequence[Mask | str]) -> RedactionPreview:
    """Show what :func:`redact` would do to ``text`` (matches are positions in the original)."""
    masks = as_masks(patterns)
    matches = [
        MaskMatch(mask=m.name, start=start, end=end, original=text[start:end])
        for m in masks
        for start, end in m.spans(text)
    ]
    matches.sort(key=lambda m: (m.start, m.end))
    return RedactionPreview(text=mask_text(text, masks)[0], matches=matches)
