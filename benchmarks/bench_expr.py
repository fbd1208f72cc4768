"""Expression evaluation: ours (allow-listed, compiled once, namespace built once per request) beside
plain ``eval`` of the same text (the naive and unsafe way) and a Python lambda (the floor); and
ours with the run-time cost budget beside ours without it, measured side by side in one run.

Prints the figures quoted in docs/performance.md ("Expressions"). Run: .venv/bin/python benchmarks/bench_expr.py
"""

from __future__ import annotations

import ast
import functools
import sys
import time
import timeit
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llamon_agent import expr  # noqa: E402
from llamon_agent.expr import (  # noqa: E402
    CostMeter,
    build_namespace,
    compile_params,
    compile_when,
    contains_any,
    expression_rule,
)
from llamon_agent.expr import checker as expr_checker  # noqa: E402
from llamon_agent.expr import compiled as expr_compiled  # noqa: E402
from llamon_agent.tools import DeterministicContext, ToolInfo  # noqa: E402

CTX = DeterministicContext(
    query="주문 조회 부탁해 A-1001 검색",
    context={"chatbotId": "premium-support", "userId": "C-1001"},
    a2a_data=[{"chatbotId": "premium-support"}],
    mcp_tools=[ToolInfo("search_docs")],
)

CASES = [
    (
        "when",
        '"주문" in ctx.query and "조회" in ctx.query',
        lambda c: "주문" in c.query and "조회" in c.query,
    ),
    (
        "when",
        'ctx.context.get("chatbotId") == "premium-support"',
        lambda c: c.context.get("chatbotId") == "premium-support",
    ),
    (
        "when",
        '"search_docs" in tool_names and "검색" in ctx.query',
        lambda c: "search_docs" in {t.name for t in c.mcp_tools} and "검색" in c.query,
    ),
    (
        "when",
        'contains_any(query, ["환불", "배송", "조회"])',
        lambda c: contains_any(c.query, ["환불", "배송", "조회"]),
    ),
    (
        "params",
        '{"customer_id": ctx.context.get("userId")}',
        lambda c: {"customer_id": c.context.get("userId")},
    ),
]


def best_us(stmt, number: int = 20_000) -> float:
    """Best of 5 runs, microseconds per evaluation."""
    return min(timeit.repeat(stmt, number=number, repeat=5)) / number * 1e6


def unmetered(source: str, kind: str):
    """The same checked expression evaluated as before the cost budget: the same function-per-run
    call, no meter (these ordinary rules use none of the size-checked helpers, so the only
    rewrite they ever had is none), params copied and size-checked the same way."""
    tree, _ = expr_checker._parse(source)
    func = ast.FunctionDef(
        name="f",
        args=ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=[ast.Return(value=tree.body)],
        decorator_list=[],
        returns=None,
        type_comment=None,
    )
    module = ast.fix_missing_locations(ast.Module(body=[func], type_ignores=[]))
    code = next(c for c in compile(module, "<expr>", "exec").co_consts if isinstance(c, types.CodeType))

    def evaluate(namespace):
        value = types.FunctionType(code, namespace)()
        if kind == "when":
            return bool(value)
        if type(value) is not dict:  # what _params did before the budget: check, copy
            raise expr.ExprError("params must give a dict")
        try:
            return expr_compiled._json_value(value, 0, [expr.MAX_DATA_BYTES])
        except expr_compiled._NotJson as exc:
            raise expr.ExprError(exc.template) from None

    return evaluate


def side_by_side(with_budget, without_budget, rounds: int = 40, number: int = 5_000) -> tuple[float, float]:
    """Best per-evaluation CPU time of each, alternating rounds so that machine noise hits both
    alike (process CPU time: the other processes sharing the cores do not count)."""
    best_with = best_without = float("inf")
    for _ in range(rounds):
        for stmt, which in ((without_budget, 0), (with_budget, 1)):
            per_call = timeit.Timer(stmt, timer=time.process_time).timeit(number=number) / number * 1e6
            if which:
                best_with = min(best_with, per_call)
            else:
                best_without = min(best_without, per_call)
    return best_with, best_without


def hostile() -> None:
    """Each attack of tests/engine/test_expr_budget.py on a request at the caps: time to the
    budget error and peak memory (tracemalloc), the worst over the set."""
    import tracemalloc

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.engine.test_expr_budget import ATTACKS, BIG_CTX

    print(
        f"Hostile expressions at the default budget ({expr.DEFAULT_EXPR_BUDGET:,} units), request at the caps"
    )
    print(f"{'attack':45} {'ms':>7} {'peak MB':>8}")
    worst_ms = worst_mb = 0.0
    for name, source in ATTACKS.items():
        compiled = compile_when(source)
        best = float("inf")
        for _ in range(3):
            namespace = build_namespace(BIG_CTX)
            started = time.perf_counter()
            try:
                compiled.evaluate(namespace)
            except expr.CostBudgetExceeded:
                pass
            best = min(best, (time.perf_counter() - started) * 1e3)
        namespace = build_namespace(BIG_CTX)
        tracemalloc.start()
        try:
            compiled.evaluate(namespace)
        except expr.CostBudgetExceeded:
            pass
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        worst_ms, worst_mb = max(worst_ms, best), max(worst_mb, peak)
        print(f"{name[:45]:45} {best:7.1f} {peak:8.1f}")
    print(f"{'worst':45} {worst_ms:7.1f} {worst_mb:8.1f}")
    print()


def main() -> None:
    # One namespace serves every timed evaluation: give its request an unlimited budget.
    ns = build_namespace(CTX, meter=CostMeter(expr_budget=expr.DEFAULT_EXPR_BUDGET))
    print("Expression evaluation, microseconds per evaluation (best of 5)")
    print(f"{'expression':55} {'ours':>7} {'eval':>7} {'lambda':>7}")
    for kind, source, floor in CASES:
        compiled = (compile_when if kind == "when" else compile_params)(source)
        code = compile(source, "<naive>", "eval")
        naive_globals = {**ns, "__builtins__": {}}
        ours = best_us(lambda compiled=compiled: compiled.evaluate(ns))
        naive = best_us(lambda code=code, g=naive_globals: eval(code, g))  # noqa: S307 - the unsafe baseline
        plain = best_us(lambda floor=floor: floor(CTX))
        print(f"{source[:55]:55} {ours:7.2f} {naive:7.2f} {plain:7.2f}")
    print()
    print(
        "Cost budget overhead: ours with the budget vs the same evaluation without it (CPU time, best of 40 x 5,000, alternating)"
    )
    print(f"{'expression':55} {'budget':>7} {'none':>7} {'overhead':>9}")
    for kind, source, _floor in CASES:
        compiled = (compile_when if kind == "when" else compile_params)(source)
        plain_eval = unmetered(source, kind)
        assert plain_eval(ns) == compiled.evaluate(ns)
        with_budget, without_budget = side_by_side(
            lambda compiled=compiled: compiled.evaluate(ns), lambda f=plain_eval: f(ns)
        )
        overhead = (with_budget / without_budget - 1) * 100
        print(f"{source[:55]:55} {with_budget:7.2f} {without_budget:7.2f} {overhead:8.0f}%")
    # A whole rule as the pre-step runs it: when, then params, and the request's accounting.
    rule = expression_rule(
        name="route_order_lookup",
        mcp_id="order-service",
        tool_name="get_order",
        when=CASES[0][1],
        params='{"query": ctx.query}',
    )

    class Plain:  # an expression as before the budget: evaluate() without the meter
        def __init__(self, source, kind):
            self.evaluate = unmetered(source, kind)

    class RuleWithout:  # ExpressionRule.evaluate_ns as it was before the budget
        compiled_when, compiled_params = Plain(CASES[0][1], "when"), Plain('{"query": ctx.query}', "params")
        tool_name = "get_order"

        def evaluate_ns(self, namespace):
            if not self.compiled_when.evaluate(namespace):
                return None
            return {"tool_name": self.tool_name, "params": self.compiled_params.evaluate(namespace)}

    rule_without = functools.partial(RuleWithout().evaluate_ns, ns)
    assert rule.evaluate_ns(ns) == rule_without()
    with_budget, without_budget = side_by_side(lambda: rule.evaluate_ns(ns), rule_without)
    overhead = (with_budget / without_budget - 1) * 100
    label = "seed rule that fires (evaluate_ns: when + params)"
    print(f"{label:55} {with_budget:7.2f} {without_budget:7.2f} {overhead:8.0f}%")
    print()
    print(
        f"build_namespace (once per request and server): {best_us(lambda: build_namespace(CTX), 5_000):.2f} us"
    )
    print(
        f"compile_when (once, when the rule is saved):   {best_us(lambda: compile_when(CASES[0][1]), 200):.0f} us"
    )


if __name__ == "__main__":
    main()
    hostile()
