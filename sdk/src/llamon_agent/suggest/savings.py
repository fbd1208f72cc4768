"""Recorded runs as the miner reads them (:class:`Observation`), and what the pre-step saved (:func:`savings`)."""

from __future__ import annotations

import statistics
import zlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llamon_agent.tools import AgentRequest

# The seed page's answer to "LLM이 deterministic 결과를 무시하고 다시 같은 tool 호출" (byte for byte).
RECALL_ADVICE = "system prompt에 “확정 호출 결과를 우선 사용” 명시"
HOLDOUT_PERCENT = 25  # runs kept out of learning, for the replay (by a hash of the run id)


# --------------------------------------------------------------------------- observations


@dataclass(frozen=True, slots=True)
class Call:
    """One tool call: by the model (ReAct loop) or by a rule (pre-step)."""

    mcp_id: str
    tool: str
    args: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Turn:
    """One LLM turn: how long it took, its tokens, and the tools the model chose in it."""

    ms: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    tools: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Observation:
    """One recorded run as the miner reads it."""

    run_id: Any
    request: AgentRequest
    model_calls: tuple[Call, ...] = ()
    rule_calls: tuple[Call, ...] = ()
    turns: tuple[Turn, ...] = ()
    version: str = ""

    def targets(self) -> set[tuple[str, str]]:
        """The (server, tool) pairs the model called and no rule did."""
        ruled = {(c.mcp_id, c.tool) for c in self.rule_calls}
        return {(c.mcp_id, c.tool) for c in self.model_calls} - ruled

    def held_out(self, percent: int = HOLDOUT_PERCENT) -> bool:
        return zlib.crc32(str(self.run_id).encode()) % 100 < percent


# --------------------------------------------------------------------------- savings


@dataclass(slots=True)
class Savings:
    """What the pre-step saved over a set of runs (one version, or all of them)."""

    runs: int = 0
    with_prestep: int = 0  # runs where at least one rule called a tool
    turns_saved: int = 0  # runs where a rule's call stood for the model's turn (not called again)
    ms_saved: float = 0.0
    input_tokens_saved: int = 0
    output_tokens_saved: int = 0
    recalled: int = 0  # runs where the model called again a tool a rule had called
    recalled_runs: list[Any] = field(default_factory=list)  # the first few, to look at
    turn_ms: float | None = None  # the value of one turn (median of comparable turns)
    turn_input_tokens: int | None = None
    turn_output_tokens: int | None = None

    @property
    def share_with_prestep(self) -> float:
        return self.with_prestep / self.runs if self.runs else 0.0

    @property
    def advice(self) -> str:
        return RECALL_ADVICE if self.recalled else ""

    def to_json(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "with_prestep": self.with_prestep,
            "share_with_prestep": round(self.share_with_prestep, 4),
            "turns_saved": self.turns_saved,
            "ms_saved": round(self.ms_saved, 1),
            "input_tokens_saved": self.input_tokens_saved,
            "output_tokens_saved": self.output_tokens_saved,
            "recalled": self.recalled,
            "recalled_runs": self.recalled_runs,
            "advice": self.advice,
            "turn": {
                "ms": self.turn_ms,
                "input_tokens": self.turn_input_tokens,
                "output_tokens": self.turn_output_tokens,
            },
        }


def turn_value(observations: Iterable[Observation]) -> tuple[float | None, int | None, int | None]:
    """One saved turn's value: the medians of the turns in which the model chose a tool."""
    ms: list[float] = []
    tin: list[int] = []
    tout: list[int] = []
    for obs in observations:
        for turn in obs.turns:
            if not turn.tools:
                continue
            if turn.ms is not None:
                ms.append(turn.ms)
            if turn.input_tokens is not None:
                tin.append(turn.input_tokens)
            if turn.output_tokens is not None:
                tout.append(turn.output_tokens)
    return (
        statistics.median(ms) if ms else None,
        round(statistics.median(tin)) if tin else None,
        round(statistics.median(tout)) if tout else None,
    )


RECALLED_RUNS_SHOWN = 20


def savings(observations: Sequence[Observation]) -> dict[str, Savings]:
    """Savings per version ("" for runs with none) and over all runs (key ``"*"``).

    A run whose rules called at least one tool that the model did not call again saved one turn:
    the turn in which the model would have chosen it (one, even when rules made several calls:
    a model may choose several tools in one turn, so the count is a floor). The turn is valued at
    the median of the turns, of the same runs, in which the model chose a tool.
    """
    ms, tin, tout = turn_value(observations)
    out: dict[str, Savings] = defaultdict(Savings)
    for obs in observations:
        for key in ("*", obs.version):
            s = out[key]
            s.runs += 1
            s.turn_ms, s.turn_input_tokens, s.turn_output_tokens = ms, tin, tout
            if not obs.rule_calls:
                continue
            s.with_prestep += 1
            called_again = {c.tool for c in obs.model_calls} & {c.tool for c in obs.rule_calls}
            if called_again:
                s.recalled += 1
                if len(s.recalled_runs) < RECALLED_RUNS_SHOWN:
                    s.recalled_runs.append(obs.run_id)
            if {c.tool for c in obs.rule_calls} - called_again:
                s.turns_saved += 1
                s.ms_saved += ms or 0.0
                s.input_tokens_saved += tin or 0
                s.output_tokens_saved += tout or 0
    return dict(out)
