"""Expression evaluation: ours (allow-listed, compiled once, namespace built once per request) beside
plain ``eval`` of the same text (the naive and unsafe way) and a Python lambda (the floor).

Prints the figures quoted in docs/performance.md ("Expressions"). Run: .venv/bin/python benchmarks/bench_expr.py
"""

from __future__ import annotations

import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llamon_agent.expr import build_namespace, compile_params, compile_when, contains_any  # noqa: E402
from llamon_agent.tools import DeterministicContext, ToolInfo  # noqa: E402

CTX = DeterministicContext(
    query="주문 조회 부탁해 A-1001 검색",
    context={"chatbotId": "premium-support", "userId": "C-1001"},
    a2a_data=[{"chatbotId": "premium-support"}],
    mcp_tools=[ToolInfo("search_docs")],
)

CASES = [
    ("when", '"주문" in ctx.query and "조회" in ctx.query', lambda c: "주문" in c.query and "조회" in c.query),
    ("when", 'ctx.context.get("chatbotId") == "premium-support"', lambda c: c.context.get("chatbotId") == "premium-support"),
    ("when", '"search_docs" in tool_names and "검색" in ctx.query', lambda c: "search_docs" in {t.name for t in c.mcp_tools} and "검색" in c.query),
    ("when", 'contains_any(query, ["환불", "배송", "조회"])', lambda c: contains_any(c.query, ["환불", "배송", "조회"])),
    ("params", '{"customer_id": ctx.context.get("userId")}', lambda c: {"customer_id": c.context.get("userId")}),
]  # fmt: skip


def best_us(stmt, number: int = 20_000) -> float:
    """Best of 5 runs, microseconds per evaluation."""
    return min(timeit.repeat(stmt, number=number, repeat=5)) / number * 1e6


def main() -> None:
    ns = build_namespace(CTX)
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
        f"build_namespace (once per request and server): {best_us(lambda: build_namespace(CTX), 5_000):.2f} us"
    )
    print(
        f"compile_when (once, when the rule is saved):   {best_us(lambda: compile_when(CASES[0][1]), 200):.0f} us"
    )


if __name__ == "__main__":
    main()
