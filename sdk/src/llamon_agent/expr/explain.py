"""Why a ``when`` expression is true or false: the value of each and/or/not operand.

The tester shows, for a skipped rule, lines such as::

    "환불" in query and "검색" in query  -> False
      "환불" in query                   -> True
      "검색" in query                   -> False

:func:`explain_when` parses the text with the checker (the same allow-list as
:func:`compile_when`; nothing unchecked is ever run), splits the tree at ``and``, ``or`` and
``not``, compiles every other operand with the same guard and runs the operands one by one
on the namespace the rule sees, in Python's order, with Python's short-circuit: an operand
that the real evaluation would not reach is reported as not evaluated (``value`` None) and is
not run. The whole explanation runs on one evaluation budget charged with the whole
expression's static cost first, as :meth:`ExpressionRule.evaluate_ns` does, so an expression
over its cost budget fails here as it does in the pre-step (CostBudgetExceeded on the operand
that spent it).
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from llamon_agent.expr.budget import _METER
from llamon_agent.expr.checker import _parse
from llamon_agent.expr.compiled import _NO_HINTS, CompiledExpr, _own
from llamon_agent.expr.errors import ExprError, _Source
from llamon_agent.expr.guard import _compile
from llamon_agent.expr.messages import Message as M


@dataclass
class Part:
    """One operand of the explained expression (or the expression itself, at the root)."""

    text: str  # the author's text of this operand
    op: str  # "and", "or", "not", or "test" (anything that is not split further)
    value: bool | None = None  # its truth value; None when short-circuit never reached it
    error: str | None = None  # the evaluation failed on this operand (its ExprError, as text)
    children: list[Part] = field(default_factory=list)
    # That ExprError (message id and params), not in to_json nor in comparisons.
    error_expr: ExprError | None = field(default=None, compare=False, repr=False)

    def lines(self, depth: int = 0) -> Iterator[tuple[int, Part]]:
        """The parts in reading order with their nesting depth (the root is depth 0)."""
        yield depth, self
        for child in self.children:
            yield from child.lines(depth + 1)

    @property
    def shown_value(self) -> str:
        if self.error is not None:
            return "error"
        if self.value is None:
            return "not evaluated"
        return str(self.value)

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "op": self.op,
            "value": self.value,
            "error": self.error,
            "children": [c.to_json() for c in self.children],
        }


@dataclass
class Explanation:
    """The root part, the final truth value (None on error) and the error that ended it, if any."""

    root: Part
    value: bool | None
    error: str | None = None

    def lines(self) -> list[tuple[int, Part]]:
        return list(self.root.lines())

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "error": self.error, "root": self.root.to_json()}


class _Node:
    """The split tree: a compiled test, or an and/or/not over child nodes."""

    __slots__ = ("op", "text", "children", "expr")

    def __init__(self, op: str, text: str, children: list[_Node], expr: CompiledExpr | None) -> None:
        self.op, self.text, self.children, self.expr = op, text, children, expr


def _segment(src: _Source, node: ast.AST) -> str:
    text = ast.get_source_segment(src.wrapped, node) or ast.unparse(node)
    return " ".join(text.split())  # one line: the tester shows each operand on one row


def _split(node: ast.expr, src: _Source) -> _Node:
    if isinstance(node, ast.BoolOp):
        op = "and" if isinstance(node.op, ast.And) else "or"
        return _Node(op, _segment(src, node), [_split(v, src) for v in node.values], None)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return _Node("not", _segment(src, node), [_split(node.operand, src)], None)
    # A copy keeps the positions in the author's text (errors point there); the guard rewrites it.
    tree = ast.Expression(body=copy.deepcopy(node))
    expr = _own(_segment(src, node), "when", _compile(tree, "<when>"), src, _NO_HINTS, None)
    return _Node("test", expr.source, [], expr)


class _Failed(Exception):
    def __init__(self, error: ExprError) -> None:
        self.error = error


def _not_reached(node: _Node) -> Part:
    return Part(text=node.text, op=node.op, children=[_not_reached(c) for c in node.children])


@lru_cache(maxsize=4_096)
def _prepared(source: str) -> tuple[_Node, int, int]:
    """The split, compiled operands and the whole expression's static cost (immutable: cached)."""
    tree, src = _parse(source)
    root_node = _split(tree.body, src)  # first: the guard below rewrites the tree in place
    _code, static_cost, query_reads, _metered = _compile(tree, "<when>")
    return root_node, static_cost, query_reads


def explain_when(source: str, namespace: dict[str, Any]) -> Explanation:
    """Evaluate ``source`` operand by operand on ``namespace`` (from :func:`build_namespace`).

    ExprError when the text is not a valid expression (as :func:`compile_when`). A failure while
    evaluating is not raised: it is in ``Explanation.error`` and on the operand that failed.
    """
    if not isinstance(source, str):
        raise ExprError(M("expr.not_text"))
    root_node, static_cost, query_reads = _prepared(source)
    meter = namespace[_METER]
    # The whole expression's static cost first, as ExpressionRule.evaluate_ns charges it.
    meter.left = meter.expr_budget - static_cost - query_reads * meter.rcost
    root = Part(text=root_node.text, op=root_node.op)
    try:
        _fill(root_node, root, namespace)
    except _Failed as failed:
        return Explanation(root=root, value=None, error=str(failed.error))
    return Explanation(root=root, value=root.value)


def _fill(node: _Node, part: Part, namespace: dict[str, Any]) -> None:
    if node.expr is not None:
        try:
            part.value = bool(node.expr.run(namespace))
        except ExprError as exc:
            part.error = str(exc)
            part.error_expr = exc.moved()
            raise _Failed(exc) from None
        return
    if node.op == "not":
        child = Part(text=node.children[0].text, op=node.children[0].op)
        part.children.append(child)
        try:
            _fill(node.children[0], child, namespace)
        except _Failed:
            part.error_expr = ExprError(M("explain.operand_failed"))
            part.error = part.error_expr.reason
            raise
        part.value = not child.value
        return
    stop_on = node.op == "or"  # `or` stops at the first true operand, `and` at the first false one
    value = not stop_on
    for i, child_node in enumerate(node.children):
        if value == stop_on:
            part.children.append(_not_reached(child_node))
            continue
        child = Part(text=child_node.text, op=child_node.op)
        part.children.append(child)
        try:
            _fill(child_node, child, namespace)
        except _Failed:
            part.error_expr = ExprError(M("explain.operand_failed"))
            part.error = part.error_expr.reason
            part.children.extend(_not_reached(c) for c in node.children[i + 1 :])
            raise
        if child.value == stop_on:
            value = stop_on
    part.value = value
