"""Compiled expressions: evaluating a checked expression and turning run-time failures into ExprError."""

from __future__ import annotations

import ast
import math
import operator
import types
from collections.abc import Callable, Iterable
from typing import Any

import llamon_agent.expr.shapes as shapes
from llamon_agent.expr.budget import (
    _BASE_NAMESPACE,
    _METER,
    BUILT_CHARS_PER_UNIT,
    READ_CHARS_PER_UNIT,
    REGEX_CHARS_PER_UNIT,
    REGEX_COMPILE_UNITS,
    rule_limit,
)
from llamon_agent.expr.checker import _parse, _syntax
from llamon_agent.expr.cost import estimate
from llamon_agent.expr.errors import ExprError, _Source, _type_name
from llamon_agent.expr.guard import REQUEST_NAMES, _compile
from llamon_agent.expr.helpers import check_regex, regex_size
from llamon_agent.expr.hints import _options, keywords_of
from llamon_agent.expr.limits import _FILENAME, MAX_DATA_BYTES, MAX_DEPTH, REGEX_CALLS
from llamon_agent.expr.messages import Message as M
from llamon_agent.expr.namespace import build_namespace
from llamon_agent.expr.reads import Reads, reads
from llamon_agent.tools import DeterministicContext


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


def _runtime_reason(exc: BaseException) -> M:
    """A Python failure inside an expression, as a message (Python's own text stays its detail)."""
    if isinstance(exc, KeyError):
        key = exc.args[0] if exc.args else None
        return M("run.key_missing", key=repr(key))
    if isinstance(exc, IndexError):
        return M("run.index", detail=exc)
    if isinstance(exc, ZeroDivisionError):
        return M("run.zero_division")
    if isinstance(exc, RecursionError):
        return M("run.data_nested")
    if isinstance(exc, MemoryError):
        return M("run.out_of_memory")
    if isinstance(exc, AttributeError):
        return M("run.attribute", detail=exc)
    if isinstance(exc, TypeError):
        return M("run.wrong_type", detail=exc)
    if isinstance(exc, ValueError):
        if "integer string conversion" in str(exc):
            return M("run.too_many_digits")  # the Python hint about sys.* means nothing here
        return M("run.wrong_value", detail=exc)
    if isinstance(exc, OverflowError):
        return M("run.overflow", detail=exc)
    return M("run.other", kind=type(exc).__name__, detail=exc)


class _NotJson(Exception):
    """A params value JSON cannot carry; the path to it is collected on the way out."""

    def __init__(self, msg_id: str, **params: object) -> None:
        super().__init__(msg_id)
        self.msg_id, self.params = msg_id, params  # the message's "path" is added on the way out
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
            raise _NotJson("params.not_json_value", value=value)
        budget[0] -= 4
    elif kind is dict or kind is list or kind is tuple:
        if depth > 2 * MAX_DEPTH:
            raise _NotJson("params.too_deep")
        budget[0] -= 2
        if kind is dict:
            out: dict[str, Any] = {}
            for key, item in value.items():
                if type(key) is not str:
                    raise _NotJson("params.key_not_text", key=repr(key))
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
        raise _NotJson("params.not_json_type", type=_type_name(value))
    if budget[0] < 0:
        raise ExprError(M("expr.params_too_large", limit=f"{MAX_DATA_BYTES:,}"))
    return value


_FREE_COPY_BYTES = 1_024  # copying params this small costs about one node: not charged


def _params(value: Any, meter: Any) -> dict[str, Any]:
    if type(value) is not dict:
        raise ExprError(M("expr.params_not_dict_value", type=_type_name(value)))
    size = _flat_size(value)
    if size is not None:  # text keys and plain scalars (most params): a plain copy
        if size > MAX_DATA_BYTES:
            raise ExprError(M("expr.params_too_large", limit=f"{MAX_DATA_BYTES:,}"))
        params: dict[str, Any] = dict(value)
    else:
        budget = [MAX_DATA_BYTES]
        try:
            params = _json_value(value, 0, budget)
        except _NotJson as exc:
            path = "params" + "".join(reversed(exc.path))
            raise ExprError(M(exc.msg_id, path=path, **exc.params)) from None
        size = MAX_DATA_BYTES - budget[0]
    if size > _FREE_COPY_BYTES:
        # A big copy, charged to the request (ExpressionRule); one copy is capped by MAX_DATA_BYTES.
        meter.left -= 1 + size // BUILT_CHARS_PER_UNIT
    return params


def _flat_size(value: dict[Any, Any]) -> int | None:
    """What _json_value counts for a dict of text keys and texts, whole numbers, booleans and
    None; None for any other dict (_json_value copies it)."""
    size = 2
    for key, item in value.items():
        kind = type(key)
        if kind is not str:
            return None
        kind = type(item)
        if kind is str:
            size += len(key) + len(item) + 5
        elif item is None or kind is int or kind is bool:
            size += len(key) + 7
        else:
            return None
    return size


_FILL = object()  # CompiledExpr._hints: made on the template's tree with the literals put in, when asked
_NO_HINTS: tuple[Any, Any] = (None, None)


class _Own:
    """What an expression compiled on its own keeps besides its code (one shared by shape keeps
    its shapes.Template instead, which holds the same fields)."""

    __slots__ = ("kind", "static_cost", "query_reads", "metered", "src")

    def __init__(self, kind: str, static_cost: int, query_reads: int, metered: bool, src: _Source) -> None:
        self.kind = kind
        self.static_cost = static_cost
        self.query_reads = query_reads
        self.metered = metered
        self.src = src


# The request's values an expression's function takes, from a build_namespace result, in order.
request_args: Callable[[dict[str, Any]], tuple[Any, ...]] = operator.itemgetter(*REQUEST_NAMES)


class CompiledExpr:
    """A checked, compiled expression: call it with a ctx, or ``evaluate`` a prebuilt namespace.

    A rule set keeps one per distinct text (tens of thousands), so it keeps six references and
    derives the rest: ``kind``, the costs and the source map from ``_meta`` (its shape's
    Template, or an :class:`_Own`), and the index hints from ``_hints`` (a tuple, or ``_FILL``:
    made on the template's tree with this expression's literals, when asked, as the index does
    once per compile).
    ``fn`` is its function, made once: ``fn(*request_args(namespace))`` evaluates it (guard).
    """

    __slots__ = ("source", "fn", "bound", "_code", "_defaults", "_meta", "_hints")

    def __init__(
        self,
        source: str,
        code: types.CodeType,
        defaults: tuple[Any, ...] | None,
        meta: shapes.Template | _Own,
        hints: Any,
        bound: int | None,
    ) -> None:
        self.source = source
        # At most what one evaluation costs on a request within the caps (cost.estimate; None:
        # no static bound, metered at run time). Compiling never refuses on it (a stored rule
        # must keep compiling after an upgrade); check_cost does, where a rule is authored.
        self.bound = bound
        # Code shared by shape (see shapes) gets this expression's literals as the defaults
        # of its last arguments. The globals are the helpers only, the same for every request.
        self.fn = types.FunctionType(code, _BASE_NAMESPACE, None, defaults)
        self._code = code  # kept beside fn: reading fn.__code__ raises an audit event
        self._defaults = defaults
        self._meta = meta
        # (index options, cost line) or _FILL; see the properties below.
        self._hints = hints

    @property
    def kind(self) -> str:
        """ "when" or "params"."""
        return self._meta.kind

    @property
    def static_cost(self) -> int:
        """Charged to the request by ExpressionRule: one unit per node."""
        return self._meta.static_cost

    @property
    def metered(self) -> bool:
        """Whether an operation charges the meter at run time. If not, every operation costs a
        constant or reads at most a literal or the query (guard): :attr:`static_cost` and
        :attr:`query_reads` bound the evaluation, which runs as plain Python."""
        return self._meta.metered

    @property
    def query_reads(self) -> int:
        """Plain reads of the query, each charged its length by ExpressionRule."""
        return self._meta.query_reads

    @property
    def required_keywords(self) -> frozenset[tuple[str, bool]] | None:
        """The keyword-index hint (hints.required_keywords)."""
        return keywords_of(self.index_options)

    @property
    def index_options(self) -> tuple[frozenset[tuple[Any, ...]], ...] | None:
        """The request index's alternative requirements (hints.index_options)."""
        if self._hints is _FILL:  # made when asked (by the index), not kept
            options = shapes.hint(self._meta, self._defaults, _options)  # type: ignore[arg-type]
            return tuple(dict.fromkeys(options)) if options else None
        return self._hints[0]  # type: ignore[no-any-return]

    @property
    def request_reads(self) -> Reads:
        """What the expression reads of a request (context and DataPart keys, literals, tools)."""
        return reads(self.source)

    @property
    def cost_line(self) -> tuple[int, float] | None:
        """(a, b): an evaluation costs at most a + b * len(query) units (None: not known statically)."""
        if self._hints is _FILL:
            return None  # no regex call with a literal pattern (see _compile_when)
        return self._hints[1]  # type: ignore[no-any-return]

    def _where(self, tb: types.TracebackType | None) -> tuple[int | None, int | None]:
        meta = self._meta
        if type(meta) is _Own:
            return _position(meta.src, tb)
        template: shapes.Template = meta  # type: ignore[assignment]
        line, column = _position(_Source(template.source), tb)
        return shapes.map_position(template, self.source, line, column)

    def evaluate(self, namespace: dict[str, Any]) -> Any:
        """Run against a :func:`build_namespace` result: a bool for ``when``, a dict for ``params``.

        The evaluation gets the meter's whole ``expr_budget`` (CostBudgetExceeded past it).
        """
        namespace[_METER].left = namespace[_METER].expr_budget
        return self.run(namespace)

    def run(self, namespace: dict[str, Any]) -> Any:
        """:meth:`evaluate` on what the meter has left (ExpressionRule runs when and params on one budget)."""
        # No eval(), so no "exec" audit event. The namespace is the globals too, as given: a
        # hand-made one without a helper must not find it elsewhere.
        fn = types.FunctionType(self._code, namespace, None, self._defaults)
        return self._result(fn, request_args(namespace), namespace[_METER])

    def run_args(self, args: tuple[Any, ...], meter: Any) -> Any:
        """:meth:`run` on ``request_args`` of a namespace :func:`build_namespace` made, by ``fn``
        (whose globals are the helpers that namespace holds too): no function made per call."""
        return self._result(self.fn, args, meter)

    def _result(self, fn: Callable[..., Any], args: tuple[Any, ...], meter: Any) -> Any:
        try:
            value = fn(*args)
        except Exception as exc:  # anything else becomes an ExprError (the pre-step's error path)
            raise self.failed(exc)  # noqa: B904  # failed() sets the cause
        if self._meta.kind == "when":
            return bool(value)
        return _params(value, meter)

    def failed(self, exc: Exception) -> ExprError:
        """The ExprError to raise for what running the code raised, with its position."""
        if isinstance(exc, ExprError):
            if exc.line is None:
                exc.line, exc.column = self._where(exc.__traceback__)
            return exc
        line, column = self._where(exc.__traceback__)
        error = ExprError(_runtime_reason(exc), line, column)
        error.__cause__ = exc
        return error

    def __call__(self, ctx: DeterministicContext) -> Any:
        return self.evaluate(build_namespace(ctx))

    def __repr__(self) -> str:
        return f"CompiledExpr({self.kind}: {self.source!r})"


def _own(
    source: str,
    kind: str,
    compiled: tuple[types.CodeType, int, int, bool],
    src: _Source,
    hints: Any,
    bound: int | None,
) -> CompiledExpr:
    """An expression compiled on its own (not shared by shape)."""
    return CompiledExpr(source, compiled[0], None, _Own(kind, *compiled[1:], src), hints, bound)


def _shared(source: str, template: shapes.Template, values: tuple[Any, ...], hints: Any) -> CompiledExpr:
    """An expression of ``template``'s shape with its own literal ``values`` (its bound made on
    the template's tree with them put in, as the full path makes it on its own tree)."""
    bound = shapes.on_values(template, values, _BOUNDS[template.kind])
    return CompiledExpr(source, template.code, values, template, hints, bound)


_BOUNDS = {kind: (lambda body, kind=kind: estimate(body, kind).units) for kind in ("when", "params")}


def check_cost(expr: CompiledExpr, limit: int | None = None) -> CompiledExpr:
    """``expr``, or ExprError when its static bound is over ``limit`` (default: the per-rule limit,
    half of LLAMON_EXPR_COST_BUDGET), naming its costliest part and what it costs. Asked where a rule is
    authored (saved, checked in the editor, published as a new version), never when a stored one
    is compiled: over the limit, that one runs under its meter.

    A bound over the limit made with the estimate of a literal pattern's program is made again
    with the program RE2 builds (what the meter charges), once, and kept."""
    if limit is None:
        limit = rule_limit(_limits().expr_cost_budget)
    units = expr.bound
    if units is None or units <= limit:
        return expr
    tree, src = _parse(expr.source)
    # RE2's program is ~2-3x smaller than its estimate: a pattern is built to price it only when
    # that could bring the rule within the limit (a huge one is refused unbuilt)
    found = estimate(tree.body, expr.kind, exact=units <= 4 * limit)
    expr.bound = found.units
    if found.units is None or found.units <= limit:
        return expr
    part = ast.get_source_segment(src.wrapped, found.part) if found.part is not None else None
    part = (part or expr.source).strip()
    if len(part) > 80:
        part = part[:77] + "..."
    message = M(
        "expr.cost_bound",
        units=f"{found.units:,}",
        limit=f"{limit:,}",
        part=repr(part),
        part_units=f"{found.part_units:,}",
    )
    raise src.node_error(found.part, message) if found.part is not None else ExprError(message)


def _limits() -> Any:
    from llamon_agent import settings

    return settings.cost_budgets()


def _regex_cost(tree: ast.AST) -> tuple[int, float] | None:
    """An upper bound ``a + b * len(query)`` on what the regex calls of ``tree`` charge; None when
    a regex call has a pattern not known when the rule is saved (or an invalid one)."""
    patterns = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in REGEX_CALLS:
            pattern = node.args[0] if node.args else None
            if not isinstance(pattern, ast.Constant) or type(pattern.value) is not str:
                return None
            patterns.append(pattern.value)
    return _pattern_cost(patterns)


def _pattern_cost(patterns: Iterable[str]) -> tuple[int, float] | None:
    a, b = 0, 0.0
    for pattern in patterns:
        try:
            check_regex(pattern)
        except ExprError:
            return None
        # charged before compiling when not compiled yet, and per character searched: the
        # estimate bounds the program (nothing is built when a rule is saved)
        program = regex_size(pattern)
        a += 2 + len(pattern) + program * REGEX_COMPILE_UNITS
        b += program / REGEX_CHARS_PER_UNIT
    return a, b


# A compiled expression is immutable, so one is shared by every rule with the same text: rule
# sets repeat their params (`{"q": query}`) and often their `when`, and the import path checks
# each rule and then compiles it again. Bounded; an ExprError is never cached.
_COMPILE_CACHE_SIZE = 100_000


def compile_when(source: str) -> CompiledExpr:
    """Check and compile a ``when`` expression: callable ``(ctx) -> bool``; ExprError if not allowed."""
    if type(source) is not str:
        return _compile_when(source)  # the checker's own error; a list would not even hash
    return _cached_when(source)


def _when_facts(body: ast.AST) -> tuple[Any, tuple[int, float] | None]:
    """(index options, regex cost) of a `when` tree, before the guard rewrites it."""
    options = _options(body)
    regex = None
    if options and any(atom[0] == "re" for option in options for atom in option):
        regex = _regex_cost(body)
    return options, regex


def _when_hints(facts: tuple[Any, tuple[int, float] | None], static_cost: int, query_reads: int) -> Any:
    """The hints an expression keeps: (index options, cost line)."""
    options, regex = facts
    cost_line = None
    if regex is not None:
        # The whole evaluation when the pattern does not match: static cost, query reads, regexes.
        cost_line = (regex[0] + static_cost + query_reads + 1, regex[1] + query_reads / READ_CHARS_PER_UNIT)
    if not options and cost_line is None:
        return _NO_HINTS
    return tuple(dict.fromkeys(options)) if options else None, cost_line


def _compile_when(source: str) -> CompiledExpr:
    found = shapes.lookup(source, "when") if type(source) is str else None
    if found:  # another expression of this shape was compiled: only the literals differ
        template, values = found  # type: ignore[misc]
        if not template.patterns:  # hints made again when asked: fewer objects kept
            return _shared(source, template, values, _FILL)
        options = shapes.hint(template, values, _options)  # a regex: its cost line is kept
        regex = None
        if options and any(atom[0] == "re" for option in options for atom in option):
            regex = _pattern_cost(values[k] for k in template.patterns) if template.priced else None
        hints = _when_hints((options, regex), template.static_cost, template.query_reads)
        return _shared(source, template, values, hints)
    tree, src = _parse(source)
    facts = _when_facts(tree.body)  # before _compile, which rewrites the tree
    bound = estimate(tree.body, "when").units
    return _compile_shared(source, "when", tree, src, found is False, bound, facts)


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
    if type(source) is not str:
        return _compile_params(source)
    return _cached_params(source)


def _compile_params(source: str) -> CompiledExpr:
    found = shapes.lookup(source, "params") if type(source) is str else None
    if found:
        template, values = found  # type: ignore[misc]
        return _shared(source, template, values, _NO_HINTS)
    tree, src = _parse(source)
    if isinstance(tree.body, _NOT_A_DICT) or (
        isinstance(tree.body, ast.UnaryOp) and isinstance(tree.body.op, ast.Not)
    ):
        raise src.node_error(tree.body, M("expr.params_not_dict"))
    return _compile_shared(source, "params", tree, src, found is False, estimate(tree.body, "params").units)


def _compile_shared(
    source: str,
    kind: str,
    tree: ast.Expression,
    src: _Source,
    learn: bool,
    bound: int | None,
    facts: tuple[Any, tuple[int, float] | None] | None = None,
) -> CompiledExpr:
    """Compile a checked tree; when ``learn``, as the template of its shape (see shapes).
    ``facts``: a `when`'s (see _when_facts), None for params."""
    plan = None
    if learn:
        pristine = _syntax(src)  # the template's own tree: the guard rewrites ``tree``
        plan = shapes.learn(source, kind, tree, pristine, src)
    if plan is None:
        compiled = _compile(tree, f"<{kind}>")
        hints = _NO_HINTS if facts is None else _when_hints(facts, compiled[1], compiled[2])
        return _own(source, kind, compiled, src, hints, bound)
    lift, literals, patterns, values = plan
    compiled = _compile(tree, f"<{kind}>", lift)
    hint = _options if kind == "when" else None
    template = shapes.remember(source, kind, compiled, pristine, literals, patterns, hint)
    hints = _NO_HINTS if facts is None else _when_hints(facts, compiled[1], compiled[2])
    return CompiledExpr(source, template.code, values, template, hints, bound)


class _Cache:
    """``compile`` memoised by text in a plain dict, emptied when it holds ``size`` texts: an
    entry costs ~30 bytes where functools.lru_cache's costs ~80 (its links), which is a tenth
    of what a rule keeps. A rule set compiles each text once, so recency matters little."""

    __slots__ = ("_compile", "_done", "_size")

    def __init__(self, compile: Callable[[str], CompiledExpr], size: int) -> None:
        self._compile = compile
        self._done: dict[str, CompiledExpr] = {}
        self._size = size

    def __call__(self, source: str) -> CompiledExpr:
        expr = self._done.get(source)
        if expr is None:
            expr = self._compile(source)  # an ExprError is never cached
            if len(self._done) >= self._size:
                self._done.clear()
            self._done[source] = expr
        return expr

    def cache_clear(self) -> None:
        self._done.clear()


_cached_when = _Cache(_compile_when, _COMPILE_CACHE_SIZE)
_cached_params = _Cache(_compile_params, _COMPILE_CACHE_SIZE)
