"""Runs for the evidence tests: finished through the product's own end, so sealed into the chain."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from agents import services
from agents.models import Agent, Run, RunStep

CARD = "4111 1111 1111 1111"


def finished_run(agent: Agent, user: str, order: str, *, days_ago: int = 0, calls: int = 1) -> Run:
    run = Run.objects.create(
        agent=agent,
        agent_name=agent.name,
        query=f"주문 {order} 카드 {CARD}",
        status=Run.Status.RUNNING,
        user_id=user,
        session_id=f"s-{order}",
        rule_set_name="seed-rules",
        rule_set_ref="v3",
        rule_set_hash="a" * 64,
    )
    for seq in range(1, calls + 1):
        RunStep.objects.create(
            run=run,
            seq=seq,
            kind=RunStep.Kind.RULE,
            name=f"order_lookup_{seq}",
            status="ok",
            mcp_id="order-service",
            tool_name="get_order",
            started_at=timezone.now(),
            input={"params": {"order_id": order}},
            output={"order_id": order, "status": "배송 중", "note": "line\u2028break"},
        )
    if days_ago:  # before it ends: the end seals the run's record, its time included
        Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(days=days_ago))
    services.run_finish(run_id=run.pk, status=Run.Status.SUCCEEDED, answer=f"{order} 배송 중")
    return run
