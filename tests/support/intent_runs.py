"""Store generated runs (tests/support/intents.py) as a worker's step sink stores them.

Each observation becomes a finished Run and its steps: the pre-step, a rule step per rule call (status ``ok``,
input ``{mcp_id, tool_name, params}``), then per model turn an LLM step (duration, token usage)
followed by the tool steps the model chose in it (input ``{"args": ...}``, parent the LLM step,
no server: a ReAct tool step records only the tool's name).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from django.utils import timezone

from agents.models import Agent, Run, RunStep
from llamon_agent.suggest import Observation


def store(observations: Sequence[Observation], agent: Agent, *, ref: str = "v1") -> list[Run]:
    now = timezone.now()
    runs = Run.objects.bulk_create(
        [
            Run(
                agent=agent,
                agent_name=agent.name,
                status=Run.Status.SUCCEEDED,
                query=o.request.query,
                context=o.request.context,
                a2a_data=o.request.a2a_data,
                user_id=str(o.request.context.get("userId", "")),
                chatbot_id=str(o.request.context.get("chatbotId", "")),
                rule_set_name=agent.rule_set.name if agent.rule_set else "",
                rule_set_ref=o.version or ref,
                llm_calls=len(o.turns),
                tool_calls=len(o.model_calls),
                prestep_calls=len(o.rule_calls),
                started_at=now - timedelta(seconds=len(observations) - i),
                finished_at=now - timedelta(seconds=len(observations) - i) + timedelta(milliseconds=900),
            )
            for i, o in enumerate(observations)
        ]
    )
    steps = []
    for run, o in zip(runs, observations, strict=True):
        steps.append(
            RunStep(run=run, seq=1, kind=RunStep.Kind.PRESTEP, name="prestep", status="ok", started_at=now)
        )
        seq = 1
        for call in o.rule_calls:
            seq += 1
            steps.append(
                RunStep(
                    run=run,
                    seq=seq,
                    parent_seq=1,
                    kind=RunStep.Kind.RULE,
                    name=f"rule_{call.tool}",
                    status="ok",
                    mcp_id=call.mcp_id,
                    tool_name=call.tool,
                    started_at=now,
                    input={"mcp_id": call.mcp_id, "tool_name": call.tool, "params": dict(call.args)},
                )
            )
        calls = list(o.model_calls)
        for turn in o.turns:
            seq += 1
            llm = seq
            steps.append(
                RunStep(
                    run=run,
                    seq=seq,
                    kind=RunStep.Kind.LLM,
                    name="scripted",
                    status="ok",
                    started_at=now,
                    duration_ms=turn.ms,
                    tokens={"input_tokens": turn.input_tokens, "output_tokens": turn.output_tokens},
                )
            )
            for tool in turn.tools:
                call = next(c for c in calls if c.tool == tool)
                calls.remove(call)
                seq += 1
                steps.append(
                    RunStep(
                        run=run,
                        seq=seq,
                        parent_seq=llm,
                        kind=RunStep.Kind.TOOL,
                        name=tool,
                        status="ok",
                        tool_name=tool,
                        started_at=now,
                        input={"args": dict(call.args), "tool_call_id": f"c{seq}"},
                    )
                )
    RunStep.objects.bulk_create(steps, batch_size=2000)
    return runs
