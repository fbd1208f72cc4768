"""The index hints of a `when` expression: which atoms (query literals, field values, numbers,
prefixes, regexes) it requires, for the pre-step's request index."""

from __future__ import annotations

import ast
from typing import Any

from llamon_agent.expr.checker import _parse
from llamon_agent.expr.limits import REGEX_CALLS


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


def _contains(node: ast.AST) -> tuple[str, bool, list[str]] | None:
    """(name, lowered, words) of ``contains_any``/``contains_all`` of the query and literal words."""
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("contains_any", "contains_all")
        and not node.keywords
        and len(node.args) == 2
        and isinstance(node.args[1], (ast.List, ast.Tuple, ast.Set))
    ):
        return None
    lowered = _query_ref(node.args[0])
    words = [e.value for e in node.args[1].elts if isinstance(e, ast.Constant) and type(e.value) is str]
    if lowered is None or len(words) != len(node.args[1].elts):
        return None
    return node.func.id, lowered, words


def is_ctx_name(node: ast.AST, name: str) -> bool:
    """``name`` or ``ctx.<name>`` (``query``, ``context``, ``tool_names``...: the names cannot be rebound)."""
    if isinstance(node, ast.Name):
        return node.id == name
    return (
        isinstance(node, ast.Attribute)
        and node.attr == name
        and isinstance(node.value, ast.Name)
        and node.value.id == "ctx"
    )


def _is_safe_get(node: ast.AST) -> bool:
    """``context.get("k")``, ``ctx.context.get("k", <constant>)`` or ``data_get("k", ...)``: never raise."""
    if not isinstance(node, ast.Call) or node.keywords or not 1 <= len(node.args) <= 2:
        return False
    if not all(isinstance(a, ast.Constant) for a in node.args) or type(node.args[0].value) is not str:  # type: ignore[attr-defined]  # all Constant, checked just before
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
            if _is_safe_get(left) and _literal_values(right) is not None:
                return True  # `in` a list compares with ==, which never raises on JSON values
            return (
                isinstance(left, ast.Constant)
                and type(left.value) is str
                and (_query_ref(right) is not None or is_ctx_name(right, "tool_names"))
            )
        if isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)):
            # == between JSON values and a literal never raises
            sides = (left, right)
            plain = [
                s
                for s in sides
                if isinstance(s, ast.Constant)
                or _is_safe_get(s)
                or _query_ref(s) is not None
                or _num_source(s) == ("len", "", None)
            ]
            return len(plain) == 2 and any(isinstance(s, ast.Constant) for s in sides)
        return False
    return _prefix_atoms(node) is not None or _contains(node) is not None


# --------------------------------------------------------------------------- the request index
#
# For the pre-step's request index (required_keywords is its query-literal part): each option is a set
# of atoms one of which must hold for `when` to be truthy, and when none holds `when` is falsy
# without raising. The pre-step picks, per rule, the option whose atoms are rarest across the
# rule set (an `and` of a common and a rare word is indexed on the rare one). Atoms:
#
#   ("kw", literal, lowered)              literal in query (lowered: in query.lower())
#   ("re", pattern)                       RE2 pattern matches somewhere in the raw query
#   ("eq", source, key, default, value)   source.get(key, default) == value, source is
#                                         "context" (ctx.context) or "data" (data_get); a
#                                         membership `... in [a, b]` is one atom per value
#   ("pre", lowered, text)                query (query.lower()) starts with text
#   ("num", source, key, default, lo, lo_incl, hi, hi_incl)
#                                         the number read is in the interval; source "len"
#                                         is len(query), source "expr" an arithmetic term
#                                         (key, below) computed once per request for every
#                                         rule that compares it; a non-number makes the
#                                         rule a candidate (its comparison raises)
#
# A term is +, -, *, / and unary - over numbers read by never-raising getters, len(query) and
# number literals: ("get", source, key, default) (source "len": len(query)), ("const", n),
# (op, left, right),
# ("neg", operand). Two terms compared (`data_get("a", 0) * 12 > data_get("b", 1) * 3`) are
# the term ("cmp", op, left, right), true in (0, inf).
Atom = tuple[Any, ...]
Option = frozenset[Atom]

_EQ_TYPES = (str, int, float, bool, type(None))


def _get_source(node: ast.AST) -> tuple[str, str, object] | None:
    """(source, key, default) of a never-raising ``.get``/``data_get`` with constant arguments."""
    if not _is_safe_get(node):
        return None
    assert isinstance(node, ast.Call)
    key = node.args[0].value  # type: ignore[attr-defined]
    default = node.args[1].value if len(node.args) == 2 else None  # type: ignore[attr-defined]
    if type(default) not in _EQ_TYPES:
        return None
    source = "data" if isinstance(node.func, ast.Name) else "context"
    return source, key, default


def _eq_atom(node: ast.Compare) -> Atom | None:
    if len(node.ops) != 1 or not isinstance(node.ops[0], ast.Eq):
        return None
    left, right = node.left, node.comparators[0]
    if isinstance(left, ast.Constant):
        left, right = right, left
    if not isinstance(right, ast.Constant) or type(right.value) not in _EQ_TYPES:
        return None
    if type(right.value) is float and right.value != right.value:  # NaN equals nothing
        return None
    got = _get_source(left)
    if got is None:
        return None
    return ("eq", *got, right.value)


def _regex_atom(node: ast.Call) -> Atom | None:
    """``re_search("p", query)`` or ``re_find("p", query[, group])``: the pattern must match."""
    if node.keywords or not isinstance(node.func, ast.Name) or node.func.id not in REGEX_CALLS:
        return None
    max_args = 2 if node.func.id == "re_search" else 3
    if not 2 <= len(node.args) <= max_args:
        return None
    pattern, text = node.args[0], node.args[1]
    if not isinstance(pattern, ast.Constant) or type(pattern.value) is not str:
        return None
    if _query_ref(text) is not False:  # the raw query only (query.lower() would build a copy)
        return None
    from llamon_agent.expr.errors import ExprError
    from llamon_agent.expr.helpers import check_regex

    try:
        check_regex(pattern.value)  # an invalid pattern raises at run time: never skip the rule
    except ExprError:
        return None
    return ("re", pattern.value)


def _is_search(node: ast.AST) -> bool:
    """Whether a call that gave an atom is a regex without a group (``re_search("p", query)``,
    ``re_find("p", query)``): it raises only when its cost is over the budget or the query
    cannot be UTF-8, which the request index tells from the query alone, so what follows it in
    an `and` can be required."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in REGEX_CALLS
        and len(node.args) == 2
    )


def _literal_values(node: ast.AST) -> list[Any] | None:
    """The values of a list, tuple or set display of JSON scalars (NaN excluded), else None."""
    if not isinstance(node, (ast.List, ast.Tuple, ast.Set)) or not node.elts:
        return None
    values = []
    for elt in node.elts:
        if not isinstance(elt, ast.Constant) or type(elt.value) not in _EQ_TYPES:
            return None
        if type(elt.value) is float and elt.value != elt.value:
            return None
        values.append(elt.value)
    return values


def _member_atoms(node: ast.Compare) -> Option | None:
    """``data_get("k") in ["a", "b"]``: one equality atom per value (any one may hold)."""
    if len(node.ops) != 1 or not isinstance(node.ops[0], ast.In):
        return None
    got = _get_source(node.left)
    values = _literal_values(node.comparators[0])
    if got is None or values is None:
        return None
    return frozenset(("eq", *got, value) for value in values)


def _prefix_atoms(node: ast.AST) -> Option | None:
    """``query.startswith("a")``, ``query.lower().startswith(("a", "b"))``: ("pre", lowered, text)."""
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "startswith"
        and len(node.args) == 1
        and not node.keywords
    ):
        return None
    lowered = _query_ref(node.func.value)
    arg = node.args[0]
    texts = [arg] if isinstance(arg, ast.Constant) else arg.elts if isinstance(arg, ast.Tuple) else []
    if lowered is None or not texts:
        return None
    if not all(isinstance(t, ast.Constant) and type(t.value) is str and t.value for t in texts):
        return None  # "" is a prefix of every text: no requirement
    return frozenset(("pre", lowered, t.value) for t in texts)  # type: ignore[attr-defined]


_INF = float("inf")
_LOWER = {ast.Gt: False, ast.GtE: True}  # getter > c: c is a lower bound (inclusive for >=)
_UPPER = {ast.Lt: False, ast.LtE: True}


def _number(node: ast.AST) -> float | int | None:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        negated = _number(node.operand)
        return None if negated is None else -negated
    if isinstance(node, ast.Constant):
        value = node.value
        if (type(value) is int or type(value) is float) and abs(value) < _INF:
            return value
    return None


_ARITHMETIC = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_COMPARE = {ast.Gt: ">", ast.GtE: ">=", ast.Lt: "<", ast.LtE: "<="}


def _term(node: ast.AST) -> tuple[Any, ...] | None:
    """The arithmetic term ``node`` computes (see above), or None."""
    number = _number(node)
    if number is not None:
        return ("const", number)
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        left, right = _term(node.left), _term(node.right)
        if left is None or right is None:
            return None
        return (_ARITHMETIC[type(node.op)], left, right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        operand = _term(node.operand)
        return None if operand is None else ("neg", operand)
    if isinstance(node, (ast.BinOp, ast.UnaryOp)):
        return None  # //, %, **, ~, not, +x: outside the terms
    got = _num_source(node)
    if got is None:
        return None
    return ("get", *got)


def _reads(term: tuple[Any, ...]) -> bool:
    """Whether ``term`` reads the request (a constant-only term is the rule's own business)."""
    kind = term[0]
    if kind == "get":
        return True
    if kind == "const":
        return False
    return any(_reads(t) for t in term[1:] if type(t) is tuple)


def _num_source(node: ast.AST) -> tuple[str, Any, object] | None:
    """(source, key, default) of a number a comparison reads: a never-raising getter, or
    ``len(query)`` (source "len")."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "len"
        and len(node.args) == 1
        and not node.keywords
        and _query_ref(node.args[0]) is False
    ):
        return ("len", "", None)
    if isinstance(node, (ast.BinOp, ast.UnaryOp)):
        term = _term(node)
        return ("expr", term, None) if term is not None and _reads(term) else None
    return _get_source(node)


def _num_atom(node: ast.AST) -> Atom | None:
    """``data_get("a", 0) > 10``, ``len(query) <= 5``, ``1 < context.get("n", 0) <= 9``: the
    interval the value must be in, ("num", source, key, default, lo, lo_incl, hi, hi_incl).
    The comparison raises when the value is not a number: the index then evaluates the rule."""
    if not isinstance(node, ast.Compare) or not 1 <= len(node.ops) <= 2:
        return None
    if any(type(op) not in _COMPARE for op in node.ops):
        return None
    operands = [node.left, *node.comparators]
    sources = [s for s in operands if _number(s) is None]
    if len(sources) == 2 and len(node.ops) == 1:
        first, second = _term(node.left), _term(node.comparators[0])  # two terms: one boolean term
        if first is None or second is None or not (_reads(first) or _reads(second)):
            return None
        return (
            "num",
            "expr",
            ("cmp", _COMPARE[type(node.ops[0])], first, second),
            None,
            0,
            False,
            _INF,
            False,
        )
    if len(sources) != 1:
        return None
    getter = sources[0]
    got = _num_source(getter)
    if got is None:
        return None
    lo: float | int = -_INF
    hi: float | int = _INF
    lo_incl = hi_incl = False
    for k, op in enumerate(node.ops):
        left, right = operands[k], operands[k + 1]
        kind = type(op)
        if left is getter:  # getter op c
            c, lower = _number(right), kind in _LOWER
        else:  # c op getter: c < g means g > c
            c, lower = _number(left), kind in _UPPER
        incl = kind in (ast.GtE, ast.LtE)
        if c is None or (left is not getter and right is not getter):
            return None
        if lower and (c > lo or (c == lo and not incl)):
            lo, lo_incl = c, incl
        elif not lower and (c < hi or (c == hi and not incl)):
            hi, hi_incl = c, incl
    return ("num", *got, lo, lo_incl, hi, hi_incl)


def _merge(first: Atom, second: Atom) -> Atom:
    """Two intervals on the same value as one (their intersection)."""
    lo, lo_incl, hi, hi_incl = first[4:]
    lo2, lo2_incl, hi2, hi2_incl = second[4:]
    if lo2 > lo or (lo2 == lo and not lo2_incl):
        lo, lo_incl = lo2, lo2_incl
    if hi2 < hi or (hi2 == hi and not hi2_incl):
        hi, hi_incl = hi2, hi2_incl
    return (*first[:4], lo, lo_incl, hi, hi_incl)


def _options(node: ast.AST) -> list[Option] | None:
    """The alternative requirements of ``node`` (any one may be used), None if unknown."""
    if isinstance(node, ast.Compare):
        member = _member_atoms(node)
        if member is not None:
            return [member]
        atom = _eq_atom(node) or _num_atom(node) or _keyword_atom(node)
        return None if atom is None else [frozenset({atom})]
    prefix = _prefix_atoms(node)
    if prefix is not None:
        return [prefix]
    regex = _regex_atom(node) if isinstance(node, ast.Call) else None
    if regex is not None:
        return [frozenset({regex})]
    contains = _contains(node)
    if contains is not None:
        name, lowered, words = contains
        if name == "contains_all":  # each word is required: each is an option
            return [frozenset({("kw", w, lowered)}) for w in dict.fromkeys(words) if w] or None
        if not words or "" in words:  # "" is in every text: no requirement
            return None
        return [frozenset(("kw", w, lowered) for w in words)]
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            known: list[Option] = []
            values = node.values
            i = 0
            while i < len(values):
                value = values[i]
                num = _num_atom(value)
                if num is not None:
                    # a range written as two tests of one value is one interval (they raise alike)
                    while i + 1 < len(values):
                        after = _num_atom(values[i + 1])
                        if after is None or after[1:4] != num[1:4]:
                            break
                        num = _merge(num, after)
                        i += 1
                    known.append(frozenset({num}))
                    if num[1] != "len":  # a non-number raises: what follows may not be reached
                        break
                    i += 1
                    continue
                part = _options(value)
                if part is not None:
                    known.extend(part)
                if not _is_safe(value) and not (part is not None and _is_search(value)):
                    break
                i += 1
            return known or None
        parts = [_options(v) for v in node.values]
        if any(p is None for p in parts):
            return None
        # `or`: one option, each side's smallest (the rarest pick happens per rule, not per side)
        return [frozenset().union(*(min(p, key=len) for p in parts))]  # type: ignore[arg-type]
    return None


def _keyword_atom(node: ast.Compare) -> Atom | None:
    """``"literal" in query`` (or ``query.lower()``): ("kw", literal, lowered)."""
    if len(node.ops) != 1 or not isinstance(node.ops[0], ast.In):
        return None
    left = node.left
    if not isinstance(left, ast.Constant) or type(left.value) is not str or not left.value:
        return None  # "" is in every text: no requirement
    lowered = _query_ref(node.comparators[0])
    return None if lowered is None else ("kw", left.value, lowered)


def _tree(source_or_tree: str | ast.AST) -> ast.AST:
    if isinstance(source_or_tree, str):
        return _parse(source_or_tree)[0].body
    if isinstance(source_or_tree, ast.Expression):
        return source_or_tree.body
    if isinstance(source_or_tree, ast.AST):
        return source_or_tree
    raise TypeError("a hint takes an expression's text or its syntax tree")


def index_options(source_or_tree: str | ast.AST) -> tuple[Option, ...] | None:
    """The request-index hint of a ``when``: alternative sets of atoms (see above), or None."""
    options = _options(_tree(source_or_tree))
    return tuple(dict.fromkeys(options)) if options else None


def keywords_of(options: tuple[Option, ...] | None) -> frozenset[tuple[str, bool]] | None:
    """The keyword hint in ``options``: the (literal, lowered) pairs of the smallest option made
    of query literals only (the longest literal first: likely the rarest); None if there is none."""
    words = [option for option in options or () if all(atom[0] == "kw" for atom in option)]
    if not words:
        return None
    best = min(words, key=lambda option: (len(option), -max(len(atom[1]) for atom in option)))
    return frozenset((atom[1], atom[2]) for atom in best)


def required_keywords(source_or_tree: str | ast.AST) -> frozenset[tuple[str, bool]] | None:
    """The keyword-index hint of a ``when``: (literal, lowered) pairs one of which it needs, or None."""
    return keywords_of(index_options(source_or_tree))
