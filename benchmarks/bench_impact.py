"""Impact analysis: a candidate rule set replayed against 100,000 recorded runs, ours vs the naive way.

Prints the figures quoted in docs/governance.md ("Speed"). Uses a temporary SQLite database and
seeds it directly (bulk inserts, not the worker): RUNS runs over 6 days of one rule set (v1, 60
rules: the seed's three and 57 keyword rules), each with the pre-step and rule steps v1 decided for
its request, as the step sink stores them. The candidate is v1 with one rule's params changed, one
rule disabled and one new rule, so a share of the runs change.

- ours: ``governance.services.impact_replay``: the candidate's dry-run pre-step once per distinct
  request (what its rules read of it: the query, the data, the context keys they name), each
  distinct pair of a request and its recorded steps compared once, runs in (created_at, id) keyset
  chunks, a chunk's steps in one query;
- naive: per run, ``Run.objects.get`` and its rule steps (whole rows), then ``rules.engine.evaluate``
  (the tester's dry run: finds the servers again, checks params against the tool schemas) and the
  same diff. Timed on NAIVE_RUNS runs and scaled to the whole set; ours is also timed on those runs.

Run: .venv/bin/python benchmarks/bench_impact.py [--runs 100000] [--naive-runs 2000] [--distinct-queries]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["LLAMON_VAR_DIR"] = tempfile.mkdtemp(prefix="llamon-bench-impact-")
os.environ["DJANGO_SETTINGS_MODULE"] = "llamon_web.settings_test"
for name in ("DATABASE_URL", "REDIS_URL", "LLAMON_TEST_DB"):
    os.environ.pop(name, None)

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import transaction  # noqa: E402
from django.utils import timezone  # noqa: E402

KEYWORDS = [f"kw{i:02d}" for i in range(57)]
WORDS = ["주문", "조회", "검색", "환불", "배송", "안녕하세요", "고마워요", "날씨", "문의", "결제"]


def rules_v1() -> list[dict]:
    from llamon_web.demo import SEED_RULES

    keyword_rules = [
        {
            "name": f"route_{kw}",
            "mcp_id": "knowledge-base",
            "tool_name": "search_docs",
            "when": f'"{kw}" in query',
            "params": '{"q": query, "limit": 3}',
        }
        for kw in KEYWORDS
    ]
    return [dict(r) for r in SEED_RULES] + keyword_rules


def seed(n_runs: int, distinct_queries: bool = False) -> tuple[object, list[dict]]:
    """The rule set with v1 published, the candidate snapshot, and n_runs recorded runs.

    ``distinct_queries``: every run's query gets its own suffix (" S-<n>", no rule's keyword), so
    no two requests share a query (by default 500 distinct queries repeat).
    """
    from agents.models import Run, RunStep
    from llamon_agent.prestep import run_prestep
    from llamon_agent.tools import AgentRequest
    from rules import engine
    from rules import services as rule_services
    from servers.models import McpServer
    from tests.support.rule_sets import TOOLS

    for mcp_id, tools in TOOLS.items():
        McpServer.objects.create(mcp_id=mcp_id, transport="http", url="http://127.0.0.1:9/mcp", tools=tools)
    rule_set = rule_services.rule_set_create(actor=None, name="bench")
    for rule in rules_v1():
        rule_services.rule_create(actor=None, rule_set=rule_set, **rule)
    version = rule_services.rule_set_publish(actor=None, rule_set=rule_set, message="v1")
    v1 = list(version.content)

    candidate = [dict(r) for r in v1]
    candidate[0]["params"] = '{"query": ctx.query, "lang": "ko"}'  # route_order_lookup: a param more
    candidate[5]["enabled"] = False  # route_kw02 removed
    candidate.append(
        {
            "name": "route_refund",
            "description": "",
            "mcp_id": "order-service",
            "tool_name": "list_orders",
            "when": '"환불" in query',
            "params": '{"customer_id": context.get("userId", "anon")}',
            "stop": False,
            "enabled": True,
        }
    )

    # 500 distinct requests; v1's decision for each is computed once and stored on every run using it.
    rng = random.Random(7)
    compiled = engine.compile_snapshot(v1)
    backend = engine.dry_backend(engine.servers_by_id(engine.snapshot_mcp_ids(v1)))
    templates = []
    for i in range(500):
        words = rng.sample(WORDS, 3) + rng.sample(KEYWORDS, rng.choice([0, 0, 1, 2]))
        context = {"userId": f"C-{i % 97}", "chatbotId": rng.choice(["premium-support", "basic", "kiosk"])}
        request = AgentRequest(query=" ".join(words) + f" A-{1000 + i}", context=context)
        outcome = run_prestep(compiled, request, backend=backend, dry_run=True)
        fired = [(r.rule, r.mcp_id, r.tool_name, r.params) for r in outcome.fired]
        templates.append((request, fired))

    now = timezone.now()
    start = now - timedelta(days=6)
    created_at = Run._meta.get_field("created_at")
    created_at.auto_now_add = False  # the seed sets each run's time itself (one INSERT, no UPDATE pass)
    step = timedelta(days=6) / n_runs
    batch = 5_000
    for first in range(0, n_runs, batch):
        count = min(batch, n_runs - first)
        runs = []
        for k in range(first, first + count):
            request, _ = templates[k % len(templates)]
            runs.append(
                Run(
                    status="succeeded",
                    query=request.query + (f" S-{k}" if distinct_queries else ""),
                    context={**request.context, "sessionId": f"s-{k}"},  # every request distinct
                    user_id=request.context["userId"],
                    chatbot_id=request.context["chatbotId"],
                    rule_set_name="bench",
                    rule_set_ref="v1",
                    rule_set_hash=version.content_hash,
                    rule_set_version=version,
                    created_at=start + step * k,
                )
            )
        created = Run.objects.bulk_create(runs, batch_size=batch)
        steps = []
        for k, run in zip(range(first, first + count), created, strict=True):
            template, fired = templates[k % len(templates)]
            if distinct_queries:  # the params that repeat the query repeat this run's query
                fired = [
                    (r, m, t, {key: run.query if v == template.query else v for key, v in p.items()})
                    for r, m, t, p in fired
                ]
            at = start + step * k
            steps.append(
                RunStep(
                    run_id=run.pk,
                    seq=1,
                    kind="prestep",
                    name="deterministic pre-step",
                    status="ok",
                    started_at=at,
                    input={"query": run.query},
                )
            )
            for seq, (rule, mcp_id, tool_name, params) in enumerate(fired, start=2):
                steps.append(
                    RunStep(
                        run_id=run.pk,
                        seq=seq,
                        kind="rule",
                        name=rule,
                        status="ok",
                        mcp_id=mcp_id,
                        tool_name=tool_name,
                        started_at=at,
                        parent_seq=1,
                        input={"mcp_id": mcp_id, "tool_name": tool_name, "params": params},
                        output={"ok": True},
                    )
                )
        RunStep.objects.bulk_create(steps, batch_size=batch)
    created_at.auto_now_add = True
    return rule_set, candidate


def naive(candidate: list[dict], run_ids: list[int]) -> dict:
    """The obvious way: one run at a time, whole rows, the tester's evaluate per request."""
    from agents.models import Run
    from agents.redaction import redactor
    from governance.impact import ImpactReport
    from governance.services import new_side, old_side
    from llamon_agent.tools import AgentRequest
    from rules import engine

    mask = redactor()
    report = ImpactReport()
    for pk in run_ids:
        run = Run.objects.get(pk=pk)
        steps = list(run.steps.filter(kind="rule").order_by("seq"))
        request = AgentRequest(
            query=run.query, context=run.context, a2a_data=run.a2a_data, a2a_files=run.a2a_files
        )
        evaluation = engine.evaluate(candidate, request)
        report.add(
            run_id=run.pk,
            created_at=run.created_at.isoformat(),
            query=lambda r=run: str(mask(r.query)),
            old=old_side(
                [(s.name, s.status, s.mcp_id, s.tool_name, s.input) for s in steps], mask
            ),  # always masked
            new=new_side(evaluation.outcome, mask),
            mask=mask,
        )
    return report.to_json()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--naive-runs", type=int, default=2_000)
    parser.add_argument("--distinct-queries", action="store_true", help="no two runs share a query")
    args = parser.parse_args()

    from agents.models import Run
    from governance.selectors import RunFilter
    from governance.services import impact_replay

    call_command("migrate", verbosity=0)
    t0 = time.perf_counter()
    with transaction.atomic():  # one commit, not one per statement
        _, candidate = seed(args.runs, args.distinct_queries)
    print(f"seeded {args.runs:,} runs in {time.perf_counter() - t0:.1f} s")

    now = timezone.now()
    everything = RunFilter(
        rule_set_name="bench", since=now - timedelta(days=7), until=now + timedelta(seconds=1)
    )
    t0, c0 = time.perf_counter(), time.process_time()
    result = impact_replay(snapshot=candidate, runs=everything)
    ours_all, ours_cpu = time.perf_counter() - t0, time.process_time() - c0
    print(
        f"ours, {result['replayed']:,} runs: {ours_all:.2f} s wall, {ours_cpu:.2f} s CPU "
        f"({ours_cpu / result['replayed'] * 1e6:.0f} us CPU/run); "
        f"{result['unchanged']:,} unchanged, {result['changed']:,} changed, kinds {result['kinds']}"
    )

    # The same first NAIVE_RUNS runs both ways.
    ids = list(Run.objects.order_by("created_at", "id").values_list("id", flat=True)[: args.naive_runs])
    last = Run.objects.get(pk=ids[-1]).created_at
    subset = RunFilter(
        rule_set_name="bench", since=now - timedelta(days=7), until=last + timedelta(microseconds=1)
    )
    t0, c0 = time.perf_counter(), time.process_time()
    ours_subset = impact_replay(snapshot=candidate, runs=subset)
    ours_s, ours_c = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    naive_subset = naive(candidate, ids)
    naive_s, naive_c = time.perf_counter() - t0, time.process_time() - c0
    same = {k: ours_subset[k] for k in ("replayed", "unchanged", "kinds")} == {
        k: naive_subset[k] for k in ("replayed", "unchanged", "kinds")
    }
    print(
        f"first {len(ids):,} runs: ours {ours_s:.3f} s wall / {ours_c:.3f} s CPU, naive {naive_s:.3f} s wall / "
        f"{naive_c:.3f} s CPU ({naive_c / ours_c:.1f}x CPU); same report: {same}"
    )
    print(
        f"naive scaled to {result['replayed']:,} runs: ~{naive_s / len(ids) * result['replayed']:.0f} s wall, "
        f"~{naive_c / len(ids) * result['replayed']:.0f} s CPU"
    )


if __name__ == "__main__":
    main()
