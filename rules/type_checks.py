"""Types in request data: where a rule compares a DataPart value with a number.

A2A DataParts are JSON written by other systems, and a vital sign or an amount often arrives as text
(``{"spo2": "86"}``). ``data_get("spo2") < 90`` then fails the whole pre-step (a text cannot be
compared with a number) for every request carrying it. The static checks warn where a rule compares
a DataPart value with a number literal without converting it; ``float(data_get("spo2", 0)) < 90``
(or ``int(...)``) converts it, failing only when the text is not a number.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from django.utils.translation import gettext as _


def _is_number(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def _root(node: ast.AST) -> ast.AST:
    """What a chain of subscripts and ``.get(...)`` calls reads from (``d["a"]["b"]`` -> ``d``)."""
    while True:
        if isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            node = node.func.value
        else:
            return node


def _reads_datapart(node: ast.AST, loop_vars: set[str]) -> bool:
    """Whether ``node`` is a DataPart value read without a conversion."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id == "data_get"
    if not isinstance(node, ast.Subscript | ast.Call):
        return False
    root = ast.unparse(_root(node))
    return root != ast.unparse(node) and (root in loop_vars or root.endswith("a2a_data"))


def datapart_number_warnings(rule: Mapping[str, Any]) -> list[str]:
    """One sentence for each comparison of an unconverted DataPart value with a number in ``when``."""
    try:
        tree = ast.parse(str(rule.get("when", "")).strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []  # the expression check reports it
    loop_vars = {
        ast.unparse(gen.target)
        for node in ast.walk(tree)
        if isinstance(node, ast.GeneratorExp | ast.ListComp | ast.SetComp)
        for gen in node.generators
        if "a2a_data" in ast.unparse(gen.iter) or "data_get" in ast.unparse(gen.iter)
    }
    found: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare) or not any(
            isinstance(op, ast.Lt | ast.LtE | ast.Gt | ast.GtE) for op in node.ops
        ):
            continue
        sides = [node.left, *node.comparators]
        if not any(_is_number(side) for side in sides):
            continue
        for side in sides:
            if _reads_datapart(side, loop_vars):
                read = ast.unparse(side)
                found.append(
                    _(
                        "%(value)s is compared with a number, but a DataPart value may arrive as text "
                        '(such as "86"): the whole pre-step then fails. Convert it: float(%(value)s).'
                    )
                    % {"value": read}
                )
    return found
