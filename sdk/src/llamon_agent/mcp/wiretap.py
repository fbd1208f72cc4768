"""A tap on one session's transport streams: the JSON-RPC messages of the requests a caller watches.

The pool wraps the two memory streams it hands its session (:mod:`llamon_agent.mcp.session`), so
the tap sees every message both ways without the session knowing. The wrappers only look: each
message is passed on unchanged, and when nobody watches, the cost is one empty-dict check.

A caller watches a request id (:meth:`Wiretap.watch`) and gets, in order, every message naming
that id while it watches (the request sent, the reply or error received, a ``notifications/cancelled``
sent before the reply), as JSON-ready dicts.
"""

from __future__ import annotations

import copy
from typing import Any

import anyio

from llamon_agent.mcp.protocol import RequestId

SENT = "sent"
RECEIVED = "received"


class Wiretap:
    """The watched request ids of one session and where their messages go."""

    def __init__(self) -> None:
        self._watched: dict[RequestId, list[dict[str, Any]]] = {}

    def watch(self, request_id: RequestId, sink: list[dict[str, Any]]) -> None:
        """Append the messages of ``request_id`` to ``sink`` as ``{"direction", "message"}``."""
        self._watched[request_id] = sink

    def unwatch(self, request_id: RequestId) -> None:
        self._watched.pop(request_id, None)

    def wrap(self, read_stream: Any, write_stream: Any) -> tuple[Any, Any]:
        """The session's streams with this tap on them."""
        return _TappedReceive(read_stream, self), _TappedSend(write_stream, self)

    def seen(self, direction: str, item: dict[str, Any] | Exception) -> None:
        if not self._watched or not isinstance(item, dict):
            return
        request_id = item.get("id")
        if request_id is None and item.get("method") == "notifications/cancelled":
            request_id = (item.get("params") or {}).get("requestId")
        sink = self._watched.get(request_id) if isinstance(request_id, int | str) else None
        if sink is not None:
            sink.append({"direction": direction, "message": copy.deepcopy(item)})


class _TappedSend:
    """A send stream that shows each message to the tap before passing it on."""

    def __init__(self, inner: Any, tap: Wiretap) -> None:
        self._inner, self._tap = inner, tap

    async def send(self, item: dict[str, Any]) -> None:
        self._tap.seen(SENT, item)
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    def close(self) -> None:
        self._inner.close()

    async def __aenter__(self) -> _TappedSend:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._inner.__aexit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _TappedReceive:
    """A receive stream that shows each message to the tap as it is taken."""

    def __init__(self, inner: Any, tap: Wiretap) -> None:
        self._inner, self._tap = inner, tap

    async def receive(self) -> dict[str, Any] | Exception:
        item: dict[str, Any] | Exception = await self._inner.receive()
        self._tap.seen(RECEIVED, item)
        return item

    def __aiter__(self) -> _TappedReceive:
        return self

    async def __anext__(self) -> dict[str, Any] | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    def close(self) -> None:
        self._inner.close()

    async def __aenter__(self) -> _TappedReceive:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._inner.__aexit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
