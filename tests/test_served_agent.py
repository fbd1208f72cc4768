"""Issue 7 acceptance on the web side: `llamon run` agents pointed at llamon-web show their runs there.

A react project and a flow project (both made by `llamon new`) are served by `llamon run`
subprocesses in registry mode against the live server (LLAMON_REGISTRY_URL + an editor's API
token); the trace goes to the same llamon-web by default, with each agent's ingest credential. An a2a-sdk client sends each one
message; the runs appear with source "served" / "flow", their full trace and the answer, and
the run pages render them (the flow's with its graph).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.urls import reverse

from accounts.token_services import token_create
from agents.models import Run
from agents.services import ingest_credential_issue
from tests.support.served import Served, a2a_send, new_project

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]


def _finished_run(source: str, timeout_s: float = 30.0) -> Run:
    """The run of ``source`` once it has finished and none of its steps is still running."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = Run.objects.filter(source=source).order_by("-pk").first()
        if run is not None and run.finished and not run.steps.filter(status="running").exists():
            return run
        time.sleep(0.1)
    raise AssertionError(f"no finished {source} run within {timeout_s} s: {list(Run.objects.values())}")


@pytest.fixture
def served(live_server: Any, make_user: Any, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The demo servers registered, an editor's token, a react and a flow project served against the live server."""
    call_command("load_demo", "--no-runs", "--no-refresh")
    editor = make_user("editor")
    secret = token_create(actor=editor, name="served-agent").secret
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMON_") and k != "MCP_ID"}
    # The workbench is the operator's own: its stdio servers (the demo servers) may start.
    env.update(LLAMON_REGISTRY_URL=live_server.url, LLAMON_REGISTRY_TOKEN=secret, LLAMON_REGISTRY_TRUSTED="1")

    def traced(name: str) -> dict[str, str]:
        """The trace goes with the agent's own ingest credential (a person's token is refused)."""
        return {**env, "LLAMON_TRACE_TOKEN": ingest_credential_issue(actor=None, agent_name=name)[1]}

    agents = {
        "react": Served(new_project("react", tmp_path / "support-agent"), traced("support-agent")),
        "flow": Served(new_project("graph-sequential", tmp_path / "order-flow"), traced("order-flow")),
    }
    try:
        for agent in agents.values():
            agent.wait_ready()
        yield {"editor": editor, **agents}
    finally:
        for agent in agents.values():
            agent.stop()


def test_served_react_and_flow_runs_appear_with_their_trace(served: dict[str, Any], client: Any) -> None:
    react, flow = served["react"], served["flow"]
    # Registry mode: the servers came from llamon-web, not from the project's registry.yaml.
    assert "bound MCP server order-service" in react.output()

    answer = asyncio.run(a2a_send(react.url, "주문 조회 A-1001 부탁해", {"userId": "C-1001"}))
    assert "확정 호출 결과" in answer and "A-1001" in answer
    run = _finished_run("served")
    assert (run.status, run.agent_name, run.query) == (
        "succeeded",
        "support-agent",
        "주문 조회 A-1001 부탁해",
    )
    assert run.answer == answer
    assert run.context["userId"] == "C-1001" and run.session_id
    kinds = list(run.steps.order_by("seq").values_list("kind", flat=True))
    assert {"guardrail", "prestep", "rule", "llm", "answer"} <= set(kinds)
    assert kinds.index("prestep") < kinds.index("llm") < kinds.index("answer")
    assert run.prestep_calls == 1 and run.llm_calls == 1
    rule = run.steps.get(kind="rule", status="ok")
    assert (rule.mcp_id, rule.tool_name) == ("order-service", "get_order")
    assert "Deterministic pre-step 완료: 1건" in react.output()

    client.force_login(served["editor"])
    page = client.get(reverse("agents:run_detail", args=[run.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    assert "served" in html and 'id="run-answer"' in html and "get_order" in html
    assert 'id="flow-graph"' not in html

    answer = asyncio.run(a2a_send(flow.url, "주문 A-1002 상태 알려줘", {}))
    assert "A-1002" in answer and "delivered" in answer
    run = _finished_run("flow")
    assert (run.status, run.agent_name, run.answer) == ("succeeded", "order-flow", answer)
    nodes = list(run.steps.filter(kind="node").order_by("seq").values_list("name", "status"))
    assert nodes == [("graph", "ok"), ("parse", "ok"), ("lookup", "ok"), ("answer", "ok")]
    graph_step = run.steps.get(kind="node", name="graph")
    assert "graph TD;" in graph_step.input["mermaid"]
    assert run.steps.filter(kind="answer").exists()

    page = client.get(reverse("agents:run_detail", args=[run.pk]))
    html = page.content.decode()
    assert page.status_code == 200
    assert 'id="flow-graph"' in html and "<svg" in html
    assert 'data-node="lookup"' in html and "flow-node-ok" in html
    assert "graph TD;" in html  # the mermaid text, for copying
