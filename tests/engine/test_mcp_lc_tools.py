"""An MCP tool as a LangChain tool (llamon_agent.mcp.lc_tools): what the ReAct loop's model is handed.

In-process: the tool's call returns a result as a server would; every block kind, the structured
artifact and an ``isError`` result in one test (the pool's tests call real servers through it).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from mcp import types

from llamon_agent.mcp.lc_tools import langchain_tool

PNG = "iVBORw0KGgo="
TOOL = types.Tool(
    name="lookup",
    description="Look it up.",
    inputSchema={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    annotations=types.ToolAnnotations(readOnlyHint=True),
)
RESULTS = {
    "blocks": types.CallToolResult(
        content=[
            types.TextContent(type="text", text="주문 A-1"),
            types.ImageContent(type="image", data=PNG, mimeType="image/png"),
            types.ResourceLink(
                type="resource_link", name="a", uri="https://x.test/a.png", mimeType="image/png"
            ),
            types.ResourceLink(
                type="resource_link", name="b", uri="https://x.test/b.pdf", mimeType="application/pdf"
            ),
            types.EmbeddedResource(
                type="resource", resource=types.TextResourceContents(uri="file:///t.txt", text="embedded")
            ),
            types.EmbeddedResource(
                type="resource",
                resource=types.BlobResourceContents(
                    uri="file:///b.bin", blob="AAE=", mimeType="application/zip"
                ),
            ),
        ],
        structuredContent={"order": "A-1"},
    ),
    "error": types.CallToolResult(
        content=[types.TextContent(type="text", text="no order Z-9")], isError=True
    ),
    "empty_error": types.CallToolResult(content=[], isError=True),
    "audio": types.CallToolResult(
        content=[types.AudioContent(type="audio", data="AAE=", mimeType="audio/wav")]
    ),
}


def _invoke(kind: str, calls: list[tuple[str, dict[str, Any]]]) -> ToolMessage:
    async def call(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        calls.append((name, arguments))
        return RESULTS[kind]

    tool = langchain_tool(TOOL, call)
    assert (tool.name, tool.description, tool.args_schema) == ("lookup", "Look it up.", TOOL.inputSchema)
    assert tool.metadata is not None and tool.metadata["readOnlyHint"] is True
    call_id = {"name": "lookup", "args": {"q": kind}, "id": f"call-{kind}", "type": "tool_call"}
    return asyncio.run(tool.ainvoke(call_id))


def test_results_become_langchain_blocks_an_artifact_and_failed_tool_messages() -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    message = _invoke("blocks", calls)
    assert calls == [("lookup", {"q": "blocks"})]
    assert message.status == "success" and message.artifact == {"structured_content": {"order": "A-1"}}
    shapes = [
        (b["type"], b.get("text") or b.get("base64") or b.get("url"), b.get("mime_type"))
        for b in message.content
    ]
    assert shapes == [
        ("text", "주문 A-1", None),
        ("image", PNG, "image/png"),
        ("image", "https://x.test/a.png", "image/png"),
        ("file", "https://x.test/b.pdf", "application/pdf"),
        ("text", "embedded", None),
        ("file", "AAE=", "application/zip"),
    ]
    # An isError result goes back to the model as a failed tool message, so the run goes on.
    error = _invoke("error", calls)
    assert error.status == "error" and [b["text"] for b in error.content] == ["no order Z-9"]
    assert (
        _invoke("empty_error", calls).content[0]["text"] == "MCP tool returned an error with empty content."
    )
    with pytest.raises(NotImplementedError, match="audio/wav"):
        _invoke("audio", calls)
