"""Loops over the DataParts (or FileParts, or any iterable) a rule can say, and calls of pure
module-level helpers put in place. ``fx`` is the translation of one function (``_function._Function``).

Loops, each kept exact (the same conditions, in the same order, failing where the function fails):

- ``for v in it: if test: return CALL`` -> ``when`` ``any(test for v in it)``; when CALL uses
  ``v`` (the first match's values), ``params`` reads ``v`` as ``[v for v in it if test][0]``;
- ``x = PRE`` then ``for v in it: if test: x = EXPR`` (the last match) or with ``break`` after the
  assignment (the first match) -> ``x`` is ``([EXPR for v in it if test] or [PRE])[-1]`` (``[0]``).

Reading ``v`` beyond the first match evaluates ``test`` on every item, so these need a ``test``
(and an ``EXPR``) that cannot fail on a DataPart or FilePart (``.get``, ``"k" in v``, ``==``):
otherwise the function is left out, with that reason.
"""

from __future__ import annotations

import ast
from typing import Any

from llamon_agent.tools_import._model import _BUILTINS, _P_ATOM, _P_OR
from llamon_agent.tools_import._tree import _Branch, _Piece, _Tree


def _is_parts(fx: Any, node: ast.expr) -> bool:
    """``ctx.a2a_data`` / ``ctx.a2a_files``, alone or ``or []``: every item is a dict."""
    if (
        isinstance(node, ast.BoolOp)
        and isinstance(node.op, ast.Or)
        and len(node.values) == 2
        and isinstance(node.values[1], ast.List)
        and not node.values[1].elts
    ):
        node = node.values[0]
    return (
        isinstance(node, ast.Attribute)
        and node.attr in ("a2a_data", "a2a_files")
        and isinstance(node.value, ast.Name)
        and node.value.id == fx.param
    )


def _uses(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))


def _exact_test(fx: Any, stmt: ast.For, test: ast.expr, env: dict[str, Any], var: str, what: str) -> None:
    if not (_is_parts(fx, stmt.iter) and fx.safe(test, env, {var: "part"})):
        raise fx.refuse(
            stmt,
            "loop-value",
            var,
            f"{what} uses the loop variable {var}: a rule can keep it only in a loop over ctx.a2a_data "
            'or ctx.a2a_files whose test cannot fail (.get(), "k" in part, ==)',
        )


def loop(fx: Any, stmt: ast.For, rest: list[ast.stmt], env: dict[str, Any], depth: int) -> _Tree:
    """A for loop of one of the shapes above, or the function is left out with the reason."""
    body = stmt.body
    if not (
        isinstance(stmt.target, ast.Name)
        and not stmt.orelse
        and len(body) == 1
        and isinstance(body[0], ast.If)
    ):
        raise _shape(fx, stmt)
    var, branch = stmt.target.id, body[0]
    if var in env or var == fx.param:
        raise fx.refuse(stmt, "reassigned", var, f"the loop reuses the name {var}")
    inner = branch.body
    if not branch.orelse and len(inner) == 1 and isinstance(inner[0], ast.Return):
        return _returning(fx, stmt, var, branch, inner[0], rest, env, depth)
    if (
        not branch.orelse
        and 1 <= len(inner) <= 2
        and isinstance(inner[0], ast.Assign)
        and len(inner[0].targets) == 1
        and isinstance(inner[0].targets[0], ast.Name)
        and (len(inner) == 1 or isinstance(inner[1], ast.Break))
    ):
        return _matching(fx, stmt, var, branch, inner[0], len(inner) == 2, rest, env, depth)
    raise _shape(fx, stmt)


def _shape(fx: Any, stmt: ast.For) -> Exception:
    refusal: Exception = fx.refuse(
        stmt,
        "statement",
        "a for loop",
        "a for loop is translated only as `for v in ...: if <test>: return <call>` or "
        "`if <test>: x = <value>` (the last match; with `break`, the first)",
    )
    return refusal


def _comprehension(
    fx: Any, stmt: ast.For, var: str, test: ast.expr, env: dict[str, Any], element: str
) -> str:
    iterable = fx.render(stmt.iter, env, {}, allow_tools=True)
    condition = fx.render(test, env, {var: "value"})
    return f"[{element} for {var} in {iterable.at(_P_OR)} if {condition.at(_P_OR)}]"


def _returning(
    fx: Any,
    stmt: ast.For,
    var: str,
    branch: ast.If,
    ret: ast.Return,
    rest: list[ast.stmt],
    env: dict[str, Any],
    depth: int,
) -> _Tree:
    iterable = fx.render(stmt.iter, env, {}, allow_tools=True)
    is_tools = (
        isinstance(stmt.iter, ast.Attribute)
        and stmt.iter.attr == "mcp_tools"
        and isinstance(stmt.iter.value, ast.Name)
        and stmt.iter.value.id == fx.param
    )
    fx.local_names.discard(var)
    test = fx.render(branch.test, env, {var: "tool" if is_tools else "value"})
    piece = _Piece(f"any({test.at(_P_OR)} for {var} in {iterable.at(_P_OR)})", _P_ATOM, False)
    leaf_env = env
    if _uses(ret, var):
        _exact_test(fx, stmt, branch.test, env, var, "the returned call")
        first = _comprehension(fx, stmt, var, branch.test, env, var) + "[0]"
        leaf_env = {**env, var: fx.binding(_Piece(first, _P_ATOM, False), stmt.iter, stmt.lineno)}
    return _Branch(piece, fx.leaf(ret, leaf_env), fx.block(rest, env, depth))


def _matching(
    fx: Any,
    stmt: ast.For,
    var: str,
    branch: ast.If,
    assign: ast.Assign,
    first: bool,
    rest: list[ast.stmt],
    env: dict[str, Any],
    depth: int,
) -> _Tree:
    target = assign.targets[0]
    assert isinstance(target, ast.Name)
    name = target.id
    if name not in env:
        raise fx.refuse(
            assign,
            "unbound",
            name,
            f"the local {name} may be used before it is assigned (assign it before the loop, e.g. {name} = None)",
        )
    if first:  # the function stops at the first match; the rule reads every item
        _exact_test(fx, stmt, branch.test, env, var, f"the value of {name}")
        if _uses(assign.value, var) and not fx.safe(assign.value, env, {var: "part"}):
            raise fx.refuse(assign, "loop-value", var, f"the value of {name} could fail on a later DataPart")
    fx.local_names.discard(var)
    element = fx.render(assign.value, env, {var: "value"})
    matches = _comprehension(fx, stmt, var, branch.test, env, element.at(_P_OR))
    before = env[name].piece
    text = f"({matches} or [{before.at(_P_OR)}])[{0 if first else -1}]"
    safe = before.safe and fx.safe(assign.value, env, {var: "part"})
    tree: _Tree = fx.block(
        rest, {**env, name: fx.binding(_Piece(text, _P_ATOM, safe), stmt.iter, stmt.lineno)}, depth
    )
    return tree


# --- pure helpers ----------------------------------------------------------------------------------


def inline_call(fx: Any, node: ast.Call, env: dict[str, Any], scope: dict[str, str]) -> _Piece | None:
    """A call of a module-level helper ``def h(a, b): return <expression of a, b>`` (no decorator,
    no default, no global, only builtins called) with arguments that cannot fail: the helper's
    expression with each argument put in place. None when ``node`` is no such call."""
    func = node.func
    if not isinstance(func, ast.Name) or node.keywords:
        return None
    defs = fx.m.functions.get(func.id) or []
    if len(defs) != 1 or fx.m.names.get(func.id) != defs[0].lineno:
        return None
    helper = defs[0]
    args = helper.args
    body = list(helper.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if (
        isinstance(helper, ast.AsyncFunctionDef)
        or helper.decorator_list
        or args.posonlyargs
        or args.vararg
        or args.kwarg
        or args.kwonlyargs
        or args.defaults
        or len(args.args) != len(node.args)
        or len(body) != 1
        or not isinstance(body[0], ast.Return)
        or body[0].value is None
    ):
        return None
    expr = body[0].value
    params = {a.arg for a in args.args}
    bound = {
        n.id
        for c in ast.walk(expr)
        if isinstance(c, ast.comprehension)
        for n in ast.walk(c.target)
        if isinstance(n, ast.Name)
    }
    if params & bound:
        return None
    for n in ast.walk(expr):
        if isinstance(n, ast.Name) and n.id not in params | bound | _BUILTINS:
            return None  # a global, another helper: the caller reports the call
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id not in _BUILTINS:
            return None
    if not all(fx.safe(a, env, scope) for a in node.args):
        raise fx.refuse(
            node,
            "call",
            func.id,
            f"calls {func.id} with an argument that could fail: a helper is put in place only with "
            "arguments that cannot (ctx.query, ctx.context.get(...), literals)",
        )
    values = {a.arg: fx.render(v, env, scope).at(_P_ATOM) for a, v in zip(args.args, node.args, strict=True)}
    edits = [(n, values[n.id]) for n in ast.walk(expr) if isinstance(n, ast.Name) and n.id in values]
    return _Piece("(" + fx.splice(expr, edits) + ")", _P_ATOM, False)
