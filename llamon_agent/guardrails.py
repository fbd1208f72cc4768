"""Guardrails around an agent run, and redaction of personal data in stored traces.

* :class:`InputGuardrail` refuses a request before anything runs: a query over
  ``max_chars`` or one that matches a blocked pattern.
* :class:`OutputGuardrail` checks the final answer: a blocked pattern refuses it; masks
  (card numbers, resident registration numbers, e-mail addresses, your own) rewrite it.
* :func:`redact` applies masks to every string inside JSON-like data (what the web app
  stores in run steps); :func:`preview` shows what a set of masks would change in a text.

Every pattern is RE2 (``google-re2``): linear time whatever the pattern and the input,
so a pattern typed into the browser cannot stall a worker. RE2 has no look-around and no
backreferences; a pattern that does not compile is a :class:`ValueError` that says so.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import re2

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
    digits = [int(c) for c in text if c.isdigit()]
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


@dataclass(frozen=True)
class Mask:
    """A named RE2 pattern and the text that replaces each match.

    ``validate`` (optional) gets each match and says whether it really is what the mask is
    for; matches it rejects are left alone. ``select`` (optional, instead) returns the
    ``(start, end)`` spans *inside* a match to replace, for masks that must look closer
    (card numbers). ``replacement`` is literal text: no group references.
    """

    name: str
    pattern: str
    replacement: str = REDACTED
    validate: Callable[[str], bool] | None = field(default=None, compare=False)
    select: Callable[[str], Sequence[Span]] | None = field(default=None, compare=False)
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

    def spans(self, text: str) -> list[Span]:
        """``(start, end)`` of each part of ``text`` the mask replaces."""
        found: list[Span] = []
        for match in self._compiled.finditer(text):
            base = match.start()
            found.extend((base + start, base + end) for start, end in self._inner(match.group(0)))
        return found

    def apply(self, text: str) -> tuple[str, int]:
        """``text`` with each masked part replaced, and how many were replaced."""
        count = 0

        def replace(match: Any) -> str:
            nonlocal count
            matched: str = match.group(0)
            parts = sorted(self._inner(matched))
            if not parts:
                return matched
            out, at = [], 0
            for start, end in parts:
                out.append(matched[at:start])
                out.append(self.replacement)
                at = end
            out.append(matched[at:])
            count += len(parts)
            return "".join(out)

        return self._compiled.sub(replace, text), count


_DIGIT_RUN = re2.compile(r"\d+")


def card_number_spans(matched: str) -> list[Span]:
    """The Luhn-valid 13-19 digit card numbers inside a run of digit groups.

    The pattern is greedy, so "4111 1111 1111 1111 2" matches as one 17-digit run that fails
    the checksum; the card inside it must still be masked. Sub-runs of whole groups are
    tried, longest first.
    """
    groups = [(m.start(), m.end()) for m in _DIGIT_RUN.finditer(matched)]
    prefix = [0]  # prefix[k] = digits in groups[:k]
    for start, end in groups:
        prefix.append(prefix[-1] + end - start)
    found: list[Span] = []
    i = 0
    while i < len(groups):
        best: Span | None = None
        # A card has at most 19 digits, so at most 19 groups: bounded work per start group
        # even on a pasted wall of numbers.
        last = min(len(groups), i + 19) - 1
        for j in range(last, i - 1, -1):
            digits = prefix[j + 1] - prefix[i]
            start, end = groups[i][0], groups[j][1]
            if 13 <= digits <= 19 and luhn_valid(matched[start:end]):
                best = (start, end)
                i = j
                break
        if best is not None:
            found.append(best)
        i += 1
    return found


# 13-19 digits, optionally grouped by single spaces or dashes, then the Luhn check: a plain
# long number (an order id, a phone number) rarely passes it.
CARD_NUMBER = Mask(
    name="card_number",
    pattern=r"\b\d(?:[ -]?\d){12,}\b",
    replacement="[카드번호]",
    select=card_number_spans,
)
# 주민등록번호: YYMMDD-GNNNNNN, G (1-4) encodes century and sex.
KR_RRN = Mask(name="kr_rrn", pattern=r"\b\d{6}-[1-4]\d{6}\b", replacement="[주민등록번호]")
EMAIL = Mask(
    name="email",
    pattern=r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b",
    replacement="[이메일]",
)
MASK_PRESETS: dict[str, Mask] = {m.name: m for m in (CARD_NUMBER, KR_RRN, EMAIL)}


def mask_preset(name: str) -> Mask:
    """A built-in mask by name (``card_number``, ``kr_rrn``, ``email``)."""
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
    """A copy of JSON-like ``value`` with every string masked (dict keys are kept as they are)."""
    masks = as_masks(patterns)
    return _redact(value, masks, 0) if masks else value


def _redact(value: Any, masks: list[Mask], depth: int) -> Any:
    if isinstance(value, str):
        return mask_text(value, masks)[0]
    if depth > 64:  # tool results are arbitrary data; a cycle must not hang the caller
        return value
    if isinstance(value, Mapping):
        return {k: _redact(v, masks, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact(v, masks, depth + 1) for v in value]
    return value


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
