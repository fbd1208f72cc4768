"""The request index at its edges, exhaustively: every rule below on every request of a grid of edge
values (inclusive and exclusive bounds, the bound itself and its neighbours, missing keys, None, NaN,
infinities, a number past 64 bits, booleans, text where a number is expected, empty texts, Unicode
whose lower case changes length) gives the same outcome indexed, unindexed (every rule evaluated),
and, where neither raises, as the same conditions written as plain Python functions.

Beside the property tests (test_prestep_mixed_index.py), this grid is what catches a wrong index:
each comparison and fallback of request_index.py was mutated by hand and fails it (docs/performance.md
lists the mutations)."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest

from llamon_agent.expr import expression_rule
from llamon_agent.prestep import RuleStatus, StaticToolBackend, compile_rules, run_prestep
from llamon_agent.tools import AgentRequest

BOUNDS = [0, 1, 1.5]
NUMERIC = [
    'data_get("n", 0) {op} {b}',
    'context.get("n", 0) {op} {b}',
    "len(query) {op} {b}",
]
WHENS = [w.format(op=op, b=b) for w in NUMERIC for op in (">", ">=", "<", "<=") for b in BOUNDS] + [
    '0 < data_get("n", 0) <= 1',
    '0 <= data_get("n", 0) < 1.5',
    'data_get("n", 0) >= 1 and data_get("n", 0) <= 1',  # a one-point interval
    'data_get("n", 0) > 1 and data_get("n", 0) < 1',  # an empty interval
    '1 < context.get("n", 0) <= 2',
    # arithmetic terms, read by two rules each so that the index computes them
    'data_get("n", 0) + context.get("n", 0) > 1',
    'data_get("n", 0) + context.get("n", 0) <= 1',
    'data_get("n", 0) * 2 >= context.get("n", 1) * 3',
    'data_get("n", 0) * 2 < context.get("n", 1) * 3',
    'len(query) / data_get("n", 1) >= 2',
    'len(query) / data_get("n", 1) < 2',
    # equality and membership: 1, 1.0 and True are equal, "1" is not
    'data_get("n") == 1',
    'data_get("n") == 0',
    'context.get("n") == "1"',
    'data_get("n") in [1, "", None]',
    'context.get("n", "none") == "none"',
    # query literals, lowered, prefixes, empty literals
    '"주문" in query',
    '"vip" in query.lower()',
    '"VIP" in query',
    '"i̇" in query.lower()',  # "İ".lower() is two characters
    'query.startswith("주")',
    'query.lower().startswith(("vip", "i̇"))',
    '"" in query and data_get("n", 0) > 0',
    'contains_all(query, ["주문", "vip"])',
    're_search(r"^\\d+$", query)',
    # a conjunct that can raise before an indexable one: never skipped
    'context["n"] > 0 and "주문" in query',
    'data_get("n") > 0 or "주문" in query',
]

MISSING = object()
VALUES: list[Any] = [
    MISSING,
    None,
    math.nan,
    math.inf,
    -1,
    0,
    0.5,
    1,
    1.0,
    1.5,
    2,
    True,
    False,
    "1",
    "",
    2**63,
    [1],
]
QUERIES = ["", "1", "주문", "VIP 주문", "İ vip", "12345"]
CONTEXT_VALUES: list[Any] = [MISSING, None, 0, 1, 1.5, "1", math.nan]


def _rules() -> list[Any]:
    return [
        expression_rule(name=f"r{i}", mcp_id="svc", tool_name="t", when=when, params="{}")
        for i, when in enumerate(WHENS)
    ]


RULES = compile_rules(_rules())
PLAIN_RULES = compile_rules(_rules(), use_index=False)
BACKEND = StaticToolBackend({"svc": ["t"]})


def _plain(when: str, query: str, context: dict[str, Any], data: dict[str, Any]) -> Any:
    """The condition as a plain Python function would compute it: (True/False) or "error"."""

    def data_get(key: str, default: Any = None) -> Any:
        return data.get(key, default)

    def contains_all(text: str, words: list[str]) -> bool:
        return all(w in text for w in words)

    def re_search(pattern: str, text: str) -> bool:
        import re

        return re.search(pattern, text) is not None

    scope = {"query": query, "context": context, "data_get": data_get, "len": len}
    scope.update(contains_all=contains_all, re_search=re_search)
    try:
        return bool(eval(when, scope))  # noqa: S307  # this file's own conditions
    except Exception:
        return "error"


def _outcome(compiled: Any, request: AgentRequest) -> list[tuple[str, str]]:
    outcome = run_prestep(compiled, request, backend=BACKEND, dry_run=True)
    return [(rec.rule, rec.status.value) for rec in outcome.records if rec.status is not RuleStatus.SKIPPED]


@pytest.mark.parametrize("query", QUERIES)
def test_indexed_unindexed_and_plain_functions_agree_on_the_edge_grid(query: str) -> None:
    disagreements = []
    for n, c in itertools.product(VALUES, CONTEXT_VALUES):
        data = {} if n is MISSING else {"n": n}
        context = {} if c is MISSING else {"n": c}
        request = AgentRequest(query=query, context=context, a2a_data=[data])
        indexed = _outcome(RULES, request)
        every = _outcome(PLAIN_RULES, request)
        if indexed != every:
            disagreements.append(("index", query, n, c, sorted(set(indexed) ^ set(every))))
            continue
        statuses = dict(every)
        for i, when in enumerate(WHENS):
            engine = statuses.get(f"r{i}", "skipped")
            plain = _plain(when, query, context, data)
            if engine == "error" or plain == "error":
                continue  # the engine's own errors (e.g. past 64 bits) are its contract, not Python's
            if (engine == "fired") != plain:
                disagreements.append(("plain", query, n, c, when, engine, plain))
    assert disagreements == []
