"""normalize_result: what a tool result becomes for callers (no server needed)."""

from __future__ import annotations

import base64

import pytest
from mcp import types

from llamon_agent.mcp.errors import McpProtocolError, McpToolError
from llamon_agent.mcp.results import normalize_result, output_problems

WRAPPED_SCHEMA = {"type": "object", "properties": {"result": {"type": "string"}}, "required": ["result"]}


def _text(*texts: str, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=t) for t in texts],
        isError=is_error,
    )


def test_structured_content_wins_over_text() -> None:
    result = types.CallToolResult(content=[_text("ignored").content[0]], structuredContent={"order": 1})
    assert normalize_result(result) == {"order": 1}


def test_fastmcp_wrapper_is_removed_when_the_output_schema_says_so() -> None:
    result = types.CallToolResult(content=[], structuredContent={"result": "hello"})
    assert normalize_result(result, output_schema=WRAPPED_SCHEMA) == "hello"
    assert normalize_result(result) == {"result": "hello"}


@pytest.mark.parametrize("value", [42, 1.5, True, None])
def test_a_wrapped_scalar_keeps_its_json_type(value: object) -> None:
    schema = {"type": "object", "properties": {"result": {}}, "required": ["result"]}
    result = types.CallToolResult(content=[], structuredContent={"result": value})
    unwrapped = normalize_result(result, output_schema=schema)
    assert unwrapped == value and type(unwrapped) is type(value)  # 42, not "42"


def test_output_problems_say_why_a_result_breaks_the_declared_schema() -> None:
    schema = {
        "type": "object",
        "properties": {"total": {"type": "integer"}, "items": {"type": "array"}},
        "required": ["total"],
    }

    def problems(structured: dict | None, **kw: object) -> list[str]:
        return output_problems(types.CallToolResult(content=[], structuredContent=structured, **kw), schema)

    assert problems({"total": 3, "items": []}) == []
    assert problems({"total": "3", "items": {}}) == [
        "items: {} is not of type 'array'",
        "total: '3' is not of type 'integer'",
    ]
    assert problems({}) == ["'total' is a required property"]
    assert problems(None) == ["the tool declares an output schema but returned no structured content"]
    assert problems({"total": "x"}, isError=True) == []  # an error result is not checked
    assert output_problems(types.CallToolResult(content=[], structuredContent={"a": 1}), None) == []
    broken = output_problems(
        types.CallToolResult(content=[], structuredContent={"a": 1}), {"type": "no-such-type"}
    )
    assert len(broken) == 1 and broken[0].startswith("the tool's output schema is itself invalid")
    long = problems({"total": "x" * 5000})
    assert len(long) == 1 and len(long[0]) < 400  # a long value is cut in the message


def test_text_that_is_a_json_object_is_parsed() -> None:
    assert normalize_result(_text('{"a": [1, 2]}')) == {"a": [1, 2]}
    assert normalize_result(_text("[1, 2]")) == [1, 2]


def test_plain_text_and_json_scalars_stay_strings() -> None:
    assert normalize_result(_text("hello", "world")) == "hello\nworld"
    assert normalize_result(_text("42")) == "42"
    assert normalize_result(_text("{not json")) == "{not json"


def test_empty_content_is_an_empty_string() -> None:
    assert normalize_result(types.CallToolResult(content=[])) == ""


def test_is_error_raises_tool_error_with_the_text_and_names() -> None:
    with pytest.raises(McpToolError, match="MCP server 'crm', tool 'get_customer': no such customer"):
        normalize_result(_text("no such customer", is_error=True), mcp_id="crm", tool_name="get_customer")


def test_binary_blocks_are_summarized_never_returned() -> None:
    png = base64.b64encode(b"\x89PNG" + b"\0" * 96).decode()
    result = types.CallToolResult(
        content=[
            types.TextContent(type="text", text="a chart"),
            types.ImageContent(type="image", data=png, mimeType="image/png"),
            types.EmbeddedResource(
                type="resource",
                resource=types.BlobResourceContents(
                    uri="file:///r.bin", blob=png, mimeType="application/pdf"
                ),
            ),
            types.ResourceLink(type="resource_link", uri="file:///doc.txt", name="doc"),
        ]
    )
    assert normalize_result(result) == [
        {"type": "text", "text": "a chart"},
        {"type": "image", "mimeType": "image/png", "bytes": 100},
        {"type": "resource", "uri": "file:///r.bin", "mimeType": "application/pdf", "bytes": 100},
        {"type": "resource_link", "uri": "file:///doc.txt", "name": "doc", "mimeType": None},
    ]


def test_bad_base64_is_a_protocol_error() -> None:
    result = types.CallToolResult(
        content=[types.ImageContent(type="image", data="%%%", mimeType="image/png")]
    )
    with pytest.raises(McpProtocolError, match="not valid base64"):
        normalize_result(result, mcp_id="x", tool_name="chart")


def test_something_that_is_not_a_result_is_a_protocol_error() -> None:
    with pytest.raises(McpProtocolError, match="expected a CallToolResult"):
        normalize_result({"content": []})  # type: ignore[arg-type]
