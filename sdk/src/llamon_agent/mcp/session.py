"""The pool's MCP client session: JSON-RPC over a transport's two streams, with request ids of its own.

It speaks the slice of MCP the pool uses: ``initialize`` + ``notifications/initialized``,
``tools/list`` (paged), ``tools/call``, ``notifications/cancelled`` and ``ping``, and answers a
server's ``ping``; other server requests (sampling, elicitation, roots) get "method not found"
and server notifications are ignored. Messages are plain JSON objects (dicts), so the session
does not depend on either major of the ``mcp`` library.

The caller picks a request's id before sending it (:meth:`ClientSession.new_request_id`), so a
request that times out can be cancelled on the server by that id.

A transport is an async context manager yielding ``(read_stream, write_stream)``: the read stream
gives each message received (a dict; an Exception is logged and skipped), the write stream takes
each message to send. A request whose write fails raises anyio's ClosedResourceError or
BrokenResourceError (it never left the process); a request whose connection ends before its
reply raises :class:`RpcError` with code :data:`~llamon_agent.mcp.protocol.CONNECTION_CLOSED`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from importlib import metadata
from typing import Any

import anyio

from llamon_agent.mcp.protocol import (
    CONNECTION_CLOSED,
    METHOD_NOT_FOUND,
    InitializeResult,
    ListToolsResult,
    RequestId,
)

logger = logging.getLogger("llamon_agent.mcp")

LATEST_PROTOCOL_VERSION = "2025-11-25"
# The handshake revisions whose tools/list and tools/call this session reads; mcp 2 servers answer
# the 2025-11-25 handshake (their 2026-07-28 per-request envelope is not used).
SUPPORTED_PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", LATEST_PROTOCOL_VERSION)
_MAX_TOOL_PAGES = 1000


def _client_version() -> str:
    try:
        return metadata.version("llamon-agent")
    except metadata.PackageNotFoundError:
        return "0"


class RpcError(Exception):
    """A JSON-RPC error reply (or :data:`CONNECTION_CLOSED` when the connection ended first)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


class ClientSession:
    """One MCP session over a transport's streams; use as ``async with`` (it reads in a task)."""

    def __init__(self, read_stream: Any, write_stream: Any) -> None:
        self._read = read_stream
        self._write = write_stream
        self._ids = itertools.count(1)
        self._pending: dict[RequestId, asyncio.Future[Any]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._closed = False
        self.server: InitializeResult | None = None

    async def __aenter__(self) -> ClientSession:
        self._reader = asyncio.get_running_loop().create_task(self._receive_loop())
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        self._fail_pending()

    # ---------------------------------------------------------------- requests

    def new_request_id(self) -> int:
        """The id of the next request (pass it to :meth:`request` to know it before sending)."""
        return next(self._ids)

    async def request(
        self, method: str, params: dict[str, Any] | None = None, request_id: RequestId | None = None
    ) -> Any:
        """Send a request and return its ``result``; RpcError for an error reply."""
        rid = self.new_request_id() if request_id is None else request_id
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        try:
            if self._closed:
                raise RpcError(CONNECTION_CLOSED, "Connection closed")
            message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
            if params is not None:
                message["params"] = params
            await self._write.send(message)
            return await future
        finally:
            self._pending.pop(rid, None)

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self._write.send(message)

    async def initialize(self) -> InitializeResult:
        """The handshake; RuntimeError when the server picks a revision this session does not read."""
        raw = await self.request(
            "initialize",
            {
                "protocolVersion": LATEST_PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "llamon-agent", "version": _client_version()},
            },
        )
        result = InitializeResult.model_validate(raw)
        if result.protocolVersion not in SUPPORTED_PROTOCOL_VERSIONS:
            raise RuntimeError(f"Unsupported protocol version from the server: {result.protocolVersion}")
        await self.notify("notifications/initialized")
        self.server = result
        return result

    async def list_tools(self, cursor: str | None = None) -> ListToolsResult:
        """One page of ``tools/list`` (pydantic's ValidationError for a malformed one)."""
        return ListToolsResult.model_validate(
            await self.request("tools/list", {"cursor": cursor} if cursor else None)
        )

    async def list_all_tools(self) -> list[Any]:
        """Every page of ``tools/list``."""
        tools: list[Any] = []
        cursor: str | None = None
        for _ in range(_MAX_TOOL_PAGES):  # a server that keeps paginating forever is a broken server
            page = await self.list_tools(cursor)
            tools.extend(page.tools)
            cursor = page.nextCursor
            if not cursor:
                return tools
        raise ValueError(f"tools/list kept returning a next cursor after {_MAX_TOOL_PAGES} pages")

    async def call_tool(
        self, name: str, arguments: dict[str, Any], request_id: RequestId | None = None
    ) -> Any:
        """The raw ``tools/call`` result (a dict; the caller validates it)."""
        return await self.request("tools/call", {"name": name, "arguments": arguments}, request_id)

    async def ping(self) -> None:
        await self.request("ping")

    async def cancel(self, request_id: RequestId, reason: str) -> None:
        """Tell the server to stop working on ``request_id`` (it sends no reply to it then)."""
        await self.notify("notifications/cancelled", {"requestId": request_id, "reason": reason})

    # ---------------------------------------------------------------- receiving

    async def _receive_loop(self) -> None:
        try:
            async for item in self._read:
                if isinstance(item, Exception):
                    logger.debug("MCP transport reported: %r", item)
                elif isinstance(item, dict):
                    await self._dispatch(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
            pass
        finally:
            self._fail_pending()

    async def _dispatch(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if isinstance(method, str):
            if "id" in message:
                await self._answer(message["id"], method)
            return  # notifications (progress, logging, list_changed) are not used
        future = self._pending.get(message.get("id"))  # type: ignore[arg-type]
        if future is None or future.done():
            return  # a reply to a request nobody waits for any more (cancelled, timed out, a duplicate)
        error = message.get("error")
        if isinstance(error, dict):
            future.set_exception(
                RpcError(int(error.get("code", 0)), str(error.get("message", "")), error.get("data"))
            )
        else:
            future.set_result(message.get("result"))

    async def _answer(self, request_id: Any, method: str) -> None:
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
        if method == "ping":
            reply["result"] = {}
        else:
            reply["error"] = {
                "code": METHOD_NOT_FOUND,
                "message": f"{method} is not supported by this client",
            }
        try:
            await self._write.send(reply)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass

    def _fail_pending(self) -> None:
        self._closed = True
        for future in self._pending.values():
            if not future.done():
                future.set_exception(RpcError(CONNECTION_CLOSED, "Connection closed"))
                future.exception()  # retrieved: its caller may have gone
