"""Tool results over the cap are cut as they arrive, with a marker and their full size (issue #27, part 4).

A red team's tool returned 50 MB: every step stored it, the model was handed all of it and a
viewer's run page was 52 MB. The pool now cuts a result whose text is over
``LLAMON_TOOL_RESULT_MAX_BYTES`` (default 256 KB) before anything reads it: the pre-step's value,
the LangChain tool the model calls and the raw result the inspector shows are the same cut text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from mcp import types

from llamon_agent.mcp.pool import McpPool
from llamon_agent.mcp.results import (
    DEFAULT_MAX_RESULT_BYTES,
    TRUNCATED_RE,
    cap_result,
    max_result_bytes_from_env,
    normalize_result,
)
from tests.engine.conftest import stdio_spec

pytestmark = pytest.mark.timeout(120)

CAP = 4096


@pytest.fixture(scope="module")
def small_pool() -> Iterator[McpPool]:
    pool = McpPool(max_result_bytes=CAP)
    pool.register(stdio_spec())
    try:
        yield pool
    finally:
        pool.close()


def _cut(text: str) -> tuple[str, int, int]:
    match = TRUNCATED_RE.search(text)
    assert match is not None, text[-200:]
    return text[: match.start()], int(match.group(1).replace(",", "")), int(match.group(2).replace(",", ""))


def test_the_default_cap_is_256_kb_and_the_environment_sets_it() -> None:
    assert DEFAULT_MAX_RESULT_BYTES == 262_144 == max_result_bytes_from_env({})
    assert max_result_bytes_from_env({"LLAMON_TOOL_RESULT_MAX_BYTES": "1_048_576"}) == 1_048_576
    with pytest.raises(ValueError, match="at least 1024"):
        max_result_bytes_from_env({"LLAMON_TOOL_RESULT_MAX_BYTES": "10"})
    with pytest.raises(ValueError, match="whole number of bytes"):
        max_result_bytes_from_env({"LLAMON_TOOL_RESULT_MAX_BYTES": "lots"})
    assert McpPool(max_result_bytes=None).max_result_bytes == DEFAULT_MAX_RESULT_BYTES


def test_a_result_over_the_cap_is_cut_with_its_full_size_for_every_reader(small_pool: McpPool) -> None:
    value = small_pool.call_tool_sync("mis", "flood", {"n_bytes": 5_000_000})
    assert isinstance(value, str)
    kept, size, shown = _cut(value)
    # The size is the larger of the text and the structured content's JSON ({"result": "xxx..."}).
    assert (kept, shown) == ("x" * CAP, CAP) and size == len(json.dumps({"result": "x" * 5_000_000}))
    raw, normalized = small_pool.call_tool_traced_sync("mis", "flood", {"n_bytes": 5_000_000})
    assert normalized == value and len(raw.model_dump_json()) < CAP + 500  # what the inspector shows
    (tool,) = [t for t in small_pool.langchain_tools_sync("mis") if t.name == "flood"]
    handed = tool.invoke({"n_bytes": 5_000_000})  # what the model gets
    text = handed if isinstance(handed, str) else json.dumps(handed)
    assert len(text.encode()) < CAP + 500 and "5,000,014 bytes" in text
    assert small_pool.call_tool_sync("mis", "add", {"a": 1, "b": 1}) == {"sum": 2}  # the session lives on


def test_a_result_within_the_cap_is_untouched(small_pool: McpPool) -> None:
    assert small_pool.call_tool_sync("mis", "flood", {"n_bytes": CAP - 100}) == "x" * (CAP - 100)
    assert small_pool.call_tool_sync("mis", "echo", {"value": "안녕"}) == "안녕"


def test_structured_content_over_the_cap_becomes_its_cut_json_text() -> None:
    big = {"rows": [{"name": "가나다라", "n": i} for i in range(2000)]}
    result = types.CallToolResult(content=[], structuredContent=big)
    capped = cap_result(result, CAP)
    assert capped.structuredContent is None
    value = normalize_result(capped)
    assert isinstance(value, str)
    kept, size, shown = _cut(value)
    full = json.dumps(big, ensure_ascii=False)
    assert full.startswith(kept) and size == len(full.encode()) and shown == len(kept.encode()) <= CAP


def test_the_cut_never_splits_a_character_and_errors_and_small_results_pass() -> None:
    text = "가" * 5000  # 3 bytes each
    capped = cap_result(types.CallToolResult(content=[types.TextContent(type="text", text=text)]), 1024)
    kept, size, shown = _cut(capped.content[0].text)  # type: ignore[union-attr]
    assert kept == "가" * 341 and shown == 1023 and size == 15_000
    error = types.CallToolResult(content=[types.TextContent(type="text", text="e" * 5000)], isError=True)
    assert cap_result(error, 1024) is error  # an error's text is cut where it is read
    small = types.CallToolResult(content=[types.TextContent(type="text", text="ok")])
    assert cap_result(small, 1024) is small and cap_result(small, None) is small


def test_a_plain_value_is_cut_the_same_way_once() -> None:
    from llamon_agent.mcp.results import cap_value, truncation

    cut = cap_value("z" * 10_000, 1024)
    assert truncation(cut) == {"size": 10_000, "kept": 1024} and cap_value(cut, 1024) == cut
    rows = {"rows": list(range(1000))}
    assert truncation(cap_value(rows, 1024))["size"] == len(json.dumps(rows))  # type: ignore[index]
    assert cap_value(rows, None) is rows and cap_value({"ok": 1}, 1024) == {"ok": 1}


def test_a_card_number_across_the_cut_is_dropped_whole_not_halved() -> None:
    from llamon_agent.guardrails import redact

    text = "a" * 1010 + " 4111 1111 1111 1111 " + "b" * 5000  # the cap falls inside the card number
    capped = cap_result(types.CallToolResult(content=[types.TextContent(type="text", text=text)]), 1024)
    kept, _, _ = _cut(capped.content[0].text)  # type: ignore[union-attr]
    assert kept == "a" * 1010 and "4111" not in redact(capped.content[0].text, ["card_number"])  # type: ignore[union-attr]
