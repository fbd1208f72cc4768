"""Expression text put together with the right parentheses, and the decision tree a routing
function is read into (each ``if`` a branch, each ``return`` a leaf), written back as expressions."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from llamon_agent.expr.limits import MAX_SOURCE_CHARS
from llamon_agent.tools_import._model import (
    _P_AND,
    _P_ARITH,
    _P_ATOM,
    _P_CMP,
    _P_IFEXP,
    _P_NOT,
    _P_OR,
    _TooLong,
)

# --- pieces of expression text -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Piece:
    text: str
    prec: int
    safe: bool  # evaluating it can never raise
    negated: _Piece | None = None  # this is ``not <negated>``

    def __post_init__(self) -> None:
        # Locals put in place can grow a text fast (b = a + a; c = b + b; ...): stop at the
        # expression language's own cap, long before memory is at stake.
        if len(self.text) > MAX_SOURCE_CHARS:
            raise _TooLong

    def at(self, prec: int) -> str:
        """The text, in parentheses unless it binds at least as tightly as ``prec``."""
        if self.prec >= prec:
            return self.text
        return "(" + self.text + ("\n)" if "#" in self.text else ")")


def _not(p: _Piece) -> _Piece:
    # In a condition only truthiness counts: not (not x) is x, not (a in b) is a not in b.
    if p.negated is not None:
        return p.negated
    return _Piece("not " + p.at(_P_CMP), _P_NOT, p.safe, negated=p)


def _and(a: _Piece, b: _Piece) -> _Piece:
    return _Piece(f"{a.at(_P_AND)} and {b.at(_P_AND)}", _P_AND, a.safe and b.safe)


def _or(a: _Piece, b: _Piece) -> _Piece:
    return _Piece(f"{a.at(_P_OR)} or {b.at(_P_OR)}", _P_OR, a.safe and b.safe)


def _ifexp(a: _Piece, cond: _Piece, b: _Piece) -> _Piece:
    return _Piece(
        f"{a.at(_P_OR)} if {cond.at(_P_OR)} else {b.at(_P_OR)}", _P_IFEXP, a.safe and cond.safe and b.safe
    )


def _evaluated(p: _Piece) -> _Piece:
    """``(p) is None or True``: evaluates ``p`` (so that it fails where it fails) and is true."""
    return _Piece(f"{p.at(_P_CMP + 1)} is None or True", _P_OR, p.safe)


def _prec(node: ast.AST) -> int:
    if isinstance(node, ast.BoolOp):
        return _P_OR if isinstance(node.op, ast.Or) else _P_AND
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return _P_NOT
    if isinstance(node, ast.Compare):
        return _P_CMP
    if isinstance(node, (ast.BinOp, ast.UnaryOp)):
        return _P_ARITH
    if isinstance(node, (ast.IfExp, ast.Lambda, ast.NamedExpr)):
        return _P_IFEXP
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float))
        and not isinstance(node.value, bool)
    ):
        return _P_ARITH if node.value < 0 else _P_ATOM
    return _P_ATOM


# --- the decision tree ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Leaf:
    tool: str | None  # None: returns None
    params: _Piece | None
    line: int


@dataclass(frozen=True, slots=True)
class _Branch:
    cond: _Piece
    then: _Tree
    orelse: _Tree


@dataclass(frozen=True, slots=True)
class _Guard:
    value: _Piece
    rest: _Tree


_Tree = _Leaf | _Branch | _Guard

_TRUE = _Piece("True", _P_ATOM, True)
_FALSE = _Piece("False", _P_ATOM, True)


def _when(tree: _Tree, tool: str) -> _Piece:
    if isinstance(tree, _Leaf):
        return _TRUE if tree.tool == tool else _FALSE
    if isinstance(tree, _Guard):
        rest = _when(tree.rest, tool)
        if rest is _FALSE:
            return _Piece(f"{tree.value.at(_P_CMP + 1)} is None and False", _P_AND, tree.value.safe)
        if rest is _TRUE:
            return _evaluated(tree.value)
        return _and(_evaluated(tree.value), rest)
    c, a, b = tree.cond, _when(tree.then, tool), _when(tree.orelse, tool)
    if a is b and a in (_TRUE, _FALSE):
        if c.safe:
            return a
        return _evaluated(c) if a is _TRUE else _Piece(f"{c.at(_P_CMP + 1)} is None and False", _P_AND, False)
    if a is _TRUE and b is _FALSE:
        return c
    if a is _FALSE and b is _TRUE:
        return _not(c)
    if b is _FALSE:
        return _and(c, a)
    if a is _FALSE:
        return _and(_not(c), b)
    if a is _TRUE:
        return _or(c, b)
    if b is _TRUE:
        return _or(_not(c), a)
    return _ifexp(a, c, b)


def _params(tree: _Tree, tool: str) -> _Piece | None:
    if isinstance(tree, _Leaf):
        return tree.params if tree.tool == tool else None
    if isinstance(tree, _Guard):
        return _params(tree.rest, tool)
    a, b = _params(tree.then, tool), _params(tree.orelse, tool)
    if a is None or b is None or a.text == b.text:
        return a or b
    return _ifexp(a, tree.cond, b)


def _tools_of(tree: _Tree) -> list[str]:
    """The tools the function returns, in the order of their first return."""
    return list(dict.fromkeys(leaf.tool for leaf in _leaves(tree) if leaf.tool is not None))


def _leaves(tree: _Tree) -> Iterator[_Leaf]:
    stack = [tree]
    while stack:
        t = stack.pop()
        if isinstance(t, _Leaf):
            yield t
        elif isinstance(t, _Guard):
            stack.append(t.rest)
        else:
            stack += [t.orelse, t.then]
