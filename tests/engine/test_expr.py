"""Behaviour of the expression language: names, helpers, errors, params, keyword hints, rules."""

from __future__ import annotations

import datetime
import pickle
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llamon_agent import expr
from llamon_agent.expr import (
    MAX_DATA_BYTES,
    MAX_QUERY_CHARS,
    MAX_RESULT_CHARS,
    MAX_SOURCE_CHARS,
    ExprError,
    build_namespace,
    check_rule_name,
    compile_params,
    compile_when,
    expression_rule,
    request_size_error,
    required_keywords,
)
from llamon_agent.expr.helpers import _repr, _str
from llamon_agent.expr.limits import MAX_FILES_BYTES, MAX_PARTS
from llamon_agent.tools import DeterministicContext, ToolInfo, is_rule, rule_info


def make_ctx(
    query: str = "주문 조회 부탁해",
    context: dict[str, Any] | None = None,
    a2a_data: list[dict[str, Any]] | None = None,
    a2a_files: list[dict[str, Any]] | None = None,
    tools: list[Any] | None = None,
) -> DeterministicContext:
    return DeterministicContext(
        query=query,
        context={} if context is None else context,
        a2a_data=a2a_data,
        a2a_files=a2a_files,
        mcp_tools=list(tools or []),
    )


CTX = make_ctx(
    context={"chatbotId": "premium-support", "userId": "u-42", "tags": ["vip", "kr"], "count": 3},
    a2a_data=[{"kind": "order", "orderId": 123}, {"chatbotId": "from-datapart", "orderId": 999}],
    a2a_files=[{"name": "receipt.pdf", "mimeType": "application/pdf", "uri": None, "size": 2048}],
    tools=[ToolInfo(name="search_docs", description="Search", input_schema={"type": "object"})],
)


def when(source: str, ctx: DeterministicContext = CTX) -> bool:
    return compile_when(source)(ctx)


def value(source: str, ctx: DeterministicContext = CTX) -> Any:
    """The value of an expression, through params (which must be a dict)."""
    return compile_params("{'v': " + source + "}")(ctx)["v"]


def error_of(source: str, ctx: DeterministicContext = CTX, *, params: bool = False) -> ExprError:
    compiler = compile_params if params else compile_when
    with pytest.raises(ExprError) as info:
        compiler(source)(ctx)
    return info.value


# --- names -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("query", "주문 조회 부탁해"),
        ("ctx.query", "주문 조회 부탁해"),
        ("context['userId']", "u-42"),
        ("ctx.context.get('chatbotId')", "premium-support"),
        ("a2a_data[1]['chatbotId']", "from-datapart"),
        ("ctx.a2a_data[0].get('orderId')", 123),
        ("a2a_files[0]['size']", 2048),
        ("sorted(tool_names)", ["search_docs"]),
        ("sorted(ctx.tool_names)", ["search_docs"]),
        (
            "ctx.mcp_tools",
            [{"name": "search_docs", "description": "Search", "input_schema": {"type": "object"}}],
        ),
        ("[t['name'] for t in ctx.mcp_tools]", ["search_docs"]),
    ],
)
def test_names_give_the_request_values(source: str, expected: Any) -> None:
    assert value(source) == expected


def test_missing_a2a_parts_are_none_as_in_the_seed() -> None:
    ctx = make_ctx()
    assert value("a2a_data", ctx) is None
    assert value("a2a_files", ctx) is None
    assert value("ctx.a2a_data is None and ctx.a2a_files is None", ctx) is True


def test_tool_names_is_a_frozenset_of_the_servers_tools() -> None:
    namespace = build_namespace(CTX)
    assert namespace["tool_names"] == frozenset({"search_docs"})
    assert namespace["ctx"].tool_names is namespace["tool_names"]


def test_mcp_tools_accept_toolinfo_mcp_tools_langchain_tools_and_dicts() -> None:
    mcp_tool = SimpleNamespace(name="get_order", description=None, inputSchema={"type": "object"})
    lc_tool = SimpleNamespace(name="lc", description="LangChain", args_schema=object)  # a pydantic class
    ctx = make_ctx(tools=[ToolInfo("a"), mcp_tool, lc_tool, {"name": "d", "inputSchema": {"x": 1}}])
    tools = value("ctx.mcp_tools", ctx)
    assert [t["name"] for t in tools] == ["a", "get_order", "lc", "d"]
    assert tools[1] == {"name": "get_order", "description": "", "input_schema": {"type": "object"}}
    assert tools[2]["input_schema"] == {}
    assert tools[3]["input_schema"] == {"x": 1}
    assert when("tool_names == {'a', 'get_order', 'lc', 'd'}", ctx)


def test_ctx_is_a_copy_nothing_live_is_reachable() -> None:
    live = {"when": datetime.date(2026, 1, 2), "nested": {"list": [1, (2, 3)]}, 7: "int key"}
    ctx = make_ctx(context=live)
    namespace = build_namespace(ctx)
    live["nested"]["list"].append("later")
    assert namespace["context"] == {"when": "2026-01-02", "nested": {"list": [1, [2, 3]]}, "7": "int key"}
    assert namespace["context"] is not live


def test_params_never_alias_the_shared_namespace() -> None:
    namespace = build_namespace(CTX)
    params = compile_params("{'data': a2a_data[0], 'tags': context['tags']}").evaluate(namespace)
    params["data"]["kind"] = "mutated"
    params["tags"].append("mutated")
    assert namespace["a2a_data"][0]["kind"] == "order"
    assert namespace["context"]["tags"] == ["vip", "kr"]


def test_unknown_names_are_refused_with_a_hint() -> None:
    with pytest.raises(ExprError) as info:
        compile_when("os")
    assert info.value.reason == (
        "name 'os' is not allowed; use ctx, query, context, a2a_data, a2a_files, tool_names or a helper"
    )
    assert (info.value.line, info.value.column) == (1, 1)


def test_tool_attribute_access_points_to_dict_lookup() -> None:
    with pytest.raises(ExprError) as info:
        compile_when("'x' in {t.name for t in ctx.mcp_tools}")
    assert 't["name"]' in info.value.reason
    assert info.value.column == 11


# --- helpers -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("contains_any(query, ['배송', '조회'])", True),
        ("contains_any(query, ['배송', '환불'])", False),
        ("contains_any(query, [])", False),
        ("contains_any(None, ['a'])", False),
        ("contains_any(context.get('missing'), ['a'])", False),
        ("contains_all(query, ['주문', '조회'])", True),
        ("contains_all(query, ['주문', '환불'])", False),
        ("contains_all(query, [])", True),
        ("contains_all(None, ['a'])", False),
        ("contains_any(query.lower(), ('order',))", False),
        ("re_search(r'\\d+', 'order 123')", True),
        ("re_search('^주문', query)", True),
        ("re_search('환불', query)", False),
        ("re_search('a', None)", False),
        ("re_find(r'\\d+', 'order 123 and 456')", "123"),
        ("re_find(r'order (\\d+)', 'order 123', 1)", "123"),
        ("re_find(r'order (?P<id>\\d+)', 'order 77', group='id')", "77"),
        ("re_find(r'\\d+', 'none here')", None),
        ("re_find(r'(a)|(b)', 'b', 1)", None),
        ("re_find('x', None)", None),
        ("data_get('chatbotId')", "from-datapart"),
        ("data_get('orderId')", 123),
        ("data_get('missing')", None),
        ("data_get('missing', 'fallback')", "fallback"),
        ("data_get('missing', default=0)", 0),
        ("len(query)", 9),
        ("str(12)", "12"),
        ("str(context['tags'])", "['vip', 'kr']"),
        ("int('42') + 1", 43),
        ("float('1.5')", 1.5),
        ("bool(context.get('x'))", False),
        ("min([3, 1, 2])", 1),
        ("max(context['tags'], key=len)", "vip"),
        ("max([], default=0)", 0),
        ("any([False, True])", True),
        ("all(t in ['vip', 'kr'] for t in context['tags'])", True),
        ("abs(-3)", 3),
        ("round(2.567, 2)", 2.57),
        ("round(2.5)", 2),
        ("sum(p.get('orderId', 0) for p in a2a_data)", 1122),
        ("sum([1.5, 2])", 3.5),
    ],
)
def test_helpers_and_builtins(source: str, expected: Any) -> None:
    assert value(source) == expected


def test_sorting_request_data_takes_a_raised_cost_limit(raised_cost_limit: int) -> None:
    # At the data cap (256 KiB of request data) a sort may cost ~5,500,000 units: over the default
    # per-rule limit, refused when saved; a deployment whose data is small may raise the limit.
    assert value("sorted(context['tags'], reverse=True)") == ["vip", "kr"]
    assert compile_params("{'a': sorted(query.split(), key=len)}")(CTX) == {"a": ["주문", "조회", "부탁해"]}


def test_data_get_reaches_a_chatbot_id_sent_in_a_datapart() -> None:
    rule_when = compile_when("data_get('chatbotId') == 'premium-support'")
    assert rule_when(make_ctx(a2a_data=[{"text": "x"}, {"chatbotId": "premium-support"}]))
    assert not rule_when(make_ctx(a2a_data=[{"chatbotId": "other"}, {"chatbotId": "premium-support"}]))
    assert not rule_when(make_ctx(a2a_data=None, context={"chatbotId": "premium-support"}))


def test_data_get_skips_parts_that_are_not_dicts() -> None:
    assert value("data_get('k')", make_ctx(a2a_data=["text", {"k": 1}])) == 1  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("contains_any(query, 'abc')", 'words must be a list such as ["a", "b"], not a text'),
        ("contains_all(query, [1])", "every word must be a text, not int"),
        ("contains_any(1, ['a'])", "the text must be a text or None, not int"),
        ("contains_any(query, None)", "words must be a list of texts, not None"),
        ("re_search(1, query)", "a regular expression must be a text, not int"),
        ("re_search(query.split()[0] + '(', query)", "invalid regular expression"),
        ("re_find('a', 'a', 3)", "has no group 3"),
        ("round(1, 10 ** 2)", "the ** operator is not allowed"),
        ("round(5, -1000)", "ndigits must be a whole number between -100 and 100"),
        ("sum(['a'])", "sum() adds numbers only"),
        ("sum([[1]], [])", "sum() adds numbers only"),
    ],
)
def test_helper_misuse_is_an_expr_error(source: str, message: str) -> None:
    with pytest.raises(ExprError) as info:
        compile_when(source)(CTX)
    assert message in info.value.reason


def test_regex_lookaround_is_refused_when_saved() -> None:
    with pytest.raises(ExprError) as info:
        compile_when("re_search('(?=a)b', query)")
    assert "RE2" in info.value.reason
    assert (info.value.line, info.value.column) == (1, 11)


def test_regex_pattern_length_is_capped() -> None:
    with pytest.raises(ExprError) as info:
        compile_when("re_search('" + "a" * 1001 + "', query)")
    assert "longer than 1,000 characters" in info.value.reason
    with pytest.raises(ExprError) as info:
        compile_when("re_search(context['p'], query)")(make_ctx(context={"p": "a" * 2000}))
    assert "longer than 1,000 characters" in info.value.reason


# --- operators ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("1 + 2 * 3 - 4 / 2", 5.0),
        ("7 // 2", 3),
        ("7 % 3", 1),
        ("-context['count']", -3),
        ("not query", False),
        ("query + '!'", "주문 조회 부탁해!"),
        ("context['tags'] + ['new']", ["vip", "kr", "new"]),
        ("(1, 2) + (3,)", [1, 2, 3]),
        ("query[:2]", "주문"),
        ("query[::-1][0]", "해"),
        ("'yes' if 'vip' in context['tags'] else 'no'", "yes"),
        ("f'{query} / {context[\"count\"]!r} / {1.5}'", "주문 조회 부탁해 / 3 / 1.5"),
        ("f'{query!r}'", "'주문 조회 부탁해'"),
        ("f'{query!a}'", "'\\uc8fc\\ubb38 \\uc870\\ud68c \\ubd80\\ud0c1\\ud574'"),
        ("'-'.join(context['tags'])", "vip-kr"),
        ("' '.join(w.upper() for w in context['tags'])", "VIP KR"),
        ("query.replace(' ', '_')", "주문_조회_부탁해"),
        ("query.replace(' ', '', 1)", "주문조회 부탁해"),
        ("{k: v for k, v in context.items() if k == 'count'}", {"count": 3}),
        ("{t for t in context['tags']} == {'kr', 'vip'}", True),
        ("tool_names.issubset({'search_docs', 'x'})", True),
        ("sorted(tool_names.union({'b'}))", ["b", "search_docs"]),
        ("query.startswith('주문') and query.endswith('해')", True),
        ("query.split()", ["주문", "조회", "부탁해"]),
        ("' A b '.strip().lower()", "a b"),
        ("context.get('userId', '').removeprefix('u-')", "42"),
        ("query.find('조회')", 3),
        ("1 < context['count'] <= 3", True),
        ("context.get('x') is None", True),
        ("True + True", 2),
    ],
)
def test_allowed_operations(source: str, expected: Any) -> None:
    assert value(source) == expected


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("query * 2", "repeating a text or list with * is not allowed"),
        ("2 * context['tags']", "repeating a text or list with * is not allowed"),
        ("'%s' % query", "% formatting is not allowed"),
        ("query + 1", "cannot add text and int"),
        ("context + context", "cannot add dict and dict"),
        ("9223372036854775807 + 1", "the integer result is too large"),
        ("9223372036854775807 * 2", "the integer result is too large"),
        ("1 / 0", "division by zero"),
        ("context['nope']", "key 'nope' is missing; use .get('nope') for optional keys"),
        ("context['tags'][5]", "check len() first"),
        ("len(3)", "wrong type"),
        ("int('abc')", "wrong value"),
        ("query.nope_not_there()", "attribute 'nope_not_there' is not allowed"),
        ("context.items().count(1)", "has no attribute 'count'"),
        ("[x for x in a2a_files[0]['uri']]", "cannot loop over None; use `or []` when it may be missing"),
        ("[x for x in context['count']]", "cannot loop over int"),
        ("','.join([1, 2])", "join() needs texts, got int"),
        ("context.join(['a'])", "dict has no method join()"),
    ],
)
def test_runtime_errors_are_expr_errors_with_plain_reasons(source: str, message: str) -> None:
    with pytest.raises(ExprError) as info:
        compile_when(source)(CTX)
    assert message in info.value.reason


def test_text_results_are_size_checked() -> None:
    big = make_ctx(query="x" * MAX_QUERY_CHARS, context={"s": "y" * (MAX_RESULT_CHARS - 10)})
    for source in (
        "query + context['s']",
        "' '.join([query, query, query, query])",
        "f'{query}{query}{query}{query}'",
        "str([context, context, context, context, context])",
        "f'{[context, context, context, context, context]!r}'",
        "query.replace('x', 'xxxx')",
        "query.replace('', query)",
    ):
        with pytest.raises(ExprError, match="would be longer"):
            compile_when(source)(big)


def test_list_concatenation_is_size_checked() -> None:
    ctx = make_ctx(query=" ".join(["w"] * 6000))
    with pytest.raises(ExprError, match="more than 10,000 items"):
        compile_when("query.split() + query.split()")(ctx)


def test_comprehension_loops_are_capped() -> None:
    ctx = make_ctx(query="x" * 20_000)
    with pytest.raises(ExprError, match="more than 10,000 items"):
        compile_when("any(c == 'y' for c in query)")(ctx)


# --- compile-time refusals and positions --------------------------------------------------------
@pytest.mark.parametrize(
    ("source", "line", "column", "message"),
    [
        ("query ==", 1, 9, "the expression is incomplete"),
        ("'주문' 조회", 1, 1, "syntax error"),
        ("'주문' in query and ctx.__class__", 1, 23, "names starting with '_' are never reachable"),
        ("'a' in query and\n  ctx.query.format()", 2, 13, ".format() is not allowed"),
        ("'조회' in query and (lambda: 1)", 1, 20, "lambda is not allowed"),
        ("[x for x in query if (y := x)]", 1, 23, "the := operator is not allowed"),
        ("2 ** 8", 1, 1, "the ** operator is not allowed"),
        ("1 << 2", 1, 1, "the << operator is not allowed"),
        ("context | context", 1, 1, "the | operator is not allowed"),
        ("~1", 1, 1, "the ~ operator is not allowed"),
        ("len(*query)", 1, 5, "* unpacking is not allowed"),
        ("{**context}", 1, 4, "** unpacking is not allowed"),
        ("max(query, **context)", 1, 14, "** unpacking is not allowed"),
        ("range(3)", 1, 1, "name 'range' is not allowed"),
        ("query()", 1, 1, "query cannot be called"),
        (
            "[len][0](query)",
            1,
            1,
            "only helpers (such as contains_any) and methods (such as .get) can be called",
        ),
        ("b'x' in query", 1, 1, "bytes literals"),
        ("1j", 1, 1, "complex numbers are not allowed"),
        ("...", 1, 1, "is not allowed"),
        ("99999999999999999999 > 1", 1, 1, "this number is too large"),
        ("1e999 > 1", 1, 1, "this number is too large"),
        ("f'{query:>10}'", 1, 1, "format specs in f-strings"),
        ("[[c for c in w] for w in query.split()]", 1, 2, "comprehensions cannot be nested"),
        ("[a for a in query for b in query]", 1, 1, "only one 'for'"),
        ("[c for c in 'abc']", 1, 13, "must loop over request data"),
        ("[query for query in context]", 1, 12, "'query' cannot be used as a loop variable"),
        ("[_ for _ in context]", 1, 8, "names starting with '_' are reserved"),
        ("data_get", 1, 1, "data_get can only be called"),
        ("query.join", 1, 7, ".join() can only be called"),
        ("sorted(query, _key=len)", 1, 20, "keyword argument '_key' is not allowed"),
        ("query)", 1, 6, "unmatched ')'"),
        ("query is 'a'", 1, 10, "use == to compare with a value"),
        ("context.get('n') is not 1", 1, 25, "use == to compare with a value"),
        ("'\u202e' in query", 1, 2, "invisible text-direction character"),
    ],
)
def test_refusals_carry_line_and_column(source: str, line: int, column: int, message: str) -> None:
    with pytest.raises(ExprError) as info:
        compile_when(source)
    assert message in info.value.reason
    assert (info.value.line, info.value.column) == (line, column)
    assert str(info.value) == f"line {line}, column {column}: {info.value.reason}"


def test_columns_count_characters_not_utf8_bytes() -> None:
    with pytest.raises(ExprError) as info:
        compile_when("'주문조회' in query and ctx.__class__")
    assert info.value.column == 25  # 6 characters before "ctx", 12 bytes


def test_expressions_may_span_lines_and_start_indented() -> None:
    source = """
        "주문" in ctx.query
        and "조회" in ctx.query  # comments are fine
    """
    assert compile_when(source)(CTX)
    assert compile_when("\r\n  'a' in query\r\n  or True")(CTX)


def test_parentheses_cannot_be_balanced_across_the_implicit_wrapping() -> None:
    with pytest.raises(ExprError, match="unmatched"):
        compile_when("'a') or ('b'")


def test_empty_and_comment_only_expressions_are_refused() -> None:
    for source in ("", "   ", "\n# just a comment\n"):
        with pytest.raises(ExprError, match="the expression is empty"):
            compile_when(source)


def test_non_text_source_is_refused() -> None:
    with pytest.raises(ExprError, match="must be text"):
        compile_when(None)  # type: ignore[arg-type]


def test_size_caps_are_checked() -> None:
    with pytest.raises(ExprError, match="longer than 4,000 characters"):
        compile_when("1" + " " * MAX_SOURCE_CHARS)
    with pytest.raises(ExprError, match="nested more than 20 levels"):
        compile_when("(" * 21 + "1" + ")" * 21)
    with pytest.raises(ExprError, match="nested more than 50 levels"):
        compile_when(" + ".join(["1"] * 60))
    with pytest.raises(ExprError, match="too big"):
        compile_when("[" + ", ".join(["1"] * 1200) + "]")
    with pytest.raises(ExprError, match="text literal is longer"):
        compile_when("'" + "a" * 1001 + "' in query")


def test_runtime_errors_carry_the_position_of_the_failing_part() -> None:
    error = error_of("'주문' in query and\n  context['missing'] == 1")
    assert (error.line, error.column) == (2, 3)
    error = error_of("True and 1 // 0")
    assert (error.line, error.column) == (1, 10)
    error = error_of("any(contains_any(query, w) for w in ['a'])")
    assert error.line == 1  # inside a comprehension the position is still known


def test_expr_error_text_and_pickling() -> None:
    assert str(ExprError("plain")) == "plain"
    assert str(ExprError("why", 2, 7)) == "line 2, column 7: why"
    error = ExprError("why", 1, 3, field="when")
    assert str(error) == "when: line 1, column 3: why"
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.reason, copy.line, copy.column, copy.field) == ("why", 1, 3, "when")


# --- when and params ----------------------------------------------------------------------------
def test_when_gives_the_truthiness_as_a_bool() -> None:
    assert compile_when("context['tags']")(CTX) is True
    assert compile_when("context.get('none')")(CTX) is False
    assert compile_when("'x' in query")(CTX) is False


def test_params_must_be_a_dict_of_json_values() -> None:
    assert compile_params("{'q': query, 't': (1, 2), 'n': None}")(CTX) == {
        "q": "주문 조회 부탁해",
        "t": [1, 2],
        "n": None,
    }
    assert compile_params("context")(CTX)["userId"] == "u-42"
    assert compile_params("data_get('missing') or {'a': 1}")(CTX) == {"a": 1}
    for source, message in [
        ("context.get('tags')", "params must give a dict"),
        ("{1: 'a'}", "keys must be texts"),
        ("{'s': tool_names}", "params['s'] is a set"),
        ("{'f': len}", "len can only be called"),
        ("{'g': (x for x in query)}", "params['g'] is a generator"),
        ("{'nan': float('nan')}", "which JSON cannot carry"),
        ("{'deep': [{'a': {1: 2}}]}", "the key 1 in params['deep'][0]['a'] is not a text"),
    ]:
        with pytest.raises(ExprError) as info:
            compile_params(source)(CTX)
        assert message in info.value.reason, source


@pytest.mark.parametrize(
    "source",
    [
        "{'a': str(re_search)}",
        "{'a': f'{len}'}",
        "{'a': f'{contains_any!r}'}",
        "{'a': [sorted][0]}",
        "{'a': str(max)}",
    ],
)
def test_functions_never_become_values(source: str) -> None:
    # str(re_search) gave "<function re_search at 0x7f...>": an internal name and a heap address.
    with pytest.raises(ExprError, match="can only be called"):
        compile_params(source)


def test_text_of_a_live_object_is_refused_when_evaluated() -> None:
    # The checker refuses functions as values; the text helpers refuse anything but data as well.
    for convert in (_str, _repr):
        with pytest.raises(ExprError, match="only data"):
            convert([1, {"a": len}])
    assert _str([1, "a", None, 2.5, True, {"k": (1,)}]) == "[1, 'a', None, 2.5, True, {'k': (1,)}]"


@pytest.mark.parametrize("source", ["'q'", "[query]", "query == 'x'", "f'{query}'", "not query", "{query}"])
def test_params_that_cannot_be_a_dict_are_refused_when_saved(source: str) -> None:
    with pytest.raises(ExprError, match="params must give a dict"):
        compile_params(source)


def test_params_size_is_capped() -> None:
    ctx = make_ctx(context={"blob": "x" * 100_000})
    with pytest.raises(ExprError, match="params would be larger than"):
        compile_params("{'a': context, 'b': context, 'c': context}")(ctx)


def test_compiled_expr_surface() -> None:
    compiled = compile_when("'주문' in query")
    assert compiled.source == "'주문' in query"
    assert compiled.required_keywords == frozenset({("주문", False)})
    namespace = build_namespace(CTX)
    assert compiled.evaluate(namespace) is True
    assert compile_params("{'a': 1}").required_keywords is None


# --- namespace and request caps ---------------------------------------------------------------------
def test_build_namespace_enforces_request_caps() -> None:
    with pytest.raises(ExprError, match="query is longer"):
        build_namespace(make_ctx(query="x" * (MAX_QUERY_CHARS + 1)))
    with pytest.raises(ExprError, match="larger than"):
        build_namespace(make_ctx(context={"blob": "x" * (MAX_DATA_BYTES + 1)}))
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(40):
        node["d"] = {}
        node = node["d"]
    with pytest.raises(ExprError, match="nested more than 32 levels"):
        build_namespace(make_ctx(context=deep))
    with pytest.raises(ExprError, match="must be a dict"):
        build_namespace(make_ctx(context=["not", "a", "dict"]))  # type: ignore[arg-type]


def test_request_size_error() -> None:
    assert request_size_error(query="hi", context={"a": 1}) is None
    assert "query is longer" in (request_size_error(query="x" * (MAX_QUERY_CHARS + 1)) or "")
    # Korean text is 3 bytes a character in UTF-8: the cap is on bytes.
    korean = "가" * (MAX_DATA_BYTES // 3 + 10)
    assert "larger than" in (request_size_error(query="q", a2a_data=[{"t": korean}]) or "")
    assert request_size_error(query="q", a2a_files=[{"when": datetime.date(2026, 1, 1)}]) is None


# --- required keywords ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("'주문' in query", {("주문", False)}),
        ("'주문' in ctx.query", {("주문", False)}),
        ("'order' in query.lower()", {("order", True)}),
        ("'order' in ctx.query.lower()", {("order", True)}),
        ("'ORDER' in query.lower()", {("ORDER", True)}),  # can never match: the index skips it
        ("'주문' in ctx.query and '조회' in ctx.query", {("주문", False)}),
        ("contains_any(query, ['a', 'b'])", {("a", False), ("b", False)}),
        ("contains_any(query.lower(), ('a', 'b'))", {("a", True), ("b", True)}),
        ("contains_all(query, ['ab', 'abcd'])", {("abcd", False)}),
        ("'a' in query or 'b' in query.lower()", {("a", False), ("b", True)}),
        ("'a' in query and contains_any(query, ['x', 'y'])", {("a", False)}),
        ("contains_any(query, ['x', 'y']) and 'a' in query", {("a", False)}),
        ("context.get('k') == 1 and 'a' in query", {("a", False)}),
        ("('a' in query or 'b' in query) and ('c' in query or 'd' in query)", {("a", False), ("b", False)}),
        ("('a' in query and x_ok) or 'b' in query".replace("x_ok", "True"), {("a", False), ("b", False)}),
        ("'search_docs' in tool_names and '검색' in ctx.query", {("검색", False)}),
        ("'a' in query and context['k'] == 1", {("a", False)}),
        ("'x' in tool_names and context.get('k') == 1 and 'a' in query", {("a", False)}),
        ("not 'z' in query and data_get('c') != 'p' and 'a' in query", {("a", False)}),
        ("ctx.context.get('k', 0) is None and query == 'b' and 'a' in query", {("a", False)}),
        ("('a' in query and context['k']) and 'bb' in query", {("a", False)}),
        ("len(query) > 2 and 'a' in query", {("a", False)}),  # len(query) never raises
    ],
)
def test_required_keywords_shapes(source: str, expected: set[tuple[str, bool]]) -> None:
    assert required_keywords(source) == frozenset(expected)
    assert compile_when(source).required_keywords == frozenset(expected)


@pytest.mark.parametrize(
    "source",
    [
        "ctx.context.get('chatbotId') == 'premium-support'",
        "'a' not in query",
        "not 'a' in query",
        "'' in query",
        "'a' in query or context.get('x')",
        "'a' in query or True",
        "'a' in context.get('q', '')",
        "'a' in query.upper()",
        "'a' in query.casefold()",
        "'a' in query.lower().strip()",
        "'a' in query == True",
        "('a' in query) == True",
        "bool('a' in query)",
        "any(w in query for w in query.split())",
        "contains_any(query, [])",
        "contains_any(query, ['a', ''])",
        "contains_all(query, [''])",
        "contains_any(query, context['words'])",
        "contains_any(context.get('q'), ['a'])",
        "contains_any(query, words=['a'])",
        "re_search('a', query)",
        "'a' in query if True else False",
        "query == 'a'",
        "'a' in tool_names",
        "'a' in a2a_data",
        "data_get('q') == 'a'",
        "f'a' in query",
        # a conjunct that may raise comes first: skipping the rule would hide its ExprError
        "ctx.context['chatbotId'] == 'x' and '주문' in query",
        "data_get('n', 0) > 2 and 'a' in query",  # a non-number raises
        "'a' in context.get('q', '') and 'b' in query",
        "context.get('k') == context.get('j') and 'a' in query",
        "context.get('k', []) == 1 and 'a' in query",
        "(True or context['k']) and 'a' in query",
    ],
)
def test_required_keywords_is_none_when_nothing_is_provably_required(source: str) -> None:
    assert required_keywords(source) is None


def test_required_keywords_accepts_trees() -> None:
    import ast

    tree = ast.parse("'x' in query", mode="eval")
    assert required_keywords(tree) == frozenset({("x", False)})
    assert required_keywords(tree.body) == frozenset({("x", False)})
    with pytest.raises(ExprError):
        required_keywords("os")


_ATOMS = [
    "'a' in query",
    "'b' in query",
    "'ab' in query",
    "'A' in query.lower()",
    "'a' in query.lower()",
    "'b' in ctx.query",
    "'a' not in query",
    "contains_any(query, ['a', 'c'])",
    "contains_all(query, ['a', 'b'])",
    "contains_any(query.lower(), ['b'])",
    "query.startswith('c')",
    "len(query) > 2",
    "True",
    "False",
    "'' in query",
    "context.get('flag') == 1",
    "context['nope'] == 1",  # always raises
    "context['flag'] == 1",
    "context.get('flag') + 1 > 1",
    "'x' in tool_names",
]


@st.composite
def _when_sources(draw: st.DrawFn, depth: int = 0) -> str:
    if depth > 2 or draw(st.booleans()):
        return draw(st.sampled_from(_ATOMS))
    op = draw(st.sampled_from(["and", "or", "not"]))
    if op == "not":
        return f"not ({draw(_when_sources(depth + 1))})"
    parts = draw(st.lists(_when_sources(depth + 1), min_size=2, max_size=3))
    return f" {op} ".join(f"({p})" for p in parts)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    source=_when_sources(),
    query=st.text(alphabet="abcABC ", max_size=6),
    flag=st.sampled_from([0, 1]),
)
def test_required_keywords_never_hides_a_rule_that_would_fire_or_raise(
    source: str, query: str, flag: int
) -> None:
    compiled = compile_when(source)
    try:
        noticed = compiled(make_ctx(query=query, context={"flag": flag}))
    except ExprError:
        noticed = True  # an error must surface with or without the index
    hint = compiled.required_keywords
    if noticed and hint is not None:
        lowered = query.lower()
        assert any(word in (lowered if low else query) for word, low in hint), (source, query, hint)


# --- rules --------------------------------------------------------------------------------------
def test_expression_rule_runs_like_a_deterministic_tool() -> None:
    rule = expression_rule(
        name="route_order_lookup",
        mcp_id="order-service",
        tool_name="get_order",
        when='"주문" in ctx.query and "조회" in ctx.query',
        params='{"query": ctx.query}',
        stop=True,
    )
    assert is_rule(rule)
    info = rule_info(rule)
    assert info.name == "route_order_lookup"
    assert info.mcp_id == "order-service"
    assert info.stop is True
    assert info.keywords == frozenset({("주문", False)})
    assert rule(CTX) == {"tool_name": "get_order", "params": {"query": "주문 조회 부탁해"}}
    assert rule(make_ctx(query="날씨 어때?")) is None
    assert rule.evaluate_ns(build_namespace(CTX)) == rule(CTX)
    assert (rule.name, rule.mcp_id, rule.tool_name, rule.stop) == (
        "route_order_lookup",
        "order-service",
        "get_order",
        True,
    )
    assert rule.when_source == '"주문" in ctx.query and "조회" in ctx.query'
    assert rule.params_source == '{"query": ctx.query}'
    assert rule.__name__ == "route_order_lookup"


def test_params_are_only_evaluated_when_the_rule_fires() -> None:
    rule = expression_rule(
        name="r", mcp_id="m", tool_name="t", when="'never' in query", params="{'x': context['missing']}"
    )
    assert rule(CTX) is None
    with pytest.raises(ExprError, match="use .get"):
        expression_rule(name="r", mcp_id="m", tool_name="t", when="True", params="{'x': context['missing']}")(
            CTX
        )


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        ({"name": "class"}, "name", "is a Python keyword"),
        ({"name": "1abc"}, "name", "must be a Python identifier"),
        ({"name": "with space"}, "name", "must be a Python identifier"),
        ({"name": "x" * 101}, "name", "longer than 100"),
        ({"mcp_id": ""}, "mcp_id", "non-empty"),
        ({"tool_name": " "}, "tool_name", "non-empty"),
        ({"when": "query =="}, "when", "incomplete"),
        ({"params": "{'a': os}"}, "params", "name 'os' is not allowed"),
        ({"params": "[1]"}, "params", "params must give a dict"),
    ],
)
def test_expression_rule_errors_name_the_field(kwargs: dict[str, str], field: str, message: str) -> None:
    arguments = {"name": "ok_name", "mcp_id": "m", "tool_name": "t", "when": "True", "params": "{}"}
    arguments.update(kwargs)
    with pytest.raises(ExprError) as info:
        expression_rule(**arguments)
    assert info.value.field == field
    assert message in info.value.reason
    assert str(info.value).startswith(f"{field}: ")


def test_check_rule_name_accepts_identifiers() -> None:
    for name in ("route_order_lookup", "주문조회", "_private", "match"):
        check_rule_name(name)
    with pytest.raises(ExprError):
        check_rule_name("None")


def test_module_exports_the_caps() -> None:
    for cap in ("MAX_SOURCE_CHARS", "MAX_DEPTH", "MAX_NODES", "MAX_QUERY_CHARS", "MAX_DATA_BYTES"):
        assert isinstance(getattr(expr, cap), int)
        assert cap in expr.__all__


def test_namespace_exposes_only_documented_names() -> None:
    # Every name an expression can see is documented; the rest start with "_" and cannot be named.
    namespace = build_namespace(CTX)
    visible = {n for n in namespace if not n.startswith("_")}
    documented = set(expr.CTX_NAMES) | set(expr.HELPER_NAMES) | set(expr.BUILTIN_NAMES)
    assert visible == documented - {"data_get"}  # data_get is rewritten to a hidden helper
    assert namespace["__builtins__"] == {}


@pytest.mark.parametrize(
    "source",
    ["sorted(query.split(), key=query.count)", "max(a2a_data or [], key=context.get)", "[query.find][0]"],
)
def test_methods_cannot_be_passed_as_values(source: str) -> None:
    """A method as a value (e.g. a sort key) would be called once per item: refused when saved."""
    with pytest.raises(ExprError, match=r"can only be called, not used as a value"):
        compile_when(source)


def test_requests_past_the_part_caps_get_a_clear_error_and_no_rule_sees_them() -> None:
    # Past MAX_PARTS DataParts (or FileParts), or FileParts over MAX_FILES_BYTES, the request is
    # over the caps the cost bound assumes: refused whole (every expression rule fails with the
    # reason, in the user's language through its msg_id), never truncated behind the rules' back.
    many = [{"n": i} for i in range(MAX_PARTS + 1)]
    big_files = [{"name": "x" * (MAX_FILES_BYTES // 2)}, {"name": "y" * (MAX_FILES_BYTES // 2)}]
    for kwargs, msg_id in (
        ({"a2a_data": many}, "run.too_many_parts"),
        ({"a2a_files": many}, "run.too_many_parts"),
        ({"a2a_files": big_files}, "run.files_too_large"),
    ):
        with pytest.raises(ExprError) as info:
            build_namespace(make_ctx(**kwargs))
        assert info.value.msg_id == msg_id
        assert request_size_error(query="q", **kwargs)
    at_the_caps = {"a2a_data": many[:MAX_PARTS], "a2a_files": [{"name": "x" * (MAX_FILES_BYTES - 64)}]}
    assert request_size_error(query="q", **at_the_caps) is None
    build_namespace(make_ctx(**at_the_caps))
