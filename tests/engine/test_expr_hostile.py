"""Hostile expressions: each is refused when saved or fails with ExprError, fast, touching nothing."""

from __future__ import annotations

import copy
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llamon_agent.expr import (
    MAX_QUERY_CHARS,
    CompiledExpr,
    ExprError,
    build_namespace,
    compile_params,
    compile_when,
)
from llamon_agent.tools import DeterministicContext, ToolInfo

# --- the audit-hook oracle ----------------------------------------------------------------------
# Audit hooks cannot be removed, so one hook is installed for the whole session and only
# records while _RECORDING is set (around evaluations below).
_RECORDING = False
_EVENTS: list[tuple[str, str]] = []
_FORBIDDEN_PREFIXES = (
    "os.",
    "subprocess.",
    "shutil.",
    "socket.",
    "ctypes.",
    "glob.",
    "pty.",
    "webbrowser.",
    "urllib.",
    "http.",
    "sys._getframe",
    "sys.set",
    "code.__new__",
    "marshal.",
    "pickle.",
    "builtins.",
    "cpython.",
)
_FORBIDDEN_EVENTS = {"open", "import", "exec", "compile", "setopencodehook", "sys.addaudithook"}


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _RECORDING:
        return
    if event in _FORBIDDEN_EVENTS or event.startswith(_FORBIDDEN_PREFIXES):
        _EVENTS.append((event, repr(args)[:200]))
    elif event == "object.__getattr__":
        # The evaluator itself reads traceback.tb_frame and frame.f_code to locate a run-time
        # error (line, column); no other guarded attribute may be reached.
        where = f"{type(args[0]).__name__}.{args[1]}"
        if where not in ("traceback.tb_frame", "frame.f_code"):
            _EVENTS.append((event, where))


sys.addaudithook(_audit)


def _evaluate_recorded(
    compiled: CompiledExpr, namespace: dict[str, Any]
) -> tuple[Any, list[tuple[str, str]]]:
    global _RECORDING
    _EVENTS.clear()
    _RECORDING = True
    try:
        try:
            result: Any = compiled.evaluate(namespace)
        except ExprError as exc:
            result = exc
    finally:
        _RECORDING = False
    return result, list(_EVENTS)


# --- the corpus --------------------------------------------------------------------------------
HOSTILE: list[str] = [
    # dunder chains and introspection
    "().__class__.__bases__[0].__subclasses__()",
    "ctx.__dict__",
    "ctx.__class__",
    "ctx.__slots__",
    "ctx._tools",
    "ctx._mcp_tools",
    "ctx.mcp_tools[0].__class__",
    "a2a_data.__class__.__base__.__subclasses__()",
    "query.__class__.__mro__[-1].__subclasses__()",
    "[x for x in ctx.__class__.__mro__]",
    "f'{query.__class__}'",
    "f'{ctx.__class__.__init__.__globals__}'",
    # format strings reach attributes through the format mini-language
    "'{0.__class__}'.format(query)",
    "str.format('{0.__class__}', query)",
    "query.format_map(context)",
    "'%(a)s' % context",
    "'%*d' % (1000000000, 1)",
    "f'{query:>1000000000}'",
    "f'{query:{10}}'",
    # generator and frame objects
    "(x for x in query).gi_frame",
    "(x for x in query).gi_frame.f_back.f_globals",
    "(x for x in query).gi_code",
    "any(x for x in query).__self__",
    # builtins that are not exposed
    "__import__('os')",
    "__import__('os').system('id')",
    "open('/etc/passwd').read()",
    "eval('1')",
    "exec('1')",
    "compile('1', '', 'eval')",
    "getattr(ctx, '_tools')",
    "setattr(ctx, 'query', 'x')",
    "globals()",
    "locals()",
    "vars(ctx)",
    "dir(ctx)",
    "type(ctx)",
    "type(ctx).__subclasses__()",
    "breakpoint()",
    "help()",
    "input()",
    "print(query)",
    "__builtins__",
    "__builtins__['eval']",
    "__llamon_add(1, 2)",
    "_CtxView",
    "range(10)",
    "memoryview(b'x')",
    "bytearray(10)",
    # attributes of helpers and builtins
    "contains_any.__globals__",
    "contains_any.__code__.co_consts",
    "re_search.__module__",
    "len.__self__",
    "max.__self__.__import__('os')",
    "str.__mro__",
    "int.from_bytes",
    "query.split.__self__",
    "data_get.__globals__",
    "ctx.mcp_tools[0]['input_schema'].get.__self__",
    "query.encode()",
    # statements and forbidden syntax
    "import os",
    "from os import system",
    "lambda: 0",
    "(lambda: 0)()",
    "sorted(query, key=lambda c: c)",
    "(y := 1)",
    "[y := 1 for x in query]",
    "(yield)",
    "await ctx",
    "[*query]",
    "{**context}",
    "len(*query)",
    "query; import os",
    "del ctx",
    "ctx.query = 1",
    "b'abc'",
    # resource exhaustion: numbers
    "9**9**9",
    "10**100",
    "2 << 100000",
    "999999999999999999999999999999",
    "9223372036854775807 * 9223372036854775807",
    "round(5, -1000000000)",
    "sum([9223372036854775807, 9223372036854775807])",
    # resource exhaustion: text and lists
    "'a' * 10**9",
    "'a' * 1000000000",
    "[1] * 1000000000",
    "[query] * 1000000000",
    "query * 1000000000",
    "query.replace('', query).replace('', query)",
    "','.join([query] * 100)",
    "','.join(query.split(' ') + query.split('a'))",
    "sum([[1]] * 10, [])",
    "query.center(1000000000)",
    "query.ljust(1000000000)",
    "query.zfill(1000000000)",
    "query.expandtabs(1000000000)",
    "str([context, context, context, context, context, context, context])",
    "f'{context}{context}{context}{context}{context}{context}'",
    "int(context['big'])",
    # resource exhaustion: loops and nesting
    "[[y for y in query] for x in query]",
    "[x for x in query for y in query]",
    "any(c in query for c in query)",
    "max(query.split(), key=query.count) and [c for c in query]",
    "(" * 200 + "1" + ")" * 200,
    "[" * 200 + "]" * 200,
    "-" * 3000 + "1",
    "not " * 900 + "query",
    "query" + ".lower()" * 500,
    " + ".join(["query"] * 600),
    "[" + ", ".join(["1"] * 2000) + "]",
    "1 if True else " * 300 + "1",
    "'a' in query and " * 1000 + "True",
    "x" * 1_000_000,
    "'" + "a" * 1_000_000 + "' in query",
    # regular expressions
    "re_search('(a+)+$', 'a' * 30 + 'b')",
    "re_search('(?=a)', query)",
    "re_search('(a)\\\\1', query)",
    "re_search('a{1000}{1000}', query)",
    "re_search('" + "a" * 5000 + "', query)",
    "re_search(query, query)",
    # smuggling
    "query[1:2:0]",
    "ctx.context['missing']",
    "[c for c in a2a_files]",
    "'\u202e' in query",
    "query\x00",
    "ctx.query.__len__()",
]

QUERY = ("a" * 29 + "b ") * (MAX_QUERY_CHARS // 31)
HOSTILE_CTX = DeterministicContext(
    query=QUERY[:MAX_QUERY_CHARS],
    context={"big": "9" * 5000, "chatbotId": "x", "blob": "y" * 30_000},
    a2a_data=[{"k": "v"}],
    a2a_files=None,
    mcp_tools=[ToolInfo(name="search_docs", input_schema={"type": "object"})],
)


def test_the_corpus_is_big_enough() -> None:
    assert len(HOSTILE) >= 40
    assert len(set(HOSTILE)) == len(HOSTILE)


@pytest.mark.parametrize("source", HOSTILE, ids=[s[:60] for s in HOSTILE])
@pytest.mark.parametrize("kind", ["when", "params"])
def test_hostile_expression_is_refused_or_fails_cleanly(source: str, kind: str) -> None:
    text = source if kind == "when" else "{'v': " + source + "}"
    try:
        compiled = compile_when(text) if kind == "when" else compile_params(text)
    except ExprError as exc:
        assert exc.reason  # refused when saved, with a reason
        return
    namespace = build_namespace(HOSTILE_CTX)
    before = copy.deepcopy(
        {k: namespace[k] for k in ("query", "context", "a2a_data", "a2a_files", "tool_names")}
    )
    result, events = _evaluate_recorded(compiled, namespace)
    assert isinstance(result, ExprError), f"{source!r} evaluated to {result!r}"
    assert events == [], f"{source!r} raised audit events {events}"
    after = {k: namespace[k] for k in before}
    assert after == before  # nothing in the shared namespace was changed


@pytest.mark.timeout(30)  # a backtracking engine would not finish; RE2 answers at once
def test_catastrophic_regex_is_linear_through_re2() -> None:
    ctx = DeterministicContext(query="a" * (MAX_QUERY_CHARS - 1) + "b")
    compiled = compile_when("re_search('(a+)+$', query) or re_search('(a|aa)*c', query)")
    assert compiled(ctx) is False


def test_seed_style_rules_raise_no_audit_events() -> None:
    namespace = build_namespace(HOSTILE_CTX)
    for source in (
        '"주문" in ctx.query and "조회" in ctx.query',
        'ctx.context.get("chatbotId") == "premium-support"',
        '"search_docs" in tool_names and "검색" in ctx.query',
        "any(t['name'] == 'search_docs' for t in ctx.mcp_tools)",
        "f'{query[:3]!r}' and re_search('a+b', query)",
    ):
        result, events = _evaluate_recorded(compile_when(source), namespace)
        assert isinstance(result, bool)
        assert events == []


def test_real_builtins_are_unreachable_even_from_a_hand_made_namespace() -> None:
    # A namespace without the expected names must not fall back to Python's builtins.
    compiled = compile_when("len(query)")
    namespace = build_namespace(HOSTILE_CTX)
    del namespace["len"]
    with pytest.raises(ExprError, match="name 'len' is not defined"):
        compiled.evaluate(namespace)


# --- random expressions ---------------------------------------------------------------------------
_ATOMS = [
    # allowed
    "query",
    "ctx.query",
    "context",
    "ctx.context",
    "a2a_data",
    "a2a_files",
    "tool_names",
    "ctx.mcp_tools",
    "1",
    "0",
    "-1",
    "2.5",
    "9223372036854775807",
    "'주문'",
    "'a'",
    "''",
    "None",
    "True",
    "[]",
    "{}",
    "[1, 'a']",
    "{'k': 1}",
    "('x', 2)",
    "context.get('k')",
    "data_get('k')",
    "ctx.mcp_tools[0]",
    # disallowed
    "os",
    "x",
    "_",
    "__import__",
    "().__class__",
    "query.__class__",
    "(lambda: 1)",
    "b''",
    "1j",
    "...",
    "range(3)",
]
_UNARY = ["not {}", "-{}", "+{}", "~{}", "({})"]
_BINARY = [
    "{} + {}",
    "{} - {}",
    "{} * {}",
    "{} / {}",
    "{} // {}",
    "{} % {}",
    "{} ** {}",
    "{} << {}",
    "{} | {}",
    "{} and {}",
    "{} or {}",
    "{} == {}",
    "{} < {}",
    "{} in {}",
    "{} not in {}",
    "{} is {}",
    "{}[{}]",
    "{}[{}:]",
    "{}.get({})",
    "{}.join({})",
    "{}.replace({}, 'xx')",
    "{}.format({})",
    "contains_any({}, {})",
    "contains_all({}, {})",
    "re_search({}, {})",
    "re_find({}, {})",
    "round({}, {})",
    "max({}, {})",
    "getattr({}, {})",
    "{} if {} else None",
    "f'{{{}}}{{{}!r}}'",
    "{{{}: {}}}",
]
_CALLS = [
    "len({})",
    "str({})",
    "int({})",
    "float({})",
    "bool({})",
    "sorted({})",
    "sum({})",
    "abs({})",
    "min({})",
    "any({})",
    "data_get({})",
    "{}.split()",
    "{}.lower()",
    "{}.keys()",
    "{}.items()",
    "[x for x in {}]",
    "any(x for x in {} if x)",
    "{{k: v for k, v in {}.items()}}",
    "[[y for y in x] for x in {}]",
    "{}.__class__",
    "{}.gi_frame",
]


@st.composite
def _expressions(draw: st.DrawFn, depth: int = 0) -> str:
    if depth >= 4 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(_ATOMS))
    shape = draw(st.sampled_from(["unary", "binary", "call"]))
    if shape == "unary":
        return draw(st.sampled_from(_UNARY)).format(draw(_expressions(depth + 1)))
    if shape == "call":
        return draw(st.sampled_from(_CALLS)).format(draw(_expressions(depth + 1)))
    return draw(st.sampled_from(_BINARY)).format(draw(_expressions(depth + 1)), draw(_expressions(depth + 1)))


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=20,
)


@st.composite
def _contexts(draw: st.DrawFn) -> DeterministicContext:
    keys = st.sampled_from(["k", "chatbotId", "userId", "a", ""])
    return DeterministicContext(
        query=draw(st.text(max_size=40)),
        context=draw(st.dictionaries(keys, _JSON, max_size=4)),
        a2a_data=draw(st.none() | st.lists(st.dictionaries(keys, _JSON, max_size=3), max_size=3)),
        a2a_files=draw(st.none() | st.lists(st.dictionaries(keys, _JSON, max_size=3), max_size=2)),
        mcp_tools=[
            ToolInfo(name=n) for n in draw(st.lists(st.sampled_from(["search_docs", "x"]), max_size=2))
        ],
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(source=_expressions(), ctx=_contexts(), as_params=st.booleans())
def test_random_expressions_only_ever_raise_expr_error(
    source: str, ctx: DeterministicContext, as_params: bool
) -> None:
    try:
        compiled = compile_params("{'v': " + source + "}") if as_params else compile_when(source)
    except ExprError:
        return
    try:
        result = compiled(ctx)
    except ExprError as exc:
        assert isinstance(exc.reason, str) and exc.reason
        return
    if as_params:
        assert isinstance(result, dict) and set(result) == {"v"}
    else:
        assert isinstance(result, bool)
