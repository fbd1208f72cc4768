"""The run-time cost budget: what each operation costs and the meter that charges it."""

from __future__ import annotations

import ast
import types
from typing import Any

from llamon_agent.expr.errors import ExprError
from llamon_agent.expr.helpers import (
    _WORD_CONTAINERS,
    MAX_NUMBER_TEXT_CHARS,
    MAX_REGEX_SIZE,
    _add,
    _ascii,
    _check_text_size,
    _data_get,
    _fstr,
    _iter,
    _join,
    _mod,
    _mul,
    _regex,
    _replace,
    _round,
    _str,
    _sum,
    _word_error,
    contains_all,
    contains_any,
    re_find,
    re_search,
    regex_cached,
    regex_size,
    to_number,
)
from llamon_agent.expr.limits import MAX_INT, MAX_PATTERN_CHARS, MAX_RESULT_CHARS, MAX_RESULT_ITEMS, SORT_KEYS
from llamon_agent.expr.messages import Message as M

# Caps bound what one operation may build; they cannot bound how often an expression repeats
# work (a comprehension runs its body up to MAX_ITER_ITEMS times, a 4,000-character expression
# can call sorted(query) 196 times). So every evaluation also has a cost budget, as CEL has in
# Kubernetes: each operation is charged in proportion to its work before (or, for results
# bounded by a cap, right after) it runs, and an evaluation that spends more than its budget
# raises CostBudgetExceeded. Since the static bound (cost.py) refuses a rule that could, the meter
# is a backstop, and the bound of the rules that have no static one.
#
# A unit is about one step of the interpreter: one syntax-tree node evaluated, one item
# visited, built or compared, READ_CHARS_PER_UNIT characters read, BUILT_CHARS_PER_UNIT
# characters built. The default keeps one evaluation under ~200 ms and ~64 MB at worst.
DEFAULT_EXPR_BUDGET = 4_000_000  # units an evaluation of a rule may spend: its run-time meter's budget
# A rule is authored only when its static bound is within half of that (rule_limit): the meter,
# a backstop, keeps a 2x margin no such rule can reach. Figures: docs/performance.md, "Cost bound".
DEFAULT_RULE_LIMIT = DEFAULT_EXPR_BUDGET // 2


def rule_limit(expr_budget: int) -> int:
    """The per-rule static limit under a meter of ``expr_budget`` units."""
    return expr_budget // 2


DEFAULT_REQUEST_BUDGET = 1_000_000_000  # units a rule set's static bounds may add up to (at publish)
READ_CHARS_PER_UNIT = 16  # scanning text (in, find, count, ==, startswith ...)
BUILT_CHARS_PER_UNIT = 8  # building text (+, join, slices, lower, str(), f-strings ...)
REGEX_CHARS_PER_UNIT = 16  # a regex search: len(text) x program size / 16
REGEX_COMPILE_UNITS = 8  # per instruction (regex_size) of a pattern not compiled yet, before it is
# Instructions of new patterns a page of many dry runs (the rule-health page) may build together.
REGEX_COMPILE_ALLOWANCE = 312_500


class CostBudgetExceeded(ExprError):
    """An evaluation (or a request's evaluations together) did more work than its cost budget."""


_settings: Any = None  # llamon_agent.settings, imported by the first meter that needs the defaults


class CostMeter:
    """The run-time meter of one request: ``expr_budget`` units per evaluation of a rule.

    :func:`build_namespace` puts one in the namespace (``meter=`` shares one between the
    namespaces of one request, as the pre-step does). Each evaluation starts with ``left =
    expr_budget`` less the rule's static charge, and the rewritten operations charge ``left``.
    A rule whose static bound (cost.estimate) is within the per-rule limit cannot run out: the
    meter is the backstop, and the bound for rules that have none (docs/expressions.md). There
    is no request-wide pool: a rule set's total bound is checked when it is published.
    """

    __slots__ = (
        "expr_budget",
        "left",
        "qcost",
        "rcost",
        "weights",
        "query",
        "lowered",
        "tables",
        "searched",
        "parts",
        "first",
    )

    def __init__(self, expr_budget: int | None = None) -> None:
        if expr_budget is None:
            global _settings
            if _settings is None:  # imported once: an import statement here costs microseconds per request
                from llamon_agent import settings as _settings
            expr_budget = _settings.cost_budgets().expr_cost_budget
        if type(expr_budget) is not int or expr_budget < 1:
            raise ValueError(
                f"expr_budget must be a positive whole number of cost units, not {expr_budget!r}"
            )
        self.expr_budget = expr_budget
        self.left = expr_budget  # what the current evaluation may still spend
        self.qcost = 1  # reading the query once (set by build_namespace)
        self.rcost = 1  # a `"w" in query` test: qcost, or 1 when it reads a table (build_namespace)
        self.weights: dict[int, tuple[Any, int]] = {}  # identity -> (value, _weight), see _weight
        # The request's query, its lowered copy and its literal tables (build_namespace), and
        # re_search results on it by pattern: made once per request, shared by its servers.
        self.query: str | None = None
        self.lowered: str | None = None
        self.tables: Any = None
        self.searched: dict[str, bool] = {}
        # The request's DataParts and the first value of each of their keys (build_namespace):
        # data_get with a literal key reads it.
        self.parts: Any = None
        self.first: dict[Any, Any] | None = None

    def exceeded(self) -> None:
        raise CostBudgetExceeded(M("run.budget", limit=f"{self.expr_budget:,}"))


def _charge(meter: CostMeter, cost: int) -> None:
    """Take ``cost`` from what the evaluation has left, or refuse the work (left unchanged)."""
    left = meter.left - cost
    if left < 0:
        meter.exceeded()
    meter.left = left


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
    if kind in _PLAIN_NUMBERS and type(right) in _PLAIN_NUMBERS:  # constant cost, the node's 1
        value = left + right
        if type(value) is int and not -MAX_INT <= value <= MAX_INT:
            raise ExprError(M("run.int_too_large"))
        return value
    if kind is type(right) and (kind is str or kind is list or kind is tuple):
        size = len(left) + len(right)
        if size <= (
            MAX_RESULT_CHARS if kind is str else MAX_RESULT_ITEMS
        ):  # else _add's size error, uncharged
            _charge(meter, 1 + (size // BUILT_CHARS_PER_UNIT if kind is str else size))
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


_PLAIN_NUMBERS = frozenset({int, float, bool})
_SMALL = frozenset({int, float, bool, type(None)})  # compared in constant time


def _m_compare(meter: CostMeter, left: Any, right: Any, op: int) -> Any:
    """One comparison whose operands' sizes are not known when the rule is saved."""
    if type(left) in _SMALL and type(right) in _SMALL:  # two numbers (the hot path): 1 unit
        remaining = meter.left - 1
        if remaining < 0:
            meter.exceeded()
        meter.left = remaining
        return _COMPARE_OPS[op](left, right)
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
        left = meter.left - cost
        if left < 0:
            meter.exceeded()
        meter.left = left
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
    raise ExprError(M("expr.sort_key", keys=", ".join(SORT_KEYS)))


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
            raise ExprError(M("run.int_too_large"))
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


_AFFIX_METHODS = frozenset({"startswith", "endswith"})
_CASE_METHODS = frozenset({"lower", "upper", "casefold"})  # a Unicode table lookup per character
_SPLIT_METHODS = frozenset({"split", "rsplit", "splitlines", "partition", "rpartition"})
PIECE_UNITS = 8  # a new text object made by split(): ~60 bytes (the memory bound), ~3 units of time


def _m_method(meter: CostMeter, value: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    """value.name(*args): charged by what it reads before, and by what it built after."""
    method = getattr(value, name)
    if name in _AFFIX_METHODS and type(value) is str:
        # compares the prefix (suffix) only: what it reads is the size of its arguments
        _charge(meter, 1 + _weight(args, meter))
        return method(*args, **kwargs)
    cost = _weight(value, meter)
    for arg in (*args, *kwargs.values()):
        # a set method iterates its argument, hashing every item (a text: every character)
        cost += _weight(arg, meter) if type(arg) is not str or type(value) is str else 1 + len(arg)
    if name in _CASE_METHODS and type(value) is str:
        cost += len(value)
    _charge(meter, cost)
    if name in _SPLIT_METHODS and type(value) is str:
        return _m_split(meter, value, name, args, kwargs)
    result = method(*args, **kwargs)
    kind = type(result)
    if kind is str:
        if result is not value:
            _charge(meter, _result_cost(result))
    elif kind in _SEQUENCES:
        _charge(meter, _result_cost(result))
    return result


# What str.splitlines() splits at; counting them bounds its pieces before any is made.
_LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def _split_arguments(sep: Any = None, maxsplit: Any = -1) -> tuple[Any, Any]:
    """str.split's own signature, to read its arguments the way it does."""
    return sep, maxsplit


def _split_bound(
    value: str, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[int, Any, Any]:
    """The most pieces ``value.name(*args, **kwargs)`` can make, and its sep and maxsplit.

    sep is None for a whitespace split; maxsplit is None when the call is not a plain
    split/rsplit whose maxsplit the meter may lower (odd arguments: the method's own error).
    """
    size = len(value)
    if name in ("partition", "rpartition"):
        return 3, None, None
    if name == "splitlines":
        return size, None, None
    try:
        sep, maxsplit = _split_arguments(*args, **kwargs)
    except TypeError:
        return size + 1, None, None  # the method raises its own error
    if type(maxsplit) is not int or not (sep is None or (type(sep) is str and sep)):
        return size + 1, None, None
    bound = (size + 1) // 2 if sep is None else size // len(sep) + 1
    if maxsplit >= 0:
        bound = min(bound, maxsplit + 1)
    return bound, sep, maxsplit


def _m_split(meter: CostMeter, value: str, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """split() and friends, charged for their pieces *before* they are made.

    Each piece is a new object (PIECE_UNITS); charging after the call let one split of a
    100,000-character text overrun the budget by 800,000 units. The most pieces the call can
    make is charged first and the difference refunded. When that bound does not fit what is
    left, split/rsplit run with a maxsplit the meter can pay for (a result that used it all
    would have cost more: the budget is exceeded), and splitlines counts its line breaks.
    """
    base = 1 + len(value) // BUILT_CHARS_PER_UNIT
    bound, sep, maxsplit = _split_bound(value, name, args, kwargs)
    method = getattr(value, name)
    if base + PIECE_UNITS * bound > meter.left:
        if maxsplit is not None:  # a plain split/rsplit: let the meter lower its maxsplit
            affordable = (meter.left - base) // PIECE_UNITS
            if affordable < 1:
                meter.exceeded()
            result = method(sep, affordable)
            if len(result) > affordable:
                meter.exceeded()
            _charge(meter, base + PIECE_UNITS * len(result))
            return result
        if name == "splitlines":
            _charge(meter, len(_LINE_BREAKS) * (1 + len(value) // READ_CHARS_PER_UNIT))
            bound = 1 + sum(value.count(mark) for mark in _LINE_BREAKS)
    _charge(meter, base + PIECE_UNITS * bound)
    result = method(*args, **kwargs)
    meter.left += PIECE_UNITS * (bound - len(result))  # refund the pieces not made
    return result


def _m_contains_any(meter: CostMeter, text: Any, words: Any) -> bool:
    """contains_any, each word searched for in the text (the hot path of keyword rules: inline)."""
    if type(text) is not str or type(words) not in _WORD_CONTAINERS:
        _charge(meter, 1 + (len(words) if type(words) in _SIZED else 0))
        return contains_any(text, words)
    left = meter.left - 1 - len(words) * (1 + len(text) // READ_CHARS_PER_UNIT)
    if left < 0:
        meter.exceeded()
    meter.left = left
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


def _m_regex(helper: Any, memo: bool = False) -> Any:
    """re_search / re_find: RE2 is linear in the text, times the size of the pattern's program.

    A pattern not compiled yet (built at run time, or evicted) is charged its estimated program
    (regex_size) before RE2 builds anything: a pattern too costly for what is left is refused
    unbuilt, and the request budget bounds what all of its rules compile together.
    """

    def run(meter: CostMeter, pattern: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if type(pattern) is str:
            text = args[0] if args else kwargs.get("text")
            _charge(meter, 1 + len(pattern))
            if not regex_cached(pattern) and len(pattern) <= MAX_PATTERN_CHARS:
                size = regex_size(pattern)
                if size <= MAX_REGEX_SIZE:  # (a larger one is refused unbuilt by _regex)
                    _charge(meter, size * REGEX_COMPILE_UNITS)
            program = _regex(pattern).programsize
            size = len(text) if type(text) is str else 0
            _charge(meter, size * program // REGEX_CHARS_PER_UNIT)
        return helper(pattern, *args, **kwargs)

    def metered(meter: CostMeter, pattern: Any, *args: Any, **kwargs: Any) -> Any:
        if memo and len(args) == 1 and not kwargs and args[0] is meter.query and type(pattern) is str:
            # re_search(p, query) again in one request (rules share patterns): its answer
            hit = meter.searched.get(pattern)
            if hit is not None:
                _charge(meter, 1)
                return hit
            hit = meter.searched[pattern] = run(meter, pattern, args, kwargs)
            return hit
        return run(meter, pattern, args, kwargs)

    return metered


def _m_to_number(meter: CostMeter, value: Any, default: Any = None) -> Any:
    """to_number reads at most 4 x MAX_NUMBER_TEXT_CHARS characters of a text: a constant cost."""
    _charge(meter, 1 + (4 * MAX_NUMBER_TEXT_CHARS) // READ_CHARS_PER_UNIT if type(value) is str else 1)
    return to_number(value, default)


def _m_data_get(meter: CostMeter, parts: Any, *args: Any, **kwargs: Any) -> Any:
    remaining = meter.left - 1 - (len(parts) if type(parts) is list else 0)  # _charge, inline
    if remaining < 0:
        meter.exceeded()
    meter.left = remaining
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
    "re_search": _m_regex(re_search, memo=True),
    "re_find": _m_regex(re_find),
    "to_number": _m_to_number,
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
    "to_number": to_number,
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
