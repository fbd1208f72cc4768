"""The static cost bound: what one evaluation of an expression can cost, at worst, on any request
within the request caps, computed from its checked syntax tree when it is compiled.

This is the estimator of CEL in Kubernetes, for our expression language. Each value an expression
can make gets an upper bound ``n`` on its size (its ``len()``, and what the meter's ``_weight``
counts for it) from the caps: the query has at most ``MAX_QUERY_CHARS`` characters, request data
(``context``, ``a2a_data``, ``a2a_files``, ``data_get``) at most ``MAX_DATA_BYTES`` (a unit of weight
needs at least one byte of JSON), a comprehension at most ``MAX_ITER_ITEMS`` items, a built text
at most ``MAX_RESULT_CHARS``. Each operation is then charged what the run-time meter would charge
it on values of those sizes (budget.py's table), so the bound is at least what any evaluation
spends: a rule whose bound is within the per-rule limit cannot fail on cost, and the meter stays
only as a backstop and where no bound exists.

No bound exists (``None``) for a regular expression made at run time (its program is not known
when the rule is saved) and for work whose cost grows with the size of a tool's listing
(``ctx.mcp_tools``, ``tool_names``): the server's tools are not capped. Those rules are metered at
run time and count as the whole per-rule limit in a rule set's total.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from llamon_agent.expr.budget import (
    _AFFIX_METHODS,
    _CASE_METHODS,
    _FREE_METHODS,
    _SPLIT_METHODS,
    BUILT_CHARS_PER_UNIT,
    PIECE_UNITS,
    READ_CHARS_PER_UNIT,
    REGEX_CHARS_PER_UNIT,
    REGEX_COMPILE_UNITS,
)
from llamon_agent.expr.guard import _affix, _literal_tests, _static_pair
from llamon_agent.expr.helpers import MAX_NUMBER_TEXT_CHARS, MAX_REGEX_SIZE, _regex, regex_size
from llamon_agent.expr.hints import _query_ref, is_ctx_name
from llamon_agent.expr.limits import (
    _STR_METHODS,
    MAX_DATA_BYTES,
    MAX_FILES_BYTES,
    MAX_ITER_ITEMS,
    MAX_PARTS,
    MAX_QUERY_CHARS,
    MAX_RESULT_CHARS,
    MAX_RESULT_ITEMS,
    REGEX_CALLS,
)

Q = MAX_QUERY_CHARS
D = MAX_DATA_BYTES
F = MAX_FILES_BYTES  # a2a_files, counted apart (limits.py)
QUERY_READ = 1 + Q // READ_CHARS_PER_UNIT  # one plain `"w" in query` at the cap
_DATA_NAMES = ("context", "a2a_data", "a2a_files")
_TOOL_NAMES = ("tool_names", "mcp_tools")
_NUMBER_CALLS = frozenset({"len", "bool", "abs", "round"})
# Methods only a text has (a list has count and index too)
_TEXT_ONLY = frozenset(_STR_METHODS.split()) - {"count", "index"}
_ADD_MOST = max(MAX_RESULT_ITEMS, MAX_RESULT_CHARS // BUILT_CHARS_PER_UNIT)


class _NoBound(Exception):
    """Raised inside the walk where no static bound exists."""


@dataclass(frozen=True, slots=True)
class Bound:
    """``units``: at most what one evaluation costs on a request within the caps (None: no static
    bound, metered at run time); ``part``: the costliest operation (its node, outside any
    comprehension body: a comprehension counts with its whole loop) and ``part_units``, its cost."""

    units: int | None
    part: ast.AST | None
    part_units: int


class _Estimator:
    def __init__(self, exact: bool) -> None:
        self.exact = exact  # price literal patterns by their built program, not its estimate
        self.parts: list[tuple[int, ast.AST]] = []
        self.elements: dict[int, int | None] = {}  # id(node) -> a bound on one item of its value
        self.lengths: dict[int, int] = {}  # id(node) -> a bound on its len() below its size
        self.depth = 0  # inside a comprehension body: charges go to the comprehension

    def charge(self, units: int, node: ast.AST) -> int:
        if self.depth == 0 and units:
            self.parts.append((units, node))
        return units

    # Each visit returns (cost, size bound of the value); size None: unbounded (tools).
    def est(self, node: ast.AST, env: dict[str, int | None]) -> tuple[int, int | None]:
        method = getattr(self, f"v_{type(node).__name__}", None)
        if method is None:
            raise _NoBound(node)
        return method(node, env)  # type: ignore[no-any-return]

    def v_Constant(self, node: ast.Constant, env: dict[str, int | None]) -> tuple[int, int | None]:
        value = node.value
        return 0, (1 + len(value)) if type(value) is str else 1

    def v_Name(self, node: ast.Name, env: dict[str, int | None]) -> tuple[int, int | None]:
        if node.id in env:
            return 0, env[node.id]
        if node.id == "query":
            self.elements[id(node)] = 1  # a character
            return 0, Q
        if node.id in ("a2a_data", "a2a_files"):
            self.lengths[id(node)] = MAX_PARTS  # plain_request refuses more parts
            return 0, D if node.id == "a2a_data" else F
        if node.id in _DATA_NAMES:
            return 0, D
        if node.id in _TOOL_NAMES:
            return 0, None
        if node.id == "ctx":
            return 0, 4 * Q + D + F + 12  # its text quotes the query
        return 0, 1  # a helper or builtin named as a sort key

    def v_Attribute(self, node: ast.Attribute, env: dict[str, int | None]) -> tuple[int, int | None]:
        if isinstance(node.value, ast.Name) and node.value.id == "ctx" and "ctx" not in env:
            name = ast.Name(id=node.attr)
            found = self.v_Name(name, env)
            for facts in (self.elements, self.lengths):
                if id(name) in facts:
                    facts[id(node)] = facts.pop(id(name))  # type: ignore[assignment]
            return found
        cost, size = self.est(node.value, env)
        return cost, size

    def _all(self, nodes: list[ast.expr], env: dict[str, int | None]) -> tuple[int, list[int | None]]:
        cost, sizes = 0, []
        for part in nodes:
            c, s = self.est(part, env)
            cost += c
            sizes.append(s)
        return cost, sizes

    def _container(
        self, node: ast.List | ast.Tuple | ast.Set, env: dict[str, int | None]
    ) -> tuple[int, int | None]:
        cost, sizes = self._all(node.elts, env)
        return cost, _sum(1, *(_add1(s) for s in sizes))

    v_List = v_Tuple = v_Set = _container

    def v_Dict(self, node: ast.Dict, env: dict[str, int | None]) -> tuple[int, int | None]:
        cost, sizes = self._all([k for k in node.keys if k is not None] + list(node.values), env)
        return cost, _sum(1, *(_add1(s) for s in sizes))

    def v_BoolOp(self, node: ast.BoolOp, env: dict[str, int | None]) -> tuple[int, int | None]:
        cost, sizes = self._all(node.values, env)
        lengths = [
            self.lengths.get(id(v), len(v.elts) if isinstance(v, ast.List) else None) for v in node.values
        ]
        if all(n is not None for n in lengths):  # `ctx.a2a_data or []`: at most the parts
            self.lengths[id(node)] = max(n for n in lengths if n is not None)
        return cost, _max(*sizes)

    def v_UnaryOp(self, node: ast.UnaryOp, env: dict[str, int | None]) -> tuple[int, int | None]:
        return self.est(node.operand, env)[0], 1

    def v_IfExp(self, node: ast.IfExp, env: dict[str, int | None]) -> tuple[int, int | None]:
        cost, sizes = self._all([node.test, node.body, node.orelse], env)
        return cost, _max(sizes[1], sizes[2])

    def v_BinOp(self, node: ast.BinOp, env: dict[str, int | None]) -> tuple[int, int | None]:
        cost, (left, right) = self._all([node.left, node.right], env)
        if not isinstance(node.op, ast.Add):
            return cost, 1  # numbers only: constant
        size = _need(_sum(left, right))
        # a text costs size // 8, a list its items; past the caps _add refuses it uncharged
        return cost + self.charge(1 + min(size, _ADD_MOST), node), size

    def v_Compare(self, node: ast.Compare, env: dict[str, int | None]) -> tuple[int, int | None]:
        operands = [node.left, *node.comparators]
        pairs = [_static_pair(operands[i], op, operands[i + 1]) for i, op in enumerate(node.ops)]
        if all(p is not None for p in pairs):
            reads = sum(p for p in pairs if p is not None)
            cost = 0
            for part in operands:  # `"w" in query` reads a table: its operands are not evaluated
                if _query_ref(part) is None:
                    cost += self.est(part, env)[0]
            return cost + self.charge(reads * QUERY_READ, node), 1
        cost, sizes = self._all(operands, env)
        units = 0
        for i, op in enumerate(node.ops):
            left, right = _need(sizes[i]), _need(sizes[i + 1])
            if isinstance(op, (ast.In, ast.NotIn)) and _is_text(operands[i + 1]):
                units += 1 + (left + right) // READ_CHARS_PER_UNIT  # a search of the text
            else:
                units += 2 + left + right  # each side walked at most once
        return cost + self.charge(units, node), 1

    def v_Subscript(self, node: ast.Subscript, env: dict[str, int | None]) -> tuple[int, int | None]:
        cost, size = self.est(node.value, env)
        where = node.slice
        if not isinstance(where, ast.Slice):
            return cost + self.est(where, env)[0], size
        bounds = [part for part in (where.lower, where.upper, where.step) if part is not None]
        cost += self._all(bounds, env)[0]
        size = _need(size)
        lower, upper = where.lower, where.upper
        if (
            _is_text(node.value)  # a list's first items may hold all of its weight
            and where.step is None
            and isinstance(upper, ast.Constant)
            and type(upper.value) is int
            and upper.value >= 0
            and (
                lower is None
                or (isinstance(lower, ast.Constant) and type(lower.value) is int and lower.value >= 0)
            )
        ):
            size = min(size, upper.value)
        return cost + self.charge(1 + size, node), size

    def v_JoinedStr(self, node: ast.JoinedStr, env: dict[str, int | None]) -> tuple[int, int | None]:
        cost, total = 0, 0
        for part in node.values:
            if isinstance(part, ast.FormattedValue):
                c, s = self.est(part.value, env)
                s = _need(s)
                text = _is_text(part.value)  # str() of a text is itself, repr() escapes it
                cost += c + self.charge(1 + 4 * s // BUILT_CHARS_PER_UNIT if text else _text_of(s), part)
                total += min(MAX_RESULT_CHARS, 4 * s + 12)
            else:
                total += self.est(part, env)[1] or 0
        total = min(total, MAX_RESULT_CHARS)
        return cost + self.charge(1 + len(node.values) + total // BUILT_CHARS_PER_UNIT, node), total

    def v_FormattedValue(
        self, node: ast.FormattedValue, env: dict[str, int | None]
    ) -> tuple[int, int | None]:
        return self.est(node.value, env)

    def v_ListComp(self, node: ast.AST, env: dict[str, int | None]) -> tuple[int, int | None]:
        """A comprehension: its iterable once, then its body per item, at most MAX_ITER_ITEMS.

        Items share their iterable's size: ``total`` bounds the sum of theirs, ``most`` one
        item's (a piece of ``query.split()`` has at most the query's characters, all pieces
        together too). The body's cost is made at three item sizes, ``c0`` (0), ``c_most`` and
        ``c_even`` (the total spread evenly), and the loop is bounded by the larger of the
        chord ``items * c0 + (c_most - c0) * (total / most)``, which bounds a cost convex in the
        item's size, and ``items * c_even``, which bounds one concave in it (a capped size)."""
        gen = node.generators[0]  # type: ignore[attr-defined]
        cost, total = self.est(gen.iter, env)
        most = self.elements.get(id(gen.iter), total)
        items = MAX_ITER_ITEMS if total is None else min(MAX_ITER_ITEMS, total)
        items = min(items, self.lengths.get(id(gen.iter), items))
        body = [getattr(node, f) for f in ("elt", "key", "value") if hasattr(node, f)]
        nodes = sum(1 for part in [*body, gen.target, *gen.ifs] for _ in ast.walk(part))

        def per_item(size: int | None) -> tuple[int, list[int | None]]:
            inner = dict(env)
            for target in ast.walk(gen.target):
                if isinstance(target, ast.Name):
                    inner[target.id] = size
            self.depth += 1
            try:
                return self._all([*gen.ifs, *body], inner)
            finally:
                self.depth -= 1

        def made(sizes: list[int | None]) -> int | None:
            return _sum(*(_add1(s) for s in sizes[len(gen.ifs) :]))

        c_most, sizes = per_item(most)
        m_most = made(sizes)
        if most is None or total is None or m_most is None:
            loop = items * (nodes + 1 + c_most)
            result = None if m_most is None else 1 + items * (1 + m_most)
        else:
            c0, sizes0 = per_item(0)
            c_even, sizes_even = per_item(min(most, -(-total // max(items, 1))))
            full = min(items, -(-total // max(most, 1)))
            loop = items * (nodes + 1) + max(items * c0 + (c_most - c0) * full, items * c_even)
            m0, m_even = _need(made(sizes0)), _need(made(sizes_even))
            result = 1 + items + max(items * m0 + (m_most - m0) * full, items * m_even)
        cost += self.charge(loop, node)
        self.elements[id(node)] = m_most
        self.lengths[id(node)] = items
        return cost, result

    v_SetComp = v_GeneratorExp = v_DictComp = v_ListComp

    def v_Call(self, node: ast.Call, env: dict[str, int | None]) -> tuple[int, int | None]:
        tests = _literal_tests(node)
        if tests is not None:
            return self.est(tests, env)
        if _query_ref(node) is True:  # query.lower(): made once per request
            return self.charge(1 + Q // BUILT_CHARS_PER_UNIT, node), 3 * Q
        func = node.func
        cost, sizes = self._all([*node.args, *(k.value for k in node.keywords)], env)
        if isinstance(func, ast.Name):
            return self._function(node, func.id, cost, sizes)
        if isinstance(func, ast.Attribute):
            own, value = self.est(func.value, env)
            return self._method(node, func.attr, cost + own, value, sizes)
        raise _NoBound(node)

    def _function(
        self, node: ast.Call, name: str, cost: int, sizes: list[int | None]
    ) -> tuple[int, int | None]:
        if name in _NUMBER_CALLS:
            return cost, 1
        if name == "data_get":
            if not node.keywords and 1 <= len(node.args) <= 2 and isinstance(node.args[0], ast.Constant):
                return cost, _max(D, *sizes[1:])  # one lookup, made once per request
            return cost + self.charge(1 + D // 2, node), _max(D, *sizes[1:])  # 1 a DataPart
        if name in REGEX_CALLS:
            pattern = node.args[0] if node.args else None
            if not isinstance(pattern, ast.Constant) or type(pattern.value) is not str:
                raise _NoBound(node)  # its program is not known before it runs
            program = regex_size(pattern.value)
            if self.exact and program <= MAX_REGEX_SIZE:
                program = min(program, _regex(pattern.value).programsize)  # what the meter charges
            text = _need(_max(*sizes[1:2])) if len(sizes) > 1 else 0
            units = (
                1
                + len(pattern.value)
                + program * REGEX_COMPILE_UNITS
                + text * program // REGEX_CHARS_PER_UNIT
            )
            return cost + self.charge(units + 1, node), text
        if name == "to_number":  # reads at most 4 x MAX_NUMBER_TEXT_CHARS of a text (budget._m_to_number)
            return cost + self.charge(1 + 4 * MAX_NUMBER_TEXT_CHARS // READ_CHARS_PER_UNIT, node), 1
        if name in ("contains_any", "contains_all"):
            text, words = (_need(s) for s in (*sizes, 1, 1)[:2])
            return cost + self.charge(1 + words * (1 + text // READ_CHARS_PER_UNIT), node), 1
        size = _need(_sum(*sizes)) if sizes else 1
        if name == "str":
            return cost + self.charge(_text_of(size), node), min(MAX_RESULT_CHARS, 4 * size + 12)
        if name in ("int", "float"):
            return cost + self.charge(1 + size + len(sizes), node), 1
        if name == "sorted":
            first = _need(sizes[0])
            units = (1 + first) * max(1, (1 + first).bit_length()) + 2 * (1 + first)
            self.elements[id(node)] = self.elements.get(id(node.args[0]), first)
            return cost + self.charge(units, node), 2 * first + 1
        if name in ("min", "max"):  # the items weighed once, and again by a key
            keyed = 3 if node.keywords else 1
            return cost + self.charge(keyed * (1 + size + len(sizes)), node), size
        if name in ("any", "all", "sum"):
            given = node.args[0] if node.args else None
            if isinstance(given, ast.GeneratorExp):
                return cost, 1  # its items were charged as they were made
            length = self.lengths.get(id(given), size)
            return cost + self.charge(1 + (4 if name == "sum" else 1) * length, node), 1
        raise _NoBound(node)

    def _method(
        self, node: ast.Call, name: str, cost: int, value: int | None, sizes: list[int | None]
    ) -> tuple[int, int | None]:
        if name in _FREE_METHODS:
            return cost, _max(value, *sizes)
        if name in _AFFIX_METHODS and not node.keywords and _affix(node.args):
            return cost, 1
        value_n = _need(value)
        args = sum(1 + _need(s) for s in sizes)
        # what reading the value costs the meter (_weight): a method only a text has can run
        # on a text only (else getattr fails before any charge), and a text weighs len // 16
        read = 1 + value_n // READ_CHARS_PER_UNIT if name in _TEXT_ONLY else 1 + value_n
        if name == "join":  # items given, then the text built (capped)
            given = self.lengths.get(id(node.args[0]), sizes[0]) if node.args else 0
            units = 2 + _need(given) + MAX_RESULT_CHARS // BUILT_CHARS_PER_UNIT
            return cost + self.charge(units, node), MAX_RESULT_CHARS
        if name == "replace":
            units = 2 + value_n // READ_CHARS_PER_UNIT + MAX_RESULT_CHARS // BUILT_CHARS_PER_UNIT
            return cost + self.charge(units, node), MAX_RESULT_CHARS
        if name in _AFFIX_METHODS:
            return cost + self.charge(read + args, node), 1
        units = read + args  # the value and the arguments read (set methods: each item)
        if name in _SPLIT_METHODS:
            # str.lower() makes no whitespace and keeps each one: the query's own pieces
            lowered = (
                name in ("split", "rsplit")
                and not node.args
                and not node.keywords
                and isinstance(node.func, ast.Attribute)
                and _query_ref(node.func.value) is True
            )
            pieces = _pieces(node, name, Q if lowered else value_n)
            units += 1 + value_n // BUILT_CHARS_PER_UNIT + PIECE_UNITS * pieces
            if name == "splitlines":
                units += 10 * (1 + value_n // READ_CHARS_PER_UNIT)
            self.elements[id(node)] = value_n
            self.lengths[id(node)] = pieces
            return cost + self.charge(units, node), 1 + 2 * pieces + value_n
        if name in _CASE_METHODS:
            units += value_n
            grown = (2 if name == "lower" else 3) * value_n  # a character may become two (three)
            return cost + self.charge(units + 1 + grown // BUILT_CHARS_PER_UNIT, node), grown
        result = value_n + args  # set methods: at most the items of both; text methods: the text
        return cost + self.charge(units + 1 + 2 * result, node), result


def _is_text(node: ast.AST) -> bool:
    """The query, its lowered copy or a text literal: a slice of it has at most its length."""
    return _query_ref(node) is not None or (isinstance(node, ast.Constant) and type(node.value) is str)


def _pieces(node: ast.Call, name: str, size: int) -> int:
    """The most pieces a split can make (budget._split_bound, on a text of ``size`` characters)."""
    if name in ("partition", "rpartition"):
        return 3
    if name == "splitlines":
        return size + 1
    args = node.args
    sep = args[0] if args else next((k.value for k in node.keywords if k.arg == "sep"), None)
    maxsplit = (
        args[1] if len(args) > 1 else next((k.value for k in node.keywords if k.arg == "maxsplit"), None)
    )
    bound = size + 1
    if sep is None or (isinstance(sep, ast.Constant) and sep.value is None):
        bound = (size + 1) // 2 + 1
    elif isinstance(sep, ast.Constant) and type(sep.value) is str and sep.value:
        bound = size // len(sep.value) + 1
    if isinstance(maxsplit, ast.Constant) and type(maxsplit.value) is int and maxsplit.value >= 0:
        bound = min(bound, maxsplit.value + 1)
    return bound


def _text_of(size: int) -> int:
    """str() / repr() / ascii() of a value of ``size``: the walk, which stops past MAX_RESULT_CHARS
    (each value visited takes at least 2 of it), and the text (helpers._check_text_size)."""
    # Each item a value holds adds at least 2 to its size (1 + its own), so a walk visits at most
    # size // 2 + 1 of them; the text has at most 4 characters a unit of size.
    visited = min(size // 2 + 1, MAX_RESULT_CHARS // 2 + 2)
    text = min(MAX_RESULT_CHARS, 4 * size + 12)
    return 2 + 8 * visited + text // 4 + text // BUILT_CHARS_PER_UNIT


def _need(size: int | None) -> int:
    if size is None:
        raise _NoBound(None)
    return size


def _add1(size: int | None) -> int | None:
    return None if size is None else 1 + size


def _sum(*sizes: int | None) -> int | None:
    if any(s is None for s in sizes):
        return None
    return sum(s for s in sizes if s is not None)


def _max(*sizes: int | None) -> int | None:
    if any(s is None for s in sizes):
        return None
    return max((s for s in sizes if s is not None), default=1)


def estimate(body: ast.AST, kind: str, exact: bool = False) -> Bound:
    """The static bound of a checked ``when`` or ``params`` tree (before the guard rewrites it).

    A literal pattern is priced by the estimate of its program (nothing is built when a rule is
    saved); ``exact`` builds it and takes RE2's own size, which the meter charges (asked only for
    an expression the estimate puts over the limit)."""
    estimator = _Estimator(exact)
    nodes = sum(1 for _ in ast.walk(body))
    try:
        cost, size = estimator.est(body, {})
        if kind == "params":  # the copy of the dict it gives (compiled._params)
            cost += 1 + min(D, 8 * _need(size) + 64) // BUILT_CHARS_PER_UNIT
    except _NoBound as exc:
        where = exc.args[0] if exc.args else None
        return Bound(None, where if isinstance(where, ast.AST) else None, 0)
    part, part_units = None, 0
    if estimator.parts:
        part_units, part = max(estimator.parts, key=lambda item: item[0])
    return Bound(nodes + cost, part, part_units)


__all__ = ["Bound", "estimate", "QUERY_READ", "is_ctx_name"]
