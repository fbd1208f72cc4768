"""The one parser for JSON a person typed or sent: the standard library's, with the gaps closed.

``json.loads`` accepts things that fail later, far from the input, as server errors:

- ``NaN``, ``Infinity`` and numbers like ``1e999`` (which become ``inf``): JSON has no such
  values, PostgreSQL's jsonb refuses them and ``json.dumps`` writes them back as invalid JSON;
- integers of more than 4,300 digits: ``int()`` raises ``ValueError`` (not ``JSONDecodeError``);
- nesting deep enough to exhaust the recursion limit (``RecursionError``), in the parser or in
  whatever walks the value next (schema checks, templates, the database adapter);
- ``\\u0000`` in a string: PostgreSQL stores no NUL in text or jsonb.

:func:`loads` refuses all of these with :class:`JSONInputError`, whose message a person can act
on (it names the line and column when the text is not JSON at all). Callers put their own label
in front ("params: ...", "The file: ..."). Plain Python, so the engine can use it too.
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_DEPTH = 64
MAX_INT_DIGITS = 100


class JSONInputError(ValueError):
    """JSON a person sent that is malformed or holds a value this product refuses; ``str()`` says which.

    ``decode_error`` is the standard library's error when the text is not JSON at all, for callers
    whose message names its line and column in their own words.
    """

    def __init__(self, message: str, decode_error: json.JSONDecodeError | None = None) -> None:
        super().__init__(message)
        self.decode_error = decode_error


def _refuse_constant(name: str) -> Any:
    raise JSONInputError(f"{name} is not a JSON number; write a finite number or null")


def _parse_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise JSONInputError(f"a number has {digits} digits; at most {MAX_INT_DIGITS} are allowed")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JSONInputError(f"the number {text[:40]} is too large; write a finite number")
    return value


def loads(text: str | bytes | bytearray, *, allow_nul: bool = False) -> Any:
    """The value of ``text``, or JSONInputError saying what is wrong with it.

    ``allow_nul`` lets NUL through for callers that store nothing (the engine reading an A2A
    message); everything that may reach the database leaves it False.
    """
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONInputError(f"the text is not UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(
            text, parse_constant=_refuse_constant, parse_int=_parse_int, parse_float=_parse_float
        )
    except JSONInputError:
        raise
    except json.JSONDecodeError as exc:
        raise JSONInputError(
            f"not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}", exc
        ) from None
    except RecursionError:
        raise JSONInputError(f"nested more than {MAX_DEPTH} levels deep") from None
    check(value, allow_nul=allow_nul)
    return value


def check(value: Any, *, allow_nul: bool = False) -> None:
    """Refuse nesting deeper than MAX_DEPTH, non-finite floats and NUL in keys or strings (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if "\x00" in item and not allow_nul:
                raise JSONInputError("text may not contain the NUL character (\\u0000)")
        elif isinstance(item, dict):
            if depth > MAX_DEPTH:
                raise JSONInputError(f"nested more than {MAX_DEPTH} levels deep")
            for key, sub in item.items():
                stack.append((key, depth))
                stack.append((sub, depth + 1))
        elif isinstance(item, list):
            if depth > MAX_DEPTH:
                raise JSONInputError(f"nested more than {MAX_DEPTH} levels deep")
            stack.extend((sub, depth + 1) for sub in item)
        elif isinstance(item, float) and not math.isfinite(item):
            raise JSONInputError("NaN and Infinity are not JSON numbers; write a finite number or null")
