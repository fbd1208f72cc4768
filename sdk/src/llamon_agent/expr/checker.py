"""Parsing and the allow-list check: caps on the text and the tree, allowed nodes, names, helpers and methods."""

from __future__ import annotations

import ast
import io
import math
import tokenize
import warnings
from collections.abc import Iterable
from typing import Any

from llamon_agent.expr.errors import ExprError, _Source
from llamon_agent.expr.helpers import check_regex
from llamon_agent.expr.limits import (
    _BIDI,
    _CALLABLE,
    _FILENAME,
    _GUARDED_METHODS,
    _RESERVED,
    CTX_ATTRS,
    CTX_NAMES,
    MAX_DEPTH,
    MAX_INT,
    MAX_NESTING,
    MAX_NODES,
    MAX_SOURCE_CHARS,
    MAX_STR_LITERAL_CHARS,
    METHOD_NAMES,
    REGEX_CALLS,
    SORT_KEYS,
)
from llamon_agent.expr.messages import Message as M
from llamon_agent.expr.messages import close_matches, quoted_list


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
                    raise ExprError(M("expr.brackets_too_deep", limit=MAX_NESTING), line, col + 1)
            elif tok.string in ")]}":
                depth -= 1
                if depth < 0:
                    line, col = tok.start
                    raise ExprError(M("expr.unmatched", bracket=tok.string), line, col + 1)
    except (tokenize.TokenError, SyntaxError):
        return  # the parser reports this one below, with a better message
    if significant == 0:
        raise ExprError(M("expr.empty"))


def _parse(source: Any) -> tuple[ast.Expression, _Source]:
    """Parse and fully check one expression; ExprError for anything not allowed."""
    if not isinstance(source, str):
        raise ExprError(M("expr.not_text"))
    if len(source) > MAX_SOURCE_CHARS:  # before any parsing work: a 1 MB expression stops here
        raise ExprError(M("expr.too_long", limit=f"{MAX_SOURCE_CHARS:,}"))
    if not source.strip():
        raise ExprError(M("expr.empty"))
    if "\x00" in source:
        raise ExprError(M("expr.nul"))
    bidi = _BIDI.search(source)
    if bidi:
        before = source[: bidi.start()]
        line: int | None = before.count("\n") + 1
        raise ExprError(
            M("expr.bidi"),
            line,
            len(before) - (before.rfind("\n") + 1) + 1,
        )
    src = _Source(source)
    _pre_scan(src)
    try:
        tree = _syntax(src)
    except SyntaxError as exc:
        if src.is_synthetic_line(exc.lineno):
            line, column = src.char_position(exc.lineno, 0)
            raise ExprError(M("expr.incomplete"), line, column) from None
        line, column = src.char_position(exc.lineno, (exc.offset or 1) - 1)
        raise ExprError(M("expr.syntax", detail=exc.msg), line, column) from None
    except (RecursionError, MemoryError):
        raise ExprError(M("expr.nested_too_deeply")) from None
    except ValueError as exc:
        raise ExprError(M("expr.syntax", detail=exc)) from None
    _check_size(tree, src)
    _Checker(src).check(tree.body, frozenset(), in_comp=False)
    return tree, src


def _syntax(src: _Source) -> ast.Expression:
    """The syntax tree of ``src`` (unchecked: _parse checks it; a second tree of a checked text)."""
    with warnings.catch_warnings():
        # "\d" in a plain string keeps its backslash, as authors of patterns expect; the
        # DeprecationWarning would only reach the server log.
        warnings.simplefilter("ignore")
        return ast.parse(src.wrapped, filename=_FILENAME, mode="eval")


def _check_size(tree: ast.AST, src: _Source) -> None:
    """Node-count and depth caps, iteratively (the checker that follows is recursive)."""
    count = 0
    stack: list[tuple[ast.AST, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise ExprError(M("expr.too_big", limit=f"{MAX_NODES:,}"))
        if depth > MAX_DEPTH:
            raise src.node_error(node, M("expr.too_deep", limit=MAX_DEPTH))
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


_OPERATOR_REASONS: dict[type, M] = {
    ast.Pow: M("expr.operator_not_allowed", operator="**"),
    ast.LShift: M("expr.operator_not_allowed", operator="<<"),
    ast.RShift: M("expr.operator_not_allowed", operator=">>"),
    ast.BitOr: M("expr.bitor"),
    ast.BitAnd: M("expr.bitand"),
    ast.BitXor: M("expr.operator_not_allowed", operator="^"),
    ast.MatMult: M("expr.operator_not_allowed", operator="@"),
    ast.Invert: M("expr.operator_not_allowed", operator="~"),
}
_NODE_REASONS: dict[type, M] = {
    ast.Lambda: M("expr.lambda"),
    ast.NamedExpr: M("expr.walrus"),
    ast.Starred: M("expr.star_unpacking"),
    ast.Await: M("expr.await"),
    ast.Yield: M("expr.yield"),
    ast.YieldFrom: M("expr.yield"),
}
_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod)
_UNARYOPS = (ast.Not, ast.USub, ast.UAdd)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


class _Checker:
    """The allow-list: every node, name, attribute, call and literal is checked here."""

    def __init__(self, src: _Source) -> None:
        self.src = src

    def fail(self, node: ast.AST, reason: str | M) -> ExprError:
        return self.src.node_error(node, reason)

    def check(self, node: ast.AST, bound: frozenset[str], in_comp: bool) -> None:
        method = getattr(self, "check_" + type(node).__name__, None)
        if method is None:
            reason = _NODE_REASONS.get(type(node))
            if reason is None:
                reason = M("expr.node_not_allowed", kind=type(node).__name__)
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
                raise self.fail(node, M("expr.text_literal_too_long", limit=f"{MAX_STR_LITERAL_CHARS:,}"))
            return
        if isinstance(value, int):
            if abs(value) > MAX_INT:
                raise self.fail(node, M("expr.int_too_large"))
            return
        if isinstance(value, float):
            if not math.isfinite(value):
                raise self.fail(node, M("expr.number_too_large"))
            return
        if isinstance(value, bytes):
            raise self.fail(node, M("expr.bytes"))
        if isinstance(value, complex):
            raise self.fail(node, M("expr.complex"))
        raise self.fail(node, M("expr.literal_not_allowed", value=repr(value)))

    def check_JoinedStr(self, node: ast.JoinedStr, bound: frozenset[str], in_comp: bool) -> None:
        self.check_all(node.values, bound, in_comp)

    def check_FormattedValue(self, node: ast.FormattedValue, bound: frozenset[str], in_comp: bool) -> None:
        # A format spec can ask for any width ("{x:>999999999}"): refuse specs altogether.
        if node.format_spec is not None:
            raise self.fail(node, M("expr.format_spec"))
        self.check(node.value, bound, in_comp)

    def check_List(self, node: ast.List, bound: frozenset[str], in_comp: bool) -> None:
        self.check_all(node.elts, bound, in_comp)

    check_Tuple = check_List
    check_Set = check_List

    def check_Dict(self, node: ast.Dict, bound: frozenset[str], in_comp: bool) -> None:
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:
                raise self.fail(value, M("expr.dict_unpacking"))
            self.check(key, bound, in_comp)
            self.check(value, bound, in_comp)

    # operators
    def check_BoolOp(self, node: ast.BoolOp, bound: frozenset[str], in_comp: bool) -> None:
        self.check_all(node.values, bound, in_comp)

    def check_BinOp(self, node: ast.BinOp, bound: frozenset[str], in_comp: bool) -> None:
        if not isinstance(node.op, _BINOPS):
            raise self.fail(node, _OPERATOR_REASONS.get(type(node.op), M("expr.any_operator")))
        self.check(node.left, bound, in_comp)
        self.check(node.right, bound, in_comp)

    def check_UnaryOp(self, node: ast.UnaryOp, bound: frozenset[str], in_comp: bool) -> None:
        if not isinstance(node.op, _UNARYOPS):
            raise self.fail(node, _OPERATOR_REASONS.get(type(node.op), M("expr.any_operator")))
        self.check(node.operand, bound, in_comp)

    def check_Compare(self, node: ast.Compare, bound: frozenset[str], in_comp: bool) -> None:
        operands = [node.left, *node.comparators]
        for i, op in enumerate(node.ops):
            if isinstance(op, (ast.Is, ast.IsNot)):
                for side in operands[i : i + 2]:
                    if isinstance(side, ast.Constant) and not any(
                        side.value is v for v in (None, True, False)
                    ):
                        raise self.fail(side, M("expr.is_value"))
        self.check(node.left, bound, in_comp)
        self.check_all(node.comparators, bound, in_comp)

    def check_IfExp(self, node: ast.IfExp, bound: frozenset[str], in_comp: bool) -> None:
        self.check_all((node.test, node.body, node.orelse), bound, in_comp)

    # names, attributes, subscripts
    def check_Name(self, node: ast.Name, bound: frozenset[str], in_comp: bool) -> None:
        name = node.id
        if name.startswith("_"):
            raise self.fail(node, M("expr.underscore_name", name=repr(name)))
        if name in bound:
            return
        if name == "data_get":
            raise self.fail(node, M("expr.data_get_value"))
        if name in _CALLABLE:  # a function as a value would print as "<function ... at 0x...>"
            raise self.fail(node, M("expr.helper_as_value", name=name))
        if name in _RESERVED:
            return
        close = close_matches(name, [*CTX_NAMES, *_CALLABLE, *bound])
        if close:
            raise self.fail(node, M("expr.name_not_allowed_close", name=repr(name), close=quoted_list(close)))
        raise self.fail(node, M("expr.name_not_allowed", name=repr(name)))

    def check_Attribute(self, node: ast.Attribute, bound: frozenset[str], in_comp: bool) -> None:
        self._check_attr_name(node)
        # Calls reach methods through check_Call; here a method would be a value, e.g. a sort key
        # (sorted(words, key=query.count) makes a helper call a method once per item: quadratic).
        if node.attr in _GUARDED_METHODS or (node.attr in METHOD_NAMES and node.attr not in CTX_ATTRS):
            raise self.src.attr_error(node, M("expr.method_as_value", method=node.attr))
        self.check(node.value, bound, in_comp)

    def _check_attr_name(self, node: ast.Attribute) -> None:
        attr = node.attr
        if attr.startswith("_"):
            raise self.src.attr_error(node, M("expr.underscore_attribute", name=repr(attr)))
        if attr in ("format", "format_map"):
            raise self.src.attr_error(node, M("expr.format_method", method=attr))
        if attr in CTX_ATTRS or attr in METHOD_NAMES:
            return
        if attr in ("name", "description", "input_schema"):
            raise self.src.attr_error(node, M("expr.tool_attribute", name=repr(attr), attr=attr))
        close = close_matches(attr, [*CTX_ATTRS, *METHOD_NAMES])
        if close:
            raise self.src.attr_error(
                node, M("expr.attribute_not_allowed_close", name=repr(attr), close=quoted_list(close))
            )
        raise self.src.attr_error(node, M("expr.attribute_not_allowed", name=repr(attr)))

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
                raise self.fail(func, M("expr.not_callable", name=func.id))
            if func.id not in _CALLABLE:
                raise self.fail(func, M("expr.not_callable", name=func.id))
            if func.id in REGEX_CALLS and node.args:
                pattern = node.args[0]
                if isinstance(pattern, ast.Constant) and isinstance(pattern.value, str):
                    try:  # a literal pattern is checked when the rule is saved, not at the first request
                        check_regex(pattern.value)
                    except ExprError as exc:
                        raise self.fail(pattern, exc.reason) from None
        elif isinstance(func, ast.Attribute):
            self._check_attr_name(func)
            self.check(func.value, bound, in_comp)
        else:
            raise self.fail(node, M("expr.call_not_allowed"))
        for arg in node.args:
            self.check(arg, bound, in_comp)
        for kw in node.keywords:
            if kw.arg is None:
                raise self.fail(kw.value, M("expr.dict_unpacking"))
            if kw.arg.startswith("_"):
                raise self.fail(kw.value, M("expr.keyword_not_allowed", name=repr(kw.arg)))
            key = kw.value
            if kw.arg == "key" and isinstance(key, ast.Name) and key.id in _CALLABLE and key.id not in bound:
                if key.id not in SORT_KEYS:
                    raise self.fail(key, M("expr.sort_key", keys=", ".join(SORT_KEYS)))
                continue  # sorted(words, key=len): the one place a function is named, not called
            self.check(kw.value, bound, in_comp)

    # comprehensions
    def _check_comprehension(
        self, node: ast.AST, generators: list[ast.comprehension], parts: list[ast.AST], in_comp: bool
    ) -> None:
        if in_comp:
            raise self.fail(node, M("expr.nested_comprehension"))
        if len(generators) != 1:
            raise self.fail(node, M("expr.comprehension_one_for"))
        gen = generators[0]
        if gen.is_async:
            raise self.fail(node, M("expr.async_comprehension"))
        # The iterable is evaluated outside the loop: no loop variables are visible there.
        self.check(gen.iter, frozenset(), in_comp=True)
        if not _is_request_data(gen.iter):
            raise self.fail(gen.iter, M("expr.comprehension_source"))
        names = frozenset(self._targets(gen.target))
        self.check_all(gen.ifs, names, in_comp=True)
        self.check_all(parts, names, in_comp=True)

    def _targets(self, target: ast.AST) -> list[str]:
        if isinstance(target, ast.Name):
            if target.id.startswith("_"):
                raise self.fail(target, M("expr.underscore_name", name=repr(target.id)))
            if target.id in _RESERVED:
                raise self.fail(target, M("expr.loop_variable_reserved", name=repr(target.id)))
            return [target.id]
        if isinstance(target, ast.Tuple):
            names: list[str] = []
            for elt in target.elts:
                if not isinstance(elt, ast.Name):
                    raise self.fail(elt, M("expr.loop_variable"))
                names.extend(self._targets(elt))
            return names
        raise self.fail(target, M("expr.loop_variable"))

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
