"""Outbound HTTP: what the guarded transport (llamon_agent.net) costs per request, side by side.

Plain ``httpx.Client`` beside ``guarded_client`` (an address literal: origin check only; and a
host name: origin check + resolution through the policy's resolver + check of every address),
each sending keep-alive GETs to one listener on 127.0.0.1.
Run: .venv/bin/python benchmarks/bench_outbound.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llamon_agent.net import guarded_client  # noqa: E402
from llamon_agent.urlguard import UrlPolicy  # noqa: E402
from tests.support.outbound import Listener  # noqa: E402

ROUNDS, REQUESTS = 5, 300


def per_request_us(client: httpx.Client, url: str) -> float:
    client.get(url)  # warm the connection
    best = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(REQUESTS):
            client.get(url)
        best.append((time.perf_counter() - start) / REQUESTS * 1e6)
    return statistics.median(best)


def main() -> None:
    policy = UrlPolicy(allow_private=True, resolver=lambda host, port: ["127.0.0.1"])
    with Listener() as server:
        named = f"http://bench.test:{server.port}/"
        cases = [
            ("plain httpx.Client, 127.0.0.1", httpx.Client(trust_env=False), server.url + "/"),
            ("guarded_client, 127.0.0.1 (literal)", guarded_client(server.url, policy), server.url + "/"),
            ("guarded_client, a name (resolver + check)", guarded_client(named, policy), named),
        ]
        print(f"{'client':45} {'per request (median of 5 x 300)':>34}")
        for name, client, url in cases:
            with client:
                print(f"{name:45} {per_request_us(client, url):31.0f} us")


if __name__ == "__main__":
    main()
