"""The pre-step's compiled rule set (:class:`CompiledRules`): the rules, what the pre-step's loop
reads of each, and their request index (llamon_agent.request_index)."""

from __future__ import annotations

import gc
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from llamon_agent.request_index import RequestIndex
from llamon_agent.tools import RuleInfo, rule_info


class CompiledRules:
    """A validated, ordered rule set with its request index (build once, reuse per request)."""

    __slots__ = (
        "rules",
        "infos",
        "fast",
        "whens",
        "costs",
        "servers",
        "first_fast",
        "mcp_ids",
        "has_index",
        "_index",
        "_all",
        "tool_names",
        "__weakref__",
    )

    def __init__(self, rules: Sequence[Any], *, use_index: bool = True) -> None:
        self.rules: tuple[Any, ...] = tuple(rules)
        self.infos: tuple[RuleInfo, ...] = tuple(_checked_info(r) for r in self.rules)
        # Expression rules evaluate against a namespace built once per server and request:
        # INLINE for an ExpressionRule (the loop calls its `when` function itself), else
        # fast[i](rule, namespace), the class's function, one object for all its rules.
        self.fast: tuple[Any, ...] = tuple(_fast_path(r) for r in self.rules)
        # For INLINE rules, read here rather than from the rule in the loop: its `when` function,
        # and (static cost, query reads, metered) as evaluate_ns reads them (None for others).
        self.whens: tuple[Any, ...] = tuple(
            r.when_fn if f is INLINE else None for r, f in zip(self.rules, self.fast, strict=True)
        )
        self.costs: tuple[Any, ...] = tuple(
            _costs(r.static, r.reads, r.metered) if f is INLINE else None
            for r, f in zip(self.rules, self.fast, strict=True)
        )
        # The first expression rule is where an unindexed run builds its first namespace.
        self.first_fast: int | None = next((i for i, f in enumerate(self.fast) if f is not None), None)
        self.servers: tuple[str, ...] = tuple(info.mcp_id for info in self.infos)  # rule i's mcp_id
        self.mcp_ids: tuple[str, ...] = tuple(dict.fromkeys(self.servers))
        self._all = range(len(self.rules))
        # Per server, the last tool list the pre-step saw and the names in it (prestep._server_tools):
        # mcp_id -> (the tools' ids, the tools, their names). Checked against every request's list.
        self.tool_names: dict[str, tuple[tuple[int, ...], tuple[Any, ...], frozenset[str]]] = {}
        self.has_index = use_index
        self._index: RequestIndex | None = RequestIndex(self.rules, self.infos) if use_index else None

    def __len__(self) -> int:
        return len(self.rules)

    def request_reads(self) -> list[Any]:
        """What each rule reads of a request, in rule order: an expression rule's
        ``(when, params)`` :class:`~llamon_agent.expr.reads.Reads`, None for a Python function."""
        return [getattr(rule, "request_reads", None) for rule in self.rules]

    def candidates(
        self,
        query: str,
        data: Callable[[], tuple[Mapping[str, Any], Any]] | None = None,
        expr_budget: int | None = None,
        found: list[Any] | None = None,
    ) -> list[int]:
        """Indexes of the rules that may fire on ``query``, in registration order.

        ``data`` gives the request's plain (context, a2a_data) for the equality index (None:
        every equality-indexed rule is a candidate); ``expr_budget`` is the per-evaluation cost
        budget in force (regex-indexed rules whose evaluation could exceed it stay candidates).
        For a long query, ``found`` gets the literals the query holds (build_namespace's found).
        """
        if self._index is None:
            return list(self._all)
        return self._index.candidates(query, data, expr_budget, found)


# Compiling this many rules at once is followed by gc.freeze(): a large rule set is hundreds of
# thousands of long-lived objects (code, literals, index entries) that every full collection
# would walk again (with 50,000 compiled rules alive, one took 0.7-2.0 s). Frozen objects are
# out of the collector's sight, and still freed by reference counting when the set is dropped.
FREEZE_AFTER_RULES = 1_000


def compile_rules(rules: Sequence[Any] | CompiledRules, *, use_index: bool = True) -> CompiledRules:
    """Validate ``rules`` (each needs ``__llamon_rule__``) and build their index; a set of
    FREEZE_AFTER_RULES rules or more is then frozen out of the garbage collector."""
    if isinstance(rules, CompiledRules):
        return rules
    compiled = CompiledRules(rules, use_index=use_index)
    if len(compiled) >= FREEZE_AFTER_RULES:
        gc.collect()
        gc.freeze()
    return compiled


def _checked_info(rule: Any) -> RuleInfo:
    info = rule_info(rule)
    if not callable(rule):
        raise TypeError(f"routing rule {info.name!r} is not callable")
    return info


# CompiledRules.fast of a rule whose `when` the pre-step's loop calls itself: an expression rule
# (expr.rules.ExpressionRule: when_fn, static, reads, metered, then; see its evaluate_ns).
INLINE = object()


_COSTS: dict[tuple[int, int, bool], tuple[int, int, bool]] = {}


def _costs(static: int, reads: int, metered: bool) -> tuple[int, int, bool]:
    """One shared tuple per distinct costs (a rule set has few): not one kept per rule."""
    key = (static, reads, metered)
    return _COSTS.setdefault(key, key)


def _fast_path(rule: Any) -> Any:
    fast = getattr(rule, "evaluate_ns", None)
    if not callable(fast):
        return None
    if all(hasattr(rule, attr) for attr in ("when_fn", "static", "reads", "metered", "params_for")):
        return INLINE
    if getattr(fast, "__self__", None) is rule and hasattr(fast, "__func__"):
        return fast.__func__  # not a bound method kept per rule
    return lambda _rule, namespace: fast(namespace)
