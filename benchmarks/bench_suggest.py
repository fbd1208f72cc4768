"""Rule suggestions against ground truth: recorded runs with known intents, mined, replayed, scored.

The runs come from ``tests/support/intents.py`` (33 intents of Korean banks, card companies,
insurers, hospitals and shops; Korean and English phrasings with particles, spaces left out and
typos; chatbotIds; DataParts; 12 % small talk; 5 % of runs where the scripted model calls a wrong
tool or none; three intents already answered by rules). The miner (``llamon_agent.suggest``) sees
only what a workbench stores of a run; the scorer knows each run's true intent.

Printed: intents recovered (a kept suggestion for the intent's tool whose ground-truth precision on
the held-out runs is >= 99 %), the lowest ground-truth precision of a kept suggestion, the share of
held-out calls with the right arguments, the miner's CPU time per pass and in total, and the same
passes split over two processes (each pass's partitions side by side; the learning pass is one).

Run: .venv/bin/python benchmarks/bench_suggest.py [--runs 100000] [--workers 2]
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llamon_agent import suggest  # noqa: E402
from tests.support.intents import generate, score  # noqa: E402

OBSERVATIONS: list[suggest.Observation] = []


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _vocabulary(bounds: tuple[int, int]) -> suggest.Vocabulary:
    return suggest.vocabulary(OBSERVATIONS[bounds[0] : bounds[1]])


def _featurize(args: tuple[tuple[int, int], suggest.Features]) -> list[suggest.Row]:
    bounds, features = args
    return suggest.featurize(OBSERVATIONS[bounds[0] : bounds[1]], features)


def _replay(
    args: tuple[tuple[int, int], list[suggest.Candidate], dict[str, set[str]]],
) -> list[suggest.Tally]:
    bounds, candidates, tools = args
    return suggest.replay(candidates, OBSERVATIONS[bounds[0] : bounds[1]], tools)


def mine(workers: int) -> tuple[suggest.Mined, dict[str, float]]:
    """The miner's three passes, each map over `workers` partitions (processes when > 1)."""
    n = len(OBSERVATIONS)
    step = -(-n // workers)
    parts = [(i, min(i + step, n)) for i in range(0, n, step)]
    pool = multiprocessing.get_context("fork").Pool(workers) if workers > 1 else None
    pmap = pool.map if pool else lambda f, xs: list(map(f, xs))
    times: dict[str, float] = {}
    try:
        t = time.perf_counter()
        vocab = suggest.merge_vocabularies(pmap(_vocabulary, parts))
        features = suggest.Features.build(vocab)
        rows = [row for part in pmap(_featurize, [(b, features) for b in parts]) for row in part]
        times["features"] = time.perf_counter() - t
        t = time.perf_counter()
        candidates, rejected = suggest.learn(rows, features)
        times["learn"] = time.perf_counter() - t
        t = time.perf_counter()
        tallies = [suggest.Tally() for _ in candidates]
        for part in pmap(_replay, [(b, candidates, features.tools) for b in parts]):
            for total, tally in zip(tallies, part, strict=True):
                total.merge(tally)
        kept, dropped = suggest.select(candidates, tallies, turn=suggest.turn_value(OBSERVATIONS))
        times["replay"] = time.perf_counter() - t
    finally:
        if pool:
            pool.close()
            pool.join()
    return suggest.Mined(kept, rejected + dropped, suggest.model_noise(candidates, tallies), n), times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    observations, truth = generate(args.runs)
    OBSERVATIONS[:] = observations
    print(f"{args.runs:,} runs, {sum(1 for o in observations if o.held_out()):,} held out")
    for workers in (1, args.workers) if args.workers > 1 else (1,):
        cpu, wall = _cpu(), time.perf_counter()
        mined, times = mine(workers)
        cpu, wall = _cpu() - cpu, time.perf_counter() - wall
        print(
            f"  {workers} process(es): {wall:.1f} s wall, {cpu:.1f} s CPU "
            f"(features {times['features']:.1f} s, learn {times['learn']:.1f} s, replay {times['replay']:.1f} s wall)"
        )
    scored = score(mined.suggestions, observations, truth)
    low = min((p["precision"] for p in scored["per_suggestion"]), default=0.0)
    print(f"  model's own inconsistency (estimated): {mined.noise:.1%}")
    print(
        f"  intents recovered: {scored['recovered']} of {scored['intents']} "
        f"({scored['recovered'] / scored['intents']:.0%}); suggestions kept: {len(mined.suggestions)}"
    )
    print(f"  lowest ground-truth precision of a kept suggestion (held-out runs): {low:.2%}")
    print(f"  held-out calls with the right arguments: {scored['args_right']:.2%}")
    print(f"  peak memory: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    for r in mined.rejected:
        print(f"  not proposed: {r.mcp_id}/{r.tool} ({r.runs} runs): {r.reason}")


if __name__ == "__main__":
    main()
