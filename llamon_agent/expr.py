"""The safe expression language for routing rules stored as data (see docs/expressions.md).

A rule authored in the browser has a ``when`` expression (truthy -> the rule fires) and a
``params`` expression (a dict). Both are a small subset of Python, so that the seed's
conditions paste in unchanged, checked once when saved and then run as bytecode:

1. caps on the raw text (length, bracket nesting) *before* ``ast.parse``, so that no
   parser work is spent on hostile input;
2. caps on the tree (depth, node count) and a strict allow-list of node types, names,
   helpers, methods and literals;
3. a rewrite of the operations whose cost depends on data (``+``, ``join``, ``replace``,
   slices, comparisons, method calls, builtins, helpers, comprehension loops, ...) into
   size-checked hidden helpers that also charge a run-time cost budget (:class:`CostMeter`);
4. ``compile()`` into the code of a function whose globals are one per-request namespace
   (``build_namespace``) with empty ``__builtins__``.

Time and memory are bounded by counting, never by signals: caps bound what one operation
may build, the cost budget bounds how much work one evaluation and one request may do
(CostBudgetExceeded, see docs/expressions.md "Cost budget"). At run time an expression
raises only :class:`ExprError`.
"""

from __future__ import annotations

import ast
import io
import json
import keyword
import math
import re
import tokenize
import types
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import re2

from llamon_agent.tools import DeterministicContext, RuleInfo, tool_view

__all__ = [
    "MAX_DATA_BYTES",
    "MAX_DATA_DEPTH",
    "MAX_DEPTH",
    "MAX_INT",
    "MAX_ITER_ITEMS",
    "MAX_NESTING",
    "MAX_NODES",
    "MAX_PATTERN_CHARS",
    "MAX_QUERY_CHARS",
    "MAX_RESULT_CHARS",
    "MAX_RESULT_ITEMS",
    "MAX_RULE_NAME_CHARS",
    "MAX_SOURCE_CHARS",
    "MAX_STR_LITERAL_CHARS",
    "BUILT_CHARS_PER_UNIT",
    "DEFAULT_EXPR_BUDGET",
    "DEFAULT_REQUEST_BUDGET",
    "READ_CHARS_PER_UNIT",
    "REGEX_CHARS_PER_UNIT",
    "REGEX_COMPILE_UNITS",
    "CompiledExpr",
    "CostBudgetExceeded",
    "CostMeter",
    "ExprError",
    "ExpressionRule",
    "build_namespace",
    "check_rule_name",
    "compile_params",
    "compile_when",
    "contains_all",
    "contains_any",
    "expression_rule",
    "re_find",
    "re_search",
    "request_size_error",
    "required_keywords",
]

# --- caps -------------------------------------------------------------------------------
# Expression caps: checked when a rule is saved (compile time).
MAX_SOURCE_CHARS = 4_000  # seed conditions are < 100 chars; a 100-keyword list fits
MAX_NESTING = 20  # ( [ { nesting, checked on tokens before parsing
MAX_DEPTH = 50  # syntax-tree depth after parsing (a + b + ... chains nest one level per term)
MAX_NODES = 1_000  # syntax-tree nodes after parsing
MAX_STR_LITERAL_CHARS = 1_000
MAX_INT = 2**63 - 1  # int literals and the results of + * % sum() stay within 64 bits
MAX_PATTERN_CHARS = 1_000  # a regular expression, literal or built at run time
MAX_RULE_NAME_CHARS = 100

# Run-time caps: what a single operation may build.
MAX_RESULT_CHARS = 100_000  # a string built by +, join() or replace()
MAX_RESULT_ITEMS = 10_000  # a list/tuple built by +, or the items given to join()
MAX_ITER_ITEMS = 10_000  # items one comprehension may loop over

# Request caps: the product rejects bigger requests before any rule runs (request_size_error);
# build_namespace enforces them again, loosely, as a second line.
MAX_QUERY_CHARS = 32_000
MAX_DATA_BYTES = 256 * 1024  # UTF-8 JSON of context + a2a_data + a2a_files
MAX_DATA_DEPTH = 32  # nesting of request data

# --- names ------------------------------------------------------------------------------
CTX_NAMES = ("ctx", "query", "context", "a2a_data", "a2a_files", "tool_names")
CTX_ATTRS = frozenset({"query", "context", "a2a_data", "a2a_files", "mcp_tools", "tool_names"})
HELPER_NAMES = ("contains_any", "contains_all", "re_search", "re_find", "data_get")
BUILTIN_NAMES = (
    "len",
    "str",
    "int",
    "float",
    "bool",
    "min",
    "max",
    "any",
    "all",
    "sorted",
    "abs",
    "round",
    "sum",
)
# Methods that cannot mutate and whose result is no bigger than (a small multiple of) their input.
_STR_METHODS = (
    "lower upper casefold strip lstrip rstrip startswith endswith split rsplit splitlines partition "
    "rpartition find rfind index count isdigit isdecimal isnumeric isalpha isalnum isspace "
    "removeprefix removesuffix"
)
_SIZE_CHECKED_METHODS = "join replace"  # through hidden helpers, see _GUARDED_METHODS
_DICT_METHODS = "get keys values items"
_SET_METHODS = "union intersection difference issubset issuperset isdisjoint"  # tool_names is a set
METHOD_NAMES = frozenset(" ".join((_STR_METHODS, _SIZE_CHECKED_METHODS, _DICT_METHODS, _SET_METHODS)).split())
_GUARDED_METHODS = {"join": "__llamon_join", "replace": "__llamon_replace"}
_RESERVED = frozenset(CTX_NAMES) | frozenset(HELPER_NAMES) | frozenset(BUILTIN_NAMES)
_CALLABLE = frozenset(HELPER_NAMES) | frozenset(BUILTIN_NAMES)
_NAMES_HINT = "use ctx, query, context, a2a_data, a2a_files, tool_names or a helper"
_FILENAME = "<expr>"
# Trojan-source characters: they make a rule read differently from what it does.
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")
_NEWLINES = re.compile(r"\r\n|\r|\n")


class ExprError(Exception):
    """Why an expression was rejected or failed, with its 1-based line and column when known.

    ``field`` names the rule field at fault ("name", "mcp_id", "tool_name", "when",
    "params") when the error comes from :func:`expression_rule`; ``str()`` then starts
    with it: ``"when: line 1, column 5: ..."``.
    """

    def __init__(
        self, reason: str, line: int | None = None, column: int | None = None, *, field: str | None = None
    ) -> None:
        super().__init__(reason, line, column)
        self.reason = reason
        self.line = line
        self.column = column
        self.field = field

    def __str__(self) -> str:
        prefix = f"{self.field}: " if self.field else ""
        if self.line is None:
            return f"{prefix}{self.reason}"
        if self.column is None:
            return f"{prefix}line {self.line}: {self.reason}"
        return f"{prefix}line {self.line}, column {self.column}: {self.reason}"

    def __reduce__(self) -> tuple[Any, ...]:
        # Celery and multiprocessing pickle exceptions; keep field across the round trip.
        return (self.__class__, (self.reason, self.line, self.column), {"field": self.field})


# --- source positions -----------------------------------------------------------------------
class _Source:
    """The author's text and how positions in the parsed (parenthesized) text map back to it."""

    __slots__ = ("text", "wrapped", "_lines")

    def __init__(self, text: str) -> None:
        self.text = text
        # Wrapping in parentheses lets an expression span lines and start indented, as typed
        # in a textarea; brackets are checked for balance first so it cannot change meaning.
        self.wrapped = "(" + text + "\n)"
        self._lines = _NEWLINES.split(text)

    def char_position(self, lineno: int | None, char_offset: int | None) -> tuple[int | None, int | None]:
        """Author's (line, column), both 1-based, from a 0-based character offset in the wrapped text."""
        if lineno is None:
            return None, None
        if lineno > len(self._lines):  # the synthetic closing parenthesis: "ends too early"
            return len(self._lines), len(self._lines[-1]) + 1
        column = max(char_offset or 0, 0)
        if lineno == 1:
            column -= 1  # the synthetic "("
        return lineno, max(column, 0) + 1

    def byte_position(self, lineno: int | None, byte_offset: int | None) -> tuple[int | None, int | None]:
        """Like :meth:`char_position` for a UTF-8 byte offset (what ``ast`` and code objects give)."""
        if lineno is None:
            return None, None
        if lineno > len(self._lines):
            return self.char_position(lineno, 0)
        line = ("(" if lineno == 1 else "") + self._lines[lineno - 1]
        chars = len(line.encode("utf-8")[: max(byte_offset or 0, 0)].decode("utf-8", "ignore"))
        return self.char_position(lineno, chars)

    def node_error(self, node: ast.AST, reason: str) -> ExprError:
        line, column = self.byte_position(getattr(node, "lineno", None), getattr(node, "col_offset", None))
        return ExprError(reason, line, column)

    def attr_error(self, node: ast.Attribute, reason: str) -> ExprError:
        """An error pointing at the attribute's name (``ctx.__dict__`` -> column of ``__dict__``)."""
        end_line, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
        if end_line is None or end_col is None:
            return self.node_error(node, reason)
        line, column = self.byte_position(end_line, end_col - len(node.attr.encode("utf-8")))
        return ExprError(reason, line, column)

    def is_synthetic_line(self, lineno: int | None) -> bool:
        return lineno is not None and lineno > len(self._lines)


# --- parsing and checking ---------------------------------------------------------------------
def _pre_scan(src: _Source) -> None:
    """Caps on the raw tokens: bracket nesting and balance (before any parsing)."""
    depth = 0
    significant = 0
    try:
        for tok in tokenize.generate_tokens(io.StringIO(src.text).readline):
            if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER):
                continue
            if tok.type in (tokenize.INDENT, tokenize.DEDENT):
                continue
            significant += 1
            if tok.type != tokenize.OP:
                continue
            if tok.string in "([{":
                depth += 1
                if depth > MAX_NESTING:
                    line, col = tok.start
                    raise ExprError(f"brackets are nested more than {MAX_NESTING} levels deep", line, col + 1)
            elif tok.string in ")]}":
                depth -= 1
                if depth < 0:
                    line, col = tok.start
                    raise ExprError(f"unmatched '{tok.string}'", line, col + 1)
    except (tokenize.TokenError, SyntaxError):
        return  # the parser reports this one below, with a better message
    if significant == 0:
        raise ExprError("the expression is empty")


def _parse(source: Any) -> tuple[ast.Expression, _Source]:
    """Parse and fully check one expression; ExprError for anything not allowed."""
    if not isinstance(source, str):
        raise ExprError("the expression must be text")
    if len(source) > MAX_SOURCE_CHARS:  # before any parsing work: a 1 MB expression stops here
        raise ExprError(f"the expression is longer than {MAX_SOURCE_CHARS:,} characters")
    if not source.strip():
        raise ExprError("the expression is empty")
    if "\x00" in source:
        raise ExprError("the expression contains a NUL character")
    bidi = _BIDI.search(source)
    if bidi:
        before = source[: bidi.start()]
        line = before.count("\n") + 1
        raise ExprError(
            "the expression contains an invisible text-direction character",
            line,
            len(before) - (before.rfind("\n") + 1) + 1,
        )
    src = _Source(source)
    _pre_scan(src)
    try:
        with warnings.catch_warnings():
            # "\d" in a plain string keeps its backslash, as authors of patterns expect; the
            # DeprecationWarning would only reach the server log.
            warnings.simplefilter("ignore")
            tree = ast.parse(src.wrapped, filename=_FILENAME, mode="eval")
    except SyntaxError as exc:
        if src.is_synthetic_line(exc.lineno):
            line, column = src.char_position(exc.lineno, 0)
            raise ExprError("the expression is incomplete", line, column) from None
        line, column = src.char_position(exc.lineno, (exc.offset or 1) - 1)
        raise ExprError(f"syntax error: {exc.msg}", line, column) from None
    except (RecursionError, MemoryError):
        raise ExprError("the expression is nested too deeply") from None
    except ValueError as exc:
        raise ExprError(f"syntax error: {exc}") from None
    _check_size(tree, src)
    _Checker(src).check(tree.body, frozenset(), in_comp=False)
    return tree, src


def _check_size(tree: ast.AST, src: _Source) -> None:
    """Node-count and depth caps, iteratively (the checker that follows is recursive)."""
    count = 0
    stack: list[tuple[ast.AST, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise ExprError(f"the expression is too big (more than {MAX_NODES:,} parts)")
        if depth > MAX_DEPTH:
            raise src.node_error(node, f"the expression is nested more than {MAX_DEPTH} levels deep")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


_OPERATOR_REASONS: dict[type, str] = {
    ast.Pow: "the ** operator is not allowed",
    ast.LShift: "the << operator is not allowed",
    ast.RShift: "the >> operator is not allowed",
    ast.BitOr: "the | operator is not allowed; use or / .union()",
    ast.BitAnd: "the & operator is not allowed; use and / .intersection()",
    ast.BitXor: "the ^ operator is not allowed",
    ast.MatMult: "the @ operator is not allowed",
    ast.Invert: "the ~ operator is not allowed",
}
_NODE_REASONS: dict[type, str] = {
    ast.Lambda: "lambda is not allowed; use a helper or a comprehension",
    ast.NamedExpr: "the := operator is not allowed",
    ast.Starred: "* unpacking is not allowed",
    ast.Await: "await is not allowed",
    ast.Yield: "yield is not allowed",
    ast.YieldFrom: "yield is not allowed",
}
_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod)
_UNARYOPS = (ast.Not, ast.USub, ast.UAdd)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


class _Checker:
    """The allow-list: every node, name, attribute, call and literal is checked here."""

    def __init__(self, src: _Source) -> None:
        self.src = src

    def fail(self, node: ast.AST, reason: str) -> ExprError:
        return self.src.node_error(node, reason)

    def check(self, node: ast.AST, bound: frozenset[str], in_comp: bool) -> None:
        method = getattr(self, "check_" + type(node).__name__, None)
        if method is None:
            reason = _NODE_REASONS.get(type(node))
            if reason is None:
                reason = f"this kind of expression ({type(node).__name__}) is not allowed"
            raise self.fail(node, reason)
        method(node, bound, in_comp)

    def check_all(self, nodes: Iterable[ast.AST | None], bound: frozenset[str], in_comp: bool) -> None:
        for child in nodes:
            if child is not None:
                self.check(child, bound, in_comp)

    # literals
    def check_Constant(self, node: ast.Constant, bound: frozenset[str], in_comp: bool) -> None:
        value = node.value
        if value is None or isinstance(value, bool):
            return
        if isinstance(value, str):
            if len(value) > MAX_STR_LITERAL_CHARS:
                raise self.fail(node, f"a text literal is longer than {MAX_STR_LITERAL_CHARS:,} characters")
            return
        if isinstance(value, int):
            if abs(value) > MAX_INT:
                raise self.fail(node, "this number is too large (the limit is 64 bits)")
            return
        if isinstance(value, float):
            if not math.isfinite(value):
                raise self.fail(node, "this number is too large")
            return
        if isinstance(value, bytes):
            raise self.fail(node, "bytes literals (b'...') are not allowed; use text")
        if isinstance(value, complex):
            raise self.fail(node, "complex numbers are not allowed")
        raise self.fail(node, f"the literal {value!r} is not allowed")

    def check_JoinedStr(self, node: ast.JoinedStr, bound: frozenset[str], in_comp: bool) -> None:
        self.check_all(node.values, bound, in_comp)

    def check_FormattedValue(self, node: ast.FormattedValue, bound: frozenset[str], in_comp: bool) -> None:
        # A format spec can ask for any width ("{x:>999999999}"): refuse specs altogether.
        if node.format_spec is not None:
            raise self.fail(node, "format specs in f-strings (the part after ':') are not allowed")
        self.check(node.value, bound, in_comp)

    def check_List(self, node: ast.List, bound: frozenset[str], in_comp: bool) -> None:
        self.check_all(node.elts, bound, in_comp)

    check_Tuple = check_List
    check_Set = check_List

    def check_Dict(self, node: ast.Dict, bound: frozenset[str], in_comp: bool) -> None:
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:
                raise self.fail(value, "** unpacking is not allowed")
            self.check(key, bound, in_comp)
            self.check(value, bound, in_comp)

    # operators
    def check_BoolOp(self, node: ast.BoolOp, bound: frozenset[str], in_comp: bool) -> None:
        self.check_all(node.values, bound, in_comp)

    def check_BinOp(self, node: ast.BinOp, bound: frozenset[str], in_comp: bool) -> None:
        if not isinstance(node.op, _BINOPS):
            raise self.fail(node, _OPERATOR_REASONS.get(type(node.op), "this operator is not allowed"))
        self.check(node.left, bound, in_comp)
        self.check(node.right, bound, in_comp)

    def check_UnaryOp(self, node: ast.UnaryOp, bound: frozenset[str], in_comp: bool) -> None:
        if not isinstance(node.op, _UNARYOPS):
            raise self.fail(node, _OPERATOR_REASONS.get(type(node.op), "this operator is not allowed"))
        self.check(node.operand, bound, in_comp)

    def check_Compare(self, node: ast.Compare, bound: frozenset[str], in_comp: bool) -> None:
        operands = [node.left, *node.comparators]
        for i, op in enumerate(node.ops):
            if isinstance(op, (ast.Is, ast.IsNot)):
                for side in operands[i : i + 2]:
                    if isinstance(side, ast.Constant) and not any(
                        side.value is v for v in (None, True, False)
                    ):
                        raise self.fail(
                            side, "use == to compare with a value; 'is' is for None, True and False"
                        )
        self.check(node.left, bound, in_comp)
        self.check_all(node.comparators, bound, in_comp)

    def check_IfExp(self, node: ast.IfExp, bound: frozenset[str], in_comp: bool) -> None:
        self.check_all((node.test, node.body, node.orelse), bound, in_comp)

    # names, attributes, subscripts
    def check_Name(self, node: ast.Name, bound: frozenset[str], in_comp: bool) -> None:
        name = node.id
        if name.startswith("_"):
            raise self.fail(node, f"name {name!r} is not allowed: names starting with '_' are reserved")
        if name in bound:
            return
        if name == "data_get":
            raise self.fail(node, "data_get can only be called, as data_get(key) or data_get(key, default)")
        if name in _RESERVED:
            return
        raise self.fail(node, f"name {name!r} is not allowed; {_NAMES_HINT}")

    def check_Attribute(self, node: ast.Attribute, bound: frozenset[str], in_comp: bool) -> None:
        self._check_attr_name(node)
        # Calls reach methods through check_Call; here a method would be a value, e.g. a sort key
        # (sorted(words, key=query.count) makes a helper call a method once per item: quadratic).
        if node.attr in _GUARDED_METHODS or (node.attr in METHOD_NAMES and node.attr not in CTX_ATTRS):
            raise self.src.attr_error(node, f".{node.attr}() can only be called, not used as a value")
        self.check(node.value, bound, in_comp)

    def _check_attr_name(self, node: ast.Attribute) -> None:
        attr = node.attr
        if attr.startswith("_"):
            raise self.src.attr_error(
                node, f"attribute {attr!r} is not allowed: names starting with '_' are never reachable"
            )
        if attr in ("format", "format_map"):
            raise self.src.attr_error(
                node, f'.{attr}() is not allowed; use an f-string such as f"order {{query}}"'
            )
        if attr in CTX_ATTRS or attr in METHOD_NAMES:
            return
        if attr in ("name", "description", "input_schema"):
            raise self.src.attr_error(
                node,
                f"attribute {attr!r} is not allowed: the tools in ctx.mcp_tools are dicts, "
                f'use t["{attr}"] (or tool_names for the names)',
            )
        raise self.src.attr_error(
            node,
            f"attribute {attr!r} is not allowed; use ctx's fields (query, context, a2a_data, a2a_files, "
            "mcp_tools, tool_names) or an allowed method (see docs/expressions.md)",
        )

    def check_Subscript(self, node: ast.Subscript, bound: frozenset[str], in_comp: bool) -> None:
        self.check(node.value, bound, in_comp)
        self.check(node.slice, bound, in_comp)

    def check_Slice(self, node: ast.Slice, bound: frozenset[str], in_comp: bool) -> None:
        self.check_all((node.lower, node.upper, node.step), bound, in_comp)

    # calls
    def check_Call(self, node: ast.Call, bound: frozenset[str], in_comp: bool) -> None:
        func = node.func
        if isinstance(func, ast.Name):
            if func.id.startswith("_") or func.id in bound or func.id not in _RESERVED:
                self.check_Name(func, bound, in_comp)  # the precise "not allowed" reason
                raise self.fail(func, f"{func.id} cannot be called; only helpers and methods can be called")
            if func.id not in _CALLABLE:
                raise self.fail(func, f"{func.id} cannot be called; only helpers and methods can be called")
            if func.id in ("re_search", "re_find") and node.args:
                pattern = node.args[0]
                if isinstance(pattern, ast.Constant) and isinstance(pattern.value, str):
                    try:  # a literal pattern is checked when the rule is saved, not at the first request
                        _regex(pattern.value)
                    except ExprError as exc:
                        raise self.fail(pattern, exc.reason) from None
        elif isinstance(func, ast.Attribute):
            self._check_attr_name(func)
            self.check(func.value, bound, in_comp)
        else:
            raise self.fail(
                node, "only helpers (such as contains_any) and methods (such as .get) can be called"
            )
        for arg in node.args:
            self.check(arg, bound, in_comp)
        for kw in node.keywords:
            if kw.arg is None:
                raise self.fail(kw.value, "** unpacking is not allowed")
            if kw.arg.startswith("_"):
                raise self.fail(kw.value, f"keyword argument {kw.arg!r} is not allowed")
            self.check(kw.value, bound, in_comp)

    # comprehensions
    def _check_comprehension(
        self, node: ast.AST, generators: list[ast.comprehension], parts: list[ast.AST], in_comp: bool
    ) -> None:
        if in_comp:
            raise self.fail(node, "comprehensions cannot be nested; use one level")
        if len(generators) != 1:
            raise self.fail(node, "a comprehension can have only one 'for'")
        gen = generators[0]
        if gen.is_async:
            raise self.fail(node, "async comprehensions are not allowed")
        # The iterable is evaluated outside the loop: no loop variables are visible there.
        self.check(gen.iter, frozenset(), in_comp=True)
        if not _is_request_data(gen.iter):
            raise self.fail(
                gen.iter,
                "a comprehension must loop over request data: ctx, query, context, a2a_data, "
                "a2a_files, tool_names, something reached from them, or data_get(...) "
                "(with `or []` as a fallback); for a fixed list of words use contains_any(query, [...])",
            )
        names = frozenset(self._targets(gen.target))
        self.check_all(gen.ifs, names, in_comp=True)
        self.check_all(parts, names, in_comp=True)

    def _targets(self, target: ast.AST) -> list[str]:
        if isinstance(target, ast.Name):
            if target.id.startswith("_"):
                raise self.fail(
                    target, f"name {target.id!r} is not allowed: names starting with '_' are reserved"
                )
            if target.id in _RESERVED:
                raise self.fail(target, f"{target.id!r} cannot be used as a loop variable")
            return [target.id]
        if isinstance(target, ast.Tuple):
            names: list[str] = []
            for elt in target.elts:
                if not isinstance(elt, ast.Name):
                    raise self.fail(elt, "a loop variable must be a name or a tuple of names")
                names.extend(self._targets(elt))
            return names
        raise self.fail(target, "a loop variable must be a name or a tuple of names")

    def check_ListComp(self, node: ast.ListComp, bound: frozenset[str], in_comp: bool) -> None:
        self._check_comprehension(node, node.generators, [node.elt], in_comp)

    check_SetComp = check_ListComp
    check_GeneratorExp = check_ListComp

    def check_DictComp(self, node: ast.DictComp, bound: frozenset[str], in_comp: bool) -> None:
        self._check_comprehension(node, node.generators, [node.key, node.value], in_comp)


def _is_request_data(node: ast.AST) -> bool:
    """Whether a comprehension's iterable comes from the request (its size is capped)."""
    if isinstance(node, ast.Name):
        return node.id in CTX_NAMES
    if isinstance(node, (ast.Attribute, ast.Subscript)):
        return _is_request_data(node.value)
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Attribute):
            return _is_request_data(node.func.value)
        if isinstance(node.func, ast.Name):
            if node.func.id == "data_get":
                return True
            return node.func.id == "sorted" and bool(node.args) and _is_request_data(node.args[0])
        return False
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
        return _is_request_data(node.values[0]) and all(
            _is_request_data(v) or _is_literal(v) for v in node.values[1:]
        )
    if isinstance(node, ast.IfExp):
        return all(_is_request_data(v) or _is_literal(v) for v in (node.body, node.orelse))
    return False


def _is_literal(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(_is_literal(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(
            k is not None and _is_literal(k) and _is_literal(v)
            for k, v in zip(node.keys, node.values, strict=True)
        )
    return False


# --- the rewrite to size-checked and metered helpers ----------------------------------------------
def _meter_name(like: ast.AST) -> ast.Name:
    return ast.copy_location(ast.Name(id=_METER, ctx=ast.Load()), like)


def _is_query(node: ast.AST) -> bool:
    """``query`` or ``ctx.query``: always the request's text (the names cannot be rebound)."""
    return _query_ref(node) is False


def _is_dict_or_set(node: ast.AST) -> bool:
    """``context``/``ctx.context`` (a dict) or ``tool_names`` (a set): ``in`` is a hash lookup."""
    if _is_tool_names(node):
        return True
    if isinstance(node, ast.Name):
        return node.id == "context"
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "context"
        and isinstance(node.value, ast.Name)
        and node.value.id == "ctx"
    )


def _scalar(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (str, int, float, bool, type(None))


def _static_pair(left: ast.AST, op: ast.cmpop, right: ast.AST) -> int | None:
    """Query reads one comparison costs when that is known from its shape, else None.

    Comparing with a literal text or number reads at most the literal; ``is`` reads nothing;
    ``"w" in query`` reads the query once (``query.lower()``: once more to build the copy, at
    the building rate); ``"w" in context`` hashes the literal. These stay plain Python.
    """
    if isinstance(op, (ast.Is, ast.IsNot)):
        return 0
    if isinstance(op, (ast.In, ast.NotIn)):
        if not _scalar(left):
            return None
        if _is_query(right):
            return 1
        if _query_ref(right) is True:  # query.lower(): read, then build a copy
            return 1 + READ_CHARS_PER_UNIT // BUILT_CHARS_PER_UNIT
        return 0 if _is_dict_or_set(right) else None
    return 0 if _scalar(left) or _scalar(right) else None


def _static_contains(node: ast.Call) -> int | None:
    """Query reads of ``contains_any/contains_all(query or query.lower(), [literal texts])``, else None."""
    func = node.func
    if not (isinstance(func, ast.Name) and func.id in ("contains_any", "contains_all")):
        return None
    if node.keywords or len(node.args) != 2:
        return None
    text, words = node.args
    lowered = _query_ref(text)
    if lowered is None or not isinstance(words, (ast.List, ast.Tuple, ast.Set)):
        return None
    if not all(_scalar(w) and type(w.value) is str for w in words.elts):
        return None
    return len(words.elts) + (READ_CHARS_PER_UNIT // BUILT_CHARS_PER_UNIT if lowered else 0)


class _Guard(ast.NodeTransformer):
    """Route data-dependent operations through the hidden helpers: size-checked and metered.

    Also counts the static cost that ExpressionRule charges to the request per evaluation:
    ``nodes`` (every node of the tree runs at most once outside a comprehension body) and
    ``scans`` (query reads of the plain comparisons above); a comprehension's body is charged
    per item, to the evaluation's own budget.
    """

    def __init__(self) -> None:
        self.scans = 0
        self.metered = False  # whether any operation charges the meter at run time
        self._in_body = False
        self._body_scans = 0

    @staticmethod
    def _call(name: str, args: list[ast.expr], keywords: list[ast.keyword], like: ast.AST) -> ast.Call:
        func = ast.copy_location(ast.Name(id=name, ctx=ast.Load()), like)
        return ast.copy_location(ast.Call(func=func, args=args, keywords=keywords), like)

    def _metered(
        self, name: str, args: list[ast.expr], keywords: list[ast.keyword], like: ast.AST
    ) -> ast.Call:
        self.metered = True
        return self._call(name, [_meter_name(like), *args], keywords, like)

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Add):
            return self._metered("__llamon_add", [node.left, node.right], [], node)
        if isinstance(node.op, ast.Mult):  # numbers only, within 64 bits: constant cost
            return self._call("__llamon_mul", [node.left, node.right], [], node)
        if isinstance(node.op, ast.Mod):
            return self._call("__llamon_mod", [node.left, node.right], [], node)
        return node  # - / // on numbers cannot build anything bigger than their operands

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.slice, ast.Slice):
            return node  # an index or a key: constant cost
        bounds = [
            part if part is not None else ast.copy_location(ast.Constant(value=None), node)
            for part in (node.slice.lower, node.slice.upper, node.slice.step)
        ]
        return self._metered("__llamon_slice", [node.value, *bounds], [], node)

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        operands = [node.left, *node.comparators]
        costs = [_static_pair(operands[i], op, operands[i + 1]) for i, op in enumerate(node.ops)]
        if all(cost is not None for cost in costs):
            self._count_reads(sum(costs))  # type: ignore[arg-type]
            # query.lower() as the right of `in` is already counted: leave it a plain call.
            node.left = self.visit(node.left)
            node.comparators = [c if _query_ref(c) is True else self.visit(c) for c in node.comparators]
            return node
        self.generic_visit(node)
        if len(node.ops) == 1:
            op = ast.copy_location(ast.Constant(value=_COMPARE_INDEX[type(node.ops[0])]), node)
            if not isinstance(node.ops[0], (ast.Is, ast.IsNot)):
                return self._metered("__llamon_cmp", [node.left, node.comparators[0], op], [], node)
        weigh = [
            part if _scalar(part) else self._metered("__llamon_weigh", [part], [], part)
            for part in (node.left, *node.comparators)
        ]
        node.left, node.comparators = weigh[0], weigh[1:]
        return node

    def _count_reads(self, reads: int) -> None:
        if self._in_body:
            self._body_scans += reads
        else:
            self.scans += reads

    def visit_Call(self, node: ast.Call) -> ast.AST:
        reads = _static_contains(node)
        if reads is not None:  # contains_any(query, ["a", "b"]): the keyword hot path stays plain
            self._count_reads(reads)
            return node
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Name):
            if func.id == "data_get":
                parts = ast.copy_location(ast.Name(id="a2a_data", ctx=ast.Load()), func)
                return self._metered("__llamon_data_get", [parts, *node.args], node.keywords, node)
            if func.id in _METERED_CALLS:
                return self._metered(f"__llamon_m_{func.id}", node.args, node.keywords, node)
            return node  # len, bool, abs, round: constant cost
        if isinstance(func, ast.Attribute):
            if func.attr in _GUARDED_METHODS:
                return self._metered(
                    _GUARDED_METHODS[func.attr], [func.value, *node.args], node.keywords, node
                )
            if func.attr not in _FREE_METHODS:
                name = ast.copy_location(ast.Constant(value=func.attr), func)
                return self._metered("__llamon_method", [func.value, name, *node.args], node.keywords, node)
        return node

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST:
        # f"{a}{b}..." as one size-checked call: many parts, each a big value, add up.
        self.generic_visit(node)
        args: list[ast.expr] = []
        for part in node.values:
            if isinstance(part, ast.FormattedValue):
                helper = {114: "__llamon_repr", 97: "__llamon_ascii"}.get(part.conversion, "__llamon_str")
                args.append(self._metered(helper, [part.value], [], part))
            else:
                args.append(part)
        return self._metered("__llamon_fstr", args, [], node)

    def _comprehension(self, node: Any, body: list[ast.AST]) -> ast.AST:
        gen = node.generators[0]
        nodes = sum(1 for part in [*body, gen.target, *gen.ifs] for _ in ast.walk(part))
        gen.iter = self.visit(gen.iter)  # evaluated once, before the loop
        self._in_body, self._body_scans = True, 0
        try:
            gen.target = self.visit(gen.target)
            gen.ifs = [self.visit(cond) for cond in gen.ifs]
            for field in ("elt", "key", "value"):
                if hasattr(node, field):
                    setattr(node, field, self.visit(getattr(node, field)))
        finally:
            self._in_body = False
        per_item = [ast.copy_location(ast.Constant(value=v), gen.iter) for v in (nodes, self._body_scans)]
        gen.iter = self._metered("__llamon_iter", [gen.iter, *per_item], [], gen.iter)
        return node

    def visit_ListComp(self, node: ast.ListComp) -> ast.AST:
        return self._comprehension(node, [node.elt])

    visit_SetComp = visit_ListComp
    visit_GeneratorExp = visit_ListComp

    def visit_DictComp(self, node: ast.DictComp) -> ast.AST:
        return self._comprehension(node, [node.key, node.value])


def _compile(tree: ast.Expression, name: str) -> tuple[types.CodeType, int, int, bool]:
    """The expression as the code of a zero-argument function (run with per-request globals),
    with its static cost and whether it charges the meter: (code, nodes, query scans, metered),
    see :class:`_Guard`."""
    nodes = sum(1 for _ in ast.walk(tree.body))
    guard = _Guard()
    body = guard.visit(tree).body
    func = ast.FunctionDef(
        name=name,
        args=ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=[ast.copy_location(ast.Return(value=body), body)],
        decorator_list=[],
        returns=None,
        type_comment=None,
    )
    module = ast.Module(body=[ast.copy_location(func, body)], type_ignores=[])
    ast.fix_missing_locations(module)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # compile-time SyntaxWarnings would only reach the log
            code = compile(module, _FILENAME, "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ExprError(f"the expression cannot be compiled: {exc}") from None
    for const in code.co_consts:
        if isinstance(const, types.CodeType) and const.co_name == name:
            return const, nodes, guard.scans, guard.metered
    raise ExprError("the expression cannot be compiled")  # pragma: no cover - compile() always emits it


# --- run-time helpers (visible to expressions) ---------------------------------------------------
def _type_name(value: Any) -> str:
    if value is None:
        return "None"
    return {dict: "dict", list: "list", tuple: "tuple", str: "text", frozenset: "set"}.get(
        type(value), type(value).__name__
    )


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


def contains_any(text: str | None, words: list[str]) -> bool:
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


def contains_all(text: str | None, words: list[str]) -> bool:
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
_RE_CACHE_SIZE = 256


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
        _RE_CACHE.clear()  # crude but bounded; rule sets rarely hold hundreds of patterns
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
        return match.group(group)
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
        return value
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


# --- the run-time cost budget -------------------------------------------------------------------
# Caps bound what one operation may build; they cannot bound how often an expression repeats
# work (a comprehension runs its body up to MAX_ITER_ITEMS times, a 4,000-character expression
# can call sorted(query) 196 times). So every evaluation also has a cost budget, as CEL has in
# Kubernetes: each operation is charged in proportion to its work before (or, for results
# bounded by a cap, right after) it runs, and an evaluation that spends more than its budget
# raises CostBudgetExceeded. One CostMeter per request also caps all evaluations together.
#
# A unit is about one step of the interpreter: one syntax-tree node evaluated, one item
# visited, built or compared, READ_CHARS_PER_UNIT characters read, BUILT_CHARS_PER_UNIT
# characters built. The defaults keep one evaluation under ~50 ms and ~64 MB at worst.
DEFAULT_EXPR_BUDGET = 250_000  # units per evaluation of one when or params
DEFAULT_REQUEST_BUDGET = 2_500_000  # units per request, every rule's evaluations together
READ_CHARS_PER_UNIT = 16  # scanning text (in, find, count, ==, startswith ...)
BUILT_CHARS_PER_UNIT = 8  # building text (+, join, slices, lower, str(), f-strings ...)
REGEX_CHARS_PER_UNIT = 16  # a regex search: len(text) x program size / 16
REGEX_COMPILE_UNITS = 8  # per instruction of a regex's compiled program, at every call
SORT_KEYS = ("len", "str", "int", "float", "abs", "bool")  # the key= a sort or min/max may use


class CostBudgetExceeded(ExprError):
    """An evaluation (or a request's evaluations together) did more work than its cost budget."""


class CostMeter:
    """The cost budget of one request: ``expr_budget`` per evaluation, ``request_budget`` for all.

    :func:`build_namespace` puts one in the namespace (``meter=`` shares one between the
    namespaces of one request, as the pre-step does). Each :meth:`CompiledExpr.evaluate`
    starts with ``left = expr_budget`` and the rewritten operations charge ``left``; each
    :meth:`ExpressionRule.evaluate_ns` (the pre-step's call) then takes what its evaluations
    spent, plus their static cost, from ``pool``, and refuses to start once ``pool`` is spent.
    """

    __slots__ = ("expr_budget", "request_budget", "left", "pool", "qcost", "weights")

    def __init__(self, expr_budget: int | None = None, request_budget: int | None = None) -> None:
        if expr_budget is None or request_budget is None:
            from llamon_agent.settings import cost_budgets

            defaults = cost_budgets()
            expr_budget = defaults.expr_cost_budget if expr_budget is None else expr_budget
            request_budget = defaults.request_cost_budget if request_budget is None else request_budget
        for name, value in (("expr_budget", expr_budget), ("request_budget", request_budget)):
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be a positive whole number of cost units, not {value!r}")
        self.expr_budget = expr_budget
        self.request_budget = request_budget
        self.left = expr_budget  # what the current evaluation may still spend
        self.pool = request_budget  # what the request's rules may still spend
        self.qcost = 1  # reading the query once (set by build_namespace)
        self.weights: dict[int, tuple[Any, int]] = {}  # identity -> (value, _weight), see _weight

    @property
    def spent(self) -> int:
        """Units the request's rules have spent so far (ExpressionRule evaluations)."""
        return self.request_budget - self.pool

    def exceeded(self) -> None:
        raise CostBudgetExceeded(
            f"cost budget of {self.expr_budget:,} units exceeded: the expression does too much work "
            "(see the cost table in docs/expressions.md)"
        )

    def request_exceeded(self) -> None:
        raise CostBudgetExceeded(
            f"request cost budget of {self.request_budget:,} units exceeded: the rules evaluated "
            "before this one did too much work together"
        )


def _charge(meter: CostMeter, cost: int) -> None:
    left = meter.left = meter.left - cost
    if left < 0:
        meter.exceeded()


_SEQUENCES = frozenset({list, tuple, set, frozenset})


# An identity key without id(), which raises a "builtins.id" audit event on every call.
_identity = object.__hash__


def _weight(value: Any, meter: CostMeter) -> int:
    """What reading ``value`` whole costs (compared, hashed, searched): items plus characters.

    The walk stops once it passes what the meter has left, so it costs no more than what it
    charges. A finished walk is remembered for the request (with the value, so that its id
    cannot be reused): comparing a big request value in a loop walks it once.
    """
    kind = type(value)
    if kind is str:
        return 1 + len(value) // READ_CHARS_PER_UNIT
    if kind is not dict and kind not in _SEQUENCES:
        return 1
    known = meter.weights.get(_identity(value))
    if known is not None and known[0] is value:
        return known[1]
    limit = meter.left
    total = 0
    stack = [value]
    while stack and total <= limit:
        item = stack.pop()
        kind = type(item)
        if kind is str:
            total += 1 + len(item) // READ_CHARS_PER_UNIT
        elif kind is dict:
            total += 1 + len(item)
            stack.extend(item.values())
        elif kind in _SEQUENCES:
            total += 1 + len(item)
            stack.extend(item)
        else:
            total += 1
    if not stack:
        meter.weights[_identity(value)] = (value, total)
    return total


def _result_cost(value: Any) -> int:
    """What building ``value`` cost: characters built, or items (2 each: pointer and object)."""
    kind = type(value)
    if kind is str:
        return 1 + len(value) // BUILT_CHARS_PER_UNIT
    if kind in _SEQUENCES or kind is dict:
        return 1 + 2 * len(value)
    return 1


def _m_add(meter: CostMeter, left: Any, right: Any) -> Any:
    kind = type(left)
    if kind is type(right):
        if kind is str:
            _charge(meter, 1 + (len(left) + len(right)) // BUILT_CHARS_PER_UNIT)
        elif kind is list or kind is tuple:
            _charge(meter, 1 + len(left) + len(right))
    return _add(left, right)


def _m_slice(meter: CostMeter, value: Any, lower: Any, upper: Any, step: Any) -> Any:
    where = slice(lower, upper, step)
    try:
        size = len(value)
    except TypeError:
        return value[where]  # the type's own error
    count = len(range(*where.indices(size)))
    _charge(meter, 1 + (count // BUILT_CHARS_PER_UNIT if type(value) is str else count))
    return value[where]


_COMPARE_OPS: tuple[Any, ...] = (
    lambda a, b: a == b,
    lambda a, b: a != b,
    lambda a, b: a < b,
    lambda a, b: a <= b,
    lambda a, b: a > b,
    lambda a, b: a >= b,
    lambda a, b: a in b,
    lambda a, b: a not in b,
)
_COMPARE_INDEX = {
    ast.Eq: 0,
    ast.NotEq: 1,
    ast.Lt: 2,
    ast.LtE: 3,
    ast.Gt: 4,
    ast.GtE: 5,
    ast.In: 6,
    ast.NotIn: 7,
}


def _m_compare(meter: CostMeter, left: Any, right: Any, op: int) -> Any:
    """One comparison whose operands' sizes are not known when the rule is saved."""
    if op >= 6:  # in / not in
        kind = type(right)
        if kind is str:
            cost = 1 + (len(right) + (len(left) if type(left) is str else 0)) // READ_CHARS_PER_UNIT
        elif kind is dict or kind is set or kind is frozenset:
            cost = _weight(left, meter)  # hashing the key
        else:
            cost = 1 + _weight(right, meter)  # each item compared, at most its own size
    else:
        # == and < stop at the first difference: at most the smaller side is read.
        cost = _weight(left, meter)
        if cost > 1:
            cost = min(cost, _weight(right, meter))
    _charge(meter, cost)
    return _COMPARE_OPS[op](left, right)


def _m_weigh(meter: CostMeter, value: Any) -> Any:
    """An operand of a chained comparison: charged by its size, returned unchanged."""
    _charge(meter, _weight(value, meter))
    return value


def _m_iter(meter: CostMeter, values: Any, nodes: int, scans: int) -> Any:
    """A comprehension's iterable, charging each item the work of one pass through the body."""
    return _metered_items(meter, _iter(values), nodes + 1 + scans * meter.qcost)


def _metered_items(meter: CostMeter, values: Any, cost: int) -> Any:
    for value in values:
        left = meter.left = meter.left - cost
        if left < 0:
            meter.exceeded()
        yield value


def _sized(values: Any) -> Any:
    """A comprehension's generator as a list (its items were charged as they were made)."""
    return values if type(values) in _SIZED else list(values)


_SIZED = frozenset({list, tuple, set, frozenset, dict, str})


def _sort_key_cost(namespace_key: Any, weight: int) -> int:
    if namespace_key is None:
        return 0
    if namespace_key in (len, abs, bool):
        return weight
    if namespace_key in (_str, int, float):
        return weight * (READ_CHARS_PER_UNIT // BUILT_CHARS_PER_UNIT)
    raise ExprError(f"key= can be one of {', '.join(SORT_KEYS)}")


def _items_weight(meter: CostMeter, items: Any) -> int:
    if type(items) is str:
        return 1 + len(items)  # sorted("...") and max("...") handle one character at a time
    return _weight(items, meter)


def _m_sorted(meter: CostMeter, values: Any, *, key: Any = None, reverse: Any = False) -> Any:
    items = _sized(values)
    weight = _items_weight(meter, items)
    _charge(meter, weight * max(1, len(items).bit_length()) + _sort_key_cost(key, weight))
    return sorted(items, key=key, reverse=reverse)


def _m_min_max(builtin: Any) -> Any:
    def metered(meter: CostMeter, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1:
            args = (_sized(args[0]),)
            weight = _items_weight(meter, args[0])
        else:
            weight = _weight(args, meter)
        _charge(meter, weight + _sort_key_cost(kwargs.get("key"), weight))
        return builtin(*args, **kwargs)

    return metered


def _m_reduce(builtin: Any, per_item: int = 1) -> Any:
    """any(), all(), sum(): a generator's items were charged as made; a container's here."""

    def metered(meter: CostMeter, values: Any, *args: Any, **kwargs: Any) -> Any:
        if type(values) in _SIZED:
            _charge(meter, 1 + per_item * len(values))
        return builtin(values, *args, **kwargs)

    return metered


def _m_convert(builtin: Any) -> Any:
    """int() and float(): reading a text is charged; an int stays within 64 bits, like literals."""

    def metered(meter: CostMeter, *args: Any, **kwargs: Any) -> Any:
        _charge(meter, _weight(args, meter))
        value = builtin(*args, **kwargs)
        if type(value) is int and not -MAX_INT <= value <= MAX_INT:
            raise ExprError("the integer result is too large (the limit is 64 bits)")
        return value

    return metered


def _m_str(meter: CostMeter, value: Any = "") -> str:
    kind = type(value)
    if kind is str or value is None or kind is int or kind is float or kind is bool:
        _charge(meter, 1)
        return value if kind is str else str(value)
    _charge(meter, _check_text_size(value))
    return str(value)


def _m_repr(meter: CostMeter, value: Any) -> str:
    if type(value) is str:  # escapes make a text up to 4x longer
        _charge(meter, 1 + 4 * len(value) // BUILT_CHARS_PER_UNIT)
        return repr(value)
    _charge(meter, _check_text_size(value))
    return repr(value)


def _m_ascii(meter: CostMeter, value: Any) -> str:
    _charge(meter, _check_text_size(value))
    text = _ascii(value)
    _charge(meter, _result_cost(text))
    return text


def _m_fstr(meter: CostMeter, *parts: str) -> str:
    size = 0
    for part in parts:
        size += len(part)
    _charge(meter, 1 + len(parts) + size // BUILT_CHARS_PER_UNIT)
    return _fstr(*parts)


def _m_join(meter: CostMeter, sep: Any, *args: Any, **kwargs: Any) -> str:
    if len(args) == 1 and not kwargs and type(args[0]) is types.GeneratorType:
        args = (list(args[0]),)
    if len(args) == 1 and type(args[0]) in _SIZED:
        _charge(meter, 1 + len(args[0]))
    text = _join(sep, *args, **kwargs)
    _charge(meter, _result_cost(text))
    return text


def _m_replace(meter: CostMeter, text: Any, *args: Any, **kwargs: Any) -> str:
    if type(text) is str:
        _charge(meter, 1 + len(text) // READ_CHARS_PER_UNIT)
    result = _replace(text, *args, **kwargs)
    _charge(meter, _result_cost(result))
    return result


# Methods whose cost does not depend on the data: left as plain calls (dict lookups, views).
_FREE_METHODS = frozenset({"get", "keys", "values", "items"})


_CASE_METHODS = frozenset({"lower", "upper", "casefold"})  # a Unicode table lookup per character
_SPLIT_METHODS = frozenset({"split", "rsplit", "splitlines", "partition", "rpartition"})
PIECE_UNITS = 8  # a new text object made by split(): allocation dominates


def _m_method(meter: CostMeter, value: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    """value.name(*args): charged by what it reads before, and by what it built after."""
    method = getattr(value, name)
    cost = _weight(value, meter)
    for arg in (*args, *kwargs.values()):
        # a set method iterates its argument, hashing every item (a text: every character)
        cost += _weight(arg, meter) if type(arg) is not str or type(value) is str else 1 + len(arg)
    if name in _CASE_METHODS and type(value) is str:
        cost += len(value)
    _charge(meter, cost)
    result = method(*args, **kwargs)
    kind = type(result)
    if kind is str:
        if result is not value:
            _charge(meter, _result_cost(result))
    elif kind in _SEQUENCES:
        if name in _SPLIT_METHODS and type(value) is str:  # the pieces: objects and characters
            _charge(meter, 1 + PIECE_UNITS * len(result) + len(value) // BUILT_CHARS_PER_UNIT)
        else:
            _charge(meter, _result_cost(result))
    return result


def _m_contains_any(meter: CostMeter, text: Any, words: Any) -> bool:
    """contains_any, each word searched for in the text (the hot path of keyword rules: inline)."""
    if type(text) is not str or type(words) not in _WORD_CONTAINERS:
        _charge(meter, 1 + (len(words) if type(words) in _SIZED else 0))
        return contains_any(text, words)
    left = meter.left = meter.left - 1 - len(words) * (1 + len(text) // READ_CHARS_PER_UNIT)
    if left < 0:
        meter.exceeded()
    for word in words:
        if type(word) is not str:
            raise _word_error("contains_any", word)
        if word in text:
            return True
    return False


def _m_contains_all(meter: CostMeter, text: Any, words: Any) -> bool:
    size = len(text) if type(text) is str else 0
    _charge(meter, 1 + (len(words) if type(words) in _SIZED else 1) * (1 + size // READ_CHARS_PER_UNIT))
    return contains_all(text, words)


def _m_regex(helper: Any) -> Any:
    """re_search / re_find: RE2 is linear in the text, times the size of the pattern's program."""

    def metered(meter: CostMeter, pattern: Any, *args: Any, **kwargs: Any) -> Any:
        text = args[0] if args else kwargs.get("text")
        if type(pattern) is str:
            _charge(meter, 1 + len(pattern))
            program = _regex(pattern).programsize
            size = len(text) if type(text) is str else 0
            _charge(meter, program * REGEX_COMPILE_UNITS + size * program // REGEX_CHARS_PER_UNIT)
        return helper(pattern, *args, **kwargs)

    return metered


def _m_data_get(meter: CostMeter, parts: Any, *args: Any, **kwargs: Any) -> Any:
    _charge(meter, 1 + (len(parts) if type(parts) is list else 0))
    return _data_get(parts, *args, **kwargs)


# Calls of these names become calls of their metered version (the name stays bound to the
# plain one: passed as a value, e.g. sorted(words, key=str), it is charged by the caller).
_METERED_CALLS: dict[str, Any] = {
    "str": _m_str,
    "int": _m_convert(int),
    "float": _m_convert(float),
    "sorted": _m_sorted,
    "min": _m_min_max(min),
    "max": _m_min_max(max),
    "any": _m_reduce(any),
    "all": _m_reduce(all),
    "sum": _m_reduce(_sum, per_item=4),  # a Python loop checking each item
    "contains_any": _m_contains_any,
    "contains_all": _m_contains_all,
    "re_search": _m_regex(re_search),
    "re_find": _m_regex(re_find),
}
_METERED_NAMESPACE: dict[str, Any] = {
    **{f"__llamon_m_{name}": fn for name, fn in _METERED_CALLS.items()},
    "__llamon_add": _m_add,
    "__llamon_slice": _m_slice,
    "__llamon_cmp": _m_compare,
    "__llamon_weigh": _m_weigh,
    "__llamon_iter": _m_iter,
    "__llamon_method": _m_method,
    "__llamon_join": _m_join,
    "__llamon_replace": _m_replace,
    "__llamon_data_get": _m_data_get,
    "__llamon_str": _m_str,
    "__llamon_repr": _m_repr,
    "__llamon_ascii": _m_ascii,
    "__llamon_fstr": _m_fstr,
}
_METER = "__llamon_meter"


_EMPTY_BUILTINS: dict[str, Any] = {}  # never written: expressions cannot store anything
_BASE_NAMESPACE: dict[str, Any] = {
    # Must be present: without it a function's builtins fall back to the real ones.
    "__builtins__": _EMPTY_BUILTINS,
    "contains_any": contains_any,
    "contains_all": contains_all,
    "re_search": re_search,
    "re_find": re_find,
    # Builtin types and functions: with no "_" attribute and only allow-listed methods they are
    # inert (int.from_bytes and friends cannot even be named). str is a size-checked function.
    "len": len,
    "str": _str,
    "int": int,
    "float": float,
    "bool": bool,
    "min": min,
    "max": max,
    "any": any,
    "all": all,
    "sorted": sorted,
    "abs": abs,
    "round": _round,
    "sum": _sum,
    # Hidden helpers: user code cannot name them (a leading "_" is refused), only the rewrite.
    "__llamon_mul": _mul,
    "__llamon_mod": _mod,
    **_METERED_NAMESPACE,
}


# --- the per-request namespace ----------------------------------------------------------------
class _Budget:
    __slots__ = ("left",)

    def __init__(self, size: int) -> None:
        self.left = size

    def spend(self, amount: int) -> None:
        self.left -= amount
        if self.left < 0:
            raise ExprError(f"the request data is larger than {MAX_DATA_BYTES:,} bytes")


def _plain(value: Any, budget: _Budget, depth: int = 0) -> Any:
    """A JSON-like copy: dict/list/str/int/float/bool/None only, nothing live, sizes capped."""
    kind = type(value)
    if kind is str:
        budget.spend(len(value) + 2)
        return value
    if value is None or kind is bool or kind is int or kind is float:
        budget.spend(4)
        return value
    if depth >= MAX_DATA_DEPTH:
        raise ExprError(f"the request data is nested more than {MAX_DATA_DEPTH} levels deep")
    if isinstance(value, Mapping):
        budget.spend(2)
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = key if type(key) is str else str(key)  # like JSON: keys are texts
            budget.spend(len(name) + 3)
            out[name] = _plain(item, budget, depth + 1)
        return out
    if isinstance(value, (list, tuple, set, frozenset)):
        budget.spend(2)
        return [_plain(item, budget, depth + 1) for item in value]
    if isinstance(value, str):
        return _plain(str.__str__(value), budget, depth)
    if isinstance(value, int):
        return _plain(int(value), budget, depth)
    if isinstance(value, float):
        return _plain(float(value), budget, depth)
    return _plain(str(value), budget, depth)  # datetimes, UUIDs, ...: as text, never the object


def _tool_dict(tool: Any) -> dict[str, Any]:
    if isinstance(tool, Mapping):
        schema = tool.get("input_schema", tool.get("inputSchema")) or {}
        return {
            "name": str(tool.get("name", "")),
            "description": str(tool.get("description", "") or ""),
            "input_schema": schema,
        }
    return tool_view(tool)


def _tool_name(tool: Any) -> str:
    if isinstance(tool, Mapping):
        return str(tool.get("name", ""))
    return str(getattr(tool, "name", ""))


class _CtxView:
    """The read-only ``ctx`` an expression sees: JSON-like copies of one request for one server."""

    __slots__ = (
        "query",
        "context",
        "a2a_data",
        "a2a_files",
        "tool_names",
        "_tools",
        "_mcp_tools",
        "_mcp_error",
    )

    def __init__(
        self,
        query: str,
        context: dict[str, Any],
        a2a_data: list[Any] | None,
        a2a_files: list[Any] | None,
        tools: list[Any],
    ) -> None:
        self.query = query
        self.context = context
        self.a2a_data = a2a_data
        self.a2a_files = a2a_files
        self.tool_names = frozenset(_tool_name(t) for t in tools)
        self._tools = tools
        self._mcp_tools: list[dict[str, Any]] | None = None
        self._mcp_error: ExprError | None = None

    @property
    def mcp_tools(self) -> list[dict[str, Any]]:
        # Built on first use: schemas can be large and most rules only need tool_names.
        if self._mcp_tools is None:
            if self._mcp_error is not None:  # once per request: a comprehension must not redo the walk
                raise ExprError(self._mcp_error.reason)
            budget = _Budget(MAX_DATA_BYTES)
            try:
                self._mcp_tools = [_plain(_tool_dict(t), budget) for t in self._tools]
            except ExprError as exc:
                self._mcp_error = exc
                raise
        return self._mcp_tools

    def __repr__(self) -> str:
        return f"ctx(query={self.query!r})"


def build_namespace(ctx: DeterministicContext, *, meter: CostMeter | None = None) -> dict[str, Any]:
    """The evaluation globals for one request on one server; build once, reuse for every rule.

    ``meter`` is the request's cost budget (share one between the namespaces of a request);
    by default a new one with the budgets of :func:`llamon_agent.settings.cost_budgets`.
    """
    query = ctx.query
    if type(query) is not str:
        query = "" if query is None else str(query)
    if len(query) > MAX_QUERY_CHARS:
        raise ExprError(f"the query is longer than {MAX_QUERY_CHARS:,} characters")
    budget = _Budget(MAX_DATA_BYTES)
    context = {} if ctx.context is None else _plain(ctx.context, budget)
    if type(context) is not dict:
        raise ExprError(f"ctx.context must be a dict, not {_type_name(context)}")
    a2a_data = None if ctx.a2a_data is None else _plain(list(ctx.a2a_data), budget)
    a2a_files = None if ctx.a2a_files is None else _plain(list(ctx.a2a_files), budget)
    view = _CtxView(query, context, a2a_data, a2a_files, list(ctx.mcp_tools or ()))
    namespace = _BASE_NAMESPACE.copy()
    namespace["ctx"] = view
    namespace["query"] = query
    namespace["context"] = context
    namespace["a2a_data"] = a2a_data
    namespace["a2a_files"] = a2a_files
    namespace["tool_names"] = view.tool_names
    if meter is None:
        meter = CostMeter()
    meter.qcost = 1 + len(query) // READ_CHARS_PER_UNIT
    namespace[_METER] = meter
    return namespace


def request_size_error(
    *, query: str, context: Any = None, a2a_data: Any = None, a2a_files: Any = None
) -> str | None:
    """Why a request is too big for the pre-step (MAX_QUERY_CHARS, MAX_DATA_BYTES), or None."""
    if len(query or "") > MAX_QUERY_CHARS:
        return f"the query is longer than {MAX_QUERY_CHARS:,} characters"
    try:
        payload = json.dumps([context, a2a_data, a2a_files], ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError) as exc:
        return f"the request data cannot be read as JSON: {exc}"
    if len(payload.encode("utf-8")) > MAX_DATA_BYTES:
        return f"the request data is larger than {MAX_DATA_BYTES:,} bytes"
    return None


# --- compiled expressions ---------------------------------------------------------------------
def _position(src: _Source, tb: types.TracebackType | None) -> tuple[int | None, int | None]:
    """Where in the expression a run-time error happened, from the innermost expression frame."""
    found: tuple[types.CodeType, int] | None = None
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename == _FILENAME:
            found = (code, tb.tb_lasti)
        tb = tb.tb_next
    if found is None:
        return None, None
    code, lasti = found
    for index, (lineno, _end, col, _end_col) in enumerate(code.co_positions()):
        if index == lasti // 2:  # co_positions has one entry per 2-byte code unit
            return src.byte_position(lineno, col)
    return None, None


def _runtime_reason(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        key = exc.args[0] if exc.args else None
        return f"key {key!r} is missing; use .get({key!r}) for optional keys"
    if isinstance(exc, IndexError):
        return f"{exc}; check len() first"
    if isinstance(exc, ZeroDivisionError):
        return "division by zero"
    if isinstance(exc, RecursionError):
        return "the data is nested too deeply"
    if isinstance(exc, MemoryError):
        return "out of memory"
    if isinstance(exc, AttributeError):
        return f"{exc}"
    if isinstance(exc, TypeError):
        return f"wrong type: {exc}"
    if isinstance(exc, ValueError):
        if "integer string conversion" in str(exc):
            return "the number has too many digits"  # the Python hint about sys.* means nothing here
        return f"wrong value: {exc}"
    if isinstance(exc, OverflowError):
        return f"number too large: {exc}"
    return f"{type(exc).__name__}: {exc}"


class _NotJson(Exception):
    """A params value JSON cannot carry; the path to it is collected on the way out."""

    def __init__(self, template: str) -> None:
        super().__init__(template)
        self.template = template  # "{path}" marks where the path goes
        self.path: list[str] = []


def _json_value(value: Any, depth: int, budget: list[int]) -> Any:
    """A JSON-ready copy of params (never aliasing the shared namespace), size-capped."""
    kind = type(value)
    if kind is str:
        budget[0] -= len(value) + 2
    elif value is None or kind is bool or kind is int:
        budget[0] -= 4
    elif kind is float:
        if not math.isfinite(value):
            raise _NotJson(f"{{path}} is {value}, which JSON cannot carry")
        budget[0] -= 4
    elif kind is dict or kind is list or kind is tuple:
        if depth > 2 * MAX_DEPTH:
            raise _NotJson("{path} is nested too deeply")
        budget[0] -= 2
        if kind is dict:
            out: dict[str, Any] = {}
            for key, item in value.items():
                if type(key) is not str:
                    raise _NotJson(f"the key {key!r} in {{path}} is not a text; keys must be texts")
                budget[0] -= len(key) + 3
                try:
                    out[key] = _json_value(item, depth + 1, budget)
                except _NotJson as exc:
                    exc.path.append(f"[{key!r}]")
                    raise
            value = out
        else:
            items: list[Any] = []
            for index, item in enumerate(value):
                try:
                    items.append(_json_value(item, depth + 1, budget))
                except _NotJson as exc:
                    exc.path.append(f"[{index}]")
                    raise
            value = items
    else:
        raise _NotJson(f"{{path}} is a {_type_name(value)}, which JSON cannot carry")
    if budget[0] < 0:
        raise ExprError(f"params would be larger than {MAX_DATA_BYTES:,} bytes")
    return value


_FREE_COPY_BYTES = 1_024  # copying params this small costs about one node: not charged


def _params(value: Any, namespace: dict[str, Any]) -> dict[str, Any]:
    if type(value) is not dict:
        raise ExprError(f'params must give a dict such as {{"q": query}}, not {_type_name(value)}')
    budget = [MAX_DATA_BYTES]
    try:
        params = _json_value(value, 0, budget)
    except _NotJson as exc:
        path = "params" + "".join(reversed(exc.path))
        raise ExprError("params: " + exc.template.replace("{path}", path)) from None
    if budget[0] < MAX_DATA_BYTES - _FREE_COPY_BYTES:
        # A big copy, charged to the request (ExpressionRule); one copy is capped by MAX_DATA_BYTES.
        namespace[_METER].left -= 1 + (MAX_DATA_BYTES - budget[0]) // BUILT_CHARS_PER_UNIT
    return params


class CompiledExpr:
    """A checked, compiled expression: call it with a ctx, or ``evaluate`` a prebuilt namespace."""

    __slots__ = ("source", "kind", "required_keywords", "static_cost", "query_reads", "_code", "_src")

    def __init__(
        self,
        source: str,
        kind: str,
        compiled: tuple[types.CodeType, int, int, bool],
        keywords: frozenset[tuple[str, bool]] | None,
        src: _Source,
    ) -> None:
        self.source = source
        self.kind = kind  # "when" or "params"
        self.required_keywords = keywords
        # Charged to the request by ExpressionRule: one unit per node, plus each plain query read.
        self._code, self.static_cost, self.query_reads, _ = compiled
        self._src = src

    def evaluate(self, namespace: dict[str, Any]) -> Any:
        """Run against a :func:`build_namespace` result: a bool for ``when``, a dict for ``params``.

        The evaluation gets the meter's whole ``expr_budget`` (CostBudgetExceeded past it).
        """
        namespace[_METER].left = namespace[_METER].expr_budget
        try:  # the body of run(), inline: a call would cost more than the budget's reset
            value = types.FunctionType(self._code, namespace)()
        except ExprError as exc:
            if exc.line is None:
                exc.line, exc.column = _position(self._src, exc.__traceback__)
            raise
        except Exception as exc:
            line, column = _position(self._src, exc.__traceback__)
            raise ExprError(_runtime_reason(exc), line, column) from exc
        if self.kind == "when":
            return bool(value)
        return _params(value, namespace)

    def run(self, namespace: dict[str, Any]) -> Any:
        """:meth:`evaluate` on what the meter has left (ExpressionRule runs when and params on one budget)."""
        try:
            # A fresh function per run binds this request's globals; no eval(), so no
            # "exec" audit event and names resolve with the fast global lookup.
            value = types.FunctionType(self._code, namespace)()
        except ExprError as exc:
            if exc.line is None:
                exc.line, exc.column = _position(self._src, exc.__traceback__)
            raise
        except Exception as exc:  # anything else becomes an ExprError (the pre-step's error path)
            line, column = _position(self._src, exc.__traceback__)
            raise ExprError(_runtime_reason(exc), line, column) from exc
        if self.kind == "when":
            return bool(value)
        return _params(value, namespace)

    def __call__(self, ctx: DeterministicContext) -> Any:
        return self.evaluate(build_namespace(ctx))

    def __repr__(self) -> str:
        return f"CompiledExpr({self.kind}: {self.source!r})"


class _UnmeteredExpr(CompiledExpr):
    """An expression with no operation that charges the meter (most rules: keyword tests,
    comparisons, dict lookups): its work is bounded by its static cost, which ExpressionRule
    charges to the request, so an evaluation needs no budget of its own and skips the reset."""

    __slots__ = ()

    evaluate = CompiledExpr.run


def _compiled_expr(
    source: str,
    kind: str,
    compiled: tuple[types.CodeType, int, int, bool],
    keywords: frozenset[tuple[str, bool]] | None,
    src: _Source,
) -> CompiledExpr:
    cls = CompiledExpr if compiled[3] else _UnmeteredExpr
    return cls(source, kind, compiled, keywords, src)


def compile_when(source: str) -> CompiledExpr:
    """Check and compile a ``when`` expression: callable ``(ctx) -> bool``; ExprError if not allowed."""
    tree, src = _parse(source)
    keywords = _requirement(tree.body)
    return _compiled_expr(source, "when", _compile(tree, "<when>"), keywords, src)


_NOT_A_DICT = (
    ast.Constant,
    ast.List,
    ast.Tuple,
    ast.Set,
    ast.ListComp,
    ast.SetComp,
    ast.GeneratorExp,
    ast.Compare,
    ast.JoinedStr,
)


def compile_params(source: str) -> CompiledExpr:
    """Check and compile a ``params`` expression: callable ``(ctx) -> dict``; ExprError if not allowed."""
    tree, src = _parse(source)
    if isinstance(tree.body, _NOT_A_DICT) or (
        isinstance(tree.body, ast.UnaryOp) and isinstance(tree.body.op, ast.Not)
    ):
        raise src.node_error(tree.body, 'params must give a dict such as {"q": query}')
    return _compiled_expr(source, "params", _compile(tree, "<params>"), None, src)


# --- the keyword index hint -------------------------------------------------------------------
def _query_ref(node: ast.AST) -> bool | None:
    """False for ``query``/``ctx.query``, True for their ``.lower()``, None for anything else."""
    if isinstance(node, ast.Name) and node.id == "query":
        return False
    if (
        isinstance(node, ast.Attribute)
        and node.attr == "query"
        and isinstance(node.value, ast.Name)
        and node.value.id == "ctx"
    ):
        return False
    if (
        isinstance(node, ast.Call)
        and not node.args
        and not node.keywords
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "lower"
        and _query_ref(node.func.value) is False
    ):
        return True
    return None


def _literal_words(node: ast.AST) -> list[str] | None:
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)) and node.elts:
        words = [e.value for e in node.elts if isinstance(e, ast.Constant) and type(e.value) is str]
        if len(words) == len(node.elts):
            return words
    return None


def _is_tool_names(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return node.id == "tool_names"
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "tool_names"
        and isinstance(node.value, ast.Name)
        and node.value.id == "ctx"
    )


def _is_safe_get(node: ast.AST) -> bool:
    """``context.get("k")``, ``ctx.context.get("k", <constant>)`` or ``data_get("k", ...)``: never raise."""
    if not isinstance(node, ast.Call) or node.keywords or not 1 <= len(node.args) <= 2:
        return False
    if not all(isinstance(a, ast.Constant) for a in node.args) or type(node.args[0].value) is not str:
        return False
    func = node.func
    if isinstance(func, ast.Name):
        return func.id == "data_get"
    if not isinstance(func, ast.Attribute) or func.attr != "get":
        return False
    target = func.value  # context is always a dict in the namespace, so .get cannot fail
    if isinstance(target, ast.Name):
        return target.id == "context"
    return (
        isinstance(target, ast.Attribute)
        and target.attr == "context"
        and isinstance(target.value, ast.Name)
        and target.value.id == "ctx"
    )


def _is_safe(node: ast.AST) -> bool:
    """Whether ``node`` provably never raises, whatever the request (a short, conservative list)."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.BoolOp):
        return all(_is_safe(v) for v in node.values)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return _is_safe(node.operand)
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, right, op = node.left, node.comparators[0], node.ops[0]
        if isinstance(op, (ast.In, ast.NotIn)):
            return (
                isinstance(left, ast.Constant)
                and type(left.value) is str
                and (_query_ref(right) is not None or _is_tool_names(right))
            )
        if isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)):
            # == between JSON values and a literal never raises
            sides = (left, right)
            plain = [
                s
                for s in sides
                if isinstance(s, ast.Constant) or _is_safe_get(s) or _query_ref(s) is not None
            ]
            return len(plain) == 2 and any(isinstance(s, ast.Constant) for s in sides)
        return False
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        return (
            node.func.id in ("contains_any", "contains_all")
            and len(node.args) == 2
            and _query_ref(node.args[0]) is not None
            and isinstance(node.args[1], (ast.List, ast.Tuple, ast.Set))
            and all(isinstance(e, ast.Constant) and type(e.value) is str for e in node.args[1].elts)
        )
    return False


def _requirement(node: ast.AST) -> frozenset[tuple[str, bool]] | None:
    """Literals one of which must occur in the query for ``node`` to be truthy; None if unknown.

    Sound for errors too: when none of the literals occurs, ``node`` evaluates to a falsy
    value *without raising*, so skipping the rule changes nothing, not even an ExprError.
    """
    if isinstance(node, ast.Compare):
        if (
            len(node.ops) == 1
            and isinstance(node.ops[0], ast.In)
            and isinstance(node.left, ast.Constant)
            and type(node.left.value) is str
            and node.left.value  # "" is in every text: no requirement
        ):
            lowered = _query_ref(node.comparators[0])
            if lowered is not None:
                return frozenset({(node.left.value, lowered)})
        return None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        if node.func.id in ("contains_any", "contains_all") and len(node.args) == 2:
            lowered = _query_ref(node.args[0])
            words = _literal_words(node.args[1])
            if lowered is None or words is None or ("" in words and node.func.id == "contains_any"):
                return None
            if node.func.id == "contains_any":
                return frozenset((w, lowered) for w in words)
            useful = [w for w in words if w]
            if not useful:
                return None
            return frozenset({(max(useful, key=len), lowered)})  # the longest is likely the rarest
        return None
    if isinstance(node, ast.BoolOp):
        parts = [_requirement(v) for v in node.values]
        if isinstance(node.op, ast.And):
            # Only a conjunct reached through never-raising ones: `context["k"] == 1 and "a" in
            # query` raises when "k" is missing, and skipping it on "a" would hide that error.
            known: list[frozenset[tuple[str, bool]]] = []
            for value, part in zip(node.values, parts, strict=True):
                if part is not None:
                    known.append(part)
                if not _is_safe(value):
                    break
            return min(known, key=len) if known else None
        if any(p is None for p in parts):
            return None
        return frozenset().union(*parts)  # type: ignore[arg-type]
    return None


def required_keywords(source_or_tree: str | ast.AST) -> frozenset[tuple[str, bool]] | None:
    """The keyword-index hint of a ``when``: (literal, lowered) pairs one of which it needs, or None."""
    if isinstance(source_or_tree, str):
        tree: ast.AST = _parse(source_or_tree)[0].body
    elif isinstance(source_or_tree, ast.Expression):
        tree = source_or_tree.body
    elif isinstance(source_or_tree, ast.AST):
        tree = source_or_tree
    else:
        raise TypeError("required_keywords() takes an expression's text or its syntax tree")
    return _requirement(tree)


# --- rules --------------------------------------------------------------------------------------
def check_rule_name(name: Any) -> None:
    """ExprError unless ``name`` is a Python identifier, not a keyword, of sane length."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ExprError(
            f"the rule name {name!r} must be a Python identifier: letters, digits and _, not starting with a digit",
            field="name",
        )
    if keyword.iskeyword(name):
        raise ExprError(f"the rule name {name!r} is a Python keyword", field="name")
    if len(name) > MAX_RULE_NAME_CHARS:
        raise ExprError(f"the rule name is longer than {MAX_RULE_NAME_CHARS} characters", field="name")


def _with_field(exc: ExprError, field: str) -> ExprError:
    return ExprError(exc.reason, exc.line, exc.column, field=field)


class ExpressionRule:
    """A routing rule made of expressions; the pre-step runs it like a ``@deterministic_tool`` function."""

    def __init__(
        self, *, name: str, mcp_id: str, tool_name: str, when: str, params: str, stop: bool = False
    ) -> None:
        check_rule_name(name)
        for field, value in (("mcp_id", mcp_id), ("tool_name", tool_name)):
            if not isinstance(value, str) or not value.strip():
                raise ExprError(f"{field} must be a non-empty text", field=field)
        try:
            compiled_when = compile_when(when)
        except ExprError as exc:
            raise _with_field(exc, "when") from None
        try:
            compiled_params = compile_params(params)
        except ExprError as exc:
            raise _with_field(exc, "params") from None
        self.name = name
        self.mcp_id = mcp_id
        self.tool_name = tool_name
        self.stop = bool(stop)
        self.when_source = when
        self.params_source = params
        self.compiled_when = compiled_when
        self.compiled_params = compiled_params
        # Charged per evaluation: every node, and each plain read of the query (its length).
        self._static = compiled_when.static_cost + compiled_params.static_cost
        self._reads = compiled_when.query_reads + compiled_params.query_reads
        self.__name__ = self.__qualname__ = name  # read by code that names rules like functions
        self.__llamon_rule__ = RuleInfo(
            name=name, mcp_id=mcp_id, stop=self.stop, keywords=compiled_when.required_keywords
        )

    def evaluate_ns(self, namespace: dict[str, Any]) -> dict[str, Any] | None:
        """The rule's tool call on a prebuilt namespace, or None when ``when`` is falsy.

        ``when`` and ``params`` share one evaluation budget, which starts charged with their
        static cost (nodes, plain query reads); what they spent is then taken from the
        request's budget (the namespace's CostMeter). Once that is spent, it raises
        CostBudgetExceeded before evaluating anything.
        """
        meter = namespace[_METER]
        if meter.pool < 0:
            meter.request_exceeded()
        budget = meter.expr_budget
        meter.left = budget - self._static - self._reads * meter.qcost
        try:
            if not self.compiled_when.run(namespace):
                return None
            return {"tool_name": self.tool_name, "params": self.compiled_params.run(namespace)}
        finally:
            meter.pool -= budget - meter.left

    def __call__(self, ctx: DeterministicContext) -> dict[str, Any] | None:
        return self.evaluate_ns(build_namespace(ctx))

    def __repr__(self) -> str:
        return f"<expression rule {self.name} on {self.mcp_id}>"


def expression_rule(
    *, name: str, mcp_id: str, tool_name: str, when: str, params: str, stop: bool = False
) -> ExpressionRule:
    """Build a routing rule from a ``when`` and a ``params`` expression; ExprError (with ``field``) if invalid."""
    return ExpressionRule(name=name, mcp_id=mcp_id, tool_name=tool_name, when=when, params=params, stop=stop)
