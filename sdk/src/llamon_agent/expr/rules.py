"""Rules as data: a checked name, a compiled `when` and `params`, run by the pre-step like a function."""

from __future__ import annotations

import keyword
from typing import Any

from llamon_agent.expr.budget import _METER, READ_CHARS_PER_UNIT, CostMeter, rule_limit
from llamon_agent.expr.compiled import (
    CompiledExpr,
    _limits,
    check_cost,
    compile_params,
    compile_when,
    request_args,
)
from llamon_agent.expr.errors import ExprError
from llamon_agent.expr.limits import MAX_RULE_NAME_CHARS
from llamon_agent.expr.messages import Message as M
from llamon_agent.expr.namespace import build_namespace
from llamon_agent.expr.reads import Reads
from llamon_agent.tools import DeterministicContext, RuleInfo


def check_rule_name(name: Any) -> None:
    """ExprError unless ``name`` is a Python identifier, not a keyword, of sane length."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ExprError(M("rule.name_identifier", name=repr(name)), field="name")
    if keyword.iskeyword(name):
        raise ExprError(M("rule.name_keyword", name=repr(name)), field="name")
    if len(name) > MAX_RULE_NAME_CHARS:
        raise ExprError(M("rule.name_too_long", limit=MAX_RULE_NAME_CHARS), field="name")


def _with_field(exc: ExprError, field: str) -> ExprError:
    return exc.moved(field=field)


class _ExprRuleInfo(RuleInfo):
    """The RuleInfo of an expression rule: its keyword hint is made when read, from the rule's
    compiled ``when`` (the request index reads ``index_options`` instead, so a rule set of
    50,000 rules would otherwise keep 50,000 hints nobody reads)."""

    __slots__ = ("_when",)
    _when: CompiledExpr

    def __init__(self, name: str, mcp_id: str, stop: bool, when: CompiledExpr) -> None:
        # RuleInfo is frozen: set its fields the way its own __init__ does.
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "mcp_id", mcp_id)
        object.__setattr__(self, "stop", stop)
        object.__setattr__(self, "_when", when)

    @property
    def keywords(self) -> frozenset[tuple[str, bool]] | None:
        return self._when.required_keywords

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RuleInfo):
            return (self.name, self.mcp_id, self.stop, self.keywords) == (
                other.name,
                other.mcp_id,
                other.stop,
                other.keywords,
            )
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.name, self.mcp_id, self.stop, self.keywords))

    def __reduce__(self) -> tuple[type[RuleInfo], tuple[str, str, bool, frozenset[tuple[str, bool]] | None]]:
        return RuleInfo, (self.name, self.mcp_id, self.stop, self.keywords)  # a copy is a plain RuleInfo

    def __repr__(self) -> str:
        return f"RuleInfo(name={self.name!r}, mcp_id={self.mcp_id!r}, stop={self.stop!r}, keywords={self.keywords!r})"


class ExpressionRule:
    """A routing rule made of expressions; the pre-step runs it like a ``@deterministic_tool`` function."""

    # Slots: a rule set holds tens of thousands of rules in every process. The name, server and
    # stop flag live in __llamon_rule__, the texts in the compiled expressions, and the index
    # cost is derived when asked: each is a property below.
    __slots__ = (
        "tool_name",
        "compiled_when",
        "compiled_params",
        "static",
        "reads",
        "metered",
        "when_fn",
        "__llamon_rule__",
        "__weakref__",
    )

    def __init__(
        self, *, name: str, mcp_id: str, tool_name: str, when: str, params: str, stop: bool = False
    ) -> None:
        check_rule_name(name)
        for field, value in (("mcp_id", mcp_id), ("tool_name", tool_name)):
            if not isinstance(value, str) or not value.strip():
                raise ExprError(M("rule.field_empty", field=field), field=field)
        try:
            compiled_when = compile_when(when)
        except ExprError as exc:
            raise _with_field(exc, "when") from None
        try:
            compiled_params = compile_params(params)
        except ExprError as exc:
            raise _with_field(exc, "params") from None
        self.tool_name = tool_name
        self.compiled_when = compiled_when
        self.compiled_params = compiled_params
        # Charged per evaluation: every node, and each plain read of the query (its length).
        self.static = compiled_when.static_cost + compiled_params.static_cost
        self.reads = compiled_when.query_reads + compiled_params.query_reads
        # Whether the when charges the meter at run time (else static and reads bound it).
        self.metered = compiled_when.metered
        self.when_fn = compiled_when.fn  # called with request_args(namespace)
        self.__llamon_rule__: RuleInfo = _ExprRuleInfo(name, mcp_id, bool(stop), compiled_when)

    @property
    def name(self) -> str:
        return self.__llamon_rule__.name

    @property
    def mcp_id(self) -> str:
        return self.__llamon_rule__.mcp_id

    @property
    def stop(self) -> bool:
        return self.__llamon_rule__.stop

    @property
    def when_source(self) -> str:
        return self.compiled_when.source

    @property
    def params_source(self) -> str:
        return self.compiled_params.source

    @property
    def bound(self) -> int | None:
        """At most what one evaluation (when, then params) costs on a request within the caps;
        None when it has no static bound (metered at run time, at most ``expr_budget``)."""
        when, params = self.compiled_when.bound, self.compiled_params.bound
        return None if when is None or params is None else when + params

    @property
    def request_reads(self) -> tuple[Reads, Reads]:
        """What ``when`` and ``params`` read of a request (expr.reads.Reads each)."""
        return self.compiled_when.request_reads, self.compiled_params.request_reads

    @property
    def index_options(self) -> Any:
        """The pre-step's request index: the when's alternative requirements (hints.index_options)."""
        return self.compiled_when.index_options

    @property
    def index_cost(self) -> tuple[int, float] | None:
        """For a regex-indexed rule, a bound a + b * len(query) on what evaluating it costs when
        the pattern does not match (over the budget, the index must not skip the rule)."""
        line = self.compiled_when.cost_line
        if line is None:
            return None
        params = self.compiled_params
        return (
            line[0] + params.static_cost + params.query_reads,
            line[1] + params.query_reads / READ_CHARS_PER_UNIT,
        )

    @property
    def __name__(self) -> str:  # read by code that names rules like functions
        return self.name

    def __getattr__(self, attr: str) -> Any:
        if attr == "__qualname__":  # a class body cannot hold a __qualname__ property
            return self.name
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {attr!r}")

    def evaluate_ns(self, namespace: dict[str, Any]) -> dict[str, Any] | None:
        """The rule's tool call on a prebuilt namespace, or None when ``when`` is falsy.

        ``when`` and ``params`` run on one evaluation budget, ``expr_budget`` less the rule's
        static charge (nodes, plain query reads), for the operations they meter. The pre-step's
        loop (prestep._PrestepRun._evaluate_all) does the same inline up to a falsy ``when``, and
        calls :meth:`params_for` when it is truthy: change both together.
        """
        meter = namespace[_METER]
        args = request_args(namespace)
        meter.left = meter.expr_budget - self.static - self.reads * meter.rcost
        try:
            value = self.when_fn(*args)
        except Exception as exc:
            raise self.compiled_when.failed(exc)  # noqa: B904  # failed() sets the cause
        if not value:
            return None
        return {"tool_name": self.tool_name, "params": self.params_for(args, meter, meter.left)}

    def params_for(self, args: tuple[Any, ...], meter: CostMeter, left: int) -> dict[str, Any]:
        """The tool call's params once ``when`` held on ``args`` (request_args of the namespace),
        evaluated on what is ``left`` of this evaluation's budget."""
        meter.left = left
        return self.compiled_params.run_args(args, meter)  # type: ignore[no-any-return]

    def __call__(self, ctx: DeterministicContext) -> dict[str, Any] | None:
        return self.evaluate_ns(build_namespace(ctx))

    def __repr__(self) -> str:
        return f"<expression rule {self.name} on {self.mcp_id}>"


def expression_rule(
    *, name: str, mcp_id: str, tool_name: str, when: str, params: str, stop: bool = False
) -> ExpressionRule:
    """Build a routing rule from a ``when`` and a ``params`` expression; ExprError (with ``field``) if invalid."""
    return ExpressionRule(name=name, mcp_id=mcp_id, tool_name=tool_name, when=when, params=params, stop=stop)


def rule_set_cost(rules: Any) -> tuple[int, list[tuple[str, int]]]:
    """What a request within the caps can cost the expression rules of ``rules`` together, at
    most: the sum of their static bounds (a rule with none counts as the per-rule limit, which
    its meter enforces), and each rule's share (name, units), costliest first. Rules written as
    Python functions are not metered and not counted."""
    limit = _limits().expr_cost_budget
    shares = []
    for rule in rules:
        if isinstance(rule, ExpressionRule):
            bound = rule.bound
            shares.append((rule.name, limit if bound is None else bound))
    shares.sort(key=lambda share: -share[1])
    return sum(units for _name, units in shares), shares


def check_rule_set_cost(rules: Any, limit: int | None = None) -> int:
    """The total of :func:`rule_set_cost`, or ExprError when it is over ``limit`` (default: the
    request limit, LLAMON_REQUEST_COST_BUDGET): what publishing a rule set checks."""
    if limit is None:
        limit = _limits().request_cost_budget
    total, shares = rule_set_cost(rules)
    if total > limit:
        costliest = ", ".join(f"{name} ({units:,})" for name, units in shares[:3])
        raise ExprError(M("rules.cost_total", units=f"{total:,}", limit=f"{limit:,}", rules=costliest))
    return total


def check_rule_cost(rule: ExpressionRule, limit: int | None = None) -> None:
    """ExprError (with ``field``) when ``rule``'s static bound is over the per-rule limit: its
    ``when``, its ``params``, or the two together. Asked where a rule is authored (saved, or
    published in a new version), never when a stored one is compiled."""
    if limit is None:
        limit = rule_limit(_limits().expr_cost_budget)
    for field, compiled in (("when", rule.compiled_when), ("params", rule.compiled_params)):
        try:
            check_cost(compiled, limit)
        except ExprError as exc:
            raise _with_field(exc, field) from None
    bound, when = rule.bound, rule.compiled_when.bound
    if bound is not None and when is not None and bound > limit:
        field = "params" if bound - when > when else "when"
        raise ExprError(M("rule.cost_bound", units=f"{bound:,}", limit=f"{limit:,}"), field=field)
