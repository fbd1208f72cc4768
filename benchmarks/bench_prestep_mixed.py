"""Pre-step cost per request on a realistic mix of rules (not only keyword rules), and the
worst cases of issue 13, side by side with plain Python functions and zen-engine.

    .venv/bin/python benchmarks/bench_prestep_mixed.py            # 10,000 and 50,000 rules + worst cases
    .venv/bin/python benchmarks/bench_prestep_mixed.py --quick    # 10,000 rules, fewer requests
    LLAMON_BENCH_CODE=/path/to/other/checkout .venv/bin/python benchmarks/bench_prestep_mixed.py
        # the same script against another version of llamon_agent (the "before" column)

The generator mixes Korean, English and mixed-case keywords, `in query.lower()`, `or`/`and`
of keywords (a common word first), `contains_any`, context and DataPart equality,
`len(query) > N and ...` and regexes; a share of the rules (5 % and 20 %) has no literal at
all (context/DataPart equality or a regex). Requests carry a context and a DataPart. Every
contender must fire the same rules on every request (checked before timing).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# The SDK of this checkout, or of another one (the "before" of a comparison): <checkout>/sdk/src.
sys.path.insert(
    0, str(Path(os.environ.get("LLAMON_BENCH_CODE") or Path(__file__).resolve().parents[1]) / "sdk" / "src")
)

import re2  # noqa: E402
from peers import measure, zen_table_decision  # noqa: E402

from llamon_agent.expr import contains_all, contains_any, expression_rule  # noqa: E402
from llamon_agent.prestep import StaticToolBackend, compile_rules, run_prestep  # noqa: E402
from llamon_agent.tools import AgentRequest  # noqa: E402

SERVERS = [f"server-{n}" for n in range(5)]
TOOL = "lookup"
COMMON = ["주문", "배송", "환불"]
FILLER = [
    "안녕하세요",
    "배송",
    "언제",
    "오나요",
    "문의",
    "드립니다",
    "상품이",
    "아직",
    "안",
    "왔어요",
    "확인",
    "부탁",
    "please",
    "help",
    "with",
    "my",
    "account",
]
TIERS = ["gold", "silver", "bronze", "vip", "free"]

# ------------------------------------------------------------------ the generator


def make_whens(n: int, unhinted: float, rng: random.Random) -> list[str]:
    """n `when` expressions; a share `unhinted` of them has no query literal at all."""
    whens = []
    for i in range(n):
        if rng.random() < unhinted:
            kind = rng.randrange(4)
            if kind == 0:
                whens.append(f'context.get("segment") == "seg{i:05d}"')
            elif kind == 1:
                whens.append(f'data_get("orderId") == "A-{i:05d}"')
            elif kind == 2:
                whens.append(f'len(query) > 5 and re_search(r"R{i:05d}-\\d+", query)')
            else:
                whens.append(f're_search(r"(?i)code{i:05d}\\b", query)')
            continue
        kind = rng.randrange(6)
        if kind == 0:
            whens.append(f'"품목{i:05d}" in query')
        elif kind == 1:
            whens.append(f'"sku-{i:05d}" in query.lower()')
        elif kind == 2:  # a common word first: the index must take the rare one
            whens.append(f'"{rng.choice(COMMON)}" in query and "상품{i:05d}" in query')
        elif kind == 3:
            whens.append(f'"Order{i:05d}" in query or "주문{i:05d}" in query')
        elif kind == 4:
            whens.append(f'contains_any(query.lower(), ["promo{i:05d}", "쿠폰{i:05d}"])')
        else:
            whens.append(f'context.get("tier") == "{rng.choice(TIERS)}" and "Plan{i:05d}" in query')
    return whens


def token_for(when: str) -> str:
    """A query word that makes this `when` true (given a matching context)."""
    import re

    m = re.search(r'"([^"]+)" in query(?!\.lower)', when.split(" and ")[-1]) or re.search(r'"([^"]+)"', when)
    if "re_search" in when:
        num = re.search(r"(\d{5})", when).group(1)
        return f"R{num}-7" if "R" in when.split("re_search")[1][:6] else f"CODE{num}"
    if "promo" in when:
        return re.search(r"(promo\d+)", when).group(1).upper()
    if "sku-" in when:
        return re.search(r"(sku-\d+)", when).group(1).upper()
    return m.group(1) if m else ""


def make_requests(whens: Sequence[str], count: int, rng: random.Random) -> list[AgentRequest]:
    requests = []
    for _ in range(count):
        words = rng.choices(FILLER, k=rng.randint(6, 14))
        context: dict[str, Any] = {"tier": rng.choice(TIERS), "userId": "u-1"}
        data = [{"orderId": "A-none", "note": "x"}]
        if rng.random() < 0.3:
            for _ in range(rng.randint(1, 3)):
                when = rng.choice(whens)
                if when.startswith('context.get("segment")'):
                    context["segment"] = when.split('"')[3]
                elif when.startswith("data_get"):
                    data[0]["orderId"] = when.split('"')[3]
                else:
                    words.insert(rng.randrange(len(words) + 1), token_for(when))
        requests.append(AgentRequest(query=" ".join(words), context=context, a2a_data=data))
    return requests


def make_rules(whens: Sequence[str]) -> list[Any]:
    return [
        expression_rule(
            name=f"r{i}",
            mcp_id=SERVERS[i % len(SERVERS)],
            tool_name=TOOL,
            when=when,
            params='{"q": query[:50]}',
        )
        for i, when in enumerate(whens)
    ]


# ------------------------------------------------------------------ contenders


def make_ours(rules: Sequence[Any]) -> Callable[[AgentRequest], list[str]]:
    compiled = compile_rules(rules)
    backend = StaticToolBackend({m: [TOOL] for m in {r.mcp_id for r in rules}})

    def run(request: AgentRequest) -> list[str]:
        return [rec.rule for rec in run_prestep(compiled, request, backend=backend, dry_run=True).fired]

    return run


def make_floor(whens: Sequence[str]) -> Callable[[AgentRequest], list[str]]:
    """The same conditions as plain Python functions called in a loop (RE2 patterns precompiled)."""
    patterns: dict[str, Any] = {}

    def re_search(pattern: str, text: str) -> bool:
        compiled = patterns.get(pattern)
        if compiled is None:
            compiled = patterns[pattern] = re2.compile(pattern)
        return compiled.search(text) is not None

    funcs = [
        (
            f"r{i}",
            eval(
                f"lambda query, context, data_get: bool({w})",
                {
                    "re_search": re_search,
                    "contains_any": contains_any,
                    "contains_all": contains_all,
                    "len": len,
                    "bool": bool,
                },
            ),
        )  # noqa: S307
        for i, w in enumerate(whens)
    ]

    def run(request: AgentRequest) -> list[str]:
        parts = request.a2a_data or []

        def data_get(key: str, default: Any = None) -> Any:
            for part in parts:
                if key in part:
                    return part[key]
            return default

        query, context = request.query, request.context
        return [name for name, f in funcs if f(query, context, data_get)]

    return run


def make_zen(whens: Sequence[str]) -> Callable[[AgentRequest], list[str]] | None:
    """The same rules as one zen-engine table; each row one ZEN expression (None if not expressible)."""
    import importlib.util
    import re

    if importlib.util.find_spec("zen") is None:
        return None

    def zen_expr(when: str) -> str:
        e = when
        e = re.sub(
            r're_search\(r"([^"]+)", query\)',
            lambda m: f'matches(query, "{m.group(1)}")',  # ZEN strings keep backslashes as they are
            e,
        )
        e = re.sub(
            r'contains_any\(query.lower\(\), \["([^"]+)", "([^"]+)"\]\)',
            r'(contains(lower(query), "\1") or contains(lower(query), "\2"))',
            e,
        )
        e = re.sub(r'"([^"]+)" in query\.lower\(\)', r'contains(lower(query), "\1")', e)
        e = re.sub(r'"([^"]+)" in query', r'contains(query, "\1")', e)
        e = re.sub(r'context\.get\("(\w+)"\)', r"context.\1", e)
        e = re.sub(r'data_get\("(\w+)"\)', r"data.\1", e)
        e = e.replace("len(query)", "len(query)")
        return e

    rows = [{"_id": f"r{i}", "c": zen_expr(w), "rule": f'"r{i}"'} for i, w in enumerate(whens)]
    table = {
        "hitPolicy": "collect",
        "inputs": [{"id": "c", "name": "when", "type": "expression", "field": ""}],
        "outputs": [{"id": "rule", "name": "rule", "type": "expression", "field": "rule"}],
        "rules": [{"_id": r["_id"], "c": r["c"], "rule": r["rule"]} for r in rows],
    }
    decision = zen_table_decision(table, "t")

    def run(request: AgentRequest) -> list[str]:
        data = {k: v for part in reversed(request.a2a_data or []) for k, v in part.items()}
        result = decision.evaluate({"query": request.query, "context": request.context, "data": data})[
            "result"
        ]
        return [row["rule"] for row in result]

    return run


# ------------------------------------------------------------------ measuring


def fmt(pair: tuple[float, float]) -> str:
    return f"{pair[0]:,.1f} / {pair[1]:,.0f}"


def mixed_row(n: int, unhinted: float, count: int, with_zen: bool) -> None:
    rng = random.Random(n + int(unhinted * 100))
    whens = make_whens(n, unhinted, rng)
    requests = make_requests(whens, count, rng)
    t0 = time.perf_counter()
    rules = make_rules(whens)
    ours = make_ours(rules)
    compile_s = time.perf_counter() - t0
    floor = make_floor(whens)
    zen_run = make_zen(whens) if with_zen else None
    check = requests[: min(50, len(requests))]
    fired = 0
    for request in check:
        a, b = sorted(ours(request)), sorted(floor(request))
        if a != b:
            raise SystemExit(f"ours and the floor disagree on {request.query!r}: {a} vs {b}")
        if zen_run is not None and sorted(zen_run(request)) != a:
            print(f"  (zen-engine disagrees on {request.query!r}; left out)")
            zen_run = None
        fired += len(a)
    o = measure(ours, requests, 3)
    f = measure(floor, requests[: max(20, count // 10)])
    z = measure(zen_run, requests[: max(20, count // 10)]) if zen_run is not None else None
    zen_txt = f"{fmt(z)} | {z[0] / o[0]:,.0f}x" if z else "- | -"
    print(
        f"| {n:,} | {unhinted:.0%} | {fmt(o)} | {fmt(f)} | {f[0] / o[0]:,.0f}x | {zen_txt} | "
        f"{compile_s * 1e6 / n:,.0f} us | {fired} fired in {len(check)} |"
    )


def compile_cost(n: int) -> None:
    whens = make_whens(n, 0.05, random.Random(7))
    gc.collect()
    tracemalloc.start()
    t0 = time.perf_counter()
    compiled = compile_rules(make_rules(whens))
    elapsed = time.perf_counter() - t0
    size, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    t1 = time.perf_counter()
    gc.collect()
    full_gc = time.perf_counter() - t1
    print(
        f"| compile {n:,} mixed rules | {elapsed:,.1f} s, {elapsed * 1e6 / n:,.0f} us and "
        f"{size / n / 1024:,.1f} KB a rule; a full gc.collect() {full_gc * 1000:,.0f} ms |"
    )
    del compiled


def worst_cases() -> None:
    backend = StaticToolBackend({f"s{n}": [TOOL] for n in range(50)})

    def timed(rules: Sequence[Any], requests: Sequence[AgentRequest], repeat: int = 1) -> tuple[float, float]:
        compiled = compile_rules(rules)
        return measure(lambda r: run_prestep(compiled, r, backend=backend, dry_run=True), requests, repeat)

    def rule(i: int, when: str, mcp_id: str = "s0") -> Any:
        return expression_rule(name=f"w{i}", mcp_id=mcp_id, tool_name=TOOL, when=when, params="{}")

    queries = [AgentRequest(query=" ".join(random.Random(i).choices(FILLER, k=10))) for i in range(100)]
    # 1. more than 256 distinct regexes (the RE2 pattern cache)
    rules = [rule(i, f're_search(r"x{i:05d}y", query)') for i in range(10_000)]
    print(f"| 10,000 rules, 10,000 distinct regexes | {fmt(timed(rules, queries))} |")
    # 2. a 200 KB DataPart, rules on 50 servers
    big = [{"blob": "가" * 1000, "i": i} for i in range(66)]  # ~200 KB as JSON
    rules = [rule(i, 'data_get("kind") == "refund"', mcp_id=f"s{i % 50}") for i in range(10_000)]
    reqs = [AgentRequest(query="배송 문의", a2a_data=[{"kind": "refund"}, *big]) for _ in range(10)]
    print(f"| 200 KB DataPart, 10,000 rules on 50 servers (all fire) | {fmt(timed(rules, reqs))} |")
    rules = [
        rule(i, 'len(query) > 3 and data_get("kind") == "x"', mcp_id=f"s{i % 50}") for i in range(10_000)
    ]
    print(f"| 200 KB DataPart, 10,000 rules on 50 servers (none fire) | {fmt(timed(rules, reqs))} |")
    # 3. 20 % unhinted rules: in the mixed table (20 % row)
    # 4. a common word first in an `and`
    rules = [rule(i, f'"주문" in query and "상품{i:05d}" in query') for i in range(10_000)]
    reqs = [AgentRequest(query=f"주문 {q.query}") for q in queries]
    print(f'| 10,000 rules `"주문" in query and "X" in query`, query has 주문 | {fmt(timed(rules, reqs))} |')
    # 5. a 32,000-character query repeating a keyword that 1,000 rules share
    rules = [rule(i, f'"주문" in query and "상품{i:05d}" in query') for i in range(1_000)]
    rules += [rule(1_000 + i, f'"품목{i:05d}" in query') for i in range(9_000)]
    reqs = [AgentRequest(query="주문" * 16_000)] * 5
    print(f"| 32,000-char query repeating a keyword 1,000 rules share | {fmt(timed(rules, reqs))} |")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-worst", action="store_true")
    args = parser.parse_args(argv)
    print(f"llamon_agent from {sys.modules['llamon_agent'].__file__}")
    print(
        "| rules | no literal | ours p50 / p99 us | floor p50 / p99 us | floor / ours | zen-engine p50 / p99 us | zen / ours | compile a rule | check |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    sizes = [10_000] if args.quick else [100, 10_000, 50_000]
    for n in sizes:
        for unhinted in (0.05, 0.20):
            mixed_row(n, unhinted, 200 if args.quick else 400, with_zen=n <= 10_000)
    compile_cost(2_000 if args.quick else 50_000)
    if not args.no_worst:
        print("| worst case | p50 / p99 us |")
        print("|---|---:|")
        worst_cases()


if __name__ == "__main__":
    main()
