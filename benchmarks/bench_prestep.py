"""Pre-step overhead per request (dry run): our executor with and without its keyword index,
the same rules as plain Python functions (the floor) and as a GoRules zen-engine decision table.

    .venv/bin/python benchmarks/bench_prestep.py            # 100 / 1,000 / 10,000 rules
    .venv/bin/python benchmarks/bench_prestep.py --quick    # fewer queries, same sizes

Synthetic keyword rules: each rule fires when its own keyword is in the query (80 % on the
raw query, 20 % on ``query.lower()``); about 30 % of the queries carry 1-3 rule keywords.
Rules are expression rules (``llamon_agent.expr``) when that module exists, otherwise
stand-ins that carry the same ``RuleInfo.keywords`` hint. The figures are quoted in
docs/performance.md ("Pre-step"); nothing here is asserted by the tests.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ahocorasick  # noqa: E402
from peers import measure, zen_table_decision  # noqa: E402

from llamon_agent.prestep import StaticToolBackend, compile_rules, run_prestep  # noqa: E402
from llamon_agent.tools import AgentRequest, DeterministicContext, RuleInfo  # noqa: E402

SERVERS = [f"server-{n}" for n in range(5)]
TOOL = "lookup"
FILLER = [
    "안녕하세요",
    "배송",
    "언제",
    "오나요",
    "문의",
    "드립니다",
    "주문한",
    "상품이",
    "아직",
    "안",
    "왔어요",
    "확인",
    "부탁",
    "감사합니다",
    "고객센터",
    "연결",
    "가능한가요",
    "오늘",
    "내일",
    "환불",
    "교환",
    "절차",
    "알려주세요",
    "please",
    "help",
    "with",
    "my",
    "account",
    "thanks",
    "order",
    "status",
]


@dataclass(frozen=True)
class Spec:
    """One synthetic rule: its name, server, keyword and whether it matches on query.lower()."""

    name: str
    mcp_id: str
    keyword: str
    lowered: bool

    @property
    def query_token(self) -> str:
        return self.keyword.upper() if self.lowered else self.keyword


def make_specs(n: int) -> list[Spec]:
    specs = []
    for i in range(n):
        lowered = i % 5 == 4
        keyword = f"sku-{i:05d}" if lowered else f"품목{i:05d}"
        specs.append(
            Spec(name=f"rule_{i:05d}", mcp_id=SERVERS[i % len(SERVERS)], keyword=keyword, lowered=lowered)
        )
    return specs


def make_queries(specs: Sequence[Spec], count: int, rng: random.Random) -> list[str]:
    queries = []
    for _ in range(count):
        words = rng.choices(FILLER, k=rng.randint(6, 14))
        if rng.random() < 0.3:
            for spec in rng.sample(list(specs), k=min(len(specs), rng.randint(1, 3))):
                words.insert(rng.randrange(len(words) + 1), spec.query_token)
        queries.append(" ".join(words))
    return queries


# --------------------------------------------------------------------------- the four contenders


class StandInRule:
    """A keyword rule with the same keyword hint an expression rule would carry."""

    def __init__(self, spec: Spec) -> None:
        self.keyword = spec.keyword
        self.lowered = spec.lowered
        self.__llamon_rule__ = RuleInfo(
            name=spec.name, mcp_id=spec.mcp_id, keywords=frozenset({(spec.keyword, spec.lowered)})
        )

    def __call__(self, ctx: DeterministicContext) -> dict[str, Any] | None:
        text = ctx.query.lower() if self.lowered else ctx.query
        if self.keyword in text:
            return {"tool_name": TOOL, "params": {"q": ctx.query}}
        return None


def make_rules(specs: Sequence[Spec], kind: str = "auto") -> tuple[list[Any], str]:
    if kind == "stand-in":
        return [StandInRule(s) for s in specs], "stand-in rules (plain callables with a keyword hint)"
    try:
        from llamon_agent.expr import expression_rule
    except ImportError:
        if kind == "expr":
            raise
        return [StandInRule(s) for s in specs], "stand-in rules (llamon_agent.expr not available)"
    rules = [
        expression_rule(
            name=s.name,
            mcp_id=s.mcp_id,
            tool_name=TOOL,
            when=f'"{s.keyword}" in query.lower()' if s.lowered else f'"{s.keyword}" in query',
            params='{"q": query}',
        )
        for s in specs
    ]
    missing = sum(1 for r in rules if r.__llamon_rule__.keywords is None)
    note = "expression rules (llamon_agent.expr)"
    if missing:
        note += f"; {missing} without a keyword hint"
    return rules, note


def make_floor(specs: Sequence[Spec]) -> Callable[[str], list[str]]:
    """The same rules as plain Python functions in a loop: the cost of doing nothing clever."""

    def make(spec: Spec) -> Callable[[DeterministicContext], dict[str, Any] | None]:
        keyword = spec.keyword
        if spec.lowered:
            return lambda ctx: (
                {"tool_name": TOOL, "params": {"q": ctx.query}} if keyword in ctx.query.lower() else None
            )
        return lambda ctx: {"tool_name": TOOL, "params": {"q": ctx.query}} if keyword in ctx.query else None

    funcs = [(spec.name, make(spec)) for spec in specs]

    def run(query: str) -> list[str]:
        ctx = DeterministicContext(query=query)
        fired = []
        for name, func in funcs:
            if func(ctx) is not None:
                fired.append(name)
        return fired

    return run


def make_zen(specs: Sequence[Spec]) -> Callable[[str], list[str]]:
    """The same rules as one zen-engine decision table (hit policy "collect")."""

    rows = []
    for spec in specs:
        cell = f'contains($, "{spec.keyword}")'
        rows.append(
            {
                "_id": spec.name,
                "q": "" if spec.lowered else cell,
                "ql": cell if spec.lowered else "",
                "rule": f'"{spec.name}"',
                "tool": f'"{TOOL}"',
            }
        )
    table = {
        "hitPolicy": "collect",
        "inputs": [
            {"id": "q", "name": "query", "type": "expression", "field": "query"},
            {"id": "ql", "name": "lowered", "type": "expression", "field": "lower(query)"},
        ],
        "outputs": [
            {"id": "rule", "name": "rule", "type": "expression", "field": "rule"},
            {"id": "tool", "name": "tool", "type": "expression", "field": "tool_name"},
        ],
        "rules": rows,
    }
    decision = zen_table_decision(table, "rules")

    def run(query: str) -> list[str]:
        result = decision.evaluate({"query": query})["result"]
        return [row["rule"] for row in result]

    return run


def make_ours(rules: Sequence[Any], *, use_index: bool) -> Callable[[str], list[str]]:
    compiled = compile_rules(rules, use_index=use_index)
    backend = StaticToolBackend({mcp_id: [TOOL] for mcp_id in SERVERS})

    def run(query: str) -> list[str]:
        outcome = run_prestep(
            compiled, AgentRequest(query=query), backend=backend, dry_run=True, use_index=use_index
        )
        return [rec.rule for rec in outcome.fired]

    return run


# --------------------------------------------------------------------------- the index variants


def two_automata_candidates(specs: Sequence[Spec]) -> Callable[[str], list[int]]:
    """The alternative design: one automaton for raw literals, one for lowered ones."""
    raw, low = ahocorasick.Automaton(), ahocorasick.Automaton()
    for i, spec in enumerate(specs):
        target = low if spec.lowered else raw
        if target.exists(spec.keyword):
            target.get(spec.keyword).append(i)
        else:
            target.add_word(spec.keyword, [i])
    raw.make_automaton()
    low.make_automaton()

    def candidates(query: str) -> list[int]:
        hits: set[int] = set()
        for _, ids in raw.iter(query):
            hits.update(ids)
        for _, ids in low.iter(query.lower()):
            hits.update(ids)
        return sorted(hits)

    return candidates


# --------------------------------------------------------------------------- measuring


def check_agreement(contenders: dict[str, Callable[[str], list[str]]], queries: Sequence[str]) -> None:
    """Every contender must fire the same rules on every query, or the figures mean nothing."""
    for query in queries:
        answers = {name: sorted(func(query)) for name, func in contenders.items()}
        if len({tuple(a) for a in answers.values()}) != 1:
            raise SystemExit(f"contenders disagree on {query!r}: {answers}")


def fmt(pair: tuple[float, float]) -> str:
    p50, p99 = pair
    return f"{p50:>9,.1f} / {p99:>9,.1f}"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer queries (about 20 s)")
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--rules",
        choices=["auto", "expr", "stand-in"],
        default="auto",
        help="expression rules (auto: when llamon_agent.expr exists) or plain callables with the same hint",
    )
    args = parser.parse_args(argv)

    sizes = [int(s) for s in args.sizes.split(",")]
    rng = random.Random(args.seed)
    print(f"Python {sys.version.split()[0]}, {'quick' if args.quick else 'full'} run; times in microseconds")
    print()
    header = (
        f"{'rules':>6} | {'ours, index p50/p99':>21} | {'ours, no index p50/p99':>23} | "
        f"{'floor (functions) p50/p99':>25} | {'zen-engine p50/p99':>21} | {'zen/ours':>8} | {'match':>5}"
    )
    print(header)
    print("-" * len(header))
    notes: list[str] = []
    variants: list[str] = []
    for n in sizes:
        specs = make_specs(n)
        queries = make_queries(specs, 300 if args.quick else 1000, rng)
        slow_queries = queries[: (60 if args.quick else 200) if n >= 10_000 else len(queries)]
        rules, note = make_rules(specs, args.rules)
        t0 = time.perf_counter()
        indexed = make_ours(rules, use_index=True)
        compile_ms = (time.perf_counter() - t0) * 1000
        t0 = time.perf_counter()
        zen_run = make_zen(specs)
        zen_ms = (time.perf_counter() - t0) * 1000
        contenders = {
            "indexed": indexed,
            "no index": make_ours(rules, use_index=False),
            "floor": make_floor(specs),
            "zen": zen_run,
        }
        check_agreement(contenders, queries[:100])
        matching = sum(1 for q in queries if contenders["floor"](q)) / len(queries)

        fast_repeat = 5 if args.quick else 10
        ours = measure(indexed, queries, fast_repeat)
        no_index = measure(contenders["no index"], slow_queries, 1)
        floor = measure(contenders["floor"], slow_queries, 1)
        zen_pair = measure(zen_run, slow_queries, 1)
        print(
            f"{n:>6,} | {fmt(ours):>21} | {fmt(no_index):>23} | {fmt(floor):>25} | {fmt(zen_pair):>21} | "
            f"{zen_pair[0] / ours[0]:>7,.0f}x | {matching:>5.0%}"
        )
        notes.append(
            f"{n:,} rules: {note}; compile_rules {compile_ms:,.0f} ms, zen table build {zen_ms:,.0f} ms"
        )

        one = compile_rules(rules)
        two = two_automata_candidates(specs)
        variants.append(
            f"{n:>6,} | {fmt(measure(one.candidates, queries, fast_repeat)):>21} | "
            f"{fmt(measure(two, queries, fast_repeat)):>21}"
        )

    print()
    for line in notes:
        print(line)
    print()
    print("candidates() alone: one automaton scanned once (Korean queries are their own lowercase)")
    print("or twice, versus two automata (raw literals on the query, lowered on query.lower()):")
    print(f"{'rules':>6} | {'one automaton p50/p99':>21} | {'two automata p50/p99':>21}")
    for line in variants:
        print(line)


if __name__ == "__main__":
    main()
