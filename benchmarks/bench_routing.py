"""The pre-step on routing tables as their authors write them (benchmarks/routing_sets.py), side by
side with the plain-lambda floor, a small hand-written index and zen-engine, interleaved in one process.

    .venv/bin/python benchmarks/bench_routing.py            # 1,000 / 10,000 / 50,000 rules, budget rows
    .venv/bin/python benchmarks/bench_routing.py --quick    # 10,000 rules only
    LLAMON_BENCH_CODE=/path/to/other/checkout .venv/bin/python benchmarks/bench_routing.py
        # the same script against another checkout's llamon_agent (the "before" of a comparison)

Every contender must give the same fired rules, in the same order, with the same params, on
every measured request (checked before timing: the disagreement count is printed).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# The SDK of this checkout, or of another one (the "before" of a comparison): <checkout>/sdk/src.
sys.path.insert(
    0, str(Path(os.environ.get("LLAMON_BENCH_CODE") or Path(__file__).resolve().parents[1]) / "sdk" / "src")
)
sys.path.insert(0, str(Path(__file__).resolve().parent))

import ahocorasick  # noqa: E402
import re2  # noqa: E402
from peers import zen_table_decision  # noqa: E402
from routing_sets import Drawn, RuleSet, draw_request, draw_rules  # noqa: E402

from llamon_agent.expr import contains_all, contains_any, expression_rule  # noqa: E402
from llamon_agent.prestep import StaticToolBackend, compile_rules, run_prestep  # noqa: E402
from llamon_agent.tools import AgentRequest  # noqa: E402

Fired = list[tuple[str, Any]]

# ------------------------------------------------------------------ contenders


def _helpers() -> dict[str, Any]:
    patterns: dict[str, Any] = {}

    def re_search(pattern: str, text: str) -> bool:
        compiled = patterns.get(pattern)
        if compiled is None:
            compiled = patterns[pattern] = re2.compile(pattern)
        return compiled.search(text) is not None

    return {
        "re_search": re_search,
        "contains_any": contains_any,
        "contains_all": contains_all,
        "len": len,
        "bool": bool,
    }


def _lambdas(rule_set: RuleSet) -> list[tuple[Drawn, Any, Any, frozenset[str]]]:
    """Each rule's `when` and `params` as plain Python lambdas (the user's own loop)."""
    scope = _helpers()
    args = "query, context, data_get, a2a_files, tool_names"
    params_cache: dict[str, Any] = {}
    out = []
    for rule in rule_set.rules:
        when = eval(f"lambda {args}: {rule.when}", scope)  # noqa: S307  # our own generated text
        params = params_cache.get(rule.params)
        if params is None:
            params = params_cache[rule.params] = eval(f"lambda {args}: {rule.params}", scope)  # noqa: S307
        out.append((rule, when, params, frozenset(rule_set.tools[rule.mcp_id])))
    return out


def _data_get(parts: Any) -> Callable[..., Any]:
    def data_get(key: str, default: Any = None) -> Any:
        for part in parts or ():
            if key in part:
                return part[key]
        return default

    return data_get


def make_floor(rule_set: RuleSet) -> Callable[[dict[str, Any]], Fired]:
    """A plain loop over the lambdas: what a user would write without any engine."""
    funcs = _lambdas(rule_set)

    def run(req: dict[str, Any]) -> Fired:
        query, context, files = req["query"], req["context"], req["a2a_files"]
        data_get = _data_get(req["a2a_data"])
        return [
            (rule.name, params(query, context, data_get, files, tools))
            for rule, when, params, tools in funcs
            if when(query, context, data_get, files, tools)
        ]

    return run


def make_hand_index(rule_set: RuleSet) -> Callable[[dict[str, Any]], Fired]:
    """The ~40-line index a user could write: Aho-Corasick on the literals, dicts for equality,
    the lambdas for everything else (always evaluated)."""
    funcs = _lambdas(rule_set)
    automaton = ahocorasick.Automaton()
    equal: dict[tuple[str, str], dict[Any, list[int]]] = {}
    always: list[int] = []
    for i, (rule, *_rest) in enumerate(funcs):
        if rule.keys:
            for key in rule.keys:
                if key not in automaton:
                    automaton.add_word(key, ([], []))
                automaton.get(key)[rule.lowered].append(i)
        elif rule.eq is not None:
            equal.setdefault(rule.eq[:2], {}).setdefault(rule.eq[2], []).append(i)
        else:
            always.append(i)
    automaton.make_automaton()

    def run(req: dict[str, Any]) -> Fired:
        query, context, files = req["query"], req["context"], req["a2a_files"]
        data_get = _data_get(req["a2a_data"])
        hits = set(always)
        for _, (raw, _low) in automaton.iter(query):
            hits.update(raw)
        for _, (_raw, low) in automaton.iter(query.lower()):
            hits.update(low)
        for (source, key), values in equal.items():
            value = context.get(key) if source == "context" else data_get(key)
            hits.update(values.get(value, ()))
        out = []
        for i in sorted(hits):
            rule, when, params, tools = funcs[i]
            if when(query, context, data_get, files, tools):
                out.append((rule.name, params(query, context, data_get, files, tools)))
        return out

    return run


def make_rules(rule_set: RuleSet) -> list[Any]:
    return [
        expression_rule(name=r.name, mcp_id=r.mcp_id, tool_name=r.tool_name, when=r.when, params=r.params)
        for r in rule_set.rules
    ]


def make_ours(rule_set: RuleSet, rules: Sequence[Any] | None = None) -> Callable[[dict[str, Any]], Fired]:
    compiled = compile_rules(rules if rules is not None else make_rules(rule_set))
    backend = StaticToolBackend(rule_set.tools)

    def run(req: dict[str, Any]) -> Fired:
        outcome = run_prestep(compiled, AgentRequest(**req), backend=backend, dry_run=True)
        if outcome.error is not None:
            return [("error", outcome.error)]
        return [(rec.rule, rec.params) for rec in outcome.fired]

    return run


def make_zen(rule_set: RuleSet) -> Callable[[dict[str, Any]], Fired] | None:
    """The same rules as one zen-engine decision table (collect), fired rules only (no params)."""
    try:
        import zen  # noqa: F401
    except ImportError:
        return None
    table = {
        "hitPolicy": "collect",
        "inputs": [{"id": "c", "name": "when", "type": "expression", "field": ""}],
        "outputs": [{"id": "rule", "name": "rule", "type": "expression", "field": "rule"}],
        "rules": [{"_id": f"r{i}", "c": r.zen, "rule": f'"{r.name}"'} for i, r in enumerate(rule_set.rules)],
    }
    decision = zen_table_decision(table, "t")
    tools = {m.replace("-", "_"): names for m, names in rule_set.tools.items()}

    def run(req: dict[str, Any]) -> Fired:
        data = {k: v for part in reversed(req["a2a_data"] or []) for k, v in part.items()}
        result = decision.evaluate(
            {
                "query": req["query"],
                "qlen": len(req["query"]),  # zen's len() counts UTF-8 bytes
                "context": req["context"],
                "data": data,
                "files": req["a2a_files"] or [],
                "tools": tools,
            }
        )["result"]
        return [(row["rule"], None) for row in result]

    return run


# ------------------------------------------------------------------ measuring


def interleaved(
    contenders: dict[str, Callable[[Any], Any]], requests: Sequence[Any], rounds: int
) -> dict[str, float]:
    """p50 in microseconds of each contender, the contenders taking turns request by request."""
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for req in requests[: max(1, len(requests) // 10)]:  # warm-up
        for name in names:
            contenders[name](req)
    gc.collect()
    gc.disable()
    try:
        for r in range(rounds):
            for k, req in enumerate(requests):
                order = names[(r + k) % len(names) :] + names[: (r + k) % len(names)]
                for name in order:
                    if name == "zen-engine" and k % 10:
                        continue  # 100-1,000x slower: every tenth request is enough for its p50
                    t0 = time.perf_counter_ns()
                    contenders[name](req)
                    samples[name].append((time.perf_counter_ns() - t0) / 1000.0)
    finally:
        gc.enable()
    return {name: statistics.median(values) for name, values in samples.items()}


def disagreements(
    contenders: dict[str, Callable[[Any], Any]], requests: Sequence[Any]
) -> tuple[int, int, list[str]]:
    """(requests where a contender differs from the floor, fired rules in all, contenders dropped)."""
    floor = contenders["floor"]
    bad = 0
    fired = 0
    dropped = []
    for k, req in enumerate(requests):
        want = floor(req)
        fired += len(want)
        for name, run in list(contenders.items()):
            if name == "zen-engine" and k >= 50:
                continue  # checked on the first 50 requests: it is 100-1,000x slower
            got = run(req)
            if name == "zen-engine":
                if [n for n, _ in got] != [n for n, _ in want]:
                    dropped.append(name)
                    del contenders[name]
                continue
            if got != want:
                bad += 1
                print(f"  {name} disagrees on {req['query'][:60]!r}: {got[:3]} vs {want[:3]}")
    return bad, fired, dropped


def routing_row(n: int, no_literal: float, count: int, rounds: int, with_zen: bool) -> None:
    rule_set = draw_rules(n, no_literal, seed=n + int(no_literal * 100))
    rng = random.Random(n)
    requests = [draw_request(rng, rule_set) for _ in range(count)]
    t0 = time.process_time()
    ours = make_ours(rule_set)
    compile_us = (time.process_time() - t0) * 1e6 / n
    contenders: dict[str, Callable[[Any], Any]] = {
        "ours": ours,
        "floor": make_floor(rule_set),
        "hand index": make_hand_index(rule_set),
    }
    if with_zen:
        zen_run = make_zen(rule_set)
        if zen_run is not None:
            contenders["zen-engine"] = zen_run
    bad, fired, dropped = disagreements(contenders, requests)
    p50 = interleaved(contenders, requests, rounds)
    o = p50["ours"]
    zen = f"{p50['zen-engine']:,.0f} | {p50['zen-engine'] / o:,.1f}x" if "zen-engine" in p50 else "- | -"
    print(
        f"| {n:,} | {no_literal:.0%} | {o:,.1f} | {p50['floor']:,.0f} | {p50['floor'] / o:,.1f}x | "
        f"{p50['hand index']:,.1f} | {p50['hand index'] / o:,.2f}x | {zen} | {compile_us:,.0f} us | "
        f"{bad} ({fired} fired{', zen left out' if dropped else ''}) |"
    )


def unindexable_row(n: int = 2_000, count: int = 100, opaque_only: bool = True) -> None:
    """Per evaluated rule, conditions no index narrows (`abs` of a difference): ours against the same
    lambdas. ``opaque_only=False``: the generator's arithmetic mix, every rule evaluated (no index)."""
    rule_set = draw_rules(n, 1.0, seed=5, unindexable=1.0, opaque_only=opaque_only)
    rng = random.Random(5)
    requests = [draw_request(rng, rule_set) for _ in range(count)]
    compiled = compile_rules(make_rules(rule_set), use_index=opaque_only)
    contenders = {"ours": make_ours(rule_set, compiled), "floor": make_floor(rule_set)}
    bad, _fired, _ = disagreements(contenders, requests)
    p50 = interleaved(contenders, requests, 3)
    o, f = p50["ours"] * 1000 / n, p50["floor"] * 1000 / n
    what = "un-indexable rule" if opaque_only else "arithmetic rule, index off"
    print(
        f"| per evaluated {what} ({n:,} rules) | ours {o:,.0f} ns | lambda {f:,.0f} ns | {o / f:,.2f}x | {bad} disagreements |"
    )


def compile_row(n: int) -> None:
    """Compiling a new set (fresh literals and numbers): CPU and memory kept, per rule."""
    import tracemalloc

    rule_set = draw_rules(n, 0.1, seed=n + 1)
    gc.collect()
    t0 = time.process_time()
    compiled = compile_rules(make_rules(rule_set))
    cpu = time.process_time() - t0
    del compiled
    rule_set = draw_rules(n, 0.1, seed=n + 2)
    gc.collect()
    tracemalloc.start()
    compiled = compile_rules(make_rules(rule_set))
    kept, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(
        f"| compile {n:,} rules (10 % without a text literal) | {cpu * 1e6 / n:,.0f} us CPU and {kept / n / 1024:,.2f} KB kept a rule |"
    )
    del compiled


def budget_row(n: int, count: int = 10) -> None:
    """Long legitimate requests: queries at the 32,000-character cap, DataParts near their cap."""
    rule_set = draw_rules(n, 0.3, seed=11)
    rules = make_rules(rule_set)
    compiled = compile_rules(rules)
    backend = StaticToolBackend(rule_set.tools)
    rng = random.Random(11)
    failures = 0
    worst = 0.0
    for k in range(count):
        req = draw_request(rng, rule_set, query_chars=32_000 if k % 2 == 0 else 10_000)
        req["a2a_data"] = [*req["a2a_data"], {"blob": "가" * 60_000, "items": list(range(2_000))}]
        t0 = time.process_time()
        outcome = run_prestep(compiled, AgentRequest(**req), backend=backend, dry_run=True)
        worst = max(worst, time.process_time() - t0)
        failures += sum(1 for rec in outcome.records if rec.error and "budget" in rec.error) > 0
    print(
        f"| {n:,} rules, queries of 10,000-32,000 chars, ~190 KB DataParts | {failures} of {count} requests failed on the budget | slowest {worst * 1000:,.0f} ms CPU |"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    print(f"llamon_agent from {sys.modules['llamon_agent'].__file__}")
    print(
        "| rules | no text literal | ours p50 us | floor p50 us | floor / ours | hand index p50 us | hand / ours | zen-engine p50 us | zen / ours | compile a rule (CPU) | disagreements |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    sizes = [10_000] if args.quick else [1_000, 10_000, 50_000]
    for n in sizes:
        for no_literal in (0.1, 0.3):
            routing_row(
                n, no_literal, 100 if n >= 50_000 else 200, 2 if n >= 50_000 else 3, with_zen=n <= 10_000
            )
    unindexable_row()
    unindexable_row(opaque_only=False)
    compile_row(10_000 if args.quick else 50_000)
    print("| long requests | budget failures | CPU |")
    print("|---|---|---:|")
    for n in [10_000] if args.quick else [10_000, 50_000]:
        budget_row(n)


if __name__ == "__main__":
    main()
