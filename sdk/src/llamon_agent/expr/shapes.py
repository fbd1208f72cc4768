"""Compiling by shape: rules that differ only by their text and number literals share one
checked, guarded and compiled code object.

A rule set of 50,000 rules holds a handful of *shapes* (``"<text>" in query``,
``data_get("<text>", <int>) > <int>``, ...). The shape of an expression is its source with
each plain text literal (``"..."``, ``'...'``, ``r"..."`` on one line, without escapes
outside raw strings) and each decimal int or float literal (``12``, ``1_000``, ``2.5``,
``1e3``; ``-5`` is a minus and ``5``) replaced by a marker, the literals' types kept (``1``
and ``1.0`` do not share). The first expression of a shape is checked and compiled in full,
with its literals lifted into the arguments of the compiled function (guard ``_Lift``); the
template keeps that code, the static cost, and the parsed tree. Any other expression of the
same shape then needs only what depends on the literals' *values*:

* the caps on the raw text (length, NUL, text-direction characters, UTF-8), on each text
  literal (length) and number (64-bit ints, finite floats), and the validity of a literal
  regex pattern (``re_search("...", ...)``); on any failure the full path runs, so every
  error message is the full path's own;
* the index hints and the regex cost bound, computed by the same functions on the
  template's tree with the literal values put in (under a lock: one tree is shared), or, when
  the literals are texts, distinct and not empty, the template's hints computed once with a
  symbol for each literal, the values put in their place (the hint functions tell texts
  apart only by equality and emptiness then, so the result is the same);
* run-time error positions, mapped from the template's columns to the expression's own.

Why this is sound: when nothing but recognised literals contains a quote, ``#`` or ``\\``,
and each number lifted is a whole token (between spaces, brackets or operators), the
expression tokenizes exactly like the template except for those literals' values (the shape
keeps everything else, newlines included, verbatim), so the tree is the template's with
other values of the same types; the checker and the guard decide on node kinds, names and
literal *types* only, except for the value checks listed above (a number's value reaches
the code only at run time, as the literal's would: the compiler folds constants only where
that changes no result).
"""

from __future__ import annotations

import ast
import re
import threading
import types
from dataclasses import dataclass
from typing import Any, cast

from llamon_agent.expr.errors import ExprError, _Source
from llamon_agent.expr.limits import (
    _BIDI,
    _NEWLINES,
    MAX_INT,
    MAX_SOURCE_CHARS,
    MAX_STR_LITERAL_CHARS,
    REGEX_CALLS,
)

# A plain text literal Python reads exactly as written: no prefix but r/R, one line, and
# outside a raw string no backslash. Anything else leaves a quote or a backslash behind.
_TEXT = r"""(?:[rR](?:"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')|"[^"\\\n]*"|'[^'\\\n]*')"""
# A decimal int or float literal, whole: touching on either side anything but a space, a bracket
# or an operator, it stays in the shape verbatim (0x1F, 1j, 1.e5, .5, 01, 1__0, x1, 1if).
_DIGITS = r"[0-9](?:_?[0-9])*"
_FLOAT = rf"(?:{_DIGITS}\.{_DIGITS}(?:[eE][+-]?{_DIGITS})?|{_DIGITS}[eE][+-]?{_DIGITS})"
_INT = r"(?:[1-9](?:_?[0-9])*|0(?:_?0)*)"
_AROUND = r"[^ \t\n()\[\]{},:;+\-*/%<>=!]"  # anything but these: not lifted (ASCII only)
_NUMBER = rf"(?=[0-9])(?<!{_AROUND})(?:{_FLOAT}|{_INT})(?!{_AROUND})"
_LITERAL = re.compile(rf"(?<!\w){_TEXT}|{_NUMBER}")
_LEFTOVER = re.compile(r"""["'\\#\x00]""")  # what the shape must not keep
_MARK = "\x00"  # never in an accepted expression (NUL is refused), so never in a shape's text

_MAX_SHAPES = 20_000
_MAX_NUMBER_CHARS = 40  # a longer number literal takes the full path (its caps, its errors)


@dataclass(frozen=True, slots=True)
class Template:
    """What expressions of one shape share (``code`` takes their literals as defaults)."""

    kind: str
    source: str  # the first expression of the shape: its columns are the code's
    code: types.CodeType
    static_cost: int
    query_reads: int
    metered: bool
    tree: ast.Expression  # the template's checked tree, before the guard rewrote a copy
    literals: tuple[ast.Constant, ...]  # its lifted literals (texts and numbers) in source order
    patterns: tuple[int, ...]  # indexes of literals that are a regex helper's literal pattern
    priced: bool  # whether every regex call's pattern is one of them (its cost known per rule)
    lock: threading.Lock  # held while the tree has an expression's literals put in (on_values)
    symbolic: Any  # the `when` hint computed with symbols (see hint), _ON_VALUES for a number


_INF = float("inf")
_UNSHAREABLE = object()
_TEMPLATES: dict[tuple[str, str], Any] = {}


_SPLIT = re.compile(f"({_LITERAL.pattern})")  # text, literal, text, ..., text


def shape(source: str) -> tuple[str, tuple[Any, ...]] | None:
    """(shape text, literal values) of ``source``, or None when it cannot share code.

    The shape text is the text between the literals, joined by a marker, then each literal's
    kind (``r`` raw, ``s`` plain text, ``i`` int, ``f`` float): two sources have the same shape
    text exactly when they differ only by their literals' values (``1`` and ``1.0`` differ)."""
    if "\r" in source:
        return None
    pieces = _SPLIT.split(source)
    texts = pieces[0::2]
    if _LEFTOVER.search("".join(texts)):
        return None
    values: list[Any] = []
    kinds = []
    for literal in pieces[1::2]:
        first = literal[0]
        if first in "rR":
            kinds.append("r")
            values.append(literal[2:-1])
        elif first in "\"'":
            kinds.append("s")
            values.append(literal[1:-1])
        elif len(literal) > _MAX_NUMBER_CHARS:
            return None
        elif "." in literal or "e" in literal or "E" in literal:
            kinds.append("f")
            values.append(float(literal))
        else:
            kinds.append("i")
            values.append(int(literal))
    return _MARK.join(texts) + _MARK + "".join(kinds), tuple(values)


def _spans(source: str) -> list[tuple[int, int, int]]:
    """(line, start, end) of each literal, 1-based line, 0-based columns in the author's text."""
    out = []
    for match in _LITERAL.finditer(source):
        start, end = match.span()
        line_start = source.rfind("\n", 0, start) + 1
        out.append((source.count("\n", 0, start) + 1, start - line_start, end - line_start))
    return out


def lookup(source: str, kind: str) -> tuple[Template, tuple[Any, ...]] | None | bool:
    """The template for ``source`` and its literal values; False when there is none yet (build
    one with :func:`learn`); None when ``source`` must take the full path."""
    if len(source) > MAX_SOURCE_CHARS or "\x00" in source or _BIDI.search(source):
        return None
    found = shape(source)
    if found is None:
        return None
    text, values = found
    template = _TEMPLATES.get((kind, text))
    if template is None:
        return False
    if template is _UNSHAREABLE:
        return None
    for value in values:  # the checker's caps on literals (check_Constant); a number is >= 0
        kind_of = type(value)
        if kind_of is str:
            if len(value) > MAX_STR_LITERAL_CHARS:
                return None
        elif (value > MAX_INT) if kind_of is int else (value == _INF):
            return None
    if not source.isascii():
        try:
            source.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: the parser's own error
            return None
    if template.patterns:
        from llamon_agent.expr.helpers import check_regex

        try:
            for index in template.patterns:
                check_regex(values[index])
        except ExprError:
            return None
    return template, values


def learn(
    source: str, kind: str, tree: ast.Expression, pristine: ast.Expression, src: _Source
) -> tuple[dict[int, int], tuple[ast.Constant, ...], tuple[tuple[int, ...], bool], tuple[Any, ...]] | None:
    """Prepare ``tree`` (a checked parse of ``source``, to be compiled) for sharing: the map of
    its text and number literals to argument indexes, the same literals in ``pristine`` (a second parse,
    kept by the template), the regex patterns among them (and whether every regex call has
    one) and their values; None when its literals cannot be told apart."""
    found = shape(source)
    if found is None or len(_TEMPLATES) >= _MAX_SHAPES:
        return None
    text, values = found
    spans = _spans(source)
    where = {(line, start + 1): index for index, (line, start, _end) in enumerate(spans)}
    lift: dict[int, int] = {}
    literals: list[ast.Constant | None] = [None] * len(values)
    for node, twin in zip(ast.walk(tree.body), ast.walk(pristine.body), strict=True):
        if isinstance(node, ast.Constant) and type(node.value) in _LIFTED:
            index = where.get(src.byte_position(node.lineno, node.col_offset))  # type: ignore[arg-type]
            if (
                index is None
                or literals[index] is not None
                or type(node.value) is not type(values[index])
                or node.value != values[index]
            ):  # e.g. "a" "b": two literals, one text; 0x1F: a number not lifted
                _TEMPLATES[(kind, text)] = _UNSHAREABLE
                return None
            literals[index] = cast(ast.Constant, twin)  # the pristine tree's node at the same place
            lift[id(node)] = index
    if any(node is None for node in literals):
        _TEMPLATES[(kind, text)] = _UNSHAREABLE
        return None
    patterns = []
    priced = True
    for node in ast.walk(tree.body):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in REGEX_CALLS:
            first = id(node.args[0]) if node.args else None
            if first in lift and type(values[lift[first]]) is str:
                patterns.append(lift[first])
            else:
                priced = False
    # none is None (checked above)
    return lift, tuple(cast(list[ast.Constant], literals)), (tuple(patterns), priced), values


_LIFTED = (str, int, float)  # not bool (True, False and None are names in the shape)
_ON_VALUES = object()


def remember(
    source: str,
    kind: str,
    compiled: tuple[types.CodeType, int, int, bool],
    tree: ast.Expression,
    literals: tuple[ast.Constant, ...],
    patterns: tuple[tuple[int, ...], bool],
    hint: Any = None,
) -> Template:
    """Publish the template of ``source``'s shape; ``hint(body)``, a `when`'s index hint, is
    computed with a symbol in each text literal (see :func:`hint`)."""
    found = shape(source)
    assert found is not None
    symbolic = _ON_VALUES
    if hint is not None and all(type(node.value) is str for node in literals):
        symbolic = _with(literals, [f"{_MARK}{i}{_MARK}" for i in range(len(literals))], hint, tree)
    template = Template(kind, source, *compiled, tree, literals, *patterns, threading.Lock(), symbolic)
    _TEMPLATES[(kind, found[0])] = template
    return template


def on_values(template: Template, values: tuple[Any, ...], hint: Any) -> Any:
    """``hint(body)`` on the template's tree with ``values`` put in its literals: what the full
    path computes on the expression's own tree (the one tree is shared, hence the lock)."""
    with template.lock:
        return _with(template.literals, values, hint, template.tree)


def _with(literals: tuple[ast.Constant, ...], values: Any, hint: Any, tree: ast.Expression) -> Any:
    for node, value in zip(literals, values, strict=True):
        node.value = value
    return hint(tree.body)


def hint(template: Template, values: tuple[Any, ...], hint: Any) -> Any:
    """The `when` hint the template was published with, for an expression of its shape with
    ``values``: its symbolic hint with the values in place of the symbols when they are texts,
    distinct and not empty, else computed on the values (on_values)."""
    symbolic = template.symbolic
    if symbolic is _ON_VALUES or not all(values) or len(set(values)) != len(values):
        return on_values(template, values, hint)
    return _put(symbolic, values)


def _put(part: Any, values: tuple[Any, ...]) -> Any:
    kind = type(part)
    if kind is str:  # a symbol starts with NUL, which a literal never holds
        return values[int(part[1:-1])] if part[:1] == _MARK else part
    if kind is tuple or kind is list or kind is frozenset:
        return kind([_put(p, values) for p in part])
    return part


def map_position(
    template: Template, source: str, line: int | None, column: int | None
) -> tuple[int | None, int | None]:
    """A position in the template's text (1-based) as the same place in ``source``."""
    if line is None or column is None:
        return line, column
    shift = 0
    for (t_line, t_start, t_end), (_line, s_start, s_end) in zip(
        _spans(template.source), _spans(source), strict=True
    ):
        if t_line == line and t_end <= column - 1:
            shift += (s_end - s_start) - (t_end - t_start)
    return line, column + shift


def clear() -> None:
    """Forget every template (tests)."""
    _TEMPLATES.clear()


assert _NEWLINES.pattern == r"\r\n|\r|\n"  # shape() refuses "\r": lines are split on "\n" alike
