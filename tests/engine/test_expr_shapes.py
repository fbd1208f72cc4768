"""Expressions of one shape share their compiled code, and nothing else changes: every hint, cost,
result, error message and error position is what compiling the expression alone gives."""

from __future__ import annotations

import copy
import pickle
import random
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
    DeterministicContext(
        query="a premium quote",
        context={"k": 5, "s": 1.0, "n": 2},
        a2a_data=[{"amount": 130_000, "risk": 90, "premium": 100, "income": 300, "n": 2.5}],
    ),
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
    # numbers: ranges, merged ranges, len(query), arithmetic, lists, slices, indexes, floats
    (
        'data_get("amount", 0) > 120000 and data_get("amount", 0) <= 140000',
        'data_get("amount", 0) > 5 and data_get("amount", 0) <= 9223372036854775807',
    ),
    (
        'data_get("amount", 0) > 1 and data_get("amount", 0) > 2',
        'data_get("amount", 0) > 9 and data_get("amount", 0) > 0',
    ),
    ('1 < context.get("k", 0) <= 9', '100 < context.get("k", 0) <= 9'),
    ('0.5 <= context.get("s", 0.0) < 1.5', '2.5 <= context.get("s", 0.0) < 1e3'),
    ("len(query) < 8", "len(query) < 1_000"),
    ('len(query) > 3 and "a" in query', 'len(query) > 30 and "quote" in query'),
    ('data_get("risk", 0) >= 85', 'data_get("risk", 100) >= 0'),
    (
        'data_get("premium", 0) * 12 > data_get("income", 1) * 3',
        'data_get("premium", 0) * 1 > data_get("n", 0) * 30',
    ),
    ('context.get("k", 0) > -5', 'context.get("k", 0) > -12345'),
    ('context.get("k") == 5 or data_get("n") == 2.5', 'context.get("k") == 0 or data_get("n") == 1e-3'),
    ('data_get("n") in [1, 2, 3]', 'data_get("n") in [0, 0, 1]'),
    ('context.get("n") in [1, 2.5, "a"]', 'context.get("n") in [2, 2.0, ""]'),
    ('query[0:3:1] == "aab"', 'query[10:1_000:2] == "x"'),
    ('len(query) > 1 and query[-1] == "a"', 'len(query) > 10 and query[-100] == "z"'),
    ('"a" * 3 in query', '"ab" * 9000000000 in query'),
    ('"a" in query or len(query) // 4 > 1', '"abcdef" in query or len(query) // 0 > 1000'),
    ('len(query) < -1 or context["missing"] == 1', 'len(query) < -100000 or context["missing"] == 1'),
    (
        'len(query) > 0 and 3 // context.get("n", 0) == 1',
        'len(query) > 000 and 3000 // context.get("n", 0) == 1',
    ),
    (
        'len(query) >= 0 and\n  1.5 + context["k"]["q"] > 2',
        'len(query) >= 00 and\n  10.25 + context["k"]["q"] > 2',
    ),
    (
        '[w for w in query.split() if len(w) > 3][0] == "y"',
        '[w for w in query.split() if len(w) > 300][0] == "y"',
    ),
    ("re_search(5, query)", "re_search(7, query)"),
    ('round(context.get("s", 0) * 2.5, 1) > 2', 'round(context.get("s", 0) * 0.5, 3) > 0'),
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
    # numbers over the caps, or written in a form the shape keeps verbatim
    ('context.get("k", 0) > 5', 'context.get("k", 0) > 9223372036854775808'),
    ('context.get("k", 0) > -5', 'context.get("k", 0) > -9223372036854775808'),
    ('context.get("k", 0) > 5.5', 'context.get("k", 0) > 1e999'),
    ('context.get("k", 0) > 5', 'context.get("k", 0) > ' + "9" * 5000),
    ('context.get("k", 0) > 5', 'context.get("k", 0) > ' + "0_" * 30 + "0"),
    ('context.get("k", 0) > 5', 'context.get("k", 0) > 05'),
    ('context.get("k", 0) > 5', 'context.get("k", 0) > 1__0'),
    ('context.get("k", 0) > 5', 'context.get("k", 0) > 0x1F'),
    ('context.get("k", 0) > 5', 'context.get("k", 0) > 5j'),
    ('context.get("k", 0) > 5.5', 'context.get("k", 0) > 5.e5'),
    ('context.get("k", 0) > 5.5', 'context.get("k", 0) > .5'),
    ('context.get("k", 0) > 5', 'context.get("k", 0) > 5if 1 else 2'),
    ('context.get("k", 0) > 5', 'context.get("k", 0) > 5 is 5'),
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


def _typed(value: Any) -> Any:
    """``value`` with each number as (type, value): 1 == 1.0, but a rule's 1 must stay an int."""
    if isinstance(value, (tuple, list, frozenset, set)):
        return type(value)(_typed(item) for item in value)
    if isinstance(value, dict):
        return {key: _typed(item) for key, item in value.items()}
    if type(value) in (int, float):
        return (type(value).__name__, value)
    return value


def _record(source: str, kind: str = "when") -> list[Any]:
    try:
        expr = compile_when(source) if kind == "when" else compile_params(source)
    except ExprError as exc:
        return ["refused", str(exc), exc.line, exc.column]
    out: list[Any] = [
        expr.required_keywords,
        _typed(expr.index_options),
        expr.cost_line,
        expr.static_cost,
        expr.query_reads,
        type(expr).__name__,
    ]
    for ctx in REQUESTS:
        try:
            out.append(("ok", _typed(expr(ctx))))
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


# Shapes whose hints compare their numbers (bounds merged, memberships, True == 1), each filled
# with numbers drawn from a small pool so that rules of one shape have equal, 0, 1 or ordered
# numbers in every combination: the hints of one order are made once and filled in for others.
NUMBER_SHAPES: list[tuple[str, list[Any]]] = [
    ('data_get("amount", {}) > {} and data_get("amount", {}) <= {}', [0, 1, 2, 5, 100]),
    ('{} < context.get("k", {}) <= {}', [0, 1, 2, 5]),
    ('{} < context.get("k", 0) > {}', [0, 1, 2, 5]),
    ('len(query) >= {} and data_get("n", {}) in [{}, {}, True, None]', [0, 1, 2, 7]),
    ('context.get("s", {}) >= {} or data_get("n") == {}', [0.0, 0.5, 1.0, 2.5, 0.25]),
    ('len(query) > {} and len(query) > {} and "a" in query', [0, 1, 3, 9]),
    ('data_get("k", {}) > {} and data_get("k", {}) > {} or data_get("n", {}) < {}', [0.0, 1.0, 2.5, 0.5]),
    ('context.get("s", {}) in [{}, {}, True, False]', [0.0, 0.5, 1.0, 0.25, 2.0]),
    (
        'data_get("{}", 0) > {} and data_get("{}", 0) <= {} and "{}" in query',
        [["a", "b", ""], [1, 2]] * 2 + [["a", ""]],
    ),
]


def test_rules_of_one_shape_with_numbers_get_their_own_hints(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(26)
    sources = []
    for text, pool in NUMBER_SHAPES:
        count = text.count("{}")
        pools = pool if isinstance(pool[0], list) else [pool] * count  # one pool a place, or one for all
        sources += [text.format(*(rng.choice(pools[i]) for i in range(count))) for _ in range(40)]
    sources = list(dict.fromkeys(sources))
    alone = {source: _alone(source, monkeypatch) for source in sources}
    shapes.clear()
    compiled_module._cached_when.cache_clear()
    exprs = [compile_when(source) for source in sources]
    assert len({expr._code for expr in exprs}) == len(NUMBER_SHAPES)
    for source in sources:
        assert _record(source) == alone[source], source


def test_rules_that_differ_by_a_number_s_type_do_not_share(monkeypatch: pytest.MonkeyPatch) -> None:
    alone = {
        (source, kind): _alone(source, monkeypatch, kind)
        for source, kind in [
            ('context.get("k") == 1', "when"),
            ('context.get("k") == 1.0', "when"),
            ('{"n": 2, "m": query[:3]}', "params"),
            ('{"n": 2.0, "m": query[:3]}', "params"),
        ]
    }
    shapes.clear()
    one, real = compile_when('context.get("k") == 1'), compile_when('context.get("k") == 1.0')
    assert one._code is not real._code
    assert compile_when('context.get("k") == 7')._code is one._code
    assert (
        compile_params('{"n": 2, "m": query[:3]}')._code
        is not compile_params('{"n": 2.0, "m": query[:3]}')._code
    )
    for source, kind in alone:
        assert _record(source, kind) == alone[source, kind]
    assert _record('{"n": 2.0, "m": query[:3]}', "params")[-1] == ("ok", {"n": ("float", 2.0), "m": "a p"})


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
