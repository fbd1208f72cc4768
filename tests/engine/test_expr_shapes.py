"""Expressions of one shape share their compiled code, and nothing else changes: every hint, cost,
result, error message and error position is what compiling the expression alone gives."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest

from llamon_agent.expr import ExprError, compile_params, compile_when, expression_rule, shapes
from llamon_agent.expr import compiled as compiled_module
from llamon_agent.tools import DeterministicContext

REQUESTS = [
    DeterministicContext(
        query="주문 상품00001 배송", context={"tier": "gold"}, a2a_data=[{"orderId": "A-1"}]
    ),
    DeterministicContext(query="Order SKU-77 please", context={"k": 1, "tier": "vip"}),
    DeterministicContext(
        query="x", context={"k": {"q": "v"}, "segment": "seg1"}, a2a_data=[{"kind": "refund"}]
    ),
    DeterministicContext(query="aab R00001-42 code7 abc", context={}),
]

# (the first of a shape, another of the same shape): literals of other lengths move the columns.
PAIRS = [
    ('"주문" in query and "상품00001" in query', '"환불이요" in query and "X" in query'),
    ('"sku-77" in query.lower()', '"a" in query.lower()'),
    ('contains_any(query.lower(), ["promo1", "쿠폰1"])', 'contains_any(query.lower(), ["p", "order"])'),
    ('context.get("tier") == "gold" and "Plan1" in query', 'context.get("tier") == "vip" and "SKU" in query'),
    ('data_get("orderId") == "A-1"', 'data_get("kind") == "refund"'),
    ('re_search(r"R\\d+-\\d+", query)', 're_search(r"code\\d\\b", query)'),
    ('len(query) > 5 and re_search(r"(?i)aab", query)', 'len(query) > 5 and re_search(r"zz+", query)'),
    # run-time errors after a literal: the column must be this expression's own
    ('"a" in query and context["k"] == 1', '"abcdef" in query and context["k"] == 1'),
    (
        '"주" in query or context["missing"]["q"] == "v"',
        '"주문주문" in query or context["missing"]["q"] == "v"',
    ),
    ('"x" in query and\n  context["k"]["q"] == "v"', '"xyz" in query and\n  context["k"]["q"] == "v"'),
    (
        '[w for w in query.split() if w == "x"][0] == "y"',
        '[w for w in query.split() if w == "abc"][0] == "y"',
    ),
    ("'a' in query and query[50] == 'z'", "'abcd' in query and query[50] == 'zz'"),
    # hints that depend on more than which literal: empty, repeated, contains_all's longest
    ('"a" in query and "b" in query', '"" in query and "b" in query'),
    ('"a" in query or "b" in query', '"a" in query or "a" in query'),
    ('contains_all(query, ["a", "bb"])', 'contains_all(query, ["ccc", "d"])'),
    ('context.get("k", "d") == "v"', 'context.get("k", "v") == "v"'),
    # keys nested in an arithmetic term of the index
    ('data_get("a", 0) + data_get("b", 0) > 5', 'data_get("x", 0) + data_get("y", 0) > 5'),
    ('data_get("a", 0) * 12 > context.get("b", 1) * 3', 'data_get("p", 0) * 12 > context.get("i", 1) * 3'),
]

# Same shape as a compiled one, but a literal's value is refused: the full path's own error.
HOSTILE = [
    ('re_search(r"a+", query)', 're_search(r"(", query)'),
    ('re_search(r"a+", query)', 're_search(r"a{1000000}", query)'),
    ('"a" in query', '"' + "x" * 20_000 + '" in query'),
    ('"a" in query', '"a\u202e" in query'),
    ('"a" in query', '"\ud800" in query'),
    ('"a" in query', '"a\x00" in query'),
    ('"a" in query', '"a" "b" in query'),
    ('"a" in query', 'f"a" in query'),
    ('"a" in query', '"a\\"" in query'),
    ('"a" in query', '"a" in query # "b"'),
    ('"a" in query', '"a" in query\r'),
    ('"a" in query', 'b"a" in query'),
    ('"a" in query', 'r"a\\" in query'),
]


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    def clear() -> None:
        shapes.clear()
        compiled_module._cached_when.cache_clear()
        compiled_module._cached_params.cache_clear()

    clear()
    yield
    clear()


def _alone(source: str, monkeypatch: pytest.MonkeyPatch, kind: str = "when") -> Any:
    """Compile ``source`` the way it was compiled before shapes existed: on its own."""
    compiled_module._cached_when.cache_clear()
    compiled_module._cached_params.cache_clear()
    with monkeypatch.context() as patch:
        patch.setattr(shapes, "lookup", lambda source, kind: None)
        return _record(source, kind)


def _record(source: str, kind: str = "when") -> list[Any]:
    try:
        expr = compile_when(source) if kind == "when" else compile_params(source)
    except ExprError as exc:
        return ["refused", str(exc), exc.line, exc.column]
    out: list[Any] = [
        expr.required_keywords,
        expr.index_options,
        expr.cost_line,
        expr.static_cost,
        expr.query_reads,
        type(expr).__name__,
    ]
    for ctx in REQUESTS:
        try:
            out.append(("ok", expr(ctx)))
        except ExprError as exc:
            out.append(("error", str(exc), exc.line, exc.column))
    return out


@pytest.mark.parametrize(("first", "other"), PAIRS)
def test_an_expression_compiled_by_shape_is_the_expression_compiled_alone(
    first: str, other: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    alone = _alone(other, monkeypatch)
    shapes.clear()
    compiled_module._cached_when.cache_clear()
    compile_when(first)  # the template of the shape
    shared = compile_when(other)
    assert shared._code is compile_when(first)._code  # the point: one code object
    assert _record(other) == alone


@pytest.mark.parametrize(("first", "other"), HOSTILE)
def test_a_refused_literal_gets_the_full_compile_s_own_answer(
    first: str, other: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    alone = _alone(other, monkeypatch)
    shapes.clear()
    compile_when(first)
    assert _record(other) == alone


def test_rules_that_differ_by_their_texts_share_code_and_others_do_not() -> None:
    def rule(i: int, when: str, params: str = '{"q": query[:50]}') -> Any:
        return expression_rule(name=f"r{i}", mcp_id="m", tool_name="t", when=when, params=params)

    a = rule(1, '"주문" in query and "상품1" in query')
    b = rule(2, '"배송" in query and "상품22" in query')
    c = rule(3, '"배송" in query or "상품22" in query')
    d = rule(4, '"x" in query', '{"q": query[:10], "k": "v"}')
    e = rule(5, '"y" in query', '{"q": query[:10], "k": "w"}')
    assert a.compiled_when._code is b.compiled_when._code
    assert a.compiled_when._code is not c.compiled_when._code
    assert d.compiled_params._code is e.compiled_params._code
    ctx = DeterministicContext(query="배송 상품22")
    assert a(ctx) is None
    assert b(ctx) == {"tool_name": "t", "params": {"q": "배송 상품22"}}
    assert e(DeterministicContext(query="yes")) == {"tool_name": "t", "params": {"q": "yes", "k": "w"}}


def test_params_of_one_shape_keep_their_own_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    alone = _alone('{"q": context["abcdef"]}', monkeypatch, "params")
    shapes.clear()
    compile_params('{"q": context["a"]}')
    assert _record('{"q": context["abcdef"]}', "params") == alone
    assert alone[-1][1] == "line 1, column 7: key 'abcdef' is missing; use .get('abcdef') for optional keys"


def test_rules_of_one_shape_never_see_each_other_s_literals(monkeypatch: pytest.MonkeyPatch) -> None:
    # Rules of a shape share the template's code and symbolic hints, and the hints of the
    # ones that cannot be filled in (a repeated literal) are computed by writing their literals
    # into the template's tree: interleaved, each rule must still answer with its own.
    words = [f"w{i}" for i in range(12)]
    whens = []
    for i, word in enumerate(words):
        whens.append(f'"{word}" in query and context.get("tier") == "t{i}"')
        whens.append(f'"{word}" in query or "{word}" in query')  # repeated: computed on the tree
    alone = {when: _alone(when, monkeypatch) for when in whens}
    shapes.clear()
    compiled_module._cached_when.cache_clear()
    rules = [
        expression_rule(name=f"r{i}", mcp_id="m", tool_name="t", when=when, params=f'{{"w": "{word}"}}')
        for i, (word, when) in enumerate(zip([w for w in words for _ in range(2)], whens, strict=True))
    ]
    assert len({rule.compiled_when._code for rule in rules}) == 2  # two shapes, two code objects
    for rule, when in zip(rules, whens, strict=True):
        assert _record(when) == alone[when]
        word = when.split('"')[1]
        assert rule.__llamon_rule__.keywords == frozenset({(word, False)})
        fired = rule(DeterministicContext(query=f"x {word} y", context={"tier": "t" + word[1:]}))
        assert fired == {"tool_name": "t", "params": {"w": word}}
        other = "w0" if word != "w0" else "w1"
        assert rule(DeterministicContext(query=other, context={"tier": "t" + word[1:]})) is None


def test_a_rule_keeps_no_keyword_hint_it_is_made_when_read() -> None:
    from llamon_agent.tools import RuleInfo

    expression_rule(name="first", mcp_id="m", tool_name="t", when='"주문" in query', params="{}")
    rule = expression_rule(
        name="r", mcp_id="m", tool_name="t", when='"배송" in query', params="{}", stop=True
    )
    info = rule.__llamon_rule__

    assert info.keywords == frozenset({("배송", False)})
    assert info.keywords is not info.keywords  # made again on each read: nothing kept
    plain = RuleInfo(name="r", mcp_id="m", stop=True, keywords=frozenset({("배송", False)}))
    assert info == plain and plain == info and hash(info) == hash(plain)
    assert repr(info) == repr(plain)
    assert pickle.loads(pickle.dumps(info)) == plain and copy.copy(info) == plain
    assert (rule.name, rule.mcp_id, rule.stop) == ("r", "m", True)
    assert (rule.when_source, rule.params_source) == ('"배송" in query', "{}")


def test_the_compile_cache_is_emptied_when_full_and_never_keeps_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(compiled_module._cached_when, "_size", 2)
    a = compile_when('"a" in query')
    assert compile_when('"a" in query') is a
    compile_when('"b" in query')
    c = compile_when('"c" in query')  # the cache held 2: emptied, then c
    assert compile_when('"c" in query') is c
    again = compile_when('"a" in query')
    assert again is not a and _record('"a" in query') == _record('"a" in query')
    for _ in range(2):
        with pytest.raises(ExprError, match="is not allowed|not defined|unknown"):
            compile_when("os.system")
    assert "os.system" not in compiled_module._cached_when._done
