"""What an expression reads of a request: the engine says it, so that no caller parses rule text.

:func:`reads` of a ``when`` or ``params`` text (``CompiledExpr.reads``, ``ExpressionRule.reads``)
gives the context keys and DataPart keys it reads by name, its literals, the tools it tests with
``"name" in tool_names``, its params dict literal, and its normal form (its syntax tree as text:
spacing, line breaks and comments do not count). The workbench's replay (which context keys
decide a request) and static checks (params against the tool's schema, repeated rules) use it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from llamon_agent.expr.hints import is_ctx_name

DYNAMIC: Any = object()  # a params value only known when the rule runs
# The attributes of ``ctx`` that are not the context (namespace._CtxView).
_CTX_OTHER = frozenset({"query", "a2a_data", "a2a_files", "tool_names", "mcp_tools"})


@dataclass(frozen=True, slots=True)
class Reads:
    """What one expression reads; None for keys means more than named keys (the whole context,
    a key computed at run time, ``ctx`` itself) or an expression that does not parse."""

    context_keys: frozenset[str] | None
    data_keys: frozenset[str] | None
    literals: frozenset[Any]
    tools: frozenset[str]
    params: tuple[dict[str, Any], bool] | None  # a dict literal: {key: literal or DYNAMIC}, every key known
    normal: str
    # DataPart values (as written) ordered against a number literal without a conversion: a value
    # that arrives as text ("86") then fails the pre-step (the static checks, llamon_agent.rule_checks, warn of each)
    data_numbers: tuple[str, ...] = ()


def _text(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and type(node.value) is str else None


def _context_keys(tree: ast.AST) -> frozenset[str] | None:
    """Every use of the context must read one key named by a text literal: ``context.get("k",
    ...)``, ``context["k"]`` or ``"k" in context`` (``ctx.context`` alike)."""
    keys: set[str] = set()
    used: set[int] = set()  # the context nodes read as one named key
    ctx_ok: set[int] = set()  # the ``ctx`` names read as an attribute other than the context
    for node in ast.walk(tree):
        key, target = None, None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            if node.args and not node.keywords and len(node.args) <= 2:
                key, target = _text(node.args[0]), node.func.value
        elif isinstance(node, ast.Subscript):
            key, target = _text(node.slice), node.value
        elif (
            isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and isinstance(node.ops[0], ast.In | ast.NotIn)
        ):
            key, target = _text(node.left), node.comparators[0]
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "ctx"
            and (node.attr in _CTX_OTHER or node.attr == "context")
        ):
            ctx_ok.add(id(node.value))
        if key is not None and target is not None and is_ctx_name(target, "context"):
            keys.add(key)
            used.add(id(target))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_ctx_name(node, "context") and id(node) not in used:
            return None
        if isinstance(node, ast.Name):
            if node.id == "ctx" and id(node) not in ctx_ok:
                return None
            if node.id == "context" and id(node) not in used:
                return None
    return frozenset(keys)


def _data_keys(tree: ast.AST) -> frozenset[str] | None:
    """The keys of ``data_get("k", ...)``; None when DataParts are read otherwise."""
    keys: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "data_get":
            key = _text(node.args[0]) if node.args else None
            if key is None:
                return None
            keys.add(key)
        elif is_ctx_name(node, "a2a_data"):
            return None
    return frozenset(keys)


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


def _data_numbers(tree: ast.AST) -> tuple[str, ...]:
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
        if any(_is_number(side) for side in sides):
            found += [ast.unparse(side) for side in sides if _reads_datapart(side, loop_vars)]
    return tuple(found)


def _params(tree: ast.AST) -> tuple[dict[str, Any], bool] | None:
    if not isinstance(tree, ast.Dict):
        return None
    params: dict[str, Any] = {}
    complete = True
    for key, value in zip(tree.keys, tree.values, strict=True):
        name = _text(key)
        if name is None:
            complete = False  # a computed key
            continue
        try:
            params[name] = ast.literal_eval(value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            params[name] = DYNAMIC
    return params, complete


@lru_cache(maxsize=4_096)
def reads(source: str) -> Reads:
    """What ``source`` (a ``when`` or ``params`` text) reads of a request."""
    try:
        tree = ast.parse("(" + source.strip() + "\n)", mode="eval").body  # as the checker reads it
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return Reads(None, None, frozenset(), frozenset(), None, source.strip())
    literals: set[Any] = set()
    tools: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and type(node.value) in (str, int, float):
            literals.add(node.value)
        if (
            isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and isinstance(node.ops[0], ast.In)
            and is_ctx_name(node.comparators[0], "tool_names")
            and _text(node.left) is not None
        ):
            tools.add(node.left.value)  # type: ignore[attr-defined]
    return Reads(
        _context_keys(tree),
        _data_keys(tree),
        frozenset(literals),
        frozenset(tools),
        _params(tree),
        ast.dump(tree),
        _data_numbers(tree),
    )
