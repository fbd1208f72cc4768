"""Span export overhead per run: the full scripted loop with and without the OpenTelemetry sink.

    .venv/bin/python benchmarks/bench_otel.py            # 300 runs per side, interleaved
    .venv/bin/python benchmarks/bench_otel.py --runs 50

One run = input guardrail, pre-step with two rules, two scripted LLM calls, one tool call, output
guardrail, answer (10 spans). "export" sends them over OTLP/HTTP to a loopback receiver
(tests/support/otlp_receiver.py) through the BatchSpanProcessor, so the figure is what a run pays on its
own thread; the export itself happens on the processor's thread. Nothing here is asserted by tests.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llamon_agent import otel  # noqa: E402
from llamon_agent.guardrails import InputGuardrail, OutputGuardrail  # noqa: E402
from llamon_agent.react import run_agent  # noqa: E402
from llamon_agent.trace import ListSink, MultiSink  # noqa: E402
from tests.engine.test_react import ask, backend, calls_tool, list_orders, scripted, spec  # noqa: E402
from tests.support.otlp_receiver import start_receiver  # noqa: E402

SPEC = spec(input_guardrail=InputGuardrail(max_chars=1000), output_guardrail=OutputGuardrail())


def one_run(exported: bool) -> float:
    events = ListSink()
    sink = events
    extra = otel.otel_sink(agent_name="support", run_id=1) if exported else None
    if extra is not None:
        sink = MultiSink(events, extra)
    model = scripted(calls_tool("list_orders", customer_id="C-1001"), {"content": "배송 중입니다."})
    started = time.perf_counter()
    result = run_agent(
        SPEC,
        ask("주문 조회 부탁해", chatbotId="premium-support", userId="C-1001"),
        backend=backend(),
        react_tools=[list_orders],
        sink=sink,
        chat_model=model,
    )
    if extra is not None:
        extra.finish(result.status)
    elapsed = (time.perf_counter() - started) * 1000.0
    assert result.status == "succeeded", result.error
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    receiver, server = start_receiver()
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.url
    for _ in range(20):  # warm up both paths (imports, the provider, the exporter's connection)
        one_run(False)
        one_run(True)
    times: dict[str, list[float]] = {"plain": [], "export": []}
    for _ in range(args.runs):
        times["plain"].append(one_run(False))
        times["export"].append(one_run(True))
    otel.shutdown_tracer_provider()
    server.shutdown()
    print(f"{args.runs} runs per side, {len(receiver.spans)} spans received")
    for name, values in times.items():
        print(
            f"{name:7s} median {statistics.median(values):7.3f} ms  p90 {sorted(values)[int(0.9 * len(values))]:7.3f} ms"
        )
    delta = statistics.median(times["export"]) - statistics.median(times["plain"])
    print(f"export overhead per run (median difference): {delta:.3f} ms")


if __name__ == "__main__":
    main()
