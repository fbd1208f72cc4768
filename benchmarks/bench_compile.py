"""What compiling a rule set costs: time, memory and garbage-collector work per rule, and the
import of 2,000 rules, with expressions compiled by shape (now) and each one on its own (the
naive compile-per-rule, as before), side by side in one run.

    .venv/bin/python benchmarks/bench_compile.py            # 2,000 / 10,000 / 50,000 rules, import
    .venv/bin/python benchmarks/bench_compile.py --quick    # 2,000 / 10,000 rules, import

The rules are the realistic mix of bench_prestep_mixed.py (5 % without any literal). Every
figure comes from a fresh process (nothing compiled before, nothing cached); the naive
contender is this code with compiling by shape turned off (``shapes.lookup`` answers None).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _naive() -> None:
    from llamon_agent.expr import shapes

    shapes.lookup = lambda source, kind: None  # type: ignore[assignment]


def _compile(n: int, memory: bool) -> dict[str, float]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_prestep_mixed import make_rules, make_whens

    from llamon_agent.prestep import compile_rules

    whens = make_whens(n, 0.05, random.Random(7))
    gc.collect()
    if memory:
        tracemalloc.start()
    t0, c0 = time.perf_counter(), time.process_time()
    compiled = compile_rules(make_rules(whens))
    elapsed = time.perf_counter() - t0
    out = {"s": elapsed, "cpu": time.process_time() - c0}
    if memory:
        out["bytes"] = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
    else:
        t1 = time.perf_counter()
        gc.collect()
        out["gc_s"] = time.perf_counter() - t1
        gc.freeze()  # what rules.engine does after a large compile
        t1 = time.perf_counter()
        gc.collect()
        out["gc_frozen_s"] = time.perf_counter() - t1
    del compiled
    return out


def _import(n: int) -> dict[str, float]:
    os.environ.setdefault("LLAMON_VAR_DIR", tempfile.mkdtemp(prefix="llamon-bench-compile-"))
    os.environ["LLAMON_ENV"] = "dev"
    os.environ["DJANGO_SETTINGS_MODULE"] = "llamon_web.settings"
    os.environ.pop("REDIS_URL", None)
    os.environ.pop("DATABASE_URL", None)
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import django

    django.setup()
    from bench_prestep_mixed import make_whens
    from django.core.management import call_command

    from accounts.services import admin_ensure
    from rules import exporting

    call_command("migrate", verbosity=0)
    user, _ = admin_ensure(password="bench-password-123")
    whens = make_whens(n, 0.05, random.Random(11))
    rules = [
        {
            "name": f"rule_{i}",
            "mcp_id": f"server-{i % 5}",
            "tool_name": "lookup",
            "description": "",
            "when": when,
            "params": '{"q": query[:50]}',
            "stop": False,
            "enabled": True,
        }
        for i, when in enumerate(whens)
    ]
    t0, c0 = time.perf_counter(), time.process_time()
    exporting.rule_set_import_json(
        actor=user, data={"format": exporting.FORMAT, "name": f"bench-{time.time_ns()}", "rules": rules}
    )
    return {"s": time.perf_counter() - t0, "cpu": time.process_time() - c0}


def _child(args: argparse.Namespace) -> None:
    if args.contender == "naive":
        _naive()
    result = _import(args.n) if args.what == "import" else _compile(args.n, memory=args.what == "memory")
    print(json.dumps(result))


def _run(contender: str, what: str, n: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", contender, what, str(n)],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--child", nargs=3, metavar=("CONTENDER", "WHAT", "N"))
    args = parser.parse_args()
    if args.child:
        contender, what, n = args.child
        _child(argparse.Namespace(contender=contender, what=what, n=int(n)))
        return
    sizes = [2_000, 10_000] if args.quick else [2_000, 10_000, 50_000]
    print(
        "| rules | compile: by shape / each alone | a rule (CPU time) | memory a rule | full gc.collect() "
        "(after gc.freeze()) | naive / shape |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        # Time and CPU from the run without tracemalloc (which slows a compile 3-7x), bytes from the other.
        row = {c: {**_run(c, "memory", n), **_run(c, "time", n)} for c in ("shape", "naive")}
        s, v = row["shape"], row["naive"]
        print(
            f"| {n:,} | {s['s']:,.2f} s / {v['s']:,.2f} s | {s['cpu'] * 1e6 / n:,.0f} us / "
            f"{v['cpu'] * 1e6 / n:,.0f} us | {s['bytes'] / n / 1024:,.2f} KB / {v['bytes'] / n / 1024:,.2f} KB | "
            f"{s['gc_s'] * 1e3:,.0f} ms ({s['gc_frozen_s'] * 1e3:,.0f} ms) / {v['gc_s'] * 1e3:,.0f} ms "
            f"({v['gc_frozen_s'] * 1e3:,.0f} ms) | {v['s'] / s['s']:,.1f}x |"
        )
    n = 2_000
    s, v = _run("shape", "import", n), _run("naive", "import", n)
    print(
        f"| import {n:,} rules (SQLite, whole call) | {s['s']:,.2f} s / {v['s']:,.2f} s | "
        f"{s['cpu']:,.2f} s / {v['cpu']:,.2f} s CPU | | | {v['s'] / s['s']:,.1f}x |"
    )


if __name__ == "__main__":
    main()
