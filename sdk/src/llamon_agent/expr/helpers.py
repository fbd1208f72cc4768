"""The run-time helpers visible to expressions (contains_any, re_search, ...) and the size-checked operators."""

from __future__ import annotations

import math
import re
import types
import unicodedata
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, NoReturn, cast

import re2

from llamon_agent.expr.errors import ExprError, _type_name
from llamon_agent.expr.limits import (
    MAX_INT,
    MAX_ITER_ITEMS,
    MAX_PATTERN_CHARS,
    MAX_RESULT_CHARS,
    MAX_RESULT_ITEMS,
)
from llamon_agent.expr.messages import Message as M
from llamon_agent.expr.view import _CtxView


def _words(helper: str, words: Any) -> Iterable[str]:
    if isinstance(words, str):
        raise ExprError(M("run.words_text", helper=helper))
    if not isinstance(words, (list, tuple, set, frozenset)):
        raise ExprError(M("run.words_type", helper=helper, type=_type_name(words)))
    for word in words:
        if not isinstance(word, str):
            raise _word_error(helper, word)
    return words


def _text(helper: str, text: Any) -> str | None:
    if text is None or isinstance(text, str):
        return text
    raise ExprError(M("run.text_type", helper=helper, type=_type_name(text)))


_WORD_CONTAINERS = (list, tuple, set, frozenset)


def _word_error(helper: str, word: Any) -> ExprError:
    return ExprError(M("run.word_type", helper=helper, type=_type_name(word)))


def contains_any(text: str | None, words: Iterable[str]) -> bool:
    """True when at least one of ``words`` occurs in ``text`` (None counts as no text)."""
    if type(text) is not str or type(words) not in _WORD_CONTAINERS:
        text = _text("contains_any", text)
        words = _words("contains_any", words)
        if text is None:
            return False
    # One pass that checks and searches: this helper is on the hot path of keyword rules.
    for word in words:
        if type(word) is not str:
            raise _word_error("contains_any", word)
        if word in text:
            return True
    return False


def contains_all(text: str | None, words: Iterable[str]) -> bool:
    """True when every one of ``words`` occurs in ``text`` (None counts as no text)."""
    if type(text) is not str or type(words) not in _WORD_CONTAINERS:
        text = _text("contains_all", text)
        words = _words("contains_all", words)
        if text is None:
            return False
    for word in words:
        if type(word) is not str:
            raise _word_error("contains_all", word)
        if word not in text:
            return False
    return True


_RE_OPTIONS = re2.Options()
_RE_OPTIONS.log_errors = False  # errors become ExprError; RE2's own stderr logging is just noise
_RE_CACHE: dict[str, Any] = {}
_RE_CACHE_SIZE = 2_048
_RE_FAILED: dict[str, str] = {}  # pattern -> why it cannot be used: a failure is found once
_RE_FAILED_SIZE = 4_096

# What compiling a regex costs is priced from its text before RE2 builds anything: building
# ``\pL{1000}`` spends 50-400 ms before RE2 says "pattern too large". regex_size() estimates
# the program RE2 would make (instructions); over MAX_REGEX_SIZE the pattern is refused unbuilt.
MAX_REGEX_SIZE = 200_000  # RE2 (8 MB) lets ~400,000 through, built in ~220 ms; \pL{100} is ~120,000
_UNICODE_CLASS = 1_300  # \pL, the largest class, compiles to ~1,200 instructions
_SCRIPT_CLASS = 160  # \p{Hangul}, \p{Latin}: a script is tens of ranges
_ANY_CHAR = 8  # "." and negated classes: one range per UTF-8 length
_PERL_CLASS = 8  # \d \w \s and their negations


def _class_end(pattern: str, start: int) -> int:
    """The index just after the character class opening at ``start`` (``[``), or len(pattern)."""
    i = start + 1
    if i < len(pattern) and pattern[i] == "^":
        i += 1
    if i < len(pattern) and pattern[i] == "]":
        i += 1  # a leading ] is a literal
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[" and pattern.startswith("[:", i):
            close = pattern.find(":]", i + 2)
            i = close + 2 if close >= 0 else i + 1
            continue
        if c == "]":
            return i + 1
        i += 1
    return len(pattern)


def _escape(pattern: str, i: int) -> tuple[int, int]:
    """(weight, length) of the escape at ``i`` (a backslash)."""
    nxt = pattern[i + 1 : i + 2]
    if nxt in ("p", "P"):
        if pattern[i + 2 : i + 3] != "{":
            return _UNICODE_CLASS, 3  # \pL, \pN ...: a whole general category
        close = pattern.find("}", i + 3)
        name = pattern[i + 3 : close] if close >= 0 else ""
        # a category (L, Lu) or a negation is large; a script (Hangul, Latin) is a few ranges
        weight = _UNICODE_CLASS if nxt == "P" or len(name.lstrip("^")) <= 2 else _SCRIPT_CLASS
        return weight, (close + 1 if close >= 0 else len(pattern)) - i
    if nxt and nxt in "dDsSwW":
        return _PERL_CLASS, 2
    if nxt == "Q":
        close = pattern.find("\\E", i + 2)
        end = close if close >= 0 else len(pattern)
        return 4 * (end - i - 2) + 1, (end + 2 if close >= 0 else end) - i
    if nxt == "x" and pattern[i + 2 : i + 3] == "{":
        close = pattern.find("}", i + 3)
        return 4, (close + 1 if close >= 0 else len(pattern)) - i
    return 4, 2


def regex_size(pattern: str) -> int:
    """An upper estimate of the RE2 program ``pattern`` compiles to, read from its text alone.

    Each atom weighs what RE2 makes of it (a literal character its UTF-8 bytes, a Unicode class
    ~1,300 instructions, ``.`` 8); a group weighs its alternatives together; ``{n,m}`` multiplies
    what it repeats by its largest count, ``*``, ``+`` and ``?`` add one. Case folding doubles
    everything. Linear in the text: it is what the budget is charged before RE2 builds anything.
    """
    frames: list[list[int]] = [[0, 0, 0]]  # per open group: finished alternatives, current, last atom
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        frame = frames[-1]
        if c == "\\":
            weight, length = _escape(pattern, i)
        elif c == "[":
            end = _class_end(pattern, i)
            body = pattern[i + 1 : end - 1]
            weight = _ANY_CHAR + 4 * len(body)
            j = body.find("\\")
            while j >= 0:  # classes inside the class: each weighs what it weighs alone
                weight += _escape(body, j)[0]
                j = body.find("\\", j + 2)
            length = end - i
        elif c == ".":
            weight, length = _ANY_CHAR, 1
        elif c == "(":
            close = pattern.find(")", i)
            if (
                pattern.startswith("(?", i)
                and close > 0
                and all(ch.isalpha() or ch == "-" for ch in pattern[i + 2 : close])
            ):
                i = close + 1  # (?i): flags only, not a group
                continue
            frames.append([0, 0, 0])
            i += 1
            if pattern.startswith("?", i):  # (?:, (?P<name>, (?i:
                colon = pattern.find(":", i)
                angle = pattern.find(">", i)
                ends = [e for e in (colon, angle) if e >= 0]
                i = min(ends) + 1 if ends else i + 1
            continue
        elif c == ")":
            if len(frames) > 1:
                done = frames.pop()
                weight = done[0] + done[1] + 1
                frame = frames[-1]
                frame[1] += weight
                frame[2] = weight
            i += 1
            continue
        elif c == "|":
            frame[0] += frame[1] + 1
            frame[1] = frame[2] = 0
            i += 1
            continue
        elif c in "*+?":
            frame[1] += 1
            i += 1
            continue
        elif c == "{":
            close = pattern.find("}", i)
            counts = pattern[i + 1 : close].split(",") if close > 0 else []
            if 1 <= len(counts) <= 2 and all(part.isdigit() for part in counts if part) and counts[0]:
                times = max(int(part) for part in counts if part) + (1 if counts[-1] == "" else 0)
                extra = frame[2] * (times - 1)
                frame[1] += extra + 1
                frame[2] += extra
                i = close + 1
                continue
            weight, length = 1, 1
        else:
            weight, length = len(c.encode("utf-8", "surrogatepass")), 1
        frame[1] += weight
        frame[2] = weight
        i += length
    while len(frames) > 1:
        done = frames.pop()
        frames[-1][1] += done[0] + done[1] + 1
    size = frames[0][0] + frames[0][1] + 4
    return 2 * size if "(?" in pattern and "i" in pattern else size


_ALLOWANCE: ContextVar[list[int] | None] = ContextVar("llamon_regex_allowance", default=None)


@contextmanager
def regex_compile_allowance(size: int) -> Iterator[None]:
    """Within the block, regexes not compiled yet may together be built up to ``size`` (in
    :func:`regex_size` instructions); past it, re_search and re_find on a new pattern fail.

    A request that runs many pre-steps (the rule-health page dry-runs every case) bounds its
    compiles across all of them with this, as one pre-step's own budget bounds its own.
    """
    token = _ALLOWANCE.set([size])
    try:
        yield
    finally:
        _ALLOWANCE.reset(token)


def regex_cached(pattern: str) -> bool:
    """Whether ``pattern`` is known already (compiled, or found unusable): no compile to pay."""
    return pattern in _RE_CACHE or pattern in _RE_FAILED


_CHECK_OPTIONS = re2.Options()
_CHECK_OPTIONS.log_errors = False
_CHECK_OPTIONS.max_mem = 64 << 10  # enough to parse any pattern; a large program stops early
_RE_CHECKED: dict[str, None] = {}


def check_regex(pattern: Any) -> None:
    """ExprError unless ``pattern`` is a valid RE2 pattern within MAX_REGEX_SIZE, found without
    building its program (a rule is checked when saved: saving 2,000 rules with large patterns
    must not build 2,000 large programs; the first request that uses one pays for it)."""
    if pattern in _RE_CACHE or pattern in _RE_CHECKED:
        return
    if not isinstance(pattern, str):
        raise ExprError(M("run.regex_type", type=_type_name(pattern)))
    failed = _RE_FAILED.get(pattern)
    if failed is not None:
        raise ExprError(failed)
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ExprError(M("run.regex_too_long", limit=f"{MAX_PATTERN_CHARS:,}"))
    size = regex_size(pattern)
    if size > MAX_REGEX_SIZE:
        _refuse(pattern, _too_large(pattern, size))
    try:
        re2.compile(pattern, _CHECK_OPTIONS)
    except re2.error as exc:
        detail = _detail(exc)
        if "pattern too large" not in detail:  # too large for the check's memory only: valid
            _refuse(pattern, _invalid(pattern, detail))
    if len(_RE_CHECKED) >= _RE_FAILED_SIZE:
        del _RE_CHECKED[next(iter(_RE_CHECKED))]
    _RE_CHECKED[pattern] = None


def _detail(exc: Exception) -> str:
    return exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)


def _invalid(pattern: str, detail: str) -> str:
    return f"invalid regular expression {pattern!r}: {detail} (RE2 syntax: no look-around or backreferences)"


def _too_large(pattern: str, size: int) -> str:
    return f"invalid regular expression {pattern!r}: pattern too large (about {size:,} instructions)"


def _regex(pattern: Any) -> Any:
    if not isinstance(pattern, str):
        raise ExprError(M("run.regex_type", type=_type_name(pattern)))
    compiled = _RE_CACHE.get(pattern)
    if compiled is not None:
        return compiled
    failed = _RE_FAILED.get(pattern)
    if failed is not None:
        raise ExprError(failed)
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ExprError(M("run.regex_too_long", limit=f"{MAX_PATTERN_CHARS:,}"))
    size = regex_size(pattern)
    if size > MAX_REGEX_SIZE:
        _refuse(pattern, _too_large(pattern, size))
    allowance = _ALLOWANCE.get()
    if allowance is not None:
        if allowance[0] < size:
            raise ExprError(M("run.regex_quota"))
        allowance[0] -= size
    try:
        compiled = re2.compile(pattern, _RE_OPTIONS)
    except re2.error as exc:
        _refuse(pattern, _invalid(pattern, _detail(exc)))
    if len(_RE_CACHE) >= _RE_CACHE_SIZE:
        # Drop the oldest only: clearing it all made every request recompile every pattern
        # of a rule set with more patterns than the cache holds (19x slower at 10,000 rules).
        del _RE_CACHE[next(iter(_RE_CACHE))]
    _RE_CACHE[pattern] = compiled
    return compiled


def _refuse(pattern: str, reason: str) -> NoReturn:
    """Remember that ``pattern`` cannot be used (the next request pays nothing), and say why."""
    if len(_RE_FAILED) >= _RE_FAILED_SIZE:
        del _RE_FAILED[next(iter(_RE_FAILED))]
    _RE_FAILED[pattern] = reason
    raise ExprError(reason)


def re_search(pattern: str, text: str | None) -> bool:
    """True when the RE2 ``pattern`` matches somewhere in ``text`` (None never matches)."""
    text = _text("re_search", text)
    compiled = _regex(pattern)
    return text is not None and compiled.search(text) is not None


def re_find(pattern: str, text: str | None, group: int | str = 0) -> str | None:
    """The first RE2 match of ``pattern`` in ``text`` (or its ``group``), None when there is none."""
    text = _text("re_find", text)
    compiled = _regex(pattern)
    if text is None:
        return None
    match = compiled.search(text)
    if match is None:
        return None
    try:
        return cast(str | None, match.group(group))  # re2 ships no type information
    except (IndexError, KeyError, TypeError):
        raise ExprError(M("run.regex_group", pattern=repr(pattern), group=repr(group))) from None


def _data_get(parts: Any, key: Any, default: Any = None) -> Any:
    """data_get(key, default=None): the first value of ``key`` across the DataParts, in order."""
    if parts:
        for part in parts:
            if type(part) is dict and key in part:
                return part[key]
    return default


# to_number: the number a DataPart value stands for, when other systems send it as text.
MAX_NUMBER_TEXT_CHARS = 64  # a longer text is no number a rule compares (and its cost stays bounded)
_NUMBER_TEXT = re.compile(r"[+-]?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?|[+-]?\.[0-9]+")


def to_number(value: Any, default: Any = None) -> Any:
    """to_number(value, default=None): ``value`` as a number, or ``default`` when it is not one.

    A number (int or float, not a bool) is itself; a text is read after removing the spaces around
    it and folding full-width characters (NFKC: "８６" is "86"): ASCII digits, an optional sign,
    an optional decimal part and optional thousands commas ("1,200,000"). A text with a decimal
    point gives a float, without one an int. Anything else (None, a bool, "86%", "eighty", "NaN",
    a list, a number out of the 64-bit range, a text longer than 64 characters) gives ``default``:
    never an error, so ``to_number(data_get("spo2"), 100) < 90`` cannot fail the pre-step on text.
    """
    kind = type(value)
    if kind is int:
        return value if -MAX_INT <= value <= MAX_INT else default
    if kind is float:
        return value if math.isfinite(value) else default
    if kind is not str or len(value) > 4 * MAX_NUMBER_TEXT_CHARS:
        return default
    text = unicodedata.normalize("NFKC", value).strip()
    if len(text) > MAX_NUMBER_TEXT_CHARS or not _NUMBER_TEXT.fullmatch(text):
        return default
    text = text.replace(",", "")
    if "." in text:
        number = float(text)
        return number if math.isfinite(number) else default
    whole = int(text)
    return whole if -MAX_INT <= whole <= MAX_INT else default


_NUMBERS = frozenset({int, float, bool})


def _number(value: Any) -> Any:
    if type(value) is int and not -MAX_INT <= value <= MAX_INT:
        raise ExprError(M("run.int_too_large"))
    return value


def _add(left: Any, right: Any) -> Any:
    lt, rt = type(left), type(right)
    if lt in _NUMBERS and rt in _NUMBERS:
        return _number(left + right)
    if lt is str and rt is str:
        if len(left) + len(right) > MAX_RESULT_CHARS:
            raise ExprError(M("run.text_too_long", limit=f"{MAX_RESULT_CHARS:,}"))
        return left + right
    if (lt is list and rt is list) or (lt is tuple and rt is tuple):
        if len(left) + len(right) > MAX_RESULT_ITEMS:
            raise ExprError(M("run.list_too_long", limit=f"{MAX_RESULT_ITEMS:,}"))
        return left + right
    raise ExprError(M("run.cannot_add", left=_type_name(left), right=_type_name(right)))


def _mul(left: Any, right: Any) -> Any:
    if type(left) in _NUMBERS and type(right) in _NUMBERS:
        value = left * right  # _number, inline: the hot path of arithmetic rules
        if type(value) is int and not -MAX_INT <= value <= MAX_INT:
            raise ExprError(M("run.int_too_large"))
        return value
    if isinstance(left, (str, list, tuple)) or isinstance(right, (str, list, tuple)):
        raise ExprError(M("run.repeat"))
    raise ExprError(M("run.cannot_multiply", left=_type_name(left), right=_type_name(right)))


def _mod(left: Any, right: Any) -> Any:
    if type(left) in _NUMBERS and type(right) in _NUMBERS:
        return _number(left % right)
    if isinstance(left, str):
        raise ExprError(M("run.percent_format"))
    raise ExprError(M("run.cannot_mod", left=_type_name(left), right=_type_name(right)))


def _join(sep: Any, *args: Any, **kwargs: Any) -> str:
    if type(sep) is not str:
        raise ExprError(M("run.no_join", type=_type_name(sep)))
    if len(args) != 1 or kwargs:
        raise ExprError(M("run.join_args"))
    items = args[0]
    if not isinstance(items, (list, tuple, set, frozenset, str, dict, types.GeneratorType)):
        raise ExprError(M("run.join_list", type=_type_name(items)))
    parts = list(items)  # a generator here comes from a comprehension, already capped
    if len(parts) > MAX_RESULT_ITEMS:
        raise ExprError(M("run.join_too_many", limit=f"{MAX_RESULT_ITEMS:,}"))
    size = len(sep) * max(len(parts) - 1, 0)
    for part in parts:
        if type(part) is not str:
            raise ExprError(M("run.join_texts", type=_type_name(part)))
        size += len(part)
    if size > MAX_RESULT_CHARS:
        raise ExprError(M("run.text_too_long", limit=f"{MAX_RESULT_CHARS:,}"))
    return sep.join(parts)


def _replace(text: Any, *args: Any, **kwargs: Any) -> str:
    if type(text) is not str:
        raise ExprError(M("run.no_replace", type=_type_name(text)))
    if kwargs or len(args) not in (2, 3):
        raise ExprError(M("run.replace_args"))
    old, new = args[0], args[1]
    count = args[2] if len(args) == 3 else -1
    if type(old) is not str or type(new) is not str or type(count) is not int:
        raise ExprError(M("run.replace_types"))
    hits = len(text) + 1 if old == "" else text.count(old)
    if count >= 0:
        hits = min(hits, count)
    if len(text) + hits * (len(new) - len(old)) > MAX_RESULT_CHARS:
        raise ExprError(M("run.text_too_long", limit=f"{MAX_RESULT_CHARS:,}"))
    return text.replace(old, new, count)


def _check_text_size(value: Any) -> int:
    """Refuse to turn a value into text that would exceed MAX_RESULT_CHARS, before building it.

    The walk stops as soon as the budget is spent, so its cost is bounded too: a list that
    refers to the whole request data a thousand times is refused after reading a little of it.
    Returns the work in cost units (items visited, plus the text's estimated size).
    """
    left = MAX_RESULT_CHARS
    visited = 0
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        visited += 1
        if kind is str:
            left -= len(item) + 2
        elif kind is dict:
            left -= 2 + 4 * len(item)
            if left >= 0:
                stack.extend(item.keys())
                stack.extend(item.values())
        elif kind is list or kind is tuple or kind is set or kind is frozenset:
            left -= 2 + 2 * len(item)
            if left >= 0:
                stack.extend(item)
        elif kind is _CtxView:  # its text quotes the whole query (escapes can quadruple it)
            left -= 4 * len(item.query) + 12
        elif item is None or kind is int or kind is float or kind is bool:
            left -= 4
        else:  # a function or any other live object would print its name and a heap address
            raise ExprError(M("run.only_data_text"))
        if left < 0:
            raise ExprError(M("run.text_too_long", limit=f"{MAX_RESULT_CHARS:,}"))
    return 1 + 8 * visited + (MAX_RESULT_CHARS - left) // 4  # a Python walk, then formatting


def _str(value: Any = "") -> str:
    """str(value): the text of a value, size-checked before it is built."""
    kind = type(value)
    if kind is str:
        return value  # type: ignore[no-any-return]  # kind is str; no cast() call on this hot path
    if value is None or kind is int or kind is float or kind is bool:
        return str(value)
    _check_text_size(value)
    return str(value)


def _repr(value: Any) -> str:
    if type(value) is not str:
        _check_text_size(value)
    return repr(value)


def _ascii(value: Any) -> str:
    _check_text_size(value)
    text = ascii(value)
    if len(text) > MAX_RESULT_CHARS:  # escapes can make it up to 10x longer than the estimate
        raise ExprError(M("run.text_too_long", limit=f"{MAX_RESULT_CHARS:,}"))
    return text


def _fstr(*parts: str) -> str:
    size = 0
    for part in parts:
        size += len(part)
    if size > MAX_RESULT_CHARS:
        raise ExprError(M("run.text_too_long", limit=f"{MAX_RESULT_CHARS:,}"))
    return "".join(parts)


def _iter(values: Any) -> Any:
    try:
        size = len(values)
    except TypeError:
        if values is None:
            raise ExprError(M("run.loop_none")) from None
        raise ExprError(M("run.cannot_loop", type=_type_name(values))) from None
    if size > MAX_ITER_ITEMS:
        raise ExprError(M("run.loop_too_many", limit=f"{MAX_ITER_ITEMS:,}"))
    return values


def _sum(values: Any, start: Any = 0) -> Any:
    """sum(): numbers only (the builtin would also concatenate lists, quadratically)."""
    if type(start) not in _NUMBERS:
        raise ExprError(M("run.sum_numbers"))
    total = start
    for value in values:
        if type(value) not in _NUMBERS:
            raise ExprError(M("run.sum_type", type=_type_name(value)))
        total += value
    return _number(total)


def _round(number: Any, ndigits: Any = None) -> Any:
    """round(): the builtin computes 10**-ndigits, so a huge ndigits would never finish."""
    if ndigits is None:
        return round(number)
    if type(ndigits) is not int or abs(ndigits) > 100:
        raise ExprError(M("run.round_digits"))
    return round(number, ndigits)
