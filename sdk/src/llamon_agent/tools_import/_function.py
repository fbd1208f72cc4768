"""One routing function read into a decision tree, and its rules."""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass
from typing import Any

from llamon_agent.expr.errors import ExprError
from llamon_agent.expr.limits import MAX_RULE_NAME_CHARS, MAX_SOURCE_CHARS
from llamon_agent.expr.rules import check_rule_name, expression_rule
from llamon_agent.mcp.spec import MCP_ID_RE
from llamon_agent.tools_import._loops import inline_call, loop
from llamon_agent.tools_import._model import (
    _BUILTINS,
    _CTX_FIELDS,
    _INVERSE,
    _P_ATOM,
    _P_CMP,
    _P_IFEXP,
    _P_NOT,
    _P_OR,
    _STR_CHAIN,
    MAX_LEAVES,
    MAX_MODULE_PATHS,
    MAX_STATEMENTS,
    ImportedRule,
    _decorator,
    _Module,
    _Refused,
    _TooLong,
)
from llamon_agent.tools_import._tree import (
    _Branch,
    _Guard,
    _Leaf,
    _params,
    _Piece,
    _prec,
    _tools_of,
    _Tree,
    _when,
)

# --- one function --------------------------------------------------------------------------------


def _function_rules(
    fn: ast.FunctionDef | ast.AsyncFunctionDef, module: _Module, enabled: bool, taken: set[str]
) -> list[ImportedRule]:
    deco = _decorator(fn, module)
    if deco is None:
        raise _Refused(
            fn,
            "not-decorated",
            fn.name,
            "not decorated with @deterministic_tool(mcp_id=...): it has no MCP server",
        )
    if len(fn.decorator_list) != 1:
        raise _Refused(fn, "decorators", fn.name, "has decorators besides @deterministic_tool")
    kwargs = {k.arg: k.value for k in deco.keywords}
    if deco.args or set(kwargs) - {"mcp_id", "stop"} or "mcp_id" not in kwargs:
        raise _Refused(
            deco, "decorator", fn.name, '@deterministic_tool takes mcp_id="..." and stop=True|False only'
        )
    mcp_id = kwargs["mcp_id"]
    if not (isinstance(mcp_id, ast.Constant) and type(mcp_id.value) is str and MCP_ID_RE.match(mcp_id.value)):
        raise _Refused(
            deco, "mcp-id", fn.name, 'mcp_id must be a literal MCP server id such as "order-service"'
        )
    stop_node = kwargs.get("stop")
    if stop_node is not None and not (isinstance(stop_node, ast.Constant) and type(stop_node.value) is bool):
        raise _Refused(deco, "decorator", fn.name, "stop must be the literal True or False")
    stop = bool(stop_node.value) if isinstance(stop_node, ast.Constant) else False
    if isinstance(fn, ast.AsyncFunctionDef):
        raise _Refused(fn, "signature", fn.name, "an async function cannot be a routing rule")
    args = fn.args
    if (
        len(args.args) != 1
        or args.posonlyargs
        or args.vararg
        or args.kwarg
        or args.kwonlyargs
        or args.defaults
    ):
        raise _Refused(fn, "signature", fn.name, "a routing function takes exactly one argument, ctx")
    try:
        check_rule_name(fn.name)
    except ExprError as exc:
        raise _Refused(fn, "rule-name", fn.name, exc.reason) from None

    body = list(fn.body)
    docstring = ast.get_docstring(fn, clean=False) if body else None
    if docstring is not None:
        body = body[1:]
    exported = _is_export_shape(body, module)
    # The export writes description.strip() on one line; read it back unchanged. A docstring
    # written by hand is cleaned as help() shows it.
    description = (docstring or "").strip() if exported else inspect.cleandoc(docstring or "")
    statements = sum(1 for n in ast.walk(fn) if isinstance(n, ast.stmt))
    if statements > MAX_STATEMENTS:
        raise _Refused(
            fn, "too-long", str(MAX_STATEMENTS), f"the function has more than {MAX_STATEMENTS} statements"
        )
    if module.paths >= MAX_MODULE_PATHS:  # spent on the functions before: not even started
        raise _Refused(
            fn,
            "module-too-complex",
            str(MAX_MODULE_PATHS),
            f"the module has more than {MAX_MODULE_PATHS} paths in all; this function and the ones "
            "after it are not translated",
        )
    fx = _Function(module, fn, args.args[0].arg)
    try:
        tree = fx.block(body, {}, 0)
        when_params = [(tool, _when(tree, tool), _params(tree, tool)) for tool in _tools_of(tree)]
    except _TooLong:
        raise _Refused(
            fn,
            "too-long",
            str(MAX_SOURCE_CHARS),
            f"the translated expression would be longer than {MAX_SOURCE_CHARS:,} characters",
        ) from None
    except RecursionError:  # pragma: no cover - bounded by MAX_TREE_DEPTH and MAX_STATEMENTS
        raise _Refused(
            fn, "too-complex", str(MAX_LEAVES), "the function is too complex to translate"
        ) from None
    tools = [tool for tool, _, _ in when_params]
    if not tools:
        raise _Refused(fn, "no-call", fn.name, "never returns a tool call, so there is no rule to make")
    rules: list[ImportedRule] = []
    for tool, when, params in when_params:
        name = fn.name if len(tools) == 1 else _split_name(fn.name, tool, taken | {r.name for r in rules})
        assert params is not None
        try:
            expression_rule(
                name=name, mcp_id=mcp_id.value, tool_name=tool, when=when.text, params=params.text, stop=stop
            )
        except ExprError as exc:
            raise _Refused(
                fn,
                "expression",
                str(exc),
                f"the expression checker refuses the result (locals put in place): {exc}",
                expr_error=exc,
            ) from None
        rules.append(
            ImportedRule(
                name=name,
                description=description,
                mcp_id=mcp_id.value,
                tool_name=tool,
                when=when.text,
                params=params.text,
                stop=stop,
                enabled=enabled,
                function=fn.name,
                line=fn.lineno,
            )
        )
    return rules


def _split_name(function: str, tool: str, taken: set[str]) -> str:
    base = f"{function}__{tool}"
    if not base.isidentifier() or len(base) > MAX_RULE_NAME_CHARS:
        base = f"{function[: MAX_RULE_NAME_CHARS - 8]}__tool"
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base[: MAX_RULE_NAME_CHARS - 6]}_{n}"
    return name


def _is_export_shape(body: list[ast.stmt], module: _Module) -> bool:
    """Does the body call a compile_when/compile_params helper of the module (llamon-web's export)?"""
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in module.compiled
        for stmt in body
        for n in ast.walk(stmt)
    )


@dataclass
class _Binding:
    piece: _Piece
    node: ast.expr
    line: int


_STATEMENT_NAMES = {
    ast.For: "a for loop",
    ast.AsyncFor: "an async for loop",
    ast.While: "a while loop",
    ast.Try: "try/except",
    ast.With: "a with block (I/O)",
    ast.AsyncWith: "an async with block",
    ast.Raise: "raise",
    ast.Import: "an import",
    ast.ImportFrom: "an import",
    ast.Global: "global",
    ast.Nonlocal: "nonlocal",
    ast.FunctionDef: "a nested function",
    ast.AsyncFunctionDef: "a nested function",
    ast.ClassDef: "a class",
    ast.Delete: "del",
    ast.Assert: "assert",
    ast.AugAssign: "an augmented assignment (a local assigned twice)",
    ast.Match: "match",
}


class _Function:
    """The translation of one function's body."""

    def __init__(self, module: _Module, fn: ast.FunctionDef | ast.AsyncFunctionDef, param: str) -> None:
        self.m = module
        self.fn = fn
        self.param = param
        self.local_names = {
            n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))
        }
        self.local_names -= self._comprehension_targets(fn)
        self.leaves = 0

    @staticmethod
    def _comprehension_targets(fn: ast.AST) -> set[str]:
        out: set[str] = set()
        for node in ast.walk(fn):
            if isinstance(node, ast.comprehension):
                out |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
        return out

    def refuse(self, node: ast.AST, code: str, detail: str, reason: str) -> _Refused:
        return _Refused(node, code, detail, reason)

    # -- statements

    def block(self, stmts: list[ast.stmt], env: dict[str, _Binding], depth: int) -> _Tree:
        for i, stmt in enumerate(stmts):
            rest = stmts[i + 1 :]
            if isinstance(stmt, ast.Pass) or (
                isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Constant)
                and isinstance(stmt.value.value, str)
            ):
                continue
            if isinstance(stmt, ast.Return):
                return self.leaf(stmt, env)
            if isinstance(stmt, ast.If):
                cond = self.expr(stmt.test, env)
                return _Branch(
                    cond,
                    self.block(stmt.body + rest, env, depth + 1),
                    self.block(stmt.orelse + rest, env, depth + 1),
                )
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                if len(targets) != 1 or not isinstance(targets[0], ast.Name) or stmt.value is None:
                    raise self.refuse(
                        stmt, "assign", "", "only assignments of one local name (x = ...) are translated"
                    )
                name = targets[0].id
                if name in env or name == self.param:
                    raise self.refuse(
                        stmt,
                        "reassigned",
                        name,
                        f"the local {name} is assigned more than once (a rule has no variables)",
                    )
                value = self.expr(stmt.value, env)
                env = {**env, name: _Binding(value, stmt.value, stmt.lineno)}
                if not value.safe and not self.evaluated_next(name, rest):
                    return _Guard(value, self.block(rest, env, depth))
                continue
            if isinstance(stmt, ast.For):
                return self.loop(stmt, rest, env, depth)
            if isinstance(stmt, ast.Expr):
                raise self.refuse(
                    stmt, "statement", "call", "a statement with effects (a call whose result is not used)"
                )
            what = _STATEMENT_NAMES.get(type(stmt), type(stmt).__name__)
            raise self.refuse(stmt, "statement", what, f"{what} cannot be translated into a rule")
        return self.count(_Leaf(None, None, stmts[-1].lineno if stmts else self.fn.lineno))

    def evaluated_next(self, name: str, rest: list[ast.stmt]) -> bool:
        """Is ``name`` the first thing the next statement evaluates (so a guard would add nothing)?"""
        for stmt in rest:
            if isinstance(stmt, ast.Pass) or (
                isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Constant)
                and isinstance(stmt.value.value, str)
            ):
                continue
            if not isinstance(stmt, ast.If):
                return False
            node: ast.AST = stmt.test
            while True:
                if isinstance(node, ast.Compare):
                    node = node.left
                elif isinstance(node, ast.BoolOp):
                    node = node.values[0]
                elif isinstance(node, ast.UnaryOp):
                    node = node.operand
                elif isinstance(node, (ast.BinOp,)):
                    node = node.left
                elif isinstance(node, (ast.Attribute, ast.Subscript)):
                    node = node.value
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    node = node.func.value
                else:
                    return isinstance(node, ast.Name) and node.id == name
        return False

    def count(self, leaf: _Leaf) -> _Leaf:
        self.leaves += 1
        self.m.paths += 1
        if self.m.paths > MAX_MODULE_PATHS:
            raise self.refuse(
                self.fn,
                "module-too-complex",
                str(MAX_MODULE_PATHS),
                f"the module has more than {MAX_MODULE_PATHS} paths in all; this function and the ones "
                "after it are not translated",
            )
        if self.leaves > MAX_LEAVES:
            raise self.refuse(
                self.fn,
                "too-complex",
                str(MAX_LEAVES),
                f"more than {MAX_LEAVES} paths through the function once its ifs are unfolded",
            )
        return leaf

    def loop(self, stmt: ast.For, rest: list[ast.stmt], env: dict[str, _Binding], depth: int) -> _Tree:
        return loop(self, stmt, rest, env, depth)  # the shapes: _loops

    def binding(self, piece: _Piece, node: ast.expr, line: int) -> _Binding:
        return _Binding(piece, node, line)

    def leaf(self, stmt: ast.Return, env: dict[str, _Binding]) -> _Leaf:
        value = stmt.value
        if isinstance(value, ast.Name) and value.id in env and isinstance(env[value.id].node, ast.Dict):
            value = env[value.id].node
        if value is None or (isinstance(value, ast.Constant) and value.value is None):
            return self.count(_Leaf(None, None, stmt.lineno))
        if not isinstance(value, ast.Dict) or any(k is None for k in value.keys):
            raise self.refuse(
                stmt,
                "return",
                "",
                'returns something other than None or {"tool_name": "...", "params": {...}}',
            )
        items = {
            k.value: v for k, v in zip(value.keys, value.values, strict=True) if isinstance(k, ast.Constant)
        }
        if len(items) != len(value.keys) or set(items) != {"tool_name", "params"}:
            raise self.refuse(
                stmt, "return", "", 'a returned call has exactly the keys "tool_name" and "params"'
            )
        tool = items["tool_name"]
        if not (isinstance(tool, ast.Constant) and type(tool.value) is str and tool.value):
            raise self.refuse(
                tool, "tool-name", "", "tool_name must be a literal text: a rule calls one named tool"
            )
        return self.count(_Leaf(tool.value, self.expr(items["params"], env), stmt.lineno))

    # -- expressions

    def expr(self, node: ast.expr, env: dict[str, _Binding]) -> _Piece:
        return self.render(node, env, {})

    def render(
        self, node: ast.expr, env: dict[str, _Binding], scope: dict[str, str], *, allow_tools: bool = False
    ) -> _Piece:
        """The node as expression text: its own source, with the rewrites spliced in."""
        edits: list[tuple[ast.AST, str]] = []
        whole = self.visit(node, env, scope, edits, allow_tools=allow_tools)
        if whole is not None:
            return whole
        text, safe = self.splice(node, edits), self.safe(node, env, scope)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return _Piece(text, _P_NOT, safe, negated=self.render(node.operand, env, scope))
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _INVERSE:
            # not (a in b) is a not in b: keep conditions readable when an early return negates them.
            inverse = f"{self.splice(node.left, edits)} {_INVERSE[type(node.ops[0])]} {self.splice(node.comparators[0], edits)}"
            return _Piece(text, _P_CMP, safe, negated=_Piece(inverse, _P_CMP, safe))
        return _Piece(text, _prec(node), safe)

    def splice(self, node: ast.AST, edits: list[tuple[ast.AST, str]]) -> str:
        start, end = self.span(node)
        if any(isinstance(n, ast.JoinedStr) for n in ast.walk(node)) and edits:
            return self.unparse(node, edits)
        raw = self.m.raw
        out: list[bytes] = []
        pos = start
        for target, text in sorted(edits, key=lambda e: (self.span(e[0])[0], -self.span(e[0])[1])):
            s, e = self.span(target)
            if s < pos or e > end:  # nested in an edit already made, or outside this node
                continue
            out += [raw[pos:s], text.encode("utf-8")]
            pos = e
        out.append(raw[pos:end])
        return b"".join(out).decode("utf-8")

    def unparse(self, node: ast.AST, edits: list[tuple[ast.AST, str]]) -> str:
        """Fallback for f-strings (whose inner positions Python 3.11 does not always give): unparse."""
        return ast.unparse(_clone(node, {id(t): text for t, text in edits}))

    def span(self, node: ast.AST) -> tuple[int, int]:
        o = self.m.offsets
        return (
            o[node.lineno - 1] + node.col_offset,  # type: ignore[attr-defined]
            o[node.end_lineno - 1] + node.end_col_offset,  # type: ignore[attr-defined]
        )

    def visit(
        self,
        node: ast.AST,
        env: dict[str, _Binding],
        scope: dict[str, str],
        edits: list[tuple[ast.AST, str]],
        *,
        allow_tools: bool,
    ) -> _Piece | None:
        """Check ``node`` and collect rewrites; a piece when the whole node is replaced."""
        if isinstance(node, ast.Name):
            name = node.id
            if name in scope:
                if scope[name] == "tool":
                    raise self.refuse(
                        node,
                        "tools",
                        name,
                        f"the tool {name} is an object in Python and a dict in a rule; only {name}.name is translated",
                    )
                return None
            if name == self.param:
                if name != "ctx":
                    edits.append((node, "ctx"))
                    return _Piece("ctx", _P_ATOM, True)
                return None
            if name in env:
                piece = env[name].piece
                edits.append((node, piece.at(_P_ATOM)))
                return piece
            if name in self.local_names:
                raise self.refuse(
                    node, "unbound", name, f"the local {name} may be used before it is assigned on this path"
                )
            if name in self.m.names:
                line = self.m.names[name]
                raise self.refuse(
                    node,
                    "global",
                    name,
                    f"uses the module-level name {name}"
                    + (f" (line {line})" if line > 0 else "")
                    + ": globals and imports are not translated",
                )
            if name in _BUILTINS:
                return None
            raise self.refuse(node, "name", name, f"uses the name {name}, which a rule does not have")
        if isinstance(node, ast.Attribute):
            base = node.value
            if isinstance(base, ast.Name) and base.id == self.param and base.id not in scope:
                if node.attr not in _CTX_FIELDS:
                    raise self.refuse(
                        node, "ctx-attr", node.attr, f"ctx has no attribute {node.attr} in Python"
                    )
                if node.attr == "mcp_tools" and not allow_tools:
                    raise self.refuse(
                        node,
                        "tools",
                        "ctx.mcp_tools",
                        "ctx.mcp_tools holds objects in Python and dicts in a rule: it is translated in "
                        "comprehensions (t.name) and in len() only",
                    )
                if base.id != "ctx":
                    edits.append((base, "ctx"))
                    return None
                return _Piece(f"ctx.{node.attr}", _P_ATOM, True) if not edits else None
            if isinstance(base, ast.Name) and scope.get(base.id) == "tool":
                if node.attr != "name":
                    raise self.refuse(
                        node,
                        "tools",
                        f"{base.id}.{node.attr}",
                        f"{base.id}.{node.attr}: only a tool's name is translated",
                    )
                edits.append((node, f'{base.id}["name"]'))
                return None
            self._children(node, env, scope, edits)
            return None
        if isinstance(node, ast.Call):
            return self.call(node, env, scope, edits)
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            return self.comprehension(node, env, scope, edits)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mod, ast.Mult)):
            sides = (node.left, node.right) if isinstance(node.op, ast.Mult) else (node.left,)
            if any(self.maybe_sequence(side, env) for side in sides):
                what = "%-formatting" if isinstance(node.op, ast.Mod) else "repeating a text or list with *"
                raise self.refuse(node, "syntax", what, f"{what} works in Python but not in a rule")
        if isinstance(node, (ast.Lambda, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)):
            what = {ast.Lambda: "lambda", ast.NamedExpr: ":="}.get(type(node), "await/yield")
            raise self.refuse(node, "syntax", what, f"{what} cannot be translated")
        self._children(node, env, scope, edits)
        return None

    def _children(
        self, node: ast.AST, env: dict[str, _Binding], scope: dict[str, str], edits: list[tuple[ast.AST, str]]
    ) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.visit(child, env, scope, edits, allow_tools=False)
            elif isinstance(child, ast.comprehension):  # pragma: no cover - handled in comprehension()
                raise self.refuse(node, "syntax", "comprehension", "unexpected comprehension")
            else:
                for sub in ast.walk(child):
                    if isinstance(sub, ast.expr):
                        self.visit(sub, env, scope, edits, allow_tools=False)
                        break
        return None

    def call(
        self,
        node: ast.Call,
        env: dict[str, _Binding],
        scope: dict[str, str],
        edits: list[tuple[ast.AST, str]],
    ) -> _Piece | None:
        func = node.func
        # A module exported by llamon-web: _x_when(ctx) / _x_params(ctx) read back to their source.
        if (
            isinstance(func, ast.Name)
            and func.id in self.m.compiled
            and func.id not in env
            and func.id not in scope
            and len(node.args) == 1
            and not node.keywords
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id == self.param
        ):
            src = self.m.compiled[func.id][1]
            piece = _Piece(src, _source_prec(src), False)
            edits.append((node, piece.at(_P_ATOM)))
            return piece
        if isinstance(func, ast.Name) and func.id in ("any", "all") and func.id not in self.m.names:
            keywords = self.keyword_test(node, func.id, env, scope)
            if keywords is not None:
                edits.append((node, keywords.text))
                return keywords
        if isinstance(func, ast.Name):
            if func.id in scope or func.id in env or func.id == self.param:
                raise self.refuse(node, "call", func.id, f"calls {func.id}, which is a value, not a function")
            inlined = inline_call(self, node, env, scope) if func.id in self.m.names else None
            if inlined is not None:  # a pure module-level helper, put in place
                edits.append((node, inlined.text))
                return inlined
            if func.id in self.m.names:
                line = self.m.names[func.id]
                raise self.refuse(
                    node,
                    "call",
                    func.id,
                    f"calls {func.id}"
                    + (f", defined at line {line}" if line > 0 else "")
                    + ": calls of other functions are not translated",
                )
            if func.id not in _BUILTINS:
                raise self.refuse(node, "call", func.id, f"calls {func.id}, which a rule cannot call")
            allow = func.id == "len" and len(node.args) == 1
            for arg in node.args:
                self.visit(arg, env, scope, edits, allow_tools=allow)
            for kw in node.keywords:
                self.visit(kw.value, env, scope, edits, allow_tools=False)
            return None
        if isinstance(func, ast.Attribute):
            self.visit(func.value, env, scope, edits, allow_tools=False)
            for arg in node.args:
                self.visit(arg, env, scope, edits, allow_tools=False)
            for kw in node.keywords:
                self.visit(kw.value, env, scope, edits, allow_tools=False)
            return None
        raise self.refuse(node, "call", "", "calls something that is not a builtin or a method")

    def is_list(self, node: ast.expr, env: dict[str, _Binding]) -> bool:
        """A list (membership of a text in it cannot fail)."""
        if isinstance(node, ast.Name) and node.id in env:
            return self.is_list(env[node.id].node, env)
        if isinstance(node, (ast.List, ast.Tuple, ast.ListComp)):
            return True
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "split"
            and not node.args
            and self.is_query_text(node.func.value, env)
        )

    def maybe_sequence(self, node: ast.expr, env: dict[str, _Binding]) -> bool:
        """Could ``node`` be a text, list or tuple? False only for numbers and arithmetic on them."""
        if isinstance(node, ast.Name) and node.id in env:
            return self.maybe_sequence(env[node.id].node, env)
        if isinstance(node, ast.Constant):
            return not isinstance(node.value, (int, float))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return self.maybe_sequence(node.operand, env)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("len", "int", "float", "abs", "round")
        ):
            return False
        return not (isinstance(node, ast.BinOp) and not isinstance(node.op, ast.Add))

    def keyword_test(
        self, node: ast.Call, kind: str, env: dict[str, _Binding], scope: dict[str, str]
    ) -> _Piece | None:
        """``any(w in <query text> for w in <literal words>)`` -> ``contains_any(<text>, <words>)``."""
        if len(node.args) != 1 or node.keywords or not isinstance(node.args[0], ast.GeneratorExp):
            return None
        gen = node.args[0]
        if len(gen.generators) != 1:
            return None
        comp = gen.generators[0]
        if comp.ifs or comp.is_async or not isinstance(comp.target, ast.Name):
            return None
        words = comp.iter
        if not (
            isinstance(words, (ast.List, ast.Tuple))
            and words.elts
            and all(isinstance(w, ast.Constant) and type(w.value) is str for w in words.elts)
        ):
            return None
        test = gen.elt
        if not (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.ops[0], ast.In)
            and isinstance(test.left, ast.Name)
            and test.left.id == comp.target.id
            and self.is_query_text(test.comparators[0], env)
        ):
            return None
        if any(isinstance(n, ast.Name) and n.id == comp.target.id for n in ast.walk(test.comparators[0])):
            return None
        text = self.expr(test.comparators[0], env)
        helper = "contains_any" if kind == "any" else "contains_all"
        return _Piece(f"{helper}({text.at(_P_OR)}, {self.splice(words, [])})", _P_ATOM, True)

    def is_query_text(self, node: ast.expr, env: dict[str, _Binding]) -> bool:
        """``ctx.query`` or ``ctx.query.lower()`` and the like (always a text)."""
        if isinstance(node, ast.Name) and node.id in env:
            return self.is_query_text(env[node.id].node, env)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _STR_CHAIN
            and not node.args
            and not node.keywords
        ):
            return self.is_query_text(node.func.value, env)
        return (
            isinstance(node, ast.Attribute)
            and node.attr == "query"
            and isinstance(node.value, ast.Name)
            and node.value.id == self.param
        )

    def comprehension(
        self,
        node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp,
        env: dict[str, _Binding],
        scope: dict[str, str],
        edits: list[tuple[ast.AST, str]],
    ) -> _Piece | None:
        inner = dict(scope)
        for comp in node.generators:
            if comp.is_async:
                raise self.refuse(node, "syntax", "async for", "async comprehensions cannot be translated")
            self.visit(comp.iter, env, inner, edits, allow_tools=True)
            if not isinstance(comp.target, ast.Name):
                raise self.refuse(
                    comp.target,
                    "syntax",
                    "unpacking",
                    "a comprehension over pairs (a, b) cannot be translated",
                )
            if comp.target.id == self.param or comp.target.id in env:
                raise self.refuse(
                    comp.target,
                    "reassigned",
                    comp.target.id,
                    f"the comprehension reuses the name {comp.target.id}",
                )
            is_tools = (
                isinstance(comp.iter, ast.Attribute)
                and comp.iter.attr == "mcp_tools"
                and isinstance(comp.iter.value, ast.Name)
                and comp.iter.value.id == self.param
            )
            inner[comp.target.id] = "tool" if is_tools else "value"
            for test in comp.ifs:
                self.visit(test, env, inner, edits, allow_tools=False)
        # {t.name for t in ctx.mcp_tools} is the ready-made tool_names.
        if (
            isinstance(node, ast.SetComp)
            and len(node.generators) == 1
            and not node.generators[0].ifs
            and inner.get(getattr(node.generators[0].target, "id", "")) == "tool"
            and isinstance(node.elt, ast.Attribute)
            and node.elt.attr == "name"
            and isinstance(node.elt.value, ast.Name)
            and node.elt.value.id == getattr(node.generators[0].target, "id", None)
        ):
            edits.append((node, "tool_names"))
            return _Piece("tool_names", _P_ATOM, True)
        elts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        for elt in elts:
            self.visit(elt, env, inner, edits, allow_tools=False)
        return None

    # -- can evaluating it fail?

    def safe(self, node: ast.AST, env: dict[str, _Binding], scope: dict[str, str]) -> bool:
        """True only for shapes that can never raise (conservative: False when unsure)."""
        if isinstance(node, ast.Constant):
            return True
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id].piece.safe
            return node.id == self.param or scope.get(node.id) == "part"
        if isinstance(node, ast.IfExp):
            return all(self.safe(n, env, scope) for n in (node.test, node.body, node.orelse))
        if isinstance(node, (ast.List, ast.Tuple)):
            return all(self.safe(n, env, scope) for n in node.elts)
        if isinstance(node, (ast.ListComp, ast.GeneratorExp)) and len(node.generators) == 1:
            # Over the DataParts or FileParts (dicts): .get() and `"k" in part` cannot fail.
            comp = node.generators[0]
            parts = comp.iter
            if (
                isinstance(parts, ast.BoolOp)
                and isinstance(parts.op, ast.Or)
                and len(parts.values) == 2
                and isinstance(parts.values[1], ast.List)
                and not parts.values[1].elts
            ):
                parts = parts.values[0]
            if not (
                isinstance(parts, ast.Attribute)
                and parts.attr in ("a2a_data", "a2a_files")
                and isinstance(parts.value, ast.Name)
                and parts.value.id == self.param
                and parts is not comp.iter
                and isinstance(comp.target, ast.Name)
            ):
                return False
            inner = {**scope, comp.target.id: "part"}
            return all(self.safe(n, env, inner) for n in (node.elt, *comp.ifs))
        if isinstance(node, ast.Attribute):
            return (
                isinstance(node.value, ast.Name) and node.value.id == self.param and node.attr in _CTX_FIELDS
            )
        if isinstance(node, ast.BoolOp):
            return all(self.safe(v, env, scope) for v in node.values)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return self.safe(node.operand, env, scope)
        if isinstance(node, ast.Compare):
            if not all(self.safe(v, env, scope) for v in [node.left, *node.comparators]):
                return False
            operands = [node.left, *node.comparators]
            for op, left, right in zip(node.ops, operands, operands[1:], strict=False):
                if isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)):
                    continue
                if isinstance(op, (ast.In, ast.NotIn)) and (
                    isinstance(left, ast.Constant)
                    and type(left.value) is str
                    and (
                        self.is_query_text(right, env)
                        or self.is_list(right, env)
                        or scope.get(getattr(right, "id", "")) == "part"
                    )
                    or isinstance(right, ast.SetComp)
                    or (
                        isinstance(right, ast.Name)
                        and right.id in env
                        and isinstance(env[right.id].node, ast.SetComp)
                    )
                ):
                    continue
                return False
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            if f.attr == "get" and not node.keywords and 1 <= len(node.args) <= 2:
                base = f.value
                if isinstance(base, ast.Name) and base.id in env:
                    base = env[base.id].node
                if isinstance(base, ast.Name) and scope.get(base.id) == "part":
                    return all(self.safe(a, env, scope) and isinstance(a, ast.Constant) for a in node.args)
                return (
                    isinstance(base, ast.Attribute)
                    and base.attr == "context"
                    and isinstance(base.value, ast.Name)
                    and base.value.id == self.param
                    and all(
                        isinstance(a, ast.Constant)
                        and isinstance(a.value, (str, int, float, bool, type(None)))
                        for a in node.args
                    )
                )
            if f.attr in _STR_CHAIN and not node.args and not node.keywords:
                return self.is_query_text(node, env)
            if f.attr == "split" and not node.args and not node.keywords:
                return self.is_query_text(f.value, env)
            return False
        if isinstance(node, ast.SetComp):
            return bool(
                len(node.generators) == 1
                and not node.generators[0].ifs
                and isinstance(node.elt, ast.Attribute)
                and node.elt.attr == "name"
                and isinstance(node.generators[0].iter, ast.Attribute)
                and node.generators[0].iter.attr == "mcp_tools"
            )
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "len"
            and len(node.args) == 1
            and not node.keywords
        ):
            arg = node.args[0]
            return self.is_query_text(arg, env) or (
                isinstance(arg, ast.Attribute) and arg.attr == "mcp_tools" and self.safe(arg, env, scope)
            )
        return False


def _clone(node: ast.AST, keep: dict[int, str]) -> ast.AST:
    """A copy of ``node`` whose nodes listed in ``keep`` are replaced by names holding their text."""
    if id(node) in keep:
        return ast.Name(id=keep[id(node)], ctx=ast.Load())
    fields: dict[str, Any] = {}
    for name, value in ast.iter_fields(node):
        if isinstance(value, ast.AST):
            fields[name] = _clone(value, keep)
        elif isinstance(value, list):
            fields[name] = [_clone(v, keep) if isinstance(v, ast.AST) else v for v in value]
        else:
            fields[name] = value
    copy = type(node)(**fields)
    return ast.copy_location(copy, node)


def _source_prec(src: str) -> int:
    try:
        tree = ast.parse("(" + src + "\n)", mode="eval")
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        return _P_IFEXP
    return _prec(tree.body)
