"""Live-tester request time on a 200-rule set (dry run), as the server sees it.

Prints p50/p95 of: the whole htmx request (form parsing, snapshot from the database, compile,
pre-step, schema checks, template), the evaluation alone, and the evaluation with the keyword
index switched off; and the size of the tester's API answer (``POST /api/rule-sets/{id}/evaluate``)
beside the page's, with the API request's own time. ``--fire-every K`` makes every K-th rule fire
on the queries that mention 주문 (half of them): at 2,000 rules and K=20, 100 rules fire.
Run: .venv/bin/python benchmarks/bench_tester.py [--rules 200] [--n 200] [--fire-every 0]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LLAMON_VAR_DIR", tempfile.mkdtemp(prefix="llamon-bench-"))
os.environ["LLAMON_ENV"] = "dev"
os.environ["DJANGO_SETTINGS_MODULE"] = "llamon_web.settings"
os.environ.pop("DATABASE_URL", None)
os.environ.pop("REDIS_URL", None)

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402

KEYWORDS = [
    "주문",
    "조회",
    "환불",
    "배송",
    "결제",
    "카드",
    "계좌",
    "보험",
    "청구",
    "예약",
    "취소",
    "변경",
    "order",
    "refund",
    "card",
    "claim",
    "policy",
    "invoice",
    "account",
    "premium",
]
QUERIES = [
    "주문 조회 부탁해 A-1001",
    "환불은 언제 되나요?",
    "what is my card limit",
    "날씨 어때?",
    "보험 청구 서류",
    "cancel my order A-1002",
    "계좌 변경하고 싶어요",
    "hello there",
]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def setup(n_rules: int, fire_every: int = 0):
    from accounts.services import admin_ensure
    from rules import services
    from servers.models import McpServer

    call_command("migrate", verbosity=0)
    user, _ = admin_ensure(password="bench-password-123")
    McpServer.objects.update_or_create(
        mcp_id="order-service",
        defaults={
            "transport": "http",
            "url": "http://127.0.0.1:9/mcp",
            "tools_refreshed_at": timezone.now(),
            "tools": [
                {
                    "name": "get_order",
                    "description": "",
                    "input_schema": {
                        "type": "object",
                        "properties": {"query": {"type": "string"}},
                        "required": ["query"],
                    },
                }
            ],
        },
    )
    rule_set = services.rule_set_create(actor=user, name=f"bench-{time.time_ns()}")
    for i in range(n_rules):
        a, b = KEYWORDS[i % len(KEYWORDS)], KEYWORDS[(i * 7 + 3) % len(KEYWORDS)]
        when = f'"{a}" in query and "{b}" in query'
        if fire_every and i % fire_every == 0:
            when = '"주문" in query'
        services.rule_create(
            actor=user,
            rule_set=rule_set,
            name=f"rule_{i}",
            mcp_id="order-service",
            tool_name="get_order",
            when=when,
            params='{"query": query}',
        )
    return user, rule_set


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rules", type=int, default=200)
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--fire-every", type=int, default=0)
    args = parser.parse_args()
    user, rule_set = setup(args.rules, args.fire_every)
    client = Client(SERVER_NAME="127.0.0.1")
    client.force_login(user)
    from accounts.token_services import token_create

    bearer = f"Bearer {token_create(actor=user, name=f'bench-{time.time_ns()}').secret}"

    from llamon_agent.expr import expression_rule
    from llamon_agent.prestep import compile_rules, run_prestep
    from llamon_agent.tools import AgentRequest
    from rules import engine

    url = f"/rules/{rule_set.pk}/test"
    timings: dict[str, list[float]] = {
        "whole tester request (htmx)": [],
        "evaluation alone": [],
        "evaluation, index off": [],
        "evaluation, compiled every request": [],
        "tester API request": [],
    }
    sizes: list[int] = []
    api_sizes: list[int] = []
    api_fired: list[int] = []
    snapshot = engine.rule_set_snapshot(rule_set)
    servers = engine.servers_by_id(["order-service"])
    backend = engine.dry_backend(servers)
    for i in range(args.n + 10):
        query = QUERIES[i % len(QUERIES)]
        t0 = time.perf_counter()
        response = client.post(
            url, {"t-query": query, "t-context": '{"userId": "C-1001"}'}, HTTP_HX_REQUEST="true"
        )
        t1 = time.perf_counter()
        assert response.status_code == 200, response.status_code
        engine.evaluate(snapshot, AgentRequest(query=query, context={"userId": "C-1001"}), servers=servers)
        t2 = time.perf_counter()
        run_prestep(
            engine.compile_snapshot(snapshot, use_index=False),
            AgentRequest(query=query),
            backend=backend,
            dry_run=True,
        )
        t3 = time.perf_counter()
        fresh = [
            expression_rule(
                name=r["name"],
                mcp_id=r["mcp_id"],
                tool_name=r["tool_name"],
                when=r["when"],
                params=r["params"],
                stop=r["stop"],
            )
            for r in snapshot
        ]  # the naive way: no compile cache
        run_prestep(compile_rules(fresh), AgentRequest(query=query), backend=backend, dry_run=True)
        t4 = time.perf_counter()
        answer = client.post(
            f"/api/rule-sets/{rule_set.pk}/evaluate",
            json.dumps({"query": query, "context": {"userId": "C-1001"}}),
            content_type="application/json",
            HTTP_AUTHORIZATION=bearer,
        )
        t5 = time.perf_counter()
        assert answer.status_code == 200, answer.content[:300]
        if i >= 10:  # warm-up
            sizes.append(len(response.content))
            api_sizes.append(len(answer.content))
            api_fired.append(answer.json()["counts"]["fired"])
            timings["tester API request"].append((t5 - t4) * 1000)
            timings["whole tester request (htmx)"].append((t1 - t0) * 1000)
            timings["evaluation alone"].append((t2 - t1) * 1000)
            timings["evaluation, index off"].append((t3 - t2) * 1000)
            timings["evaluation, compiled every request"].append((t4 - t3) * 1000)

    print(f"Live tester, {args.rules} rules, dry run, {args.n} requests (ms)")
    # Fired and failed rules are all listed, skipped ones up to rules.tester.SKIPPED_SHOWN.
    print(
        f"response size: median {statistics.median(sizes) / 1024:.1f} KB, largest {max(sizes) / 1024:.1f} KB"
    )
    print(
        f"API answer size: median {statistics.median(api_sizes) / 1024:.1f} KB, largest "
        f"{max(api_sizes) / 1024:.1f} KB (fired rules a request: median {statistics.median(api_fired)}, "
        f"most {max(api_fired)})"
    )
    firing = [size for size, n in zip(api_sizes, api_fired, strict=True) if n]
    if firing:
        print(
            f"API answer size when rules fire: median {statistics.median(firing) / 1024:.1f} KB, "
            f"largest {max(firing) / 1024:.1f} KB ({len(firing)} requests)"
        )
    print(f"{'what':34} {'p50':>8} {'p95':>8} {'mean':>8}")
    for name, values in timings.items():
        print(
            f"{name:34} {statistics.median(values):8.2f} {percentile(values, 0.95):8.2f} {statistics.fmean(values):8.2f}"
        )


if __name__ == "__main__":
    main()
