"""The pre-step's fixed cost per request: a small rule set, every query distinct (the impact replay's case).

The rule set is bench_impact.py's v1 (the seed's three rules and 57 keyword rules on three servers);
each request has its own query and context, so nothing repeats. Prints the dry-run pre-step's CPU
time per request (the best and the median of 7 passes), and with --profile the functions that take it.

    .venv/bin/python benchmarks/bench_prestep_fixed.py [--requests 10000] [--profile]
    LLAMON_BENCH_CODE=/path/to/other/checkout .venv/bin/python benchmarks/bench_prestep_fixed.py
        # the same against another version of llamon_agent (alternate the two for a before/after)
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import random
import sys
import time
from pathlib import Path

# The SDK of this checkout, or of another one (the "before" of a comparison): <checkout>/sdk/src.
sys.path.insert(
    0, str(Path(os.environ.get("LLAMON_BENCH_CODE") or Path(__file__).resolve().parents[1]) / "sdk" / "src")
)

from llamon_agent.expr import expression_rule  # noqa: E402
from llamon_agent.prestep import StaticToolBackend, compile_rules, run_prestep  # noqa: E402
from llamon_agent.tools import AgentRequest, ToolInfo  # noqa: E402

SEED = [  # llamon_web.demo.SEED_RULES (not imported: this benchmark needs no Django)
    (
        "route_order_lookup",
        "order-service",
        "get_order",
        '"주문" in ctx.query and "조회" in ctx.query',
        '{"query": ctx.query}',
    ),
    (
        "route_by_chatbot_id",
        "customer-crm",
        "get_customer_profile",
        'ctx.context.get("chatbotId") == "premium-support"',
        '{"customer_id": ctx.context.get("userId")}',
    ),
    (
        "route_by_available_tool",
        "knowledge-base",
        "search_docs",
        '"search_docs" in tool_names and "검색" in ctx.query',
        '{"q": ctx.query}',
    ),
]
KEYWORDS = [f"kw{i:02d}" for i in range(57)]
WORDS = ["주문", "조회", "검색", "환불", "배송", "안녕하세요", "고마워요", "날씨", "문의", "결제"]
TOOLS = {
    "order-service": [ToolInfo("get_order"), ToolInfo("list_orders")],
    "customer-crm": [ToolInfo("get_customer_profile")],
    "knowledge-base": [ToolInfo("search_docs")],
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()

    rules = [expression_rule(name=n, mcp_id=m, tool_name=t, when=w, params=p) for n, m, t, w, p in SEED]
    rules += [
        expression_rule(
            name=f"route_{kw}",
            mcp_id="knowledge-base",
            tool_name="search_docs",
            when=f'"{kw}" in query',
            params='{"q": query, "limit": 3}',
        )
        for kw in KEYWORDS
    ]
    compiled = compile_rules(rules)
    backend = StaticToolBackend(TOOLS)
    rng = random.Random(7)
    requests = []
    for k in range(args.requests):
        words = rng.sample(WORDS, 3) + rng.sample(KEYWORDS, rng.choice([0, 0, 1, 2]))
        context = {
            "userId": f"C-{k % 97}",
            "chatbotId": rng.choice(["premium-support", "basic", "kiosk"]),
            "sessionId": f"s-{k}",
        }
        requests.append(AgentRequest(query=" ".join(words) + f" A-{k} S-{k}", context=context))

    def one_pass() -> None:
        for request in requests:
            run_prestep(compiled, request, backend=backend, dry_run=True)

    one_pass()  # warm-up
    passes = []
    for _ in range(7):
        c0 = time.process_time()
        one_pass()
        passes.append((time.process_time() - c0) / len(requests) * 1e6)
    passes.sort()
    print(
        f"{len(rules)} rules, {len(requests):,} distinct requests, dry run: "
        f"{passes[0]:.1f} us CPU/request best, {passes[3]:.1f} median of 7"
    )
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        one_pass()
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main()
