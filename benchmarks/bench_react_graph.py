"""Building the agent graph per run (as before) against the graph cached per spec (now), side by
side in one run: the time of run_agent for a one-reply scripted model, and of the build alone.

    .venv/bin/python benchmarks/bench_react_graph.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from langchain_core.tools import tool  # noqa: E402
from peers import measure  # noqa: E402

from llamon_agent import react  # noqa: E402
from llamon_agent.models import ModelConfig, ScriptedChatModel  # noqa: E402
from llamon_agent.prestep import StaticToolBackend  # noqa: E402
from llamon_agent.react import AgentSpec, run_agent  # noqa: E402
from llamon_agent.tools import AgentRequest  # noqa: E402

os.environ.setdefault("LLAMON_ENV", "dev")


@tool
def list_orders(customer_id: str) -> dict:
    """List a customer's orders."""
    return {"customer_id": customer_id, "orders": []}


@tool
def get_order(order_id: str) -> dict:
    """One order."""
    return {"order_id": order_id}


SPEC = AgentSpec(
    name="bench", system_prompt="답하세요.", rules=[], model=ModelConfig(provider="scripted", script=[])
)
BACKEND = StaticToolBackend({})
TOOLS = [list_orders, get_order]


def one_run(_: object) -> None:
    model = ScriptedChatModel(script=[{"content": "네"}])
    result = run_agent(SPEC, AgentRequest(query="안녕"), backend=BACKEND, react_tools=TOOLS, chat_model=model)
    assert result.status == "succeeded", result.error


def main() -> None:
    items = list(range(60))
    real_get = react._GRAPHS.get
    react._GRAPHS.get = lambda key: None  # type: ignore[method-assign]  # every run builds (before)
    try:
        before = measure(one_run, items)
    finally:
        react._GRAPHS.get = real_get  # type: ignore[method-assign]
    react._GRAPHS.clear()
    after = measure(one_run, items)
    print("| run_agent, one scripted reply, 2 tools | p50 ms | p99 ms |")
    print("|---|---:|---:|")
    print(f"| graph built per run (before) | {before[0] / 1e3:,.1f} | {before[1] / 1e3:,.1f} |")
    print(f"| graph cached per spec (now) | {after[0] / 1e3:,.1f} | {after[1] / 1e3:,.1f} |")
    print(f"| ratio | {before[0] / after[0]:,.1f}x | |")


if __name__ == "__main__":
    main()
