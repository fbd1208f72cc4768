"""Learning a rule per group (sequential covering, derived arguments), replaying it through the
engine on held-out runs, and choosing what to propose."""

from __future__ import annotations

import json
import math
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llamon_agent.compiled_rules import compile_rules
from llamon_agent.expr import ExprError, expression_rule, re_find
from llamon_agent.prestep import StaticToolBackend, run_prestep
from llamon_agent.suggest.features import (
    DERIVATION_SAMPLE,
    MIN_SUPPORT,
    Features,
    Row,
    expression_literal,
    featurize,
    vocabulary,
)
from llamon_agent.suggest.savings import Observation, turn_value
from llamon_agent.tools import AgentRequest

ARG_AGREEMENT = 0.95  # an argument's derivation must give the model's value on this share of runs
MAX_TERMS = 3  # literals in one conjunction
MAX_CONJUNCTIONS = 4  # conjunctions in one condition


# --------------------------------------------------------------------------- learning


def _precision(p: int, n: int) -> float:
    return (p + 1) / (p + n + 2)  # Laplace: a literal seen on 3 runs is not "100 %"


def _gain(p1: int, n1: int, p0: int, n0: int) -> float:
    if p1 == 0:
        return -math.inf
    return p1 * (math.log2(p1 / (p1 + n1)) - math.log2(p0 / (p0 + n0)))


class _Index:
    """The learning share as sets of row numbers: per literal, the rows that have it."""

    def __init__(self, rows: Sequence[Row], features: Features) -> None:
        self.rows = rows
        self.texts = features.texts
        self.by_feature: dict[int, set[int]] = defaultdict(set)
        for i, row in enumerate(rows):
            for fid in row.features:
                self.by_feature[fid].add(i)

    def grow(self, pos: set[int], neg: set[int], used: Sequence[int]) -> int | None:
        """The literal with the best FOIL gain on (pos, neg), or None when none gains."""
        counts: Counter[int] = Counter()
        for i in pos:
            counts.update(self.rows[i].features)
        p0, n0 = len(pos), len(neg)
        best: tuple[float, int, int] | None = None
        for fid, p1 in counts.items():
            if fid in used:
                continue
            n1 = len(self.by_feature[fid] & neg) if neg else 0
            # Equal gains (the same runs): the longer text, "보험료" rather than "험료".
            key = (round(_gain(p1, n1, p0, n0), 9), len(self.texts[fid]), -fid)
            if best is None or key > best:
                best = key
        return -best[2] if best is not None and best[0] > 0 else None

    def covered(self, conj: Sequence[int], among: set[int]) -> set[int]:
        out = among
        for fid in conj:
            out = out & self.by_feature[fid]
        return out


# A literal is added to a conjunction only when it changes who is covered beyond chance: the
# likelihood-ratio statistic of CN2 over 3.84 (5 %, one degree of freedom). Without the test, a
# literal that happens to drop the few runs where the model was inconsistent looks like progress.
SIGNIFICANCE = 3.84


def _significant(p1: int, n1: int, p0: int, n0: int) -> bool:
    covered = p1 + n1
    stat = 0.0
    for seen, prior in ((p1, p0), (n1, n0)):
        expected = covered * prior / (p0 + n0)
        if seen:
            stat += seen * math.log(seen / expected)
    return 2 * stat > SIGNIFICANCE


def learn_condition(
    rows: Sequence[Row], group: tuple[str, str], features: Features, index: _Index | None = None
) -> list[list[int]] | None:
    """Sequential covering (CN2/RIPPER style): grow a conjunction literal by literal (best FOIL
    gain, only while the literal is significant), take away the runs it covers, start again."""
    index = index or _Index(rows, features)
    pos_all = {i for i, r in enumerate(rows) if group in r.targets}
    neg_all = set(range(len(rows))) - pos_all
    uncovered = set(pos_all)
    conjunctions: list[list[int]] = []
    floor = max(3, int(0.02 * len(pos_all)))
    while len(conjunctions) < MAX_CONJUNCTIONS and len(uncovered) >= floor:
        pos, neg = uncovered, neg_all
        conj: list[int] = []
        while len(conj) < MAX_TERMS and neg:
            fid = index.grow(pos, neg, conj)
            if fid is None:
                break
            p1, n1 = len(pos & index.by_feature[fid]), len(neg & index.by_feature[fid])
            if conj and not _significant(p1, n1, len(pos), len(neg)):
                break
            conj.append(fid)
            pos, neg = pos & index.by_feature[fid], neg & index.by_feature[fid]
        p = len(index.covered(conj, uncovered)) if conj else 0
        n = len(index.covered(conj, neg_all)) if conj else 0
        if p < floor or _precision(p, n) < 0.8:
            break
        conjunctions.append(conj)
        uncovered -= index.covered(conj, uncovered)
    return _simplest(conjunctions) or None


def _simplest(conjunctions: list[list[int]]) -> list[list[int]]:
    """Drop a conjunction that another one, with a subset of its literals, already covers."""
    sets = [frozenset(c) for c in conjunctions]
    kept = []
    for i, c in enumerate(conjunctions):
        if any(j != i and sets[j] < sets[i] or (sets[j] == sets[i] and j < i) for j in range(len(sets))):
            continue
        kept.append(c)
    return kept


def condition_text(conjunctions: Sequence[Sequence[int]], features: Features) -> str:
    parts = [" and ".join(features.texts[f] for f in conj) for conj in conjunctions]
    if len(parts) == 1:
        return parts[0]
    return " or ".join(f"({p})" if " and " in p else p for p in parts)


# --------------------------------------------------------------------------- arguments


def _pattern_literal(pattern: str) -> str:
    """A pattern as an expression literal: raw when it can be (what a person writes), else escaped."""
    if '"' not in pattern and not pattern.endswith("\\") and pattern.isprintable():
        return f'r"{pattern}"'
    return expression_literal(pattern)


_META = set(".^$*+?{}[]\\|()")


def _shape(value: str) -> str | None:
    """A pattern for a value found in the query: letters and digits by class and count, the rest literal."""
    if not 2 <= len(value) <= 64:
        return None
    out = []
    for run in re.finditer(r"[A-Z]+|[a-z]+|[0-9]+|[가-힣]+|.", value):
        text = run.group()
        if text.isdigit():
            out.append(rf"\d{{{len(text)}}}")
        else:  # letters (a prefix such as ORD or CLM) and punctuation are kept as written
            out.append("".join("\\" + c if c in _META else c for c in text))
    pattern = "".join(out)
    return pattern if r"\d" in pattern else None


def _arg_candidates(req: AgentRequest, value: Any) -> list[tuple[str, str, str]]:
    """(kind, expression, pattern or "") for each way of getting ``value`` from this run."""
    out: list[tuple[str, str, str]] = []
    if value == req.query:
        out.append(("query", "query", ""))
    for key, v in req.context.items():
        if v == value and isinstance(key, str):
            out.append(("context", f"context.get({expression_literal(key)})", ""))
    seen: set[str] = set()
    for part in req.a2a_data or ():
        if isinstance(part, Mapping):
            for key, v in part.items():
                if isinstance(key, str) and key not in seen:
                    seen.add(key)
                    if v == value:
                        out.append(("data", f"data_get({expression_literal(key)})", ""))
    if isinstance(value, str) and value and value in req.query:
        shape = _shape(value)
        if shape is not None:
            out.append(("pattern", f"re_find({_pattern_literal(shape)}, query)", shape))
    return out


def derive_params(pos: Sequence[Row], group: tuple[str, str]) -> tuple[str | None, dict[str, str], str]:
    """The params expression for a group and each argument's kind, or None and the argument that
    no derivation gives."""
    calls = [r.calls[group] for r in pos if group in r.calls]
    if not calls:
        return None, {}, "?"
    keys = Counter(k for c in calls for k in c)
    wanted = [k for k, n in keys.items() if n >= len(calls) / 2]  # each must then agree on ARG_AGREEMENT
    exprs: dict[str, str] = {}
    kinds: dict[str, str] = {}
    # The derivation is checked on a sample; the replay checks it on every held-out run.
    sample = [(r.request, r.calls[group]) for r in pos if r.request is not None and group in r.calls]
    sample = sample[:DERIVATION_SAMPLE]
    for key in sorted(wanted):
        values = [args.get(key) for _req, args in sample]
        const, count = Counter(json.dumps(v, sort_keys=True, ensure_ascii=False) for v in values).most_common(
            1
        )[0]
        tally: Counter[tuple[str, str]] = Counter()
        shapes: dict[str, str] = {}
        for (req, _args), value in zip(sample, values, strict=True):
            for kind, expr, shape in set(_arg_candidates(req, value)):
                tally[(kind, expr)] += 1
                if shape:
                    shapes[expr] = shape
        best = tally.most_common(3)
        chosen = None
        for (kind, expr), hits in best:
            if hits < ARG_AGREEMENT * len(values):
                break
            if kind == "pattern":  # only as good as what re_find (the engine's helper) gives back
                pattern = shapes[expr]
                hits = sum(
                    re_find(pattern, req.query) == v for (req, _a), v in zip(sample, values, strict=True)
                )
                if hits < ARG_AGREEMENT * len(values):
                    continue
            chosen = (kind, expr)
            break
        if chosen is None and count >= ARG_AGREEMENT * len(values) and len(values) >= 5:
            chosen = ("constant", expression_literal(json.loads(const)))
        if chosen is None:
            return None, {}, key
        kinds[key], exprs[key] = chosen
    body = ", ".join(f"{expression_literal(k)}: {e}" for k, e in exprs.items())
    return "{" + body + "}", kinds, ""


# --------------------------------------------------------------------------- candidates


@dataclass(slots=True)
class Candidate:
    """A learned rule, before its replay."""

    mcp_id: str
    tool: str
    when: str
    params: str
    arg_kinds: dict[str, str]
    support: int

    @property
    def name(self) -> str:
        return "suggest_" + re.sub(r"[^0-9A-Za-z_]", "_", self.tool)[:80]

    def to_json(self) -> dict[str, Any]:
        return {
            "mcp_id": self.mcp_id,
            "tool": self.tool,
            "when": self.when,
            "params": self.params,
            "arg_kinds": self.arg_kinds,
            "support": self.support,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Candidate:
        return cls(**data)


@dataclass(slots=True)
class Rejected:
    """A tool the model called without a rule, and why no rule is proposed for it.

    ``code`` (too_few, no_condition, no_argument, not_compiled, precision) and ``detail`` let an
    application say ``reason`` in its user's language.
    """

    mcp_id: str
    tool: str
    runs: int
    reason: str
    code: str = ""
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "mcp_id": self.mcp_id,
            "tool": self.tool,
            "runs": self.runs,
            "reason": self.reason,
            "code": self.code,
            "detail": self.detail,
        }


def learn(
    rows: Sequence[Row], features: Features, min_support: int = MIN_SUPPORT
) -> tuple[list[Candidate], list[Rejected]]:
    """Reduce: a candidate rule for each group with enough runs, or why there is none."""
    groups = Counter(g for r in rows for g in r.targets)
    index = _Index(rows, features)
    candidates: list[Candidate] = []
    rejected: list[Rejected] = []
    for group, n in sorted(groups.items(), key=lambda kv: (-kv[1], kv[0])):
        if n < min_support:
            reason = f"only {n} runs (at least {min_support})"
            rejected.append(Rejected(*group, n, reason, "too_few", {"runs": n, "min": min_support}))
            continue
        conj = learn_condition(rows, group, features, index)
        if conj is None:
            reason = "no condition separates these runs from the others"
            rejected.append(Rejected(*group, n, reason, "no_condition"))
            continue
        # Arguments are derived on the runs the condition covers, where the model called the tool:
        # a call made for another kind of request (the model's mistake) says nothing about them.
        covered: set[int] = set()
        for c in conj:
            covered |= index.covered(c, set(range(len(rows))))
        pos = [rows[i] for i in sorted(covered) if group in rows[i].targets]
        params, kinds, why = derive_params(pos, group)
        if params is None:
            reason = f"argument {why!r}: no derivation gives the model's value on {ARG_AGREEMENT:.0%} of runs"
            rejected.append(Rejected(*group, n, reason, "no_argument", {"argument": why}))
            continue
        when = condition_text(conj, features)
        try:
            expression_rule(name="suggest", mcp_id=group[0], tool_name=group[1], when=when, params=params)
        except ExprError as exc:  # the engine's own checks have the last word
            rejected.append(
                Rejected(*group, n, f"the rule does not compile: {exc}", "not_compiled", {"error": str(exc)})
            )
            continue
        candidates.append(Candidate(group[0], group[1], when, params, kinds, n))
    return candidates, rejected


# --------------------------------------------------------------------------- replay


@dataclass(slots=True)
class Tally:
    """A candidate's replay over held-out runs (mergeable across partitions)."""

    fired: int = 0
    agreed: int = 0  # fired, and the model called that tool
    args_right: int = 0  # agreed, and the params equal the model's arguments
    positives: int = 0  # held-out runs where the model called it and no rule did
    changed: int = 0  # fired where no existing rule called that tool
    must: list[Any] = field(default_factory=list)  # run ids: fired and agreed
    must_not: list[Any] = field(default_factory=list)  # run ids: neither fired nor called

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Tally:
        return cls(**data)

    def merge(self, other: Tally) -> None:
        self.fired += other.fired
        self.agreed += other.agreed
        self.args_right += other.args_right
        self.positives += other.positives
        self.changed += other.changed
        self.must = (self.must + other.must)[:EXAMPLES]
        self.must_not = (self.must_not + other.must_not)[:EXAMPLES]


EXAMPLES = 3


def replay(
    candidates: Sequence[Candidate], observations: Iterable[Observation], tools: Mapping[str, set[str]]
) -> list[Tally]:
    """Map: every candidate through the engine (one compiled set, dry run) on the held-out runs."""
    rules = [
        expression_rule(name=f"{c.name}_{i}", mcp_id=c.mcp_id, tool_name=c.tool, when=c.when, params=c.params)
        for i, c in enumerate(candidates)
    ]
    compiled = compile_rules(rules)
    backend = StaticToolBackend({k: sorted(v) for k, v in tools.items()})
    index = {r.name: i for i, r in enumerate(rules)}
    tallies = [Tally() for _ in candidates]
    for obs in observations:
        if not obs.held_out():
            continue
        targets = obs.targets()
        model: dict[tuple[str, str], Mapping[str, Any]] = {}
        for call in obs.model_calls:
            model.setdefault((call.mcp_id, call.tool), call.args)
        ruled = {(c.mcp_id, c.tool) for c in obs.rule_calls}
        outcome = run_prestep(compiled, obs.request, backend=backend, dry_run=True)
        fired = {index[rec.rule]: rec for rec in outcome.fired}
        for i, cand in enumerate(candidates):
            group = (cand.mcp_id, cand.tool)
            t = tallies[i]
            if group in targets:
                t.positives += 1
            rec = fired.get(i)
            if rec is None:
                if group not in model and len(t.must_not) < EXAMPLES:
                    t.must_not.append(obs.run_id)
                continue
            t.fired += 1
            if group not in ruled:
                t.changed += 1
            if group in targets:
                t.agreed += 1
                if len(t.must) < EXAMPLES:
                    t.must.append(obs.run_id)
                if rec.params == dict(model[group]):
                    t.args_right += 1
    return tallies


@dataclass(slots=True)
class Suggestion:
    """A rule the traces support, with its replay on held-out runs and what it would save."""

    candidate: Candidate
    tally: Tally
    precision: float  # agreement with the model, corrected by the model's own consistency
    margin: float  # one-sided 95 % margin of ``precision`` at this number of replayed runs
    agreement: float  # fired runs where the model called the tool / fired runs
    recall: float
    args_accuracy: float
    turns_saved: int
    ms_saved: float
    tokens_saved: int

    def to_json(self) -> dict[str, Any]:
        c, t = self.candidate, self.tally
        return {
            "mcp_id": c.mcp_id,
            "tool": c.tool,
            "name": c.name,
            "when": c.when,
            "params": c.params,
            "arguments": c.arg_kinds,
            "support": c.support,
            "replayed": {
                "fired": t.fired,
                "agreed": t.agreed,
                "positives": t.positives,
                "changed": t.changed,
            },
            "precision": round(self.precision, 4),
            "margin": round(self.margin, 4),
            "agreement": round(self.agreement, 4),
            "recall": round(self.recall, 4),
            "args_accuracy": round(self.args_accuracy, 4),
            "saving": {"turns": self.turns_saved, "ms": round(self.ms_saved, 1), "tokens": self.tokens_saved},
            "cases": {"must_call": t.must, "must_not_call": t.must_not},
        }


NOISE_ESTIMATE_MIN_RULES = 5  # suggestions needed to estimate the model's own inconsistency
NOISE_ESTIMATE_MIN_FIRED = 30


def model_noise(candidates: Sequence[Candidate], tallies: Sequence[Tally]) -> float:
    """The model's own inconsistency: the median disagreement of the well-supported candidates.

    A rule that fires exactly on one kind of request still disagrees with a model that, now and
    then, calls another tool or none for that kind: that share is the model's, not the rule's.
    Estimated only from at least NOISE_ESTIMATE_MIN_RULES candidates (else 0: no correction).
    """
    rates = [1 - t.agreed / t.fired for t in tallies if t.fired >= NOISE_ESTIMATE_MIN_FIRED]
    if len(rates) < NOISE_ESTIMATE_MIN_RULES:
        return 0.0
    return min(statistics.median(rates), 0.2)


# A candidate is refused when its precision is below the bar beyond chance: its disagreement with
# the model exceeds the model's own (model_noise) by more than 1 - min_precision, by more than
# Z standard errors (one-sided 5 %). A candidate is never refused for a shortfall that its number
# of replayed runs cannot tell from the model's inconsistency.
Z = 1.645


def _margin(noise: float, fired: int) -> float:
    return Z * math.sqrt(max(noise, 0.005) * (1 - max(noise, 0.005)) / fired)


def select(
    candidates: Sequence[Candidate],
    tallies: Sequence[Tally],
    *,
    turn: tuple[float | None, int | None, int | None],
    min_precision: float = 0.99,
    min_fired: int = MIN_SUPPORT,
) -> tuple[list[Suggestion], list[Rejected]]:
    """Keep the candidates whose replay does not show a precision below ``min_precision``; rank
    them by what they save."""
    noise = model_noise(candidates, tallies)
    kept: list[Suggestion] = []
    rejected: list[Rejected] = []
    ms, tin, tout = turn
    for cand, t in zip(candidates, tallies, strict=True):
        agreement = t.agreed / t.fired if t.fired else 0.0
        precision = min(1.0, agreement / (1 - noise)) if t.fired else 0.0
        margin = _margin(noise, t.fired) if t.fired else 0.0
        if t.fired < min_fired or precision + margin < min_precision:
            rejected.append(
                Rejected(
                    cand.mcp_id,
                    cand.tool,
                    cand.support,
                    f"precision {precision:.1%} (±{margin:.1%}) on {t.fired} replayed runs; asked {min_precision:.0%}",
                    "precision",
                    {"precision": precision, "margin": margin, "fired": t.fired, "asked": min_precision},
                )
            )
            continue
        saved = min(t.changed, t.agreed)
        kept.append(
            Suggestion(
                cand,
                t,
                precision,
                margin,
                agreement,
                t.agreed / t.positives if t.positives else 0.0,
                t.args_right / t.agreed if t.agreed else 0.0,
                saved,
                saved * (ms or 0.0),
                saved * ((tin or 0) + (tout or 0)),
            )
        )
    kept.sort(key=lambda s: (-s.turns_saved, -s.precision, s.candidate.tool))
    return kept, rejected


@dataclass(slots=True)
class Mined:
    suggestions: list[Suggestion]
    rejected: list[Rejected]
    noise: float
    runs: int

    def to_json(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "noise": round(self.noise, 4),
            "suggestions": [s.to_json() for s in self.suggestions],
            "rejected": [r.to_json() for r in self.rejected],
        }


def mine(
    observations: Sequence[Observation],
    *,
    min_precision: float = 0.99,
    min_support: int = MIN_SUPPORT,
) -> Mined:
    """All three passes in one process (a caller with workers runs the map steps on partitions)."""
    vocab = vocabulary(observations)
    features = Features.build(vocab, min_support)
    rows = featurize(observations, features)
    candidates, rejected = learn(rows, features, min_support)
    tallies = replay(candidates, observations, features.tools)
    kept, dropped = select(candidates, tallies, turn=turn_value(observations), min_precision=min_precision)
    return Mined(kept, rejected + dropped, model_noise(candidates, tallies), len(observations))
