"""The run-time helpers visible to expressions (contains_any, re_search, ...) and the size-checked operators."""

from __future__ import annotations

import types
from collections.abc import Iterable
from typing import Any, cast

import re2

from llamon_agent.expr.errors import ExprError, _type_name
from llamon_agent.expr.limits import (
    MAX_INT,
    MAX_ITER_ITEMS,
    MAX_PATTERN_CHARS,
    MAX_RESULT_CHARS,
    MAX_RESULT_ITEMS,
)
from llamon_agent.expr.view import _CtxView


def _words(helper: str, words: Any) -> Iterable[str]:
    if isinstance(words, str):
        raise ExprError(f'{helper}(text, words): words must be a list such as ["a", "b"], not a text')
    if not isinstance(words, (list, tuple, set, frozenset)):
        raise ExprError(f"{helper}(text, words): words must be a list of texts, not {_type_name(words)}")
    for word in words:
        if not isinstance(word, str):
            raise _word_error(helper, word)
    return words


def _text(helper: str, text: Any) -> str | None:
    if text is None or isinstance(text, str):
        return text
    raise ExprError(f"{helper}: the text must be a text or None, not {_type_name(text)}")


_WORD_CONTAINERS = (list, tuple, set, frozenset)


def _word_error(helper: str, word: Any) -> ExprError:
    return ExprError(f"{helper}(text, words): every word must be a text, not {_type_name(word)}")


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


def _regex(pattern: Any) -> Any:
    if not isinstance(pattern, str):
        raise ExprError(f"a regular expression must be a text, not {_type_name(pattern)}")
    compiled = _RE_CACHE.get(pattern)
    if compiled is not None:
        return compiled
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ExprError(f"the regular expression is longer than {MAX_PATTERN_CHARS:,} characters")
    try:
        compiled = re2.compile(pattern, _RE_OPTIONS)
    except re2.error as exc:
        detail = (
            exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else exc
        )
        raise ExprError(
            f"invalid regular expression {pattern!r}: {detail} (RE2 syntax: no look-around or backreferences)"
        ) from None
    if len(_RE_CACHE) >= _RE_CACHE_SIZE:
        # Drop the oldest only: clearing it all made every request recompile every pattern
        # of a rule set with more patterns than the cache holds (19x slower at 10,000 rules).
        del _RE_CACHE[next(iter(_RE_CACHE))]
    _RE_CACHE[pattern] = compiled
    return compiled


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
        raise ExprError(f"re_find: the pattern {pattern!r} has no group {group!r}") from None


def _data_get(parts: Any, key: Any, default: Any = None) -> Any:
    """data_get(key, default=None): the first value of ``key`` across the DataParts, in order."""
    if parts:
        for part in parts:
            if type(part) is dict and key in part:
                return part[key]
    return default


_NUMBERS = frozenset({int, float, bool})


def _number(value: Any) -> Any:
    if type(value) is int and not -MAX_INT <= value <= MAX_INT:
        raise ExprError("the integer result is too large (the limit is 64 bits)")
    return value


def _add(left: Any, right: Any) -> Any:
    lt, rt = type(left), type(right)
    if lt in _NUMBERS and rt in _NUMBERS:
        return _number(left + right)
    if lt is str and rt is str:
        if len(left) + len(right) > MAX_RESULT_CHARS:
            raise ExprError(f"the text would be longer than {MAX_RESULT_CHARS:,} characters")
        return left + right
    if (lt is list and rt is list) or (lt is tuple and rt is tuple):
        if len(left) + len(right) > MAX_RESULT_ITEMS:
            raise ExprError(f"the list would have more than {MAX_RESULT_ITEMS:,} items")
        return left + right
    raise ExprError(f"cannot add {_type_name(left)} and {_type_name(right)}")


def _mul(left: Any, right: Any) -> Any:
    if type(left) in _NUMBERS and type(right) in _NUMBERS:
        return _number(left * right)
    if isinstance(left, (str, list, tuple)) or isinstance(right, (str, list, tuple)):
        raise ExprError("repeating a text or list with * is not allowed")
    raise ExprError(f"cannot multiply {_type_name(left)} and {_type_name(right)}")


def _mod(left: Any, right: Any) -> Any:
    if type(left) in _NUMBERS and type(right) in _NUMBERS:
        return _number(left % right)
    if isinstance(left, str):
        raise ExprError('% formatting is not allowed; use an f-string such as f"order {query}"')
    raise ExprError(f"cannot compute {_type_name(left)} % {_type_name(right)}")


def _join(sep: Any, *args: Any, **kwargs: Any) -> str:
    if type(sep) is not str:
        raise ExprError(f"{_type_name(sep)} has no method join()")
    if len(args) != 1 or kwargs:
        raise ExprError("join() takes one argument: the list of texts")
    items = args[0]
    if not isinstance(items, (list, tuple, set, frozenset, str, dict, types.GeneratorType)):
        raise ExprError(f"join() needs a list of texts, not {_type_name(items)}")
    parts = list(items)  # a generator here comes from a comprehension, already capped
    if len(parts) > MAX_RESULT_ITEMS:
        raise ExprError(f"join() was given more than {MAX_RESULT_ITEMS:,} items")
    size = len(sep) * max(len(parts) - 1, 0)
    for part in parts:
        if type(part) is not str:
            raise ExprError(f"join() needs texts, got {_type_name(part)}")
        size += len(part)
    if size > MAX_RESULT_CHARS:
        raise ExprError(f"the text would be longer than {MAX_RESULT_CHARS:,} characters")
    return sep.join(parts)


def _replace(text: Any, *args: Any, **kwargs: Any) -> str:
    if type(text) is not str:
        raise ExprError(f"{_type_name(text)} has no method replace()")
    if kwargs or len(args) not in (2, 3):
        raise ExprError("replace() takes the old text, the new text and optionally a count")
    old, new = args[0], args[1]
    count = args[2] if len(args) == 3 else -1
    if type(old) is not str or type(new) is not str or type(count) is not int:
        raise ExprError("replace(old, new, count): old and new must be texts, count a number")
    hits = len(text) + 1 if old == "" else text.count(old)
    if count >= 0:
        hits = min(hits, count)
    if len(text) + hits * (len(new) - len(old)) > MAX_RESULT_CHARS:
        raise ExprError(f"the text would be longer than {MAX_RESULT_CHARS:,} characters")
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
        else:
            left -= 4
        if left < 0:
            raise ExprError(f"the text would be longer than {MAX_RESULT_CHARS:,} characters")
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
        raise ExprError(f"the text would be longer than {MAX_RESULT_CHARS:,} characters")
    return text


def _fstr(*parts: str) -> str:
    size = 0
    for part in parts:
        size += len(part)
    if size > MAX_RESULT_CHARS:
        raise ExprError(f"the text would be longer than {MAX_RESULT_CHARS:,} characters")
    return "".join(parts)


def _iter(values: Any) -> Any:
    try:
        size = len(values)
    except TypeError:
        hint = "; use `or []` when it may be missing" if values is None else ""
        raise ExprError(f"cannot loop over {_type_name(values)}{hint}") from None
    if size > MAX_ITER_ITEMS:
        raise ExprError(f"cannot loop over more than {MAX_ITER_ITEMS:,} items")
    return values


def _sum(values: Any, start: Any = 0) -> Any:
    """sum(): numbers only (the builtin would also concatenate lists, quadratically)."""
    if type(start) not in _NUMBERS:
        raise ExprError("sum() adds numbers only")
    total = start
    for value in values:
        if type(value) not in _NUMBERS:
            raise ExprError(f"sum() adds numbers only, got {_type_name(value)}")
        total += value
    return _number(total)


def _round(number: Any, ndigits: Any = None) -> Any:
    """round(): the builtin computes 10**-ndigits, so a huge ndigits would never finish."""
    if ndigits is None:
        return round(number)
    if type(ndigits) is not int or abs(ndigits) > 100:
        raise ExprError("round(number, ndigits): ndigits must be a whole number between -100 and 100")
    return round(number, ndigits)
