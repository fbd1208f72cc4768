"""The pre-step's request index: which rules of a compiled rule set (llamon_agent.compiled_rules)
a request could fire, from the atoms of their `when`.

Each rule's `when` is read (expr.hints.index_options) as alternative sets of atoms, one of which
must hold for it to be true without raising; each kind of atom has its own structure, looked up
once per request. Only the candidate rules are then evaluated, in order, by the pre-step
(llamon_agent.prestep): the outcome is the same as evaluating every rule, errors included.
"""

from __future__ import annotations

import bisect
import operator
from array import array
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ahocorasick

from llamon_agent.tools import RuleInfo

_Atom = tuple[Any, ...]


def _rule_options(rule: Any, info: RuleInfo) -> tuple[frozenset[_Atom], ...] | None:
    """The rule's alternative index requirements; None when it must always be evaluated."""
    options = getattr(rule, "index_options", None)
    if options is None:
        if not info.keywords:
            return None
        options = (frozenset(("kw", literal, lowered) for literal, lowered in info.keywords),)
    # "" is in every text: no requirement.
    usable = [o for o in options if o and not any(a[0] == "kw" and not a[1] for a in o)]
    return tuple(usable) or None


class RequestIndex:
    """What a request must show for a rule to be worth evaluating, one structure per kind of
    atom (expr.hints): query literals (one Aho-Corasick automaton), regexes (one RE2 set),
    context/DataPart equalities and memberships (hashes), query prefixes (a hash per prefix
    length), numeric intervals on context/DataPart fields and len(query) (bisect, _Intervals).

    Each rule is indexed on one of its alternative requirements, the one whose atoms let the
    fewest rules through. A rule without any is always evaluated.
    """

    def __init__(self, rules: Sequence[Any], infos: Sequence[RuleInfo]) -> None:
        chosen: list[tuple[int, frozenset[_Atom]]] = []
        always: list[int] = []
        frequency: dict[_Atom, int] = {}
        per_rule: list[tuple[frozenset[_Atom], ...] | None] = []
        with_regex: set[int] = set()
        for i, (rule, info) in enumerate(zip(rules, infos, strict=True)):
            options = _rule_options(rule, info)
            per_rule.append(options)
            if options:
                for atom in options[0] if len(options) == 1 else frozenset().union(*options):
                    frequency[atom] = frequency.get(atom, 0) + 1
                    if atom[0] == "re":
                        with_regex.add(i)
        for i in [i for i in with_regex if getattr(rules[i], "index_cost", None) is None]:
            # A regex whose cost is not known: the rule may raise on any long query, and the
            # options after it in an `and` rely on that cost (expr.hints._is_search). Evaluated.
            options = per_rule[i] or ()
            for atom in options[0] if len(options) == 1 else frozenset().union(*options):
                frequency[atom] -= 1
            per_rule[i] = None
            with_regex.discard(i)
        # How many rules an atom lets through, roughly: its own rules for a text, a regex, an
        # equality or a prefix (each value is its own atom); for a numeric interval, a share of
        # the rules testing the same value (its numbers differ per rule, so counting is no guide).
        tested: dict[tuple[Any, ...], int] = {}
        for atom in frequency:
            if atom[0] == "num":
                tested[atom[1:4]] = tested.get(atom[1:4], 0) + frequency[atom]

        def weight(atom: _Atom) -> float:
            if atom[0] != "num":
                return frequency[atom]
            bounded = atom[4] != -_INF and atom[6] != _INF
            return 1 + tested[atom[1:4]] * (0.1 if bounded else 0.5)

        for i, options in enumerate(per_rule):
            if options is not None and any(a[0] == "num" and a[1] == "expr" for o in options for a in o):
                # A term only one rule compares costs the index more to compute than the rule
                # costs to evaluate: only shared terms are worth it.
                options = tuple(o for o in options if all(_shared(a, tested) for a in o)) or None
            if options is None:
                always.append(i)
                continue
            best = options[0] if len(options) == 1 else min(options, key=lambda o: sum(weight(a) for a in o))
            chosen.append((i, best))
        self.always: tuple[int, ...] = tuple(always)
        keywords: dict[str, tuple[list[int], list[int]]] = {}
        patterns: dict[str, list[int]] = {}
        equalities: dict[tuple[str, str, Any], dict[Any, list[int]]] = {}
        prefixes: dict[tuple[bool, int], dict[str, list[int]]] = {}
        numbers: dict[tuple[str, str, Any], list[tuple[Any, ...]]] = {}
        costs: list[tuple[int, int, float]] = []
        on_regex: list[int] = []
        for i, option in chosen:
            has_regex = False
            for atom in option:
                kind = atom[0]
                if kind == "kw":
                    found = keywords.get(atom[1])
                    if found is None:
                        found = keywords[atom[1]] = ([], [])
                    raw_ids, low_ids = found
                    ids = low_ids if atom[2] else raw_ids
                    if not ids or ids[-1] != i:
                        ids.append(i)
                elif kind == "re":
                    ids = patterns.setdefault(atom[1], [])
                    if not ids or ids[-1] != i:
                        ids.append(i)
                    has_regex = True
                elif kind == "eq":
                    _, source, key, default, value = atom
                    ids = equalities.setdefault((source, key, default), {}).setdefault(value, [])
                    if not ids or ids[-1] != i:
                        ids.append(i)
                elif kind == "pre":
                    _, lowered, text = atom
                    prefixes.setdefault((lowered, len(text)), {}).setdefault(text, []).append(i)
                else:  # "num"
                    numbers.setdefault(atom[1:4], []).append((*atom[4:], i))
            if has_regex:
                on_regex.append(i)
            if i in with_regex:
                # Its regex may raise on this request (over the budget, a query that cannot be
                # UTF-8) whichever option it is indexed on: _regex_hits checks that per request.
                a, b = rules[i].index_cost
                costs.append((i, a, b))
        # Keyword hits are de-duplicated by literal before rules are merged: a long query that
        # repeats a literal 10,000 times costs 10,000 set inserts, not 10,000 x its rules.
        # The rules of literal k, flat (a tuple each would cost ~100 bytes a literal): those that
        # need it in the raw query are keyword_ids[b[2k]:b[2k + 1]], in query.lower()
        # keyword_ids[b[2k + 1]:b[2k + 2]], where b is keyword_bounds.
        self.keyword_ids = array("l")
        self.keyword_bounds = array("l", [0])
        self.automaton: Any = None
        self.literals: tuple[str, ...] = tuple(keywords)  # by automaton value
        self.known: frozenset[str] = frozenset(keywords)
        if keywords:
            self.automaton = ahocorasick.Automaton(ahocorasick.STORE_INTS)
            for k, (literal, (raw_ids, low_ids)) in enumerate(keywords.items()):
                self.automaton.add_word(literal, k)
                self.keyword_ids.extend(raw_ids)
                self.keyword_bounds.append(len(self.keyword_ids))
                self.keyword_ids.extend(low_ids)
                self.keyword_bounds.append(len(self.keyword_ids))
            self.automaton.make_automaton()
        self.regex_set: Any = None
        self.regex_rules: list[tuple[int, ...]] = []
        if patterns:
            self.regex_set, refused = _regex_set(list(patterns))
            self.regex_rules = [tuple(ids) for ids in patterns.values()]
            for j in refused:  # RE2 took the pattern alone but not in a set: evaluate those rules
                hits_always = set(self.always).union(self.regex_rules[j])
                self.always = tuple(sorted(hits_always))
        self.equalities = {
            where: {value: tuple(ids) for value, ids in values.items()}
            for where, values in equalities.items()
        }
        self.equality_rules: tuple[int, ...] = tuple(
            sorted({i for values in self.equalities.values() for ids in values.values() for i in ids})
        )
        self.prefixes = {
            where: {text: tuple(ids) for text, ids in texts.items()} for where, texts in prefixes.items()
        }
        self.numbers = {where: _Intervals(items) for where, items in numbers.items()}
        # Regex-indexed rules cost at most a + b * len(query) when their pattern does not match.
        self.regex_costs = tuple(costs)
        self.max_a = max((a for _, a, _ in costs), default=0)
        self.max_b = max((b for _, _, b in costs), default=0.0)
        self.regex_guarded: tuple[int, ...] = tuple(i for i, _, _ in costs)  # every rule with a regex
        self.all_regex_rules: tuple[int, ...] = tuple(on_regex)  # those indexed on one

    def candidates(
        self,
        query: str,
        data: Callable[[], tuple[Mapping[str, Any], Any]] | None,
        expr_budget: int | None,
        found_out: list[Any] | None = None,
    ) -> list[int]:
        hits: set[int] = set(self.always)
        if self.automaton is not None:
            lowered = query.lower()
            automaton = self.automaton
            ids, bounds = self.keyword_ids, self.keyword_bounds
            found = {k for _, k in automaton.iter(query)}
            # Korean text is its own lowercase: one scan
            found_low = found if lowered == query else {k for _, k in automaton.iter(lowered)}
            for k in found:
                hits.update(ids[bounds[2 * k] : bounds[2 * k + 1]])
            for k in found_low:
                hits.update(ids[bounds[2 * k + 1] : bounds[2 * k + 2]])
            if found_out is not None:
                # the literal tests of the candidates read these instead of the query
                literals = self.literals
                found_out.append(
                    (
                        {literals[k] for k in found},
                        {literals[k] for k in found_low},
                        self.known,
                    )
                )
        if self.regex_costs:
            self._regex_hits(query, hits, expr_budget)
        if self.equalities or self.numbers:
            self._data_hits(query, data, hits)
        if self.prefixes:
            lowered = query.lower()
            for (low, size), texts in self.prefixes.items():
                starting = texts.get((lowered if low else query)[:size])
                if starting is not None:
                    hits.update(starting)
        return sorted(hits)

    def _regex_hits(self, query: str, hits: set[int], expr_budget: int | None) -> None:
        n = len(query)
        if expr_budget is None:
            from llamon_agent.settings import cost_budgets

            expr_budget = cost_budgets().expr_cost_budget
        if 2 * (self.max_a + self.max_b * n) > expr_budget:
            # A long query: a rule whose evaluation might run out of budget must be evaluated
            # (skipping it would hide that error). Twice the bound: a margin, not a need.
            hits.update(i for i, a, b in self.regex_costs if 2 * (a + b * n) > expr_budget)
        try:
            if self.regex_set is None:  # every rule with a regex is indexed on another atom
                if not query.isascii():
                    query.encode()
                return
            matched = self.regex_set.Match(query)
        except Exception:  # e.g. a lone surrogate cannot be UTF-8: re_search raises, evaluate
            hits.update(self.regex_guarded)
            return
        if not matched:  # the sentinel "" always matches: none means RE2 gave up (DFA memory)
            hits.update(self.all_regex_rules)
            return
        rules = self.regex_rules
        for j in matched:
            if j:
                hits.update(rules[j - 1])

    def _data_hits(
        self, query: str, data: Callable[[], tuple[Mapping[str, Any], Any]] | None, hits: set[int]
    ) -> None:
        context: Any = None
        parts: Any = None
        known = data is not None
        if data is not None:
            try:
                context, parts = data()
            except Exception:  # the request is over the caps: the namespace probe reports it
                known = False
        if not known:
            hits.update(self.equality_rules)
            for intervals in self.numbers.values():
                hits.update(intervals.everyone)
            return
        global _data_get, _max_int
        if _data_get is None:  # imported once, not per request: plain rule sets never need expr
            from llamon_agent.expr.helpers import _data_get
            from llamon_agent.expr.limits import MAX_INT as _max_int
        data_get, bound = _data_get, _max_int

        def read(source: str, key: Any, default: Any) -> Any:
            if source == "len":
                return len(query)
            if source == "expr":
                try:
                    return _compute(key, read, bound)
                except (_NotANumber, ArithmeticError):  # the rule's own arithmetic raises: evaluate it
                    return None
            return context.get(key, default) if source == "context" else data_get(parts, key, default)

        for (source, key, default), values in self.equalities.items():
            try:
                ids = values.get(read(source, key, default))
            except TypeError:  # a list or dict never equals a literal
                continue
            if ids is not None:
                hits.update(ids)
        for where, intervals in self.numbers.items():
            intervals.hits(read(*where), hits)


_data_get: Any = None  # llamon_agent.expr.helpers._data_get, imported by the first request that needs it
_max_int = 0  # and llamon_agent.expr.limits.MAX_INT: past it the helpers' arithmetic raises


def _shared(atom: _Atom, tested: Mapping[tuple[Any, ...], int]) -> bool:
    return atom[0] != "num" or atom[1] != "expr" or tested[atom[1:4]] > 1


class _NotANumber(Exception):
    pass


_NUMBERS = (int, float, bool)
_OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}


def _compute(term: tuple[Any, ...], read: Callable[[str, Any, Any], Any], bound: int) -> Any:
    """The value of an arithmetic term (expr.hints) on this request, as the rule computes it;
    _NotANumber (or ArithmeticError) where the rule's own evaluation would raise or may differ
    (``bound``: the helpers' largest whole number)."""
    kind = term[0]
    if kind == "const":
        return term[1]
    if kind == "get":
        value = read(*term[1:])
        if type(value) not in _NUMBERS:
            raise _NotANumber
        return value
    if kind == "neg":
        value = -_compute(term[1], read, bound)
    elif kind == "cmp":
        return _OPERATORS[term[1]](_compute(term[2], read, bound), _compute(term[3], read, bound))
    else:
        value = _OPERATORS[kind](_compute(term[1], read, bound), _compute(term[2], read, bound))
    if type(value) is int and not -bound <= value <= bound:
        raise _NotANumber
    return value


SET_PATTERN_SIZE = 5_000  # regex_size of a pattern the index's RE2 set takes (others: evaluated)
SET_TOTAL_SIZE = 2_000_000  # and of all of them together


_INF = float("inf")


class _Intervals:
    """The numeric intervals (lo, lo_incl, hi, hi_incl, rule) rules need one value to be in:
    which contain a value. Bisect on sorted bounds: intervals open above by their lower bound,
    open below by their upper bound, bounded ones by their lower bound within width classes."""

    __slots__ = ("above", "above_ids", "below", "below_ids", "bounded", "everyone")

    def __init__(self, items: Sequence[tuple[Any, ...]]) -> None:
        above = sorted((lo, not lo_incl, i) for lo, lo_incl, hi, _, i in items if hi == _INF)
        below = sorted((hi, hi_incl, i) for lo, _, hi, hi_incl, i in items if hi != _INF and lo == -_INF)
        self.above = [(lo, strict) for lo, strict, _ in above]
        self.above_ids = [i for *_, i in above]
        self.below = [(hi, incl) for hi, incl, _ in below]
        self.below_ids = [i for *_, i in below]
        classes: dict[int, list[tuple[Any, ...]]] = {}
        for lo, lo_incl, hi, hi_incl, i in items:
            if lo != -_INF and hi != _INF:
                width = max(hi - lo, 0)
                classes.setdefault(int(width).bit_length(), []).append((lo, lo_incl, hi, hi_incl, i))
        self.bounded = [
            (float(2**size), [item[0] for item in group], group)
            for size, group in ((size, sorted(group)) for size, group in classes.items())
        ]
        self.everyone = tuple(i for *_, i in items)

    def hits(self, value: Any, out: set[int]) -> None:
        if type(value) not in (int, float, bool) or value != value:
            out.update(self.everyone)  # the comparison raises (or NaN): let the rules say so
            return
        # lo < value, or lo == value when inclusive: (lo, strict) < (value, True)
        out.update(self.above_ids[: bisect.bisect_left(self.above, (value, True))])
        # hi > value, or hi == value when inclusive: (hi, incl) > (value, False)
        out.update(self.below_ids[bisect.bisect_right(self.below, (value, False)) :])
        for width, los, group in self.bounded:
            try:
                start = bisect.bisect_left(los, value - width)
            except OverflowError:  # an int past the floats: compare the whole class
                start = 0
            end = bisect.bisect_right(los, value)
            for lo, lo_incl, hi, hi_incl, i in group[start:end]:
                if (lo < value or (lo_incl and lo == value)) and (value < hi or (hi_incl and value == hi)):
                    out.add(i)


def _regex_set(patterns: Sequence[str]) -> tuple[Any, list[int]]:
    """One RE2 set of ``patterns`` (index 0 is a sentinel that matches every text), and the
    positions of the patterns it refused."""
    import re2

    from llamon_agent.expr.helpers import _RE_OPTIONS, regex_size

    options = re2.Options()
    options.log_errors = _RE_OPTIONS.log_errors
    options.max_mem = 256 << 20  # a set of thousands of patterns needs more than the 8 MB default
    regex_set = re2.Set.SearchSet(options)
    regex_set.Add("")
    refused = []
    total = 0
    for j, pattern in enumerate(patterns):
        # A large pattern is built by the first request that evaluates its rule (and charged
        # to it), not here: compiling a rule set must not build 2,000 large programs.
        size = regex_size(pattern)
        total += size
        try:
            if size > SET_PATTERN_SIZE or total > SET_TOTAL_SIZE:
                raise re2.error("left out of the set")
            regex_set.Add(pattern)
        except re2.error:
            refused.append(j)
            regex_set.Add(r"[^\x00-\x{10FFFF}]")  # an empty class keeps the numbering: never matches
    regex_set.Compile()
    return regex_set, refused
