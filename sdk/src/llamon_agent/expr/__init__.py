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
4. ``compile()`` into one function per expression, of the request's values (the names of the
   per-request namespace, ``build_namespace``), whose globals are the helpers with empty
   ``__builtins__``.

Time and memory are bounded by counting, never by signals: caps bound what one operation
may build, the cost budget bounds how much work one evaluation and one request may do
(CostBudgetExceeded, see docs/expressions.md "Cost budget"). At run time an expression
raises only :class:`ExprError`.

The parts, one module each:

* ``limits``: the caps and the names an expression may use;
* ``errors``: :class:`ExprError` and positions in the author's text;
* ``checker``: parsing and the allow-list check;
* ``guard``: the rewrite to size-checked, metered helpers, and compiling;
* ``helpers``: the run-time helpers expressions call (``contains_any``, ``re_search``, ...);
* ``budget``: the run-time cost budget (:class:`CostMeter`);
* ``view`` and ``namespace``: the read-only request view and the per-request globals;
* ``compiled``: :class:`CompiledExpr`, ``compile_when``, ``compile_params``;
* ``hints``: the keyword-index hint (``required_keywords``);
* ``rules``: :class:`ExpressionRule`, a rule stored as data.
"""

from __future__ import annotations

from llamon_agent.expr.budget import (
    BUILT_CHARS_PER_UNIT,
    DEFAULT_EXPR_BUDGET,
    DEFAULT_REQUEST_BUDGET,
    DEFAULT_RULE_LIMIT,
    READ_CHARS_PER_UNIT,
    REGEX_CHARS_PER_UNIT,
    REGEX_COMPILE_ALLOWANCE,
    REGEX_COMPILE_UNITS,
    CostBudgetExceeded,
    CostMeter,
)
from llamon_agent.expr.compiled import CompiledExpr, check_cost, compile_params, compile_when
from llamon_agent.expr.cost import Bound, estimate
from llamon_agent.expr.errors import ExprError
from llamon_agent.expr.helpers import (
    MAX_REGEX_SIZE,
    contains_all,
    contains_any,
    re_find,
    re_search,
    regex_compile_allowance,
    regex_size,
)
from llamon_agent.expr.hints import required_keywords
from llamon_agent.expr.limits import (
    BUILTIN_NAMES,
    CTX_NAMES,
    HELPER_NAMES,
    MAX_DATA_BYTES,
    MAX_DATA_DEPTH,
    MAX_DEPTH,
    MAX_INT,
    MAX_ITER_ITEMS,
    MAX_NESTING,
    MAX_NODES,
    MAX_PATTERN_CHARS,
    MAX_QUERY_CHARS,
    MAX_RESULT_CHARS,
    MAX_RESULT_ITEMS,
    MAX_RULE_NAME_CHARS,
    MAX_SOURCE_CHARS,
    MAX_STR_LITERAL_CHARS,
    METHOD_NAMES,
)
from llamon_agent.expr.namespace import build_namespace, request_size_error
from llamon_agent.expr.reads import DYNAMIC, Reads, reads
from llamon_agent.expr.rules import (
    ExpressionRule,
    check_rule_cost,
    check_rule_name,
    check_rule_set_cost,
    expression_rule,
    rule_set_cost,
)

__all__ = [
    "BUILTIN_NAMES",
    "CTX_NAMES",
    "HELPER_NAMES",
    "METHOD_NAMES",
    "MAX_DATA_BYTES",
    "MAX_DATA_DEPTH",
    "MAX_DEPTH",
    "MAX_INT",
    "MAX_ITER_ITEMS",
    "MAX_NESTING",
    "MAX_NODES",
    "MAX_PATTERN_CHARS",
    "MAX_REGEX_SIZE",
    "MAX_QUERY_CHARS",
    "MAX_RESULT_CHARS",
    "MAX_RESULT_ITEMS",
    "MAX_RULE_NAME_CHARS",
    "MAX_SOURCE_CHARS",
    "MAX_STR_LITERAL_CHARS",
    "BUILT_CHARS_PER_UNIT",
    "DEFAULT_EXPR_BUDGET",
    "DEFAULT_RULE_LIMIT",
    "DEFAULT_REQUEST_BUDGET",
    "READ_CHARS_PER_UNIT",
    "REGEX_CHARS_PER_UNIT",
    "REGEX_COMPILE_UNITS",
    "REGEX_COMPILE_ALLOWANCE",
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
    "check_cost",
    "check_rule_cost",
    "check_rule_set_cost",
    "rule_set_cost",
    "estimate",
    "reads",
    "Reads",
    "DYNAMIC",
    "Bound",
    "re_find",
    "re_search",
    "regex_compile_allowance",
    "regex_size",
    "request_size_error",
    "required_keywords",
]
