"""Incremental impact replay: evaluate only the rules the candidate changed, keep what runs recorded.

A run recorded which rules of the version that served it (``Run.rule_set_hash``) fired and with
what params. A candidate rule identical to a served rule gives the same decision on the same
request, so only the candidate's new or edited rules need evaluating: most requests are not even
candidates of their keyword index. The report must be exactly what the full replay gives, so this
path is taken only where the pre-step's semantics make the rules independent; every other run is
replayed in full (``IncrementalPlan.replay`` returns None). What couples rules in the pre-step
(sdk/src/llamon_agent/prestep.py) and how each coupling is handled:

- order and ``stop``: the decisions are merged in the candidate's order and the walk ends at the
  first firing stop rule, kept or evaluated, as the pre-step does. A kept rule the recorded run
  never reached (after a stop rule of the served version) is not known: full replay.
- errors: a recorded run with any error is replayed in full (it stopped at the error, so the rules
  after it were never evaluated). The candidate's own errors come from evaluating its changed
  rules; the walk ends at the first one, as ``services.new_side`` does.
- the bind check: a candidate server without tools (unbound) fails every run the same way: the
  whole analysis is replayed in full.
- the tool list: a rule whose expressions read ``tool_names`` or ``ctx.mcp_tools`` depends on the
  server's tools, and a rule whose tool is not (any more) on its server fails: both are evaluated,
  never kept.
- the request cost budget (``request_budget``, shared by every expression rule of a request): a
  rule may fail only because the rules before it spent the pool. A run is taken incrementally only
  when the rules the full replay would evaluate (the candidate index's candidates, plus the
  namespace probe) cannot spend the pool even at their most (``max_spend``), and the same for the
  changed rules evaluated alone.
- the namespace: built once per server and request; it fails only on the request itself (over the
  expression caps), and the recorded run built one without error.
- masking: kept calls compare as stored, so they must be what the full replay would store: the
  privacy settings have not changed since the run, and the stored params are a fixed point of
  the masking (and of ``json_safe``).

The rule sets compared are the candidate and the served snapshot; a run whose served snapshot is
not known (no hash, or a draft since edited) is replayed in full.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llamon_agent.expr.budget import BUILT_CHARS_PER_UNIT, READ_CHARS_PER_UNIT
from llamon_agent.expr.limits import MAX_DATA_BYTES
from llamon_agent.prestep import PRESTEP_FAILED, CompiledRules, RuleStatus, ToolBackend, run_prestep
from llamon_agent.tools import AgentRequest
from rules import engine

RuleKey = tuple[str, str, str, str, str, bool]
MEMO_SIZE = 50_000  # changed-rule decisions remembered per served snapshot
WARMUP = 2_000  # runs a plan decides before it judges whether it pays (IncrementalPlan.consult)
_LITERAL = r"""(?:"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')"""
# Reading one key of the context with a literal name: context.get("k"...) or context["k"].
_CONTEXT_READ = re.compile(rf"context\s*(?:\.\s*get\s*\(\s*({_LITERAL})\s*[,)]|\[\s*({_LITERAL})\s*\])")
_MISSING = object()


def rule_key(rule: Mapping[str, Any]) -> RuleKey:
    """What decides a rule's behaviour (``engine.compile_snapshot``'s key: the description does not)."""
    return (rule["name"], rule["mcp_id"], rule["tool_name"], rule["when"], rule["params"], bool(rule["stop"]))


def _enabled(snapshot: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in snapshot if r.get("enabled", True)]


def context_keys(rules: Sequence[Mapping[str, Any]]) -> tuple[str, ...] | None:
    """The context keys the rules' expressions can read, when that is all they read of the request
    besides the query (and the tools, the same for a whole replay); None when it cannot be told.

    Text, not syntax: every ``context`` in the source must be a read of one key with a literal
    name, and nothing may name the DataPart or files (``a2a_data``, ``a2a_files``, ``data_get``).
    A false None only costs speed.
    """
    keys: dict[str, None] = {}
    for rule in rules:
        for source in (rule["when"], rule["params"]):
            lowered = source.lower()
            if "a2a" in lowered or "data_get" in lowered:
                return None
            found = 0
            for match in _CONTEXT_READ.finditer(source):
                keys[ast.literal_eval(match.group(1) or match.group(2))] = None
                found += 1
            if lowered.count("context") != found:
                return None
    return tuple(keys)


def _memo_value(value: Any) -> Any:
    """A hashable, type-exact stand-in for a context value (True, 1 and 1.0 stay apart)."""
    if value is _MISSING or value is None or type(value) in (str, int, bool):
        return (type(value).__name__, value)
    return ("json", json.dumps(value, ensure_ascii=False, allow_nan=True))


def reads_tools(rule: Mapping[str, Any]) -> bool:
    """Whether a rule's expressions may read its server's tools (``tool_names``, ``ctx.mcp_tools``)."""
    return "tool" in f"{rule['when']}\n{rule['params']}".lower()


@dataclass(frozen=True, slots=True)
class NewCall:
    """One call of the candidate's decision; ``kept``: the recorded, stored params of an unchanged rule."""

    rule: str
    mcp_id: str
    tool_name: str
    params: Any
    kept: bool


@dataclass(frozen=True, slots=True)
class Decision:
    """The candidate's decision on one run, as the full replay's dry run would make it."""

    calls: list[NewCall]
    error_rule: str | None = None
    error: str | None = None


class IncrementalPlan:
    """How the candidate differs from one served snapshot: kept rules, and the changed ones compiled alone."""

    def __init__(
        self,
        *,
        candidate: Sequence[Mapping[str, Any]],
        compiled: CompiledRules,
        served: Sequence[Mapping[str, Any]],
        tools: Mapping[str, frozenset[str]],
        expr_budget: int,
        request_budget: int,
    ) -> None:
        rules = _enabled(candidate)
        served_rules = _enabled(served)
        self.usable = (
            bool(served_rules)  # the recorded run built a namespace (its probe) without error
            and len({r["name"] for r in rules}) == len(rules)
            and len({r["name"] for r in served_rules}) == len(served_rules)
            and len(compiled.rules) == len(rules)
        )
        # name -> (position, mcp_id, tool_name, stop) of the served version's enabled rules
        self.served: dict[str, tuple[int, str, str, bool]] = {}
        served_keys: dict[str, RuleKey] = {}
        for pos, r in enumerate(served_rules):
            self.served[r["name"]] = (pos, r["mcp_id"], r["tool_name"], bool(r["stop"]))
            served_keys[r["name"]] = rule_key(r)
        # The kept rules by name: (candidate position, mcp_id, tool_name, stop)
        self.kept: dict[str, tuple[int, str, str, bool]] = {}
        changed: list[Mapping[str, Any]] = []
        self.changed_at: list[tuple[int, bool]] = []  # per changed rule: (candidate position, stop)
        self.last_kept = -1  # the furthest served position a kept rule has
        self.kept_served: list[tuple[int, int]] = []  # (candidate position, served position) of kept rules
        for i, r in enumerate(rules):
            key = rule_key(r)
            keep = (
                served_keys.get(r["name"]) == key
                and not reads_tools(r)
                and r["tool_name"] in tools.get(r["mcp_id"], frozenset())
            )
            if keep:
                pos = self.served[r["name"]][0]
                self.last_kept = max(self.last_kept, pos)
                self.kept[r["name"]] = (i, r["mcp_id"], r["tool_name"], bool(r["stop"]))
                self.kept_served.append((i, pos))
            else:
                self.changed_at.append((i, bool(r["stop"])))
                changed.append(r)
        self.compiled = compiled
        self.changed: CompiledRules | None = engine.compile_snapshot(changed) if changed else None
        # The changed rules' decision depends on the request only through the query and these
        # context keys: requests equal in those are evaluated once (None: no such memo).
        self.memo_keys = context_keys(changed)
        self.memo: dict[Any, Any] = {}
        # Whether deciding runs this way still pays (``consult``): runs this plan was asked about,
        # and how many of them had the changed rules evaluated afresh.
        self.consulted = self.evaluated = 0
        self.given_up = False
        self.expr_budget = expr_budget
        self.request_budget = request_budget
        # The most one rule's evaluation can take from the request's pool: its whole evaluation
        # budget, or its static cost when that alone is more (it then fails at once), plus the
        # one charge that may overdraw (copying params of up to MAX_DATA_BYTES).
        static = reads = 0
        for rule in compiled.rules:
            when, params = getattr(rule, "compiled_when", None), getattr(rule, "compiled_params", None)
            if when is None or params is None:
                self.usable = False  # not an expression rule: its cost is unknown
                continue
            static = max(static, when.static_cost + params.static_cost)
            reads = max(reads, when.query_reads + params.query_reads)
        self._static, self._reads = static, reads
        self._overdraw = 1 + MAX_DATA_BYTES // BUILT_CHARS_PER_UNIT
        # With every rule evaluated (and the probe) the pool cannot run out: no per-run check.
        self.always_within_budget = (len(rules) + 1) * self.max_spend(0) <= request_budget

    def max_spend(self, query_chars: int) -> int:
        """An upper bound on what one rule's evaluation takes from the request pool."""
        qcost = 1 + query_chars // READ_CHARS_PER_UNIT
        return max(self.expr_budget, self._static + self._reads * qcost) + self._overdraw

    def _within_budget(self, evaluated: int, query: str) -> bool:
        return evaluated * self.max_spend(len(query)) <= self.request_budget

    def consult(self) -> bool:
        """Count one run this plan is asked about; whether to decide it incrementally.

        Deciding incrementally must save work over a full replay: once WARMUP runs were seen, if
        the changed rules had to be evaluated afresh for more than half of them (no request repeats
        and the changed rules are candidates of most), each such run costs a pre-step anyway plus
        the merge, so this plan gives up for good (no flapping) and the rest of its runs are
        replayed in full. The report is the same either way; only the time differs.
        """
        if not self.given_up and self.consulted >= WARMUP and self.evaluated * 2 > self.consulted:
            self.given_up = True
        if self.given_up:
            return False
        self.consulted += 1
        return True

    def outcome_key(self, query: str, context: Callable[[], Any]) -> tuple[Any, ...] | None:
        """What ``replay`` depends on besides the run's recorded rule steps: the query and the context
        keys the changed rules read; None when that cannot be told (then nothing is remembered).

        Runs equal in this and in their recorded steps get the same decision, so a replay decides
        once per distinct (key, recorded steps) and counts the other runs from it.
        """
        if self.changed is None:
            return (query,)
        if self.memo_keys is None:
            return None
        found = context()
        found = found if found is not None else {}
        if not isinstance(found, dict):
            return None
        try:
            return (query, *(_memo_value(found.get(k, _MISSING)) for k in self.memo_keys))
        except (TypeError, ValueError):
            return None

    def _evaluate(self, query: str, request: Callable[[], AgentRequest], backend: ToolBackend) -> Any:
        """The changed rules' records on one request (memoized on what they read of it)."""
        assert self.changed is not None
        key = None
        built = request()
        if self.memo_keys is not None:
            context = built.context if isinstance(built.context, dict) else None
            if context is not None:
                try:
                    key = (query, *(_memo_value(context.get(k, _MISSING)) for k in self.memo_keys))
                except (TypeError, ValueError):
                    key = None
                found = self.memo.get(key) if key is not None else None
                if found is not None:
                    return found
        self.evaluated += 1
        records = run_prestep(
            self.changed,
            built,
            backend=backend,
            dry_run=True,
            expr_budget=self.expr_budget,
            request_budget=self.request_budget,
        ).records
        if key is not None and len(self.memo) < MEMO_SIZE:
            self.memo[key] = records
        return records

    def replay(
        self,
        *,
        query: str,
        request: Callable[[], AgentRequest],
        recorded: Sequence[tuple[str, str, str, str, Any]],
        backend: ToolBackend,
        stable: Callable[[Any], bool],
    ) -> Decision | None:
        """The candidate's decision on one run from its recorded rule steps; None: replay it in full.

        ``stable(params)``: whether stored params compare as the full replay would store them again.
        """
        fired: dict[str, Any] = {}
        reached = len(self.served)  # served positions below this were evaluated by the run
        last = -1
        for name, status, mcp_id, tool_name, data in recorded:
            served = self.served.get(name)
            if status != "ok" or not tool_name or served is None or name in fired:
                return None
            pos, served_mcp, served_tool, stop = served
            if (mcp_id, tool_name) != (served_mcp, served_tool) or pos <= last or reached < len(self.served):
                return None
            params = data.get("params") if isinstance(data, dict) else None
            if not isinstance(params, dict):
                return None
            fired[name] = params
            last = pos
            if stop:
                reached = pos + 1
        if not self.always_within_budget and not self._within_budget(
            len(self.compiled.candidates(query, None, self.expr_budget)) + 1, query
        ):
            return None
        records = None
        if self.changed is not None:
            # None for the data: every equality-indexed changed rule is a candidate (evaluated).
            candidates = self.changed.candidates(query, None, self.expr_budget)
            if candidates:
                if not self._within_budget(len(candidates) + 1, query):
                    return None
                records = self._evaluate(query, request, backend)
        # What decides the candidate's side, in its rule order: the kept rules that fired (their
        # recorded calls) and the changed rules that fired or failed. Skipped rules decide nothing.
        decided: list[tuple[int, bool, Any]] = []
        for name, params in fired.items():
            kept = self.kept.get(name)
            if kept is not None:
                pos, mcp_id, tool_name, stop = kept
                decided.append((pos, stop, NewCall(name, mcp_id, tool_name, params, True)))
        if records is not None:
            for (pos, stop), rec in zip(self.changed_at, records, strict=True):
                # Skipped ones decide nothing; not reached ones come after a changed stop rule
                # that fired, where the walk below ends.
                if rec.status is RuleStatus.FIRED or rec.status is RuleStatus.ERROR:
                    decided.append((pos, stop, rec))
        decided.sort(key=_position)
        calls: list[NewCall] = []
        end, error = len(self.compiled.rules), None  # where the candidate's pre-step ends, and why
        for pos, stop, item in decided:
            if isinstance(item, NewCall):
                if not stable(item.params):
                    return None
                calls.append(item)
            elif item.status is RuleStatus.FIRED:
                calls.append(NewCall(item.rule, item.mcp_id, item.tool_name or "", item.params, False))
            else:
                end, error = pos, (item.rule, f"{PRESTEP_FAILED}: {item.rule}: {item.error}")
                break
            if stop:
                end = pos
                break
        if self.last_kept >= reached and any(c < end and v >= reached for c, v in self.kept_served):
            return None  # a kept rule the candidate reaches but the run never did: not known
        if error is not None:
            return Decision(calls, *error)
        return Decision(calls)


def _position(item: tuple[int, bool, Any]) -> int:
    return item[0]


MASK_MEMO = 100_000  # masked strings remembered per replay
MASK_MEMO_CHARS = 2_000  # longer strings are masked every time


def memo_mask(mask: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``mask`` (``agents.privacy.redactor()``) with each distinct value masked once per replay.

    A string, and a dict or list as a whole (the redaction reads JSON-like data as one text, so a
    card number split across a list's strings is found: ``guardrails.Redactor``), are remembered
    by their text; a query and the params that repeat it, or a user id on thousands of runs, cost
    one masking each.
    """
    known: dict[str, Any] = {}

    def masked(value: Any) -> Any:
        key = _memo_key(value)
        if key is None:
            return mask(value)
        found = known.get(key, _MISSING)
        if found is _MISSING:
            found = mask(value)
            if len(key) <= MASK_MEMO_CHARS and len(known) < MASK_MEMO:
                known[key] = found
        return found  # shared between runs with the same value: read, never changed

    return masked


_MISSING = object()


def _memo_key(value: Any) -> str | None:
    """The text a value is remembered by: a string as itself, a dict or list by its JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict | list):
        try:
            return "\x00" + json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        except (TypeError, ValueError):  # not JSON (a tuple inside is fine; a set is not): not remembered
            return None
    return None


def stable_params(mask: Callable[[Any], Any]) -> Callable[[Any], bool]:
    """``params -> mask(params) == params``: whether stored params are what masking them again gives
    (the full replay compares them masked). The redaction reads the params as one text
    (``guardrails.Redactor``), so the check is made on the whole value, once per distinct value.
    """
    known: dict[str, bool] = {}

    def stable(value: Any) -> bool:
        key = _memo_key(value)
        if key is None:
            return bool(mask(value) == value)
        ok = known.get(key)
        if ok is None:
            ok = bool(mask(value) == value) and _plain(value)
            if len(key) <= MASK_MEMO_CHARS and len(known) < MASK_MEMO:
                known[key] = ok
        return ok

    return stable


def _plain(value: Any, depth: int = 0) -> bool:
    """Only dicts and lists inside (a tuple would come back from masking as a list)."""
    if depth > 64:
        return True
    if isinstance(value, Mapping):
        return type(value) is dict and all(_plain(v, depth + 1) for v in value.values())
    if isinstance(value, list | tuple):
        return type(value) is list and all(_plain(v, depth + 1) for v in value)
    return True
