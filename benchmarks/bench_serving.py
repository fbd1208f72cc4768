"""Throughput and latency of the web process: gunicorn as docs/deploy.md runs it vs Django's runserver.

Both serve the same production settings (LLAMON_ENV=prod, DEBUG off) from one SQLite file (or
DATABASE_URL when set) on 127.0.0.1. For each server, CLIENTS threads send REQUESTS requests in
all to each endpoint, with an API token: the live tester's API (POST /api/rule-sets/{id}/evaluate,
a 200-rule set, dry run) and a read API (GET /api/runs, 50 of 2,000 runs). Prints requests/s,
p50 and p95 per server and endpoint, side by side.

``--loadgen ab`` sends the requests with ApacheBench (``apt-get install apache2-utils``) instead
of Python threads: on a 2-core machine the Python client takes most of a core from the servers it
measures; ab, written in C, takes little (it sends one body: the first query).

Run: .venv/bin/python benchmarks/bench_serving.py [--clients 8] [--requests 400] [--workers 2 --threads 4]
     [--loadgen ab]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
SETUP = """
from django.contrib.auth.models import Group, User
from django.utils import timezone
from agents.models import Agent, Run
from accounts.token_services import token_create
from rules import services
from servers.models import McpServer

user = User.objects.create_user("bench", password=None)
user.groups.add(Group.objects.get(name="editor"))
McpServer.objects.create(mcp_id="order-service", transport="http", url="http://127.0.0.1:9/mcp",
    tools_refreshed_at=timezone.now(), tools=[{"name": "get_order", "description": "",
    "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}])
words = ["주문", "조회", "환불", "배송", "결제", "카드", "계좌", "보험", "청구", "예약", "order", "refund", "card", "claim"]
doc = {"format": "llamon-ruleset/1", "name": "bench", "rules": [
    {"name": f"rule_{i}", "mcp_id": "order-service", "tool_name": "get_order",
     "when": f'"{words[i % len(words)]}" in query and "{words[(i * 7 + 3) % len(words)]}" in query',
     "params": '{"query": query}'} for i in range(200)]}
from rules.exporting import rule_set_import_json
rule_set = rule_set_import_json(actor=user, data=doc)
agent = Agent.objects.create(name="bench", system_prompt="p")
Run.objects.bulk_create(Run(agent=agent, agent_name="bench", query=f"주문 조회 A-{i}", status="succeeded",
    user_id=f"C-{i % 50}") for i in range(2000))
print(rule_set.pk, token_create(actor=user, name="bench").secret)
"""
QUERIES = [
    "주문 조회 부탁해 A-1001",
    "환불은 언제 되나요?",
    "what is my card limit",
    "날씨 어때?",
    "보험 청구 서류",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("server did not listen")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def load(base: str, token: str, method: str, path: str, bodies: list, clients: int, total: int) -> dict:
    """``total`` requests from ``clients`` threads, each with its own keep-alive connection."""
    timings: list[float] = []
    lock, errors = threading.Lock(), []
    per = total // clients
    headers = {"Authorization": f"Bearer {token}", "X-Forwarded-Proto": "https"}

    def client(n: int) -> None:
        with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
            for i in range(per):
                t0 = time.perf_counter()
                r = http.request(method, path, json=bodies[(n + i) % len(bodies)] if bodies else None)
                elapsed = (time.perf_counter() - t0) * 1000
                with lock:
                    (timings.append(elapsed) if r.status_code == 200 else errors.append(r.status_code))

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise SystemExit(f"{path}: {len(errors)} failed requests, e.g. {errors[:3]}")
    return {"rps": len(timings) / wall, "p50": statistics.median(timings), "p95": percentile(timings, 0.95)}


def load_ab(base: str, token: str, method: str, path: str, bodies: list, clients: int, total: int) -> dict:
    """The same load sent by ApacheBench: ``clients`` at a time, ``total`` requests, a connection each
    (runserver does not keep ab's HTTP/1.0 connections alive; a loopback connect is ~0.1 ms)."""
    argv = [
        "ab",
        "-q",
        "-c",
        str(clients),
        "-n",
        str(total),
        "-H",
        f"Authorization: Bearer {token}",
        "-H",
        "X-Forwarded-Proto: https",
    ]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as body:
        json.dump(bodies[0] if bodies else {}, body, ensure_ascii=False)
    if method == "POST":
        argv += ["-p", body.name, "-T", "application/json"]
    try:
        done = subprocess.run([*argv, base + path], capture_output=True, text=True)
    finally:
        os.unlink(body.name)
    if done.returncode:
        raise SystemExit(f"{path}: ab exited with {done.returncode}: {done.stderr.strip()}\n{done.stdout}")
    out = done.stdout
    # ab counts a body whose length differs from the first one's as failed ("Length"): the tester's
    # answer carries timings, so only connection errors and non-2xx answers are failures here.
    failed = re.search(r"\(Connect: (\d+), Receive: (\d+), Length: \d+, Exceptions: (\d+)\)", out)
    if (failed and any(int(n) for n in failed.groups())) or "Non-2xx responses" in out:
        raise SystemExit(f"{path}: ab saw failed requests:\n{out}")
    rps = float(re.search(r"Requests per second:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    pct = dict(re.findall(r"^\s+(\d+)%\s+(\d+)", out, re.M))
    return {"rps": rps, "p50": float(pct["50"]), "p95": float(pct["95"])}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn processes (WEB_CONCURRENCY)")
    parser.add_argument("--threads", type=int, default=4, help="threads per process (LLAMON_WEB_THREADS)")
    parser.add_argument(
        "--loadgen", choices=["python", "ab"], default="python", help="who sends the requests"
    )
    args = parser.parse_args()
    if args.loadgen == "ab" and shutil.which("ab") is None:
        raise SystemExit("--loadgen ab needs ApacheBench: apt-get install apache2-utils")
    send = load_ab if args.loadgen == "ab" else load
    var = tempfile.mkdtemp(prefix="llamon-bench-serving-")
    env = {
        "PATH": f"{Path(PY).parent}:/usr/bin:/bin",
        "HOME": var,
        "LLAMON_ENV": "prod",
        "SECRET_KEY": secrets.token_urlsafe(48),
        "ALLOWED_HOSTS": "127.0.0.1",
        "LLAMON_VAR_DIR": var,
        "WEB_CONCURRENCY": str(args.workers),
        "LLAMON_WEB_THREADS": str(args.threads),
        "LOG_LEVEL": "WARNING",
    }
    if os.environ.get("DATABASE_URL"):
        env["DATABASE_URL"] = os.environ["DATABASE_URL"]
    for command in ("migrate --noinput", "collectstatic --noinput"):
        done = subprocess.run(
            [PY, "manage.py", *command.split()], cwd=ROOT, env=env, capture_output=True, text=True
        )
        if done.returncode:
            raise SystemExit(done.stderr)
    out = subprocess.run(
        [PY, "manage.py", "shell", "-c", SETUP], cwd=ROOT, env=env, check=True, capture_output=True, text=True
    )
    rule_set_id, token = out.stdout.split()[-2:]
    endpoints = {
        "tester API (POST evaluate, 200 rules)": (
            "POST",
            f"/api/rule-sets/{rule_set_id}/evaluate",
            [{"query": q, "context": {"userId": "C-1"}} for q in QUERIES],
        ),
        "read API (GET /api/runs, 50 runs)": ("GET", "/api/runs?limit=50", []),
    }
    servers = {
        f"gunicorn {args.workers}x{args.threads} (docs/deploy.md)": "gunicorn -c python:llamon_web.gunicorn_conf",
        "runserver (threaded, its default)": f"{PY} manage.py runserver --noreload 127.0.0.1:{{port}}",
        "runserver --nothreading": f"{PY} manage.py runserver --noreload --nothreading 127.0.0.1:{{port}}",
    }
    results: dict[str, dict[str, dict]] = {}
    for name, command in servers.items():
        port = free_port()
        argv = shlex.split(command.format(port=port))
        if argv[0] == "gunicorn":
            argv[0] = str(Path(PY).parent / "gunicorn")
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env={**env, "LLAMON_BIND": f"127.0.0.1:{port}"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            wait_for(port, proc)
            print(f"measuring {name} ...", file=sys.stderr)
            base = f"http://127.0.0.1:{port}"
            results[name] = {}
            for label, (method, path, bodies) in endpoints.items():
                send(
                    base, token, method, path, bodies, args.clients, args.clients * 10
                )  # warm-up: every process compiles the set once
                results[name][label] = send(base, token, method, path, bodies, args.clients, args.requests)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)

    print(
        f"Serving, {args.clients} concurrent clients, {args.requests} requests per endpoint, {os.cpu_count()} cores, "
        f"load sent by {args.loadgen}"
    )
    for label in endpoints:
        print(f"\n{label}")
        print(f"{'server':42} {'req/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'vs runserver':>13}")
        base_rps = results["runserver (threaded, its default)"][label]["rps"]
        for name in servers:
            r = results[name][label]
            print(f"{name:42} {r['rps']:8.1f} {r['p50']:8.1f} {r['p95']:8.1f} {r['rps'] / base_rps:12.2f}x")


if __name__ == "__main__":
    main()
