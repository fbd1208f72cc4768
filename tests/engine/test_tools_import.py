"""Importing an app/tools.py as rules: the differential test and the translator's edges.

The bank module (tests/support/bank_tools.py) is our own file, so the test may import and run it;
the translator itself only parses it. For every translated function, 2,000 random requests give
the same outcome from the function run by the pre-step and from its rules: the same call (tool
and params), no call, or an error (both fail).
"""

from __future__ import annotations

import ast
import random
from pathlib import Path
from typing import Any

import pytest

from llamon_agent.expr import expression_rule
from llamon_agent.prestep import RuleStatus, StaticToolBackend, compile_rules, run_prestep
from llamon_agent.tools import AgentRequest, ToolInfo, rule_info
from llamon_agent.tools_import import (
    MAX_SOURCE_BYTES,
    MAX_TREE_DEPTH,
    ToolsImportError,
    translate_tools_module,
)
from tests.support import bank_tools, care_tools

ROOT = Path(__file__).resolve().parents[2]
BANK = Path(bank_tools.__file__)
SEED = ROOT / "examples" / "seed_project" / "app" / "tools.py"
REQUESTS = 2_000

# The functions the bank module marks UNTRANSLATABLE, and the two whose locals make nested
# comprehensions once put in place, with the line the report must name.
EXPECTED_UNTRANSLATABLE = {
    "parse_pdf": "expression",
    "filename_keyword": "expression",
    "vip_by_global_list": "global",
    "audit_log_lookup": "statement",
    "accumulate_amounts": "statement",
    "parse_json_part": "statement",
    "dynamic_tool_name": "tool-name",
    "type_checked_amount": "call",
}


def _line_of(source: str, function: str) -> int:
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            return node.lineno
    raise AssertionError(function)


def test_bank_module_imports_with_every_untranslatable_function_named_with_its_line() -> None:
    source = BANK.read_text(encoding="utf-8")
    result = translate_tools_module(source, filename="app/tools.py")
    left_out = {u.function: u for u in result.untranslatable}
    assert {name: u.code for name, u in left_out.items()} == EXPECTED_UNTRANSLATABLE
    for name, item in left_out.items():
        body_start = _line_of(source, name)
        body_end = max(
            getattr(n, "end_lineno", 0) or 0
            for n in ast.walk(ast.parse(source))
            if getattr(n, "name", None) == name
        )
        assert body_start <= item.line <= body_end, (name, item.line)
        assert str(item).startswith(f"app/tools.py:{item.line}: {name}: ")
    functions = list(dict.fromkeys(r.function for r in result.rules if r.enabled))
    assert len(functions) >= 40
    # Order: DETERMINISTIC_TOOLS' order; the decorated function left out of it comes last, disabled.
    listed = [f.__name__ for f in bank_tools.DETERMINISTIC_TOOLS]
    assert functions == [n for n in listed if n not in EXPECTED_UNTRANSLATABLE]
    assert [(r.name, r.enabled) for r in result.rules if not r.enabled] == [("not_listed_faq", False)]
    # A function returning two tools is two rules, in the order of their first return.
    assert [r.name for r in result.rules if r.function == "multi_tool_account"] == [
        "multi_tool_account__get_savings",
        "multi_tool_account__get_deposits",
    ]
    stop = {r.function for r in result.rules if r.stop}
    assert stop == {"card_lost"}
    assert next(r for r in result.rules if r.function == "balance_lookup").description.startswith("잔액 조회")


# --- the differential test --------------------------------------------------------------------


def _module_words(source: str) -> list[list[str]]:
    """Each function's short texts (its keywords), so that random queries reach its conditions."""
    groups = []
    for fn in ast.parse(source).body:
        if isinstance(fn, ast.FunctionDef):
            words = {
                n.value
                for stmt in fn.body[1 if ast.get_docstring(fn) is not None else 0 :]
                for n in ast.walk(stmt)
                if isinstance(n, ast.Constant) and type(n.value) is str and 0 < len(n.value) <= 20
            }
            groups.append(sorted(words))
    return groups


NOISE = [
    "안녕하세요",
    "please",
    "A-1001",
    "부탁해요",
    "HOW TO",
    "How do I",
    "help",
    "지금",
    "123",
    "  ",
    "EUR",
    "jpy",
]
CHATBOTS = ["private-banking", "vip-desk", "default", "basic-support"]
CONTEXT_TEXTS = {*CHATBOTS, "mobile", "web", "branch", "resume-"}


def _value(rng: random.Random, numbers: list[Any]) -> Any:
    roll = rng.random()
    if roll < 0.75:
        return rng.choice(numbers)
    if roll < 0.85:
        return None
    if roll < 0.93:
        return rng.choice(["high", "12", ""])  # a text where a number is expected: both must fail
    return rng.choice([True, False])


def _request(
    rng: random.Random, words: list[list[str]], n: int, data_keys: dict[str, list[Any]] | None = None
) -> AgentRequest:
    # A target function's texts (in turn, and sometimes another's): its keywords and the values
    # it compares, each kept or dropped at random.
    target = words[n % len(words)] + (rng.choice(words) if rng.random() < 0.3 else [])
    parts = [w for w in target if rng.random() < 0.8]
    parts += rng.sample(NOISE, rng.randint(0, 2))
    rng.shuffle(parts)
    query = " ".join(parts)
    if rng.random() < 0.2:
        query = query.upper() if rng.random() < 0.5 else query.lower()
    context: dict[str, Any] = {}
    fields: dict[str, list[Any]] = {
        "chatbotId": CHATBOTS,
        "userId": ["C-1", "C-2"],
        "sessionId": ["resume-77", "s-1", ""],
        "channel": ["mobile", "web", "branch"],
        "country": ["KR", "US", "JP", None],
        "authenticated": [True, False, "yes"],
        "age": [15, 30, 19],
        "house_price": [0, 100, 500],
        "loan_amount": [50, 400],
        "months": [6, 36, "12개월"],
        "creditScore": [950, 800, 600],
        "premium": [0, 150_000, 2_000_000],
        "pulse": [40, 80, 130],
        "ward": ["ICU", "ER", "7B"],
        "policyNo": ["P-1", ""],
    }
    for key, values in fields.items():
        if rng.random() < (0.8 if key == "chatbotId" else 0.6):
            if isinstance(values[0], str) and rng.random() < 0.5:
                values = [w for w in target if w in CONTEXT_TEXTS] or values
            context[key] = rng.choice(values) if rng.random() < 0.95 else _value(rng, [1, 2])
    a2a_data = None
    if rng.random() < 0.6:
        keys = {
            "amount": [1_000_000, 4_999_999, 100_000_000, 200_000_000],
            "transfer_amount": [5_000_000, 10_000_001, 20_000_000],
            "type": ["loan", "card"],
            "tier": ["gold", "silver", "platinum"],
            "count": [1, 2, 3, 6],
            "usd": [500, 10_000, 20_000],
            "requested_limit": [0, 1_000_000],
            **(data_keys or {}),
        }
        a2a_data = []
        for _ in range(rng.randint(0, 3)):
            chosen = {k for k in keys if k in target and rng.random() < 0.8}
            chosen |= set(rng.sample(sorted(keys), rng.randint(0, 2)))
            a2a_data.append(
                {
                    k: _value(rng, keys[k]) if rng.random() < 0.1 else rng.choice(keys[k])
                    for k in sorted(chosen)
                }
            )
    a2a_files = None
    if rng.random() < 0.5:
        # The target's own texts where one is a file name or a MIME type.
        names = ["report.pdf", "rates.XLSX", "id.png", "note.txt"]
        mimes = ["application/pdf", "image/png", "text/plain"]
        a2a_files = [
            {
                "name": rng.choice(names),
                "mimeType": rng.choice(mimes),
                "uri": f"file:///upload/{i}",
                "size": rng.choice([100, 6_000_000, None]),
            }
            for i in range(rng.randint(0, 4))
        ]
    return AgentRequest(query=query, context=context, a2a_data=a2a_data, a2a_files=a2a_files)


def _tools_by_server(result: Any) -> dict[str, list[str]]:
    tools: dict[str, set[str]] = {}
    for rule in result.rules:
        tools.setdefault(rule.mcp_id, set()).add(rule.tool_name)
    tools.setdefault("kb", set()).update({"search_docs", "search_notice"})
    tools.setdefault("card-service", set()).add("get_card_benefits")
    return {k: sorted(v) for k, v in tools.items()}


def _outcome(records: list[Any]) -> Any:
    statuses = {r.status for r in records}
    if RuleStatus.ERROR in statuses:
        return "error"
    fired = [r for r in records if r.status is RuleStatus.FIRED]
    assert len(fired) <= 1, "rules of one function fired together"
    if fired:
        return (fired[0].tool_name, fired[0].params)
    if RuleStatus.NOT_REACHED in statuses:
        return "not_reached"
    return None


CORPUS = [(BANK, bank_tools), (Path(care_tools.__file__), care_tools)]


def test_the_corpus_has_at_least_60_functions_and_names_every_one_left_out() -> None:
    translated = 0
    for path, module in CORPUS:
        source = path.read_text(encoding="utf-8")
        result = translate_tools_module(source, filename="app/tools.py")
        translated += len({r.function for r in result.rules if r.enabled})
        marked = {f.__name__ for f in module.DETERMINISTIC_TOOLS if "UNTRANSLATABLE" in (f.__doc__ or "")}
        assert marked and marked <= {u.function for u in result.untranslatable}, path.name
        assert all(str(u).startswith("app/tools.py:") and u.reason for u in result.untranslatable)
    assert translated >= 60, translated
    # The shapes of issue 43, translated: loops returning the matching part's values (first match),
    # the last part holding a key, values chosen in if/elif/else, helpers put in place.
    care = translate_tools_module(CORPUS[1][0].read_text(encoding="utf-8"))
    rules = {r.function: r for r in care.rules}
    assert '[0].get("claimId")' in rules["claim_status_first"].params
    assert "[-1]" in rules["latest_patient_chart"].when
    assert "[0]" in rules["claim_first_pending"].when
    assert '.replace(" ", "").lower()' in rules["policy_by_clean_query"].when
    assert '"overseas"' in rules["travel_insurance"].params


@pytest.mark.parametrize(("path", "module"), CORPUS, ids=["bank", "insurer-hospital"])
def test_every_translated_function_agrees_with_its_rules_on_random_requests(path: Path, module: Any) -> None:
    source = path.read_text(encoding="utf-8")
    result = translate_tools_module(source, filename="app/tools.py")
    enabled = [r for r in result.rules if r.enabled]
    names = list(dict.fromkeys(r.function for r in enabled))
    functions = {f.__name__: f for f in module.DETERMINISTIC_TOOLS}
    python_rules = compile_rules([functions[n] for n in names])
    expr_rules = compile_rules(
        [
            expression_rule(
                name=r.name, mcp_id=r.mcp_id, tool_name=r.tool_name, when=r.when, params=r.params, stop=r.stop
            )
            for r in enabled
        ]
    )
    # Every function keeps its server and stop flag.
    for name in names:
        info = rule_info(functions[name])
        assert {(r.mcp_id, r.stop) for r in enabled if r.function == name} == {(info.mcp_id, info.stop)}
    groups: dict[str, list[int]] = {}
    for i, rule in enumerate(enabled):
        groups.setdefault(rule.function, []).append(i)
    server_tools = _tools_by_server(result)
    words = _module_words(source)
    rng = random.Random(29)
    fired = dict.fromkeys(names, 0)
    errors = dict.fromkeys(names, 0)
    for n in range(REQUESTS):
        request = _request(rng, words, n, getattr(module, "DATA_KEYS", None))
        tools = {
            mcp_id: [ToolInfo(name=t) for t in tool_names if rng.random() < 0.9]
            for mcp_id, tool_names in server_tools.items()
        }
        backend = StaticToolBackend(tools)
        py = run_prestep(python_rules, request, backend=backend, dry_run=True).records
        ex = run_prestep(expr_rules, request, backend=backend, dry_run=True).records
        for i, name in enumerate(names):
            expected = _outcome([py[i]])
            got = _outcome([ex[j] for j in groups[name]])
            assert got == expected, (n, name, request, py[i], [ex[j] for j in groups[name]])
            if isinstance(expected, tuple):
                fired[name] += 1
            elif expected == "error":
                errors[name] += 1
    # The requests reach every function: each fired at least 5 times, and errors
    # (a text where a number is expected, a missing key) were compared too.
    assert {n: c for n, c in fired.items() if c < 5} == {}, fired
    assert sum(errors.values()) >= 20, errors


# --- the seed, exported modules, and refusals ----------------------------------------------------


def test_the_seed_module_imports_to_its_expressions() -> None:
    result = translate_tools_module(SEED.read_bytes())
    assert result.untranslatable == [] and result.notes == []
    assert [(r.name, r.tool_name, r.when, r.params) for r in result.rules] == [
        (
            "route_order_lookup",
            "get_order",
            '"주문" in ctx.query and "조회" in ctx.query',
            '{"query": ctx.query}',
        ),
        (
            "route_by_chatbot_id",
            "get_customer_profile",
            'ctx.context.get("chatbotId") == "premium-support"',
            '{"customer_id": ctx.context.get("userId")}',
        ),
        (
            "route_by_available_tool",
            "search_docs",
            '"search_docs" in tool_names and "검색" in ctx.query',
            '{"q": ctx.query}',
        ),
    ]


def test_whole_file_errors_are_clear_and_bounded() -> None:
    with pytest.raises(ToolsImportError) as exc:
        translate_tools_module("def f(:\n")
    assert exc.value.code == "syntax" and exc.value.line == 1
    with pytest.raises(ToolsImportError) as exc:
        translate_tools_module(b"x" * (MAX_SOURCE_BYTES + 1))
    assert exc.value.code == "too-big"
    with pytest.raises(ToolsImportError) as exc:
        translate_tools_module("x = " + "-" * (MAX_TREE_DEPTH + 5) + "1\n")
    assert exc.value.code == "too-deep"
    with pytest.raises(ToolsImportError) as exc:
        translate_tools_module(b"\xff\xfe")
    assert exc.value.code == "not-utf8"
    with pytest.raises(ToolsImportError) as exc:
        translate_tools_module("DETERMINISTIC_TOOLS = [f for f in []]\n")
    assert exc.value.code == "tools-list"


def test_functions_that_would_translate_to_huge_expressions_are_refused_quickly() -> None:
    doubling = "".join(f"    v{i} = v{i - 1} + v{i - 1}\n" for i in range(1, 40))
    many = "".join(f"    a{i} = ctx.context['k']\n" for i in range(600))
    source = (
        "from llamon_agent.tools import deterministic_tool\n"
        "@deterministic_tool(mcp_id='kb')\n"
        f"def grows(ctx):\n    v0 = ctx.query\n{doubling}    return {{'tool_name': 't', 'params': {{'q': v39}}}}\n"
        "@deterministic_tool(mcp_id='kb')\n"
        f"def long(ctx):\n{many}    return {{'tool_name': 't', 'params': {{}}}}\n"
        "DETERMINISTIC_TOOLS = [grows, long]\n"
    )
    result = translate_tools_module(source)
    assert [(u.function, u.code) for u in result.untranslatable] == [
        ("grows", "too-long"),
        ("long", "too-long"),
    ]


def test_the_module_is_never_run() -> None:
    # A module that would write a file when imported: parsing it must not.
    marker = ROOT / "var" / "tools-import-ran"
    source = (
        "import pathlib\n"
        f"pathlib.Path({str(marker)!r}).write_text('ran')\n"
        "from llamon_agent.tools import deterministic_tool\n"
        "@deterministic_tool(mcp_id='kb')\n"
        "def f(ctx):\n"
        "    if 'x' in ctx.query:\n"
        "        return {'tool_name': 't', 'params': {}}\n"
        "DETERMINISTIC_TOOLS = [f]\n"
    )
    result = translate_tools_module(source)
    assert [r.when for r in result.rules] == ["'x' in ctx.query"]
    assert not marker.exists()


def test_locals_that_can_fail_fail_where_the_function_fails() -> None:
    source = (
        "from llamon_agent.tools import deterministic_tool\n"
        "@deterministic_tool(mcp_id='crm')\n"
        "def g(c):\n"
        "    user = c.context['userId']\n"
        "    if 'x' in c.query:\n"
        "        return {'tool_name': 't', 'params': {'u': user}}\n"
        "    return None\n"
        "DETERMINISTIC_TOOLS = [g]\n"
    )
    (rule,) = translate_tools_module(source).rules
    # The parameter is renamed to ctx, and the lookup stays before the keyword test.
    assert rule.when == "(ctx.context['userId'] is None or True) and 'x' in ctx.query"
    assert rule.params == "{'u': ctx.context['userId']}"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ("    x = 1\n    x = 2\n    return {'tool_name': 't', 'params': {'x': x}}\n", "reassigned"),
        (
            "    if 'a' in ctx.query:\n        y = 1\n    return {'tool_name': 't', 'params': {'y': y}}\n",
            "unbound",
        ),
        ("    return {'tool_name': 't', 'params': {}, 'extra': 1}\n", "return"),
        ("    return ['t']\n", "return"),
        ("    if ctx.tool_names:\n        return {'tool_name': 't', 'params': {}}\n", "ctx-attr"),
        ("    if ctx.mcp_tools[0].name == 't':\n        return {'tool_name': 't', 'params': {}}\n", "tools"),
        ("    while True:\n        return None\n", "statement"),
        ("    with open('x') as f:\n        return None\n", "statement"),
        ("    if 'a' in ctx.query:\n        return None\n", "no-call"),
        ("    if ctx.query % 2:\n        return {'tool_name': 't', 'params': {}}\n", "syntax"),
        ("    if '%s' % ctx.query:\n        return {'tool_name': 't', 'params': {}}\n", "syntax"),
        ("    if (n := len(ctx.query)) > 3:\n        return {'tool_name': 't', 'params': {}}\n", "syntax"),
    ],
)
def test_shapes_that_cannot_be_translated_are_named(body: str, code: str) -> None:
    source = (
        "from llamon_agent.tools import deterministic_tool\n"
        "@deterministic_tool(mcp_id='kb')\n"
        f"def f(ctx):\n{body}"
        "DETERMINISTIC_TOOLS = [f]\n"
    )
    result = translate_tools_module(source)
    assert result.rules == []
    (item,) = result.untranslatable
    assert (item.function, item.code) == ("f", code), item
    assert 3 <= item.line <= source.count("\n")


def test_functions_without_a_server_or_listed_twice_are_named() -> None:
    source = (
        "from llamon_agent.tools import deterministic_tool\n"
        "def plain(ctx):\n"
        "    return None\n"
        "@deterministic_tool(mcp_id='kb', stop=True)\n"
        "def ok(ctx):\n"
        "    return {'tool_name': 't', 'params': {}}\n"
        "DETERMINISTIC_TOOLS = [plain, ok, ok, missing]\n"
    )
    result = translate_tools_module(source)
    assert [(r.name, r.when, r.stop) for r in result.rules] == [("ok", "True", True)]
    assert [(u.function, u.code, u.line) for u in result.untranslatable] == [
        ("plain", "not-decorated", 2),
        ("ok", "listed-twice", 7),
        ("missing", "not-defined", 7),
    ]


def test_the_llamon_command_prints_writes_and_exits_by_outcome(tmp_path, capsys) -> None:
    import json

    from llamon_agent.cli import main

    out = tmp_path / "ruleset.json"
    assert main(["import-tools", str(SEED), "--out", str(out), "--name", "seed-rules"]) == 0
    document = json.loads(out.read_text(encoding="utf-8"))
    assert document["format"] == "llamon-ruleset/1" and document["name"] == "seed-rules"
    assert [r["name"] for r in document["rules"]] == [
        "route_order_lookup",
        "route_by_chatbot_id",
        "route_by_available_tool",
    ]
    assert main(["import-tools", str(BANK)]) == 1
    err = capsys.readouterr().err
    assert f"left out: {BANK}:" in err and "vip_by_global_list" in err
    assert main(["import-tools", str(tmp_path / "missing.py")]) == 2
    (tmp_path / "broken.py").write_text("def f(:\n", encoding="utf-8")
    assert main(["import-tools", str(tmp_path / "broken.py")]) == 2
    assert "not valid Python" in capsys.readouterr().err
