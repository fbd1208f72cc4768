"""The literals a learned condition may use: the vocabulary of candidate words and values, and the
runs as sets of literal ids (:class:`Row`); each pass maps over parts of the runs and is merged."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import ahocorasick

from llamon_agent.suggest.savings import Observation
from llamon_agent.tools import AgentRequest

MIN_SUPPORT = 20  # runs of a group (in the learning share) before it is learned at all
MAX_KEYWORDS = 300  # candidate keywords per group
MAX_VALUES = 50  # a context or DataPart key with more distinct values is an id, not a condition
MAX_QUERY_CHARS = 2_000  # of a query read for words (what a rule's condition would look at)
_WORD = re.compile(r"[0-9A-Za-z가-힣]+")
_HANGUL = re.compile(r"[가-힣]")


# --------------------------------------------------------------------------- literals


def _words(query: str) -> list[str]:
    return _WORD.findall(query[:MAX_QUERY_CHARS].lower())


# Words that say how, not what: verb endings, requests, greetings (Korean) and function words
# (English). A condition on them would fire on any message.
STOP_WORDS = frozenset(
    [
        "세요",
        "주세요",
        "해주",
        "해줘",
        "해요",
        "어요",
        "아요",
        "나요",
        "까요",
        "니다",
        "습니다",
        "합니다",
        "싶어",
        "싶어요",
        "고싶",
        "하고",
        "알려",
        "알려줘",
        "알려주",
        "부탁",
        "부탁해",
        "드려요",
        "하세요",
        "안녕",
        "안녕하",
        "녕하세",
        "하세",
        "혹시",
        "저기",
        "저기요",
        "있나",
        "있나요",
        "되나",
        "되나요",
        "인가",
        "가요",
        "the",
        "and",
        "for",
        "you",
        "your",
        "my",
        "me",
        "is",
        "are",
        "was",
        "what",
        "how",
        "when",
        "where",
        "can",
        "could",
        "would",
        "please",
        "want",
        "need",
        "new",
        "many",
        "with",
        "this",
        "that",
        "have",
        "has",
        "get",
        "hi",
        "hello",
        "thanks",
    ]
)


def _keywords_of(word: str) -> set[str]:
    """The keywords a rule could test for a word: a Korean word's pieces of 2 to 4 syllables (a
    stem with its particle, or a noun inside a compound), an English word and its first 4+ letters."""
    if _HANGUL.search(word):
        n = len(word)
        found = {word[i : i + k] for k in (2, 3, 4) for i in range(n - k + 1)} | ({word} if n <= 6 else set())
    elif len(word) < 3 or word.isdigit() or word in STOP_WORDS:
        return set()
    else:
        found = {word} | ({word[:4]} if len(word) > 5 else set())
    return found - STOP_WORDS


def _plain(value: Any) -> bool:
    return isinstance(value, str | int | bool) and not (isinstance(value, str) and len(value) > 100)


def _literals_of(obs: Observation) -> Iterable[tuple[str, str, Any]]:
    """The context and DataPart literals of one run: ("ctx", key, value), ("has", key, None), ("data", key, value)."""
    for key, value in obs.request.context.items():
        if isinstance(key, str) and _plain(value):
            yield ("ctx", key, value)
    seen: set[str] = set()
    for part in obs.request.a2a_data or ():
        if not isinstance(part, Mapping):
            continue
        for key, value in part.items():
            if not isinstance(key, str) or key in seen:
                continue  # data_get gives the first part's value
            seen.add(key)
            yield ("has", key, None)
            if _plain(value):
                yield ("data", key, value)


@dataclass(slots=True)
class Vocabulary:
    """Candidate literals: per group, its positives' keyword counts; over all runs, the values seen."""

    positives: Counter[tuple[str, str]] = field(default_factory=Counter)
    keywords: dict[tuple[str, str], Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    values: dict[tuple[str, str], set[Any]] = field(default_factory=lambda: defaultdict(set))
    tools: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))


def vocabulary_to_json(vocab: Vocabulary, max_keywords: int = 4 * MAX_KEYWORDS) -> dict[str, Any]:
    """A part's vocabulary as JSON (each group's most common keywords only: the rest cannot be chosen)."""
    return {
        "positives": [[m, t, n] for (m, t), n in vocab.positives.items()],
        "keywords": [[m, t, counts.most_common(max_keywords)] for (m, t), counts in vocab.keywords.items()],
        "values": [[kind, key, sorted(values, key=repr)] for (kind, key), values in vocab.values.items()],
        "tools": {m: sorted(tools) for m, tools in vocab.tools.items()},
    }


def vocabulary_from_json(data: Mapping[str, Any]) -> Vocabulary:
    vocab = Vocabulary()
    for m, t, n in data["positives"]:
        vocab.positives[(m, t)] = n
    for m, t, counts in data["keywords"]:
        vocab.keywords[(m, t)].update(dict(counts))
    for kind, key, values in data["values"]:
        vocab.values[(kind, key)] = set(values)
    for m, tools in data["tools"].items():
        vocab.tools[m] = set(tools)
    return vocab


def vocabulary(observations: Iterable[Observation]) -> Vocabulary:
    """Map: count the candidate literals of one partition (learning share only)."""
    vocab = Vocabulary()
    for obs in observations:
        for call in (*obs.model_calls, *obs.rule_calls):
            vocab.tools[call.mcp_id].add(call.tool)
        if obs.held_out():
            continue
        targets = obs.targets()
        for kind, key, value in _literals_of(obs):
            if kind != "has":
                kept = vocab.values[(kind, key)]
                if len(kept) <= MAX_VALUES:
                    kept.add(value)
        if not targets:
            continue
        words: set[str] = set()
        for word in _words(obs.request.query):
            words |= _keywords_of(word)
        for group in targets:
            vocab.positives[group] += 1
            vocab.keywords[group].update(words)
    return vocab


def merge_vocabularies(parts: Iterable[Vocabulary]) -> Vocabulary:
    """Reduce: one vocabulary from the partitions'."""
    total = Vocabulary()
    for part in parts:
        total.positives.update(part.positives)
        for group, counts in part.keywords.items():
            total.keywords[group].update(counts)
        for key, values in part.values.items():
            total.values[key] |= values
        for mcp_id, tools in part.tools.items():
            total.tools[mcp_id] |= tools
    return total


@dataclass(slots=True)
class Features:
    """The literals the learner may use, each with its expression text, and an automaton for keywords."""

    texts: list[str]
    ids: dict[tuple[str, str, Any], int]
    automaton: Any  # ahocorasick.Automaton over the keywords, value: feature id
    tools: dict[str, set[str]]

    @classmethod
    def build(cls, vocab: Vocabulary, min_support: int = MIN_SUPPORT) -> Features:
        texts: list[str] = []
        ids: dict[tuple[str, str, Any], int] = {}

        def add(key: tuple[str, str, Any], text: str) -> None:
            if key not in ids:
                ids[key] = len(texts)
                texts.append(text)

        automaton = ahocorasick.Automaton()
        for group, n in vocab.positives.items():
            if n < min_support:
                continue
            common = [(w, c) for w, c in vocab.keywords[group].most_common(MAX_KEYWORDS) if c >= 0.05 * n]
            for word, _count in common:
                # Words are found in the lower-cased query; a rule says so when case matters.
                where = "query.lower()" if word.lower() != word.upper() else "query"
                add(("kw", word, None), f"{expression_literal(word)} in {where}")
        for (kind, key), values in vocab.values.items():
            if len(values) > MAX_VALUES:
                continue
            for value in values:
                lit = expression_literal(value)
                read = (
                    f"context.get({expression_literal(key)})"
                    if kind == "ctx"
                    else f"data_get({expression_literal(key)})"
                )
                add((kind, key, value), f"{read} == {lit}")
        for (kind, key), _values in vocab.values.items():
            if kind == "data":
                add(("has", key, None), f"data_get({expression_literal(key)}) is not None")
        for (kind, word, _v), fid in ids.items():
            if kind == "kw":
                automaton.add_word(word, fid)
        if len(automaton):
            automaton.make_automaton()
        return cls(texts, ids, automaton, {k: set(v) for k, v in vocab.tools.items()})

    def of(self, obs: Observation) -> frozenset[int]:
        found: set[int] = set()
        if len(self.automaton):
            found.update(
                fid for _end, fid in self.automaton.iter(obs.request.query[:MAX_QUERY_CHARS].lower())
            )
        for kind, key, value in _literals_of(obs):
            fid = self.ids.get((kind, key, value if kind != "has" else None))
            if fid is not None:
                found.add(fid)
        return frozenset(found)


@dataclass(frozen=True, slots=True)
class Row:
    """One run of the learning share, reduced to what the learner reads."""

    run_id: Any
    features: frozenset[int]
    targets: frozenset[tuple[str, str]]
    calls: Mapping[tuple[str, str], Mapping[str, Any]]  # the model's first call of each target: its args
    request: AgentRequest | None  # None: not carried (a row read back without it)


def row_to_json(row: Row, with_request: bool) -> list[Any]:
    """A row as JSON; the request only when asked (arguments are derived on a sample of each group)."""
    return [
        row.run_id,
        sorted(row.features),
        sorted(row.targets),
        [[m, t, dict(args)] for (m, t), args in row.calls.items()],
        row.request.to_json() if with_request and row.request is not None else None,
    ]


def row_from_json(data: Sequence[Any]) -> Row:
    run_id, features, targets, calls, request = data
    return Row(
        run_id,
        frozenset(features),
        frozenset((m, t) for m, t in targets),
        {(m, t): args for m, t, args in calls},
        AgentRequest(**request) if request is not None else None,
    )


DERIVATION_SAMPLE = 400


def rows_to_json(rows: Sequence[Row], sample: int = DERIVATION_SAMPLE) -> list[list[Any]]:
    """Rows as JSON, with the request of the first ``sample`` rows of each group (what derivation reads)."""
    seen: Counter[tuple[str, str]] = Counter()
    out = []
    for row in rows:
        wanted = False
        for group in row.targets:
            seen[group] += 1
            wanted = wanted or seen[group] <= sample
        out.append(row_to_json(row, wanted))
    return out


def featurize(observations: Iterable[Observation], features: Features) -> list[Row]:
    """Map: the learning share of one partition as rows of literal ids."""
    rows = []
    for obs in observations:
        if obs.held_out():
            continue
        targets = obs.targets()
        calls: dict[tuple[str, str], Mapping[str, Any]] = {}
        for call in obs.model_calls:
            calls.setdefault((call.mcp_id, call.tool), call.args)
        rows.append(Row(obs.run_id, features.of(obs), frozenset(targets), calls, obs.request))
    return rows


def expression_literal(value: Any) -> str:
    """A value as an expression literal; text with invisible characters is written with escapes."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=not value.isprintable())
    return repr(value)  # numbers, True/False/None, lists and dicts of them (repr escapes the invisible)
