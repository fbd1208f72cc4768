"""An ``app/tools.py`` read back as routing rules (``when`` / ``params`` expressions).

The module is untrusted input: it is parsed, never imported or run. Its size and the depth of
its syntax tree are capped before anything else is done with it.

Which functions: those listed in ``DETERMINISTIC_TOOLS`` in that order (the pre-step's order),
then the ``@deterministic_tool`` functions left out of the list, as disabled rules (they never
run in the project either). Without a ``DETERMINISTIC_TOOLS`` list, every decorated function in
source order.

What translates: a body made of an optional docstring, ``pass``, locals assigned once, ``if`` /
``elif`` / ``else`` (nested), ``return None`` (or falling off the end), ``return {"tool_name":
"<literal>", "params": <expression>}``, and ``for v in <iterable>: if <test>: return <call>``
where the call does not use ``v`` (it becomes ``any(<test> for v in <iterable>)``). Conditions
and params use ``ctx.query``, ``ctx.context``, ``ctx.a2a_data``, ``ctx.a2a_files``,
``ctx.mcp_tools`` (in a comprehension, where ``t.name`` becomes ``t["name"]``, or in ``len()``),
the builtins the expression language has and the methods it allows. ``{t.name for t in
ctx.mcp_tools}`` becomes ``tool_names``; ``any(w in ctx.query for w in ("a", "b"))`` becomes
``contains_any(ctx.query, ("a", "b"))`` (``all`` gives ``contains_all``). A module exported by
llamon-web (``compile_when("...")`` / ``compile_params("...")``) reads back to its own
expressions, character for character.

How the behaviour is kept exactly: the body is read into a decision tree (each ``if`` a branch,
each ``return`` a leaf). A rule's ``when`` is that tree written as one expression that is true
exactly on the leaves returning the rule's tool, evaluating the same conditions in the same
order as the function (``c and X``, ``not c or X``, ``X if c else Y``), so it also fails where
the function fails. A local is replaced by its expression where it is used; when evaluating it
could fail (``ctx.context["k"]``), ``((<expr>) is None or True) and ...`` keeps the failure at
the point of the assignment. A function returning several tools becomes one rule per tool, in
order of their first ``return``; at most one of them fires for a request, as the function makes
at most one call. ``params`` is the tree restricted to the rule's leaves.

What does not translate is listed with the file, the line and the reason (:class:`Untranslatable`):
calls of other functions, module-level names (globals, imports), loops other than the one above,
``try``/``with``/``raise``/``import``, locals assigned twice, returned values of another shape,
and whatever the expression checker refuses (its message is the reason).
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from llamon_agent.expr.errors import ExprError
from llamon_agent.expr.limits import BUILTIN_NAMES, MAX_RULE_NAME_CHARS, MAX_SOURCE_CHARS
from llamon_agent.expr.rules import check_rule_name, expression_rule
from llamon_agent.mcp.spec import MCP_ID_RE

MAX_SOURCE_BYTES = 1024 * 1024  # a 40-function module is ~20 KB
MAX_TREE_DEPTH = 100  # syntax-tree depth of the module
MAX_TREE_NODES = 200_000
MAX_LEAVES = 256  # returns reachable in one function once every if is unfolded
MAX_STATEMENTS = 500  # statements in one routing function (the translation recurses on them)
RULESET_FORMAT = "llamon-ruleset/1"

_CTX_FIELDS = frozenset({"query", "context", "a2a_data", "a2a_files", "mcp_tools"})
_BUILTINS = frozenset(BUILTIN_NAMES)
_STR_CHAIN = frozenset({"lower", "upper", "casefold", "strip", "lstrip", "rstrip"})

_INVERSE: dict[type, str] = {
    ast.In: "not in",
    ast.NotIn: "in",
    ast.Is: "is not",
    ast.IsNot: "is",
    ast.Eq: "!=",
    ast.NotEq: "==",
}

# Precedence of an expression's top node, for parentheses when pieces are put together.
_P_IFEXP, _P_OR, _P_AND, _P_NOT, _P_CMP, _P_ARITH, _P_ATOM = 0, 1, 2, 3, 4, 5, 10


class ToolsImportError(ValueError):
    """The file as a whole cannot be read (too big, not Python, too deep); ``line`` when known."""

    def __init__(self, reason: str, *, code: str, line: int | None = None, detail: str = "") -> None:
        self.reason, self.code, self.line, self.detail = reason, code, line, detail
        super().__init__(f"line {line}: {reason}" if line else reason)


@dataclass(frozen=True, slots=True)
class ImportedRule:
    """One rule read from a function (a function returning several tools gives several)."""

    name: str
    description: str
    mcp_id: str
    tool_name: str
    when: str
    params: str
    stop: bool
    enabled: bool
    function: str
    line: int

    def to_json(self) -> dict[str, Any]:
        """The rule as a ``llamon-ruleset/1`` rule (the rule set snapshot's fields, in order)."""
        return {
            "name": self.name,
            "description": self.description,
            "mcp_id": self.mcp_id,
            "tool_name": self.tool_name,
            "when": self.when,
            "params": self.params,
            "stop": self.stop,
            "enabled": self.enabled,
        }


@dataclass(frozen=True, slots=True)
class Untranslatable:
    """A function left out, where and why. ``code`` names the kind of reason, ``detail`` its subject."""

    function: str
    file: str
    line: int
    code: str
    detail: str
    reason: str
    # For code "expression": the checker's error, whose message id a user interface translates.
    expr_error: ExprError | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.function}: {self.reason}"

    def to_json(self) -> dict[str, Any]:
        return {
            "function": self.function,
            "file": self.file,
            "line": self.line,
            "code": self.code,
            "detail": self.detail,
            "reason": self.reason,
        }


@dataclass
class ToolsImport:
    """What a module gives: rules in order, the functions left out, and notes (no DETERMINISTIC_TOOLS...)."""

    filename: str
    rules: list[ImportedRule] = field(default_factory=list)
    untranslatable: list[Untranslatable] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def ruleset(self, name: str, description: str = "") -> dict[str, Any]:
        """A ``llamon-ruleset/1`` document of the rules (no cases)."""
        return {
            "format": RULESET_FORMAT,
            "name": name,
            "description": description,
            "rules": [r.to_json() for r in self.rules],
            "cases": [],
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "filename": self.filename,
            "rules": [r.to_json() | {"function": r.function, "line": r.line} for r in self.rules],
            "untranslatable": [u.to_json() for u in self.untranslatable],
            "notes": list(self.notes),
        }


class _TooLong(Exception):
    pass


class _Refused(Exception):
    def __init__(
        self, node: ast.AST | int, code: str, detail: str, reason: str, expr_error: ExprError | None = None
    ) -> None:
        self.line = node if isinstance(node, int) else getattr(node, "lineno", 0)
        self.code, self.detail, self.reason, self.expr_error = code, detail, reason, expr_error
        super().__init__(reason)


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


# --- the module ----------------------------------------------------------------------------------


@dataclass
class _Module:
    source: str
    filename: str
    lines: list[bytes]
    offsets: list[int]
    raw: bytes
    names: dict[str, int]  # module-level name -> line it is bound at
    functions: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]]
    compiled: dict[str, tuple[str, str]]  # name -> ("when"|"params", source) of compile_when/compile_params
    decorators: set[str]  # local names of deterministic_tool
    ctx_names: set[str]  # local names of compile_when / compile_params imported from llamon_agent.expr


def translate_tools_module(source: str | bytes, *, filename: str = "app/tools.py") -> ToolsImport:
    """Read ``source`` (an ``app/tools.py``) into rules; :class:`ToolsImportError` if it cannot be read at all."""
    module, tree = _parse(source, filename)
    result = ToolsImport(filename=filename)
    listed, listed_line = _tools_list(tree, result)
    decorated = [
        fn.name
        for fn in tree.body
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and _decorator(fn, module) is not None
    ]
    order: list[tuple[str, int, bool]] = []  # (name, line of the mention, enabled)
    if listed is None:
        if decorated:
            result.notes.append(
                "no DETERMINISTIC_TOOLS list: the @deterministic_tool functions are taken in source order"
            )
        order = [(name, module.functions[name][-1].lineno, True) for name in dict.fromkeys(decorated)]
    else:
        order = [(name, line, True) for name, line in listed]
        left_out = [n for n in dict.fromkeys(decorated) if n not in {name for name, _ in listed}]
        for name in left_out:
            order.append((name, module.functions[name][-1].lineno, False))
        if left_out:
            result.notes.append(
                f"decorated but not in DETERMINISTIC_TOOLS (line {listed_line}), imported disabled: "
                + ", ".join(left_out)
            )
    taken: set[str] = set()
    seen: set[str] = set()
    for name, line, enabled in order:
        try:
            if name in seen:
                raise _Refused(line, "listed-twice", name, f"{name} is listed twice in DETERMINISTIC_TOOLS")
            seen.add(name)
            defs = module.functions.get(name)
            if not defs:
                raise _Refused(
                    line,
                    "not-defined",
                    name,
                    f"{name} is not a function defined in this module"
                    + (f" (line {module.names[name]})" if name in module.names else ""),
                )
            fn = defs[-1]
            if len(defs) > 1 or module.names.get(name, fn.lineno) != fn.lineno:
                raise _Refused(
                    fn, "redefined", name, f"the name {name} is bound more than once in the module"
                )
            rules = _function_rules(fn, module, enabled, taken)
        except _Refused as exc:
            result.untranslatable.append(
                Untranslatable(name, filename, exc.line, exc.code, exc.detail, exc.reason, exc.expr_error)
            )
            continue
        taken.update(r.name for r in rules)
        result.rules.extend(rules)
    return result


def _parse(source: str | bytes, filename: str) -> tuple[_Module, ast.Module]:
    raw = source.encode("utf-8", "surrogatepass") if isinstance(source, str) else bytes(source)
    if len(raw) > MAX_SOURCE_BYTES:
        raise ToolsImportError(
            f"the file is {len(raw):,} bytes; at most {MAX_SOURCE_BYTES:,} are read",
            code="too-big",
            detail=str(MAX_SOURCE_BYTES),
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolsImportError("the file is not UTF-8 text", code="not-utf8") from None
    if "\x00" in text:
        raise ToolsImportError("the file contains a NUL character", code="nul")
    try:
        tree = ast.parse(text, filename=filename)
    except SyntaxError as exc:
        raise ToolsImportError(
            f"not valid Python: {exc.msg}", code="syntax", line=exc.lineno, detail=str(exc.msg)
        ) from None
    except (RecursionError, MemoryError):
        raise ToolsImportError(
            "the file is nested too deeply to be read", code="too-deep", detail=str(MAX_TREE_DEPTH)
        ) from None
    # Depth and size without recursion: the translation below recurses on the tree.
    count = 0
    stack: list[tuple[ast.AST, int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if depth > MAX_TREE_DEPTH:
            raise ToolsImportError(
                f"the syntax tree is deeper than {MAX_TREE_DEPTH} levels",
                code="too-deep",
                line=getattr(node, "lineno", None),
                detail=str(MAX_TREE_DEPTH),
            )
        if count > MAX_TREE_NODES:
            raise ToolsImportError(
                f"the syntax tree has more than {MAX_TREE_NODES:,} nodes",
                code="too-big",
                detail=str(MAX_TREE_NODES),
            )
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    lines = raw.split(b"\n")
    offsets, pos = [], 0
    for line in lines:
        offsets.append(pos)
        pos += len(line) + 1
    module = _Module(
        source=text,
        filename=filename,
        lines=lines,
        offsets=offsets,
        raw=raw,
        names={},
        functions={},
        compiled={},
        decorators=set(),
        ctx_names=set(),
    )
    for stmt in tree.body:
        for name in _bound_names(stmt):
            module.names.setdefault(name, stmt.lineno)
            if name in module.names and module.names[name] != stmt.lineno:
                module.names[name] = -1  # bound twice: never trusted
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            module.functions.setdefault(stmt.name, []).append(stmt)
        if isinstance(stmt, ast.ImportFrom) and stmt.level == 0:
            for alias in stmt.names:
                if stmt.module == "llamon_agent.tools" and alias.name == "deterministic_tool":
                    module.decorators.add(alias.asname or alias.name)
                if stmt.module == "llamon_agent.expr" and alias.name in ("compile_when", "compile_params"):
                    module.ctx_names.add(alias.asname or alias.name)
    for stmt in tree.body:
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Name)
            and stmt.value.func.id in module.ctx_names
            and module.names.get(stmt.value.func.id) != -1
            and len(stmt.value.args) == 1
            and not stmt.value.keywords
            and isinstance(stmt.value.args[0], ast.Constant)
            and type(stmt.value.args[0].value) is str
            and module.names.get(stmt.targets[0].id) == stmt.lineno
        ):
            kind = "when" if _imported_name(tree, stmt.value.func.id) == "compile_when" else "params"
            module.compiled[stmt.targets[0].id] = (kind, stmt.value.args[0].value)
    return module, tree


def _imported_name(tree: ast.Module, local: str) -> str:
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                if (alias.asname or alias.name) == local:
                    return alias.name
    return local


def _bound_names(stmt: ast.stmt) -> Iterator[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield stmt.name
    elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
        for alias in stmt.names:
            yield (alias.asname or alias.name).split(".")[0]
    else:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                yield node.id
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                yield from node.names


def _tools_list(tree: ast.Module, result: ToolsImport) -> tuple[list[tuple[str, int]] | None, int]:
    """The names in ``DETERMINISTIC_TOOLS = [...]`` and the assignment's line; None without one."""
    found: list[ast.stmt] = [stmt for stmt in tree.body if "DETERMINISTIC_TOOLS" in set(_bound_names(stmt))]
    if not found:
        return None, 0
    stmt = found[0]
    value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
    if (
        len(found) > 1
        or value is None
        or not isinstance(value, (ast.List, ast.Tuple))
        or (isinstance(stmt, ast.Assign) and len(stmt.targets) != 1)
    ):
        raise ToolsImportError(
            "DETERMINISTIC_TOOLS must be assigned once, as a list of the routing functions' names",
            code="tools-list",
            line=(found[1] if len(found) > 1 else stmt).lineno,
        )
    names: list[tuple[str, int]] = []
    for element in value.elts:
        if not isinstance(element, ast.Name):
            raise ToolsImportError(
                "DETERMINISTIC_TOOLS must list function names only",
                code="tools-list",
                line=element.lineno,
            )
        names.append((element.id, element.lineno))
    return names, stmt.lineno


def _decorator(fn: ast.FunctionDef | ast.AsyncFunctionDef, module: _Module) -> ast.Call | None:
    for deco in fn.decorator_list:
        func = deco.func if isinstance(deco, ast.Call) else deco
        if (isinstance(func, ast.Name) and func.id in module.decorators) or (
            isinstance(func, ast.Attribute) and func.attr == "deterministic_tool"
        ):
            return deco if isinstance(deco, ast.Call) else ast.Call(func=func, args=[], keywords=[])
    return None


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
        if self.leaves > MAX_LEAVES:
            raise self.refuse(
                self.fn,
                "too-complex",
                str(MAX_LEAVES),
                f"more than {MAX_LEAVES} paths through the function once its ifs are unfolded",
            )
        return leaf

    def loop(self, stmt: ast.For, rest: list[ast.stmt], env: dict[str, _Binding], depth: int) -> _Tree:
        """``for v in it: if test: return CALL`` (CALL not using v) -> any(test for v in it)."""
        body = stmt.body
        shape = (
            isinstance(stmt.target, ast.Name)
            and not stmt.orelse
            and len(body) == 1
            and isinstance(body[0], ast.If)
            and not body[0].orelse
            and len(body[0].body) == 1
            and isinstance(body[0].body[0], ast.Return)
        )
        if not shape:
            raise self.refuse(
                stmt,
                "statement",
                "a for loop",
                "a for loop is translated only as `for v in ...: if <test>: return <call>`",
            )
        assert isinstance(stmt.target, ast.Name) and isinstance(body[0], ast.If)
        var = stmt.target.id
        ret = body[0].body[0]
        assert isinstance(ret, ast.Return)
        if any(isinstance(n, ast.Name) and n.id == var for n in ast.walk(ret)):
            raise self.refuse(
                ret,
                "loop-value",
                var,
                f"the returned call uses the loop variable {var}, which a rule cannot keep",
            )
        if var in env or var == self.param:
            raise self.refuse(stmt, "reassigned", var, f"the loop reuses the name {var}")
        iterable = self.render(stmt.iter, env, {}, allow_tools=True)
        is_tools = (
            isinstance(stmt.iter, ast.Attribute)
            and stmt.iter.attr == "mcp_tools"
            and isinstance(stmt.iter.value, ast.Name)
            and stmt.iter.value.id == self.param
        )
        self.local_names.discard(var)
        test = self.render(body[0].test, env, {var: "tool" if is_tools else "value"})
        piece = _Piece(f"any({test.at(_P_OR)} for {var} in {iterable.at(_P_OR)})", _P_ATOM, False)
        return _Branch(piece, self.leaf(ret, env), self.block(rest, env, depth))

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
