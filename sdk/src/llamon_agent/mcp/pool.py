"""A per-process pool of open MCP sessions (stdio and streamable HTTP) on one background loop.

An MCP session belongs to the asyncio loop that opened it, so every session lives on the
pool's own loop thread, each under a supervisor task that opens it, keeps it open and
opens a new one after it died. Callers on any thread or loop hand their work to that loop:
async callers with ``run_coroutine_threadsafe`` + ``wrap_future``, plain threads (Django,
Celery) through the ``*_sync`` facade.

Failure policy (at most once):

* A session found dead *before* a call (the child exited, the HTTP connection dropped) is
  reopened and the call goes to the new session: nothing was sent to the dead one.
* A call whose request provably never reached the server (the write to the child's stdin
  failed, the HTTP connect was refused, the server answered "Session terminated") is
  retried once on a new session.
* A call whose request may have reached the server is never retried (tools need not be
  idempotent): it fails with :class:`McpConnectionError`, and the session is reopened for
  the next call.
* A timeout cancels the request (``notifications/cancelled``) and raises
  :class:`McpTimeoutError`; the session is then pinged, and if it does not answer (a tool
  blocking the server's loop) the server is restarted. Calls made meanwhile wait for that
  verdict instead of queueing behind a frozen server.

A stdio child gets only the variables its spec names plus PATH and HOME, an argument list
(no shell) and its own process group, which is killed when the session ends.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import functools
import logging
import os
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, TypeVar, cast

import anyio
import httpx
from pydantic import ValidationError

from llamon_agent.envnames import EnvNamePolicy, header_env_name
from llamon_agent.mcp import protocol as types
from llamon_agent.mcp.errors import (
    McpConnectionError,
    McpError,
    McpProtocolError,
    McpTimeoutError,
    McpToolError,
    PoolUsageError,
    UnknownServerError,
)
from llamon_agent.mcp.results import (
    Normalized,
    cap_result,
    max_result_bytes_from_env,
    normalize_result,
    output_problems,
)
from llamon_agent.mcp.session import ClientSession, RpcError
from llamon_agent.mcp.spec import McpServerSpec
from llamon_agent.mcp.transports import (
    _GRACEFUL_EXIT_S,
    _KILL_WAIT_S,
    SESSION_TERMINATED,
    STDERR_MARKER,
    HttpGuard,
    _http_transport,
    _Link,
    _stdio_transport,
)

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

logger = logging.getLogger("llamon_agent.mcp")
T = TypeVar("T")
StdioAllowed = Callable[[McpServerSpec], bool]
_HEALTH_PING_S = 3.0  # after a timeout, a session that cannot answer a ping this fast is restarted
_CANCEL_SEND_S = 1.0


class _Slot:
    """One registered server on the pool loop: its spec, current session and caches."""

    def __init__(self, spec: McpServerSpec) -> None:
        self.spec = spec
        self.session: ClientSession | None = None
        self.link: _Link | None = None
        self.connects = 0
        self.closing = False
        self.wanted = asyncio.Event()
        self.ready: asyncio.Future[None] | None = None
        self.health: asyncio.Future[None] | None = None
        self.tools: list[types.Tool] | None = None
        self.lc_tools: list[BaseTool] | None = None
        self.tools_lock = asyncio.Lock()
        self.inflight: dict[asyncio.Task[Any], _Link] = {}
        self.supervisor: asyncio.Task[None] | None = None
        self.last_error: str | None = None
        self.last_link: _Link | None = None  # the newest connection, opened or not (its stderr tail)

    def live(self) -> tuple[ClientSession, _Link] | None:
        if self.session is not None and self.link is not None and not self.link.done.is_set():
            return self.session, self.link
        return None

    def resolve_ready(self, error: BaseException | None = None) -> None:
        if self.ready is not None and not self.ready.done():
            if error is None:
                self.ready.set_result(None)
            else:
                self.ready.set_exception(error)
                self.ready.exception()  # retrieved: nobody may be waiting any more

    def output_schema(self, tool_name: str) -> dict[str, Any] | None:
        for tool in self.tools or ():
            if tool.name == tool_name:
                return tool.outputSchema
        return None


# --------------------------------------------------------------------------- the pool


class McpPool:
    """Open MCP sessions for one process, on one background event-loop thread (see module doc)."""

    def __init__(
        self,
        stdio_allowed: StdioAllowed | None = None,
        http_guard: HttpGuard | None = None,
        *,
        env_policy: EnvNamePolicy | None = None,
        connect_timeout_s: float | None = None,
        max_message_bytes: int = 64 * 1024 * 1024,
        max_result_bytes: int | None = None,
    ) -> None:
        self.stdio_allowed = stdio_allowed
        self.http_guard = http_guard
        # Checked each time a session opens: a spec saved before the allow-list (or before it was
        # narrowed) must not hand a forbidden variable to a child or a header.
        self.env_policy = env_policy
        # A session's start-up limit (process, transport, handshake): each server's own timeout_s
        # (a server with 1,200 tools may need more than 30 s to start), unless the pool sets one.
        self.connect_timeout_s = connect_timeout_s
        self.max_message_bytes = max_message_bytes
        # A tool result over this is cut (results.cap_result) as it arrives, before anything reads it.
        self.max_result_bytes = max_result_bytes_from_env() if max_result_bytes is None else max_result_bytes
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._specs: dict[str, McpServerSpec] = {}
        self._slots: dict[str, _Slot] = {}
        self._retiring: set[asyncio.Task[None]] = set()
        self._doomed: set[asyncio.Task[Any]] = set()
        self._background: set[asyncio.Task[Any]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        _all_pools.add(self)

    # ---------------------------------------------------------------- registration (any thread)

    def register(self, spec: McpServerSpec) -> None:
        """Make ``spec.mcp_id`` callable; idempotent, and a changed spec replaces the session."""
        if not isinstance(spec, McpServerSpec):
            raise TypeError(f"register() takes an McpServerSpec, not {type(spec).__name__}")
        with self._lock:
            previous = self._specs.get(spec.mcp_id)
            self._specs[spec.mcp_id] = spec
        if previous is not None and previous != spec:
            self._reconcile_soon(spec.mcp_id)

    def unregister(self, mcp_id: str) -> None:
        """Forget ``mcp_id`` and close its session (in the background)."""
        with self._lock:
            removed = self._specs.pop(mcp_id, None)
        if removed is not None:
            self._reconcile_soon(mcp_id)

    def spec(self, mcp_id: str) -> McpServerSpec:
        """The registered spec of ``mcp_id``; UnknownServerError if none."""
        with self._lock:
            spec = self._specs.get(mcp_id)
            known = list(self._specs)
        if spec is None:
            raise UnknownServerError(mcp_id, known, where="the MCP pool")
        return spec

    def registered(self) -> list[str]:
        """The registered mcp_ids."""
        with self._lock:
            return sorted(self._specs)

    @property
    def closed(self) -> bool:
        """True once close()/aclose() ran; a closed pool refuses work."""
        return self._closed

    # ---------------------------------------------------------------- async API (any loop)

    async def list_tools(self, mcp_id: str, refresh: bool = False) -> list[types.Tool]:
        """The server's tools (cached per session owner; ``refresh`` asks the server again)."""
        return await self._on_loop(self._list_tools, mcp_id, refresh)

    async def call_tool(
        self, mcp_id: str, tool_name: str, params: dict[str, Any] | None = None, timeout: float | None = None
    ) -> Normalized:
        """Call a tool and return its normalized result (a JSON value); raises McpError subclasses."""
        return await self._on_loop(self._call_normalized, mcp_id, tool_name, params, timeout)

    async def call_tool_checked(
        self, mcp_id: str, tool_name: str, params: dict[str, Any] | None = None, timeout: float | None = None
    ) -> tuple[Normalized, list[str]]:
        """:meth:`call_tool` plus why the result breaks the tool's output schema (empty when it fits)."""
        return await self._on_loop(self._call_checked, mcp_id, tool_name, params, timeout)

    async def call_tool_raw(
        self, mcp_id: str, tool_name: str, params: dict[str, Any] | None = None, timeout: float | None = None
    ) -> types.CallToolResult:
        """Call a tool and return the raw ``CallToolResult`` (``isError`` results included)."""
        return await self._on_loop(self._call, mcp_id, tool_name, params, timeout)

    async def langchain_tools(self, mcp_id: str) -> list[BaseTool]:
        """LangChain tools bound to the pooled session; invocable from any thread or loop."""
        return await self._on_loop(self._langchain_tools, mcp_id)

    async def stats(self, mcp_id: str) -> dict[str, Any]:
        """Connection facts for ``mcp_id``: sessions opened, child pid, alive, last error."""
        return await self._on_loop(self._stats, mcp_id)

    async def aclose(self) -> None:
        """Close every session (stdio children stopped) and stop the loop thread."""
        if self._loop is None or self._closed:
            self._closed = True
            return
        await self._on_loop(self._shutdown)
        await asyncio.to_thread(self._stop_thread)

    # ---------------------------------------------------------------- sync facade (plain threads)

    def list_tools_sync(self, mcp_id: str, refresh: bool = False) -> list[types.Tool]:
        """Blocking :meth:`list_tools` for plain threads (never from the pool's own loop)."""
        return self._blocking(self._list_tools, mcp_id, refresh)

    def call_tool_sync(
        self, mcp_id: str, tool_name: str, params: dict[str, Any] | None = None, timeout: float | None = None
    ) -> Normalized:
        """Blocking :meth:`call_tool` for plain threads (Django views, Celery tasks)."""
        return self._blocking(self._call_normalized, mcp_id, tool_name, params, timeout)

    def call_tool_checked_sync(
        self, mcp_id: str, tool_name: str, params: dict[str, Any] | None = None, timeout: float | None = None
    ) -> tuple[Normalized, list[str]]:
        """Blocking :meth:`call_tool_checked`."""
        return self._blocking(self._call_checked, mcp_id, tool_name, params, timeout)

    def call_tool_traced_sync(
        self,
        mcp_id: str,
        tool_name: str,
        params: dict[str, Any] | None = None,
        timeout: float | None = None,
        *,
        wire: list[dict[str, Any]] | None = None,
    ) -> tuple[types.CallToolResult, Normalized | McpError]:
        """One call, both views: the raw ``CallToolResult`` and its normalized value (or the McpError
        normalizing raised, e.g. for ``isError``). For pages that show what the server really sent.

        ``wire``, when given, receives the call's JSON-RPC messages as they pass (request, reply,
        cancellation; see :mod:`llamon_agent.mcp.wiretap`), also when the call fails."""
        return self._blocking(self._call_both, mcp_id, tool_name, params, timeout, wire)

    def stderr_tail_sync(self, mcp_id: str) -> list[str] | None:
        """The last stderr lines of ``mcp_id``'s newest stdio child in this process, as redacted when
        read (see :func:`llamon_agent.mcp.transports.redact_stderr`); None when none was started here."""
        return self._blocking(self._stderr_tail, mcp_id)

    def langchain_tools_sync(self, mcp_id: str) -> list[BaseTool]:
        """Blocking :meth:`langchain_tools`."""
        return self._blocking(self._langchain_tools, mcp_id)

    def stats_sync(self, mcp_id: str) -> dict[str, Any]:
        """Blocking :meth:`stats`."""
        return self._blocking(self._stats, mcp_id)

    def cold_sync(self, mcp_ids: list[str]) -> list[str]:
        """Those of ``mcp_ids`` with no live session now (in their order), in one trip to the pool's
        loop; an id the pool cannot serve (:class:`McpError`) is left out."""
        return self._blocking(self._cold, mcp_ids)

    def close(self, timeout: float = 30.0) -> None:
        """Close every session (stdio children stopped, no orphans) and stop the loop thread."""
        if self._loop is None or self._closed or self._pid != os.getpid():
            self._closed = True
            return
        try:
            self._blocking(self._shutdown, timeout=timeout)
        except concurrent.futures.TimeoutError:
            logger.warning("MCP pool: sessions did not close within %ss", timeout)
        finally:
            self._stop_thread()

    # ---------------------------------------------------------------- loop plumbing

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        if self._pid != os.getpid():
            raise PoolUsageError(
                "this MCP pool was created in another process (before a fork); "
                "call llamon_agent.mcp.get_pool() in this process instead"
            )
        with self._lock:
            if self._closed:
                raise PoolUsageError("the MCP pool is closed")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=_run_loop, args=(loop,), name="llamon-mcp-pool", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def _in_pool_thread(self) -> bool:
        return self._thread is not None and threading.get_ident() == self._thread.ident

    async def _on_loop(self, func: Callable[..., Awaitable[T]], *args: Any) -> T:
        loop = self._ensure_loop()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            return await func(*args)
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_as_coro(func, *args), loop))

    def _blocking(self, func: Callable[..., Awaitable[T]], *args: Any, timeout: float | None = None) -> T:
        loop = self._ensure_loop()
        if self._in_pool_thread():
            raise PoolUsageError(
                "the MCP pool's sync API was called from the pool's own event-loop thread, which would "
                "deadlock; await the async API (list_tools / call_tool / langchain_tools) instead"
            )
        future = asyncio.run_coroutine_threadsafe(_as_coro(func, *args), loop)
        return future.result(timeout)

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coro`` on the pool loop (used by the LangChain tools' sync path)."""
        loop = self._ensure_loop()
        if self._in_pool_thread():
            coro.close()
            raise PoolUsageError("a pooled LangChain tool was invoked synchronously on the pool's own loop")
        return asyncio.run_coroutine_threadsafe(coro, loop)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _reconcile_soon(self, mcp_id: str) -> None:
        loop = self._loop
        if loop is not None and not self._closed and self._pid == os.getpid():
            loop.call_soon_threadsafe(self._reconcile, mcp_id)

    def _reconcile(self, mcp_id: str) -> None:
        slot = self._slots.get(mcp_id)
        with self._lock:
            spec = self._specs.get(mcp_id)
        if slot is not None and slot.spec != spec:
            self._retire(slot, "its registration changed" if spec else "it was unregistered")
            del self._slots[mcp_id]

    def _stop_thread(self) -> None:
        loop, thread = self._loop, self._thread
        with self._lock:
            self._closed = True
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        if threading.get_ident() != thread.ident:
            thread.join(timeout=10)
        if not thread.is_alive():
            loop.close()

    # ---------------------------------------------------------------- on the pool loop: slots

    def _slot(self, mcp_id: str) -> _Slot:
        spec = self.spec(mcp_id)
        slot = self._slots.get(mcp_id)
        if slot is None or slot.spec != spec:
            if slot is not None:
                self._retire(slot, "its registration changed")
            slot = _Slot(spec)
            slot.supervisor = asyncio.get_running_loop().create_task(
                self._supervise(slot), name=f"mcp-supervisor-{mcp_id}"
            )
            self._slots[mcp_id] = slot
        return slot

    def _retire(self, slot: _Slot, why: str) -> None:
        slot.closing = True
        slot.wanted.set()
        slot.resolve_ready(
            McpConnectionError.about(f"the session was closed because {why}", mcp_id=slot.spec.mcp_id)
        )
        if slot.link is not None:
            slot.link.finish(f"the session was closed because {why}")
        if slot.supervisor is not None:
            self._retiring.add(slot.supervisor)
            slot.supervisor.add_done_callback(self._retiring.discard)

    async def _supervise(self, slot: _Slot) -> None:
        while not slot.closing:
            await slot.wanted.wait()
            slot.wanted.clear()
            if slot.closing:
                break
            await self._run_session(slot)
        slot.resolve_ready(McpConnectionError.about("the session is closed", mcp_id=slot.spec.mcp_id))

    async def _run_session(self, slot: _Slot) -> None:
        link = _Link()
        slot.last_link = link
        attached = False
        try:
            async with AsyncExitStack() as stack:
                read_stream, write_stream = await stack.enter_async_context(self._transport(slot.spec, link))
                read_stream, write_stream = link.tap.wrap(read_stream, write_stream)
                session = await stack.enter_async_context(ClientSession(read_stream, write_stream))
                with anyio.fail_after(self.startup_limit_s(slot.spec)):
                    await session.initialize()
                slot.session, slot.link, attached = session, link, True
                slot.connects += 1
                slot.last_error = None
                slot.resolve_ready()
                await link.done.wait()
                logger.info("MCP server '%s': session ended: %s", slot.spec.mcp_id, link.cause)
        except Exception as exc:
            link.finish(_describe_exception(exc))
            if not attached:
                slot.resolve_ready(self._connect_error(slot.spec, link, exc))
            slot.last_error = link.describe()
            logger.info("MCP server '%s': session ended: %s", slot.spec.mcp_id, link.describe())
        finally:
            if slot.link is link:
                slot.session = None
            self._doom_inflight(slot, link)
            link.closed.set()

    def startup_limit_s(self, spec: McpServerSpec) -> float:
        """How long a session of ``spec`` may take to start: the pool's limit, else the server's timeout_s."""
        return self.connect_timeout_s if self.connect_timeout_s is not None else spec.timeout_s

    def _transport(self, spec: McpServerSpec, link: _Link) -> Any:
        if self.env_policy is not None:
            names = spec.env if spec.transport == "stdio" else [header_env_name(h) for h in spec.headers]
            reason = self.env_policy.first_refusal(names)
            if reason is not None:
                raise McpConnectionError.about(f"refusing to open a session: {reason}", mcp_id=spec.mcp_id)
        if spec.transport == "stdio":
            if self.stdio_allowed is not None and not self.stdio_allowed(spec):
                raise McpConnectionError.about(
                    f"refusing to start stdio command {spec.command!r}: not allowed by this pool's stdio allow-list",
                    mcp_id=spec.mcp_id,
                )
            return _stdio_transport(spec, link, max_message_bytes=self.max_message_bytes)
        return _http_transport(spec, link, guard=self.http_guard)

    def _connect_error(self, spec: McpServerSpec, link: _Link, exc: Exception) -> McpError:
        if isinstance(exc, McpError):
            return exc
        if isinstance(exc, TimeoutError):
            reason = f"the server did not finish the MCP handshake within {self.startup_limit_s(spec)}s"
        else:
            reason = f"could not open a session: {_describe_exception(exc)}"
        if link.stderr_tail or link.returncode is not None:
            reason += f" [{link.describe(stderr=False)}]"
        if link.stderr_tail:
            reason += STDERR_MARKER + " | ".join(link.stderr_tail)  # last: see STDERR_MARKER
        return McpConnectionError.about(reason, mcp_id=spec.mcp_id)

    def _doom_inflight(self, slot: _Slot, link: _Link) -> None:
        # Some transports (HTTP) tear down without answering pending requests: wake their callers.
        for task, task_link in list(slot.inflight.items()):
            if task_link is link and not task.done():
                self._doomed.add(task)
                task.cancel()

    async def _session(self, slot: _Slot) -> tuple[ClientSession, _Link]:
        if slot.health is not None:
            # A timeout is being diagnosed: do not queue behind a possibly frozen server.
            await asyncio.shield(slot.health)
        live = slot.live()
        if live is not None:
            return live
        if slot.closing:
            raise McpConnectionError.about("the session is closed", mcp_id=slot.spec.mcp_id)
        if slot.ready is None or slot.ready.done():
            slot.ready = asyncio.get_running_loop().create_future()
            slot.wanted.set()
        try:
            async with asyncio.timeout(self.startup_limit_s(slot.spec)):
                await asyncio.shield(slot.ready)
        except TimeoutError:
            raise McpConnectionError.about(
                f"no session within {self.startup_limit_s(slot.spec)}s", mcp_id=slot.spec.mcp_id
            ) from None
        live = slot.live()
        if live is None:
            raise McpConnectionError.about(
                f"the session ended right after opening: {slot.last_error or 'unknown cause'}",
                mcp_id=slot.spec.mcp_id,
            )
        return live

    # ---------------------------------------------------------------- on the pool loop: work

    async def _list_tools(self, mcp_id: str, refresh: bool) -> list[types.Tool]:
        slot = self._slot(mcp_id)
        async with slot.tools_lock:
            if slot.tools is None or refresh:
                slot.tools = await self._fetch_tools(slot)
                slot.lc_tools = None
            return list(slot.tools)

    async def _fetch_tools(self, slot: _Slot) -> list[types.Tool]:
        # Listing is idempotent, so one retry on a session that died under it is always safe.
        for attempt in (1, 2):
            session, link = await self._session(slot)
            try:
                async with asyncio.timeout(slot.spec.timeout_s):
                    return await _list_all_tools(session)
            except TimeoutError:
                raise McpTimeoutError.about(
                    f"tools/list got no answer within {slot.spec.timeout_s}s", mcp_id=slot.spec.mcp_id
                ) from None
            except (RpcError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                link.finish(_describe_exception(exc))
                if attempt == 2:
                    raise McpConnectionError.about(
                        f"tools/list failed: {link.describe()}", mcp_id=slot.spec.mcp_id
                    ) from None
            except ValidationError as exc:
                raise McpProtocolError.about(
                    f"malformed tools/list reply: {_first_error(exc)}", mcp_id=slot.spec.mcp_id
                ) from None
        raise AssertionError("unreachable")

    async def _call_normalized(
        self, mcp_id: str, tool_name: str, params: dict[str, Any] | None, timeout: float | None
    ) -> Normalized:
        return (await self._call_checked(mcp_id, tool_name, params, timeout))[0]

    async def _call_checked(
        self, mcp_id: str, tool_name: str, params: dict[str, Any] | None, timeout: float | None
    ) -> tuple[Normalized, list[str]]:
        result = await self._call(mcp_id, tool_name, params, timeout)
        slot = self._slots.get(mcp_id)
        schema = slot.output_schema(tool_name) if slot is not None else None
        value = normalize_result(result, mcp_id=mcp_id, tool_name=tool_name, output_schema=schema)
        return value, output_problems(result, schema)

    async def _call_both(
        self,
        mcp_id: str,
        tool_name: str,
        params: dict[str, Any] | None,
        timeout: float | None,
        wire: list[dict[str, Any]] | None = None,
    ) -> tuple[types.CallToolResult, Normalized | McpError]:
        raw = await self._call(mcp_id, tool_name, params, timeout, wire)
        slot = self._slots.get(mcp_id)
        schema = slot.output_schema(tool_name) if slot is not None else None
        try:
            return raw, normalize_result(raw, mcp_id=mcp_id, tool_name=tool_name, output_schema=schema)
        except McpError as exc:
            return raw, exc

    async def _call(
        self,
        mcp_id: str,
        tool_name: str,
        params: dict[str, Any] | None,
        timeout: float | None,
        wire: list[dict[str, Any]] | None = None,
    ) -> types.CallToolResult:
        slot = self._slot(mcp_id)
        if slot.tools is None:
            # Known output schemas let normalize_result unwrap FastMCP's {"result": ...}.
            await self._list_tools(mcp_id, False)
        bound = slot.spec.timeout_s if timeout is None else timeout
        for attempt in (1, 2):
            session, link = await self._session(slot)
            outcome = await self._call_once(slot, session, link, tool_name, params or {}, bound, wire)
            if isinstance(outcome, types.CallToolResult):
                return cap_result(outcome, self.max_result_bytes)
            request_id, cause = outcome
            if attempt == 1 and request_id is not None and request_id in link.unsent:
                logger.info("MCP server '%s': retrying %s on a new session (%s)", mcp_id, tool_name, cause)
                continue
            raise McpConnectionError.about(
                f"the session died during the call ({cause}); the call was not retried because the "
                "server may have received it",
                mcp_id=mcp_id,
                tool_name=tool_name,
            )
        raise AssertionError("unreachable")

    async def _call_once(
        self,
        slot: _Slot,
        session: ClientSession,
        link: _Link,
        tool_name: str,
        params: dict[str, Any],
        timeout: float,
        wire: list[dict[str, Any]] | None = None,
    ) -> types.CallToolResult | tuple[types.RequestId | None, str]:
        """One attempt: the result, or ``(request_id, cause)`` when the session died under it."""
        mcp_id = slot.spec.mcp_id
        task = asyncio.current_task()
        assert task is not None
        # Our own id, chosen before sending: a timed-out request is cancelled on the server by it.
        request_id: types.RequestId | None = session.new_request_id()
        slot.inflight[task] = link
        if wire is not None and request_id is not None:
            link.tap.watch(request_id, wire)
        try:
            async with asyncio.timeout(timeout):
                raw = await session.call_tool(tool_name, params, request_id)
            # A result that breaks the tool's output schema is handed on, with the problems as a
            # warning (_call_checked, the trace); mcp's own client refuses it.
            return types.CallToolResult.model_validate(raw)
        except TimeoutError:
            self._spawn(self._after_timeout(slot, session, link, request_id))
            raise McpTimeoutError.about(
                f"no answer within {timeout:g}s; the request was cancelled",
                mcp_id=mcp_id,
                tool_name=tool_name,
            ) from None
        except asyncio.CancelledError:
            if task not in self._doomed:
                self._spawn(_send_cancel(session, request_id, "the caller gave up"))
                raise
            self._doomed.discard(task)
            task.uncancel()
            return request_id, link.describe()
        except RpcError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                # The connection ended first: wait for its teardown, so that the error names the
                # child's exit code and last stderr lines (out of inflight: nothing to doom).
                slot.inflight.pop(task, None)
                link.finish("the connection closed" if exc.message == "Connection closed" else exc.message)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(link.closed.wait(), _GRACEFUL_EXIT_S + 2 * _KILL_WAIT_S + 1)
                return request_id, link.describe()
            return self._rpc_error(exc, link, request_id, mcp_id, tool_name)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            # The session's write stream was already closed: this request never left the process.
            if request_id is not None:
                link.unsent.add(request_id)
            link.finish("the connection was already closed")
            return request_id, link.describe()
        except ValidationError as exc:
            raise McpProtocolError.about(
                f"malformed tools/call reply: {_first_error(exc)}", mcp_id=mcp_id, tool_name=tool_name
            ) from None
        finally:
            slot.inflight.pop(task, None)
            if request_id is not None:
                link.tap.unwatch(request_id)

    def _rpc_error(
        self,
        exc: RpcError,
        link: _Link,
        request_id: types.RequestId | None,
        mcp_id: str,
        tool_name: str,
    ) -> tuple[types.RequestId | None, str]:
        code, message = exc.code, exc.message
        if code == SESSION_TERMINATED and "terminated" in message.lower():
            # The HTTP server no longer knows our session (it restarted): it did not run the call.
            if request_id is not None:
                link.unsent.add(request_id)
            link.finish("the server forgot the session (it restarted?)")
            return request_id, link.cause
        if code == types.PARSE_ERROR:
            raise McpProtocolError.about(message, mcp_id=mcp_id, tool_name=tool_name) from None
        raise McpToolError.about(
            f"the server refused the call: {message} (JSON-RPC error {code})",
            mcp_id=mcp_id,
            tool_name=tool_name,
        ) from None

    async def _after_timeout(
        self, slot: _Slot, session: ClientSession, link: _Link, request_id: types.RequestId | None
    ) -> None:
        await _send_cancel(session, request_id, "timed out")
        if slot.health is not None or link.done.is_set():
            return
        verdict = asyncio.get_running_loop().create_future()
        slot.health = verdict
        try:
            with anyio.fail_after(_HEALTH_PING_S):
                await session.ping()
        except Exception:
            logger.warning(
                "MCP server '%s' did not answer a ping after a timeout; restarting it", slot.spec.mcp_id
            )
            link.finish("the server stopped answering (restarted after a timeout)", kill=True)
        finally:
            verdict.set_result(None)
            if slot.health is verdict:
                slot.health = None

    async def _langchain_tools(self, mcp_id: str) -> list[BaseTool]:
        slot = self._slot(mcp_id)
        tools = await self._list_tools(mcp_id, False)
        if slot.lc_tools is None:
            slot.lc_tools = [_langchain_tool(self, mcp_id, tool) for tool in tools]
        return list(slot.lc_tools)

    async def _stderr_tail(self, mcp_id: str) -> list[str] | None:
        slot = self._slots.get(mcp_id)  # never opens a session just to look
        if slot is None or slot.last_link is None or slot.spec.transport != "stdio":
            return None
        return list(slot.last_link.stderr_tail)

    async def _cold(self, mcp_ids: list[str]) -> list[str]:
        cold = []
        for mcp_id in mcp_ids:
            try:
                if self._slot(mcp_id).live() is None:
                    cold.append(mcp_id)
            except McpError:
                continue
        return cold

    async def _stats(self, mcp_id: str) -> dict[str, Any]:
        slot = self._slot(mcp_id)
        live = slot.live()
        return {
            "mcp_id": mcp_id,
            "transport": slot.spec.transport,
            "connects": slot.connects,
            "alive": live is not None,
            "pid": live[1].pid if live else None,
            "last_error": slot.last_error,
        }

    async def _shutdown(self) -> None:
        for mcp_id, slot in list(self._slots.items()):
            self._retire(slot, "the pool is closing")
            del self._slots[mcp_id]
        pending = set(self._retiring)
        if pending:
            _, still = await asyncio.wait(pending, timeout=_GRACEFUL_EXIT_S + 2 * _KILL_WAIT_S + 2)
            for task in still:
                task.cancel()
            if still:
                await asyncio.wait(still, timeout=_KILL_WAIT_S * 2)
        for task in list(self._background):
            task.cancel()


# --------------------------------------------------------------------------- helpers


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    loop.run_forever()


async def _as_coro(func: Callable[..., Awaitable[T]], *args: Any) -> T:
    return await func(*args)


async def _list_all_tools(session: ClientSession) -> list[types.Tool]:
    try:
        return await session.list_all_tools()
    except ValueError as exc:
        if isinstance(exc, ValidationError):
            raise
        raise McpProtocolError(str(exc)) from None


async def _send_cancel(session: ClientSession, request_id: types.RequestId | None, reason: str) -> None:
    if request_id is None:
        return
    try:
        with anyio.move_on_after(_CANCEL_SEND_S):
            await session.cancel(request_id, reason)
    except Exception:
        pass  # the session is gone: nothing is left to cancel


def _describe_exception(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)]
        if inner:
            return _describe_exception(inner[0])
    if isinstance(exc, RpcError):
        return exc.message
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if isinstance(exc, httpx.HTTPError | OSError) else text


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return str(exc)
    first = errors[0]
    where = ".".join(str(part) for part in first.get("loc", ())) or "(root)"
    return f"{where}: {first.get('msg', 'invalid')}"


# --------------------------------------------------------------------------- process-wide pool

_all_pools: weakref.WeakSet[McpPool] = weakref.WeakSet()
_default_pool: McpPool | None = None
_default_lock = threading.Lock()


def get_pool() -> McpPool:
    """The process-wide pool, created on first use (and again in a forked child)."""
    global _default_pool
    with _default_lock:
        if _default_pool is None or _default_pool.closed:
            _default_pool = McpPool()
        return _default_pool


def set_pool(pool: McpPool | None) -> McpPool | None:
    """Install ``pool`` as the process-wide pool (e.g. one with allow-list hooks); returns the old one."""
    global _default_pool
    with _default_lock:
        previous, _default_pool = _default_pool, pool
        return previous


def _forget_pools_in_child() -> None:
    # The parent's loop thread does not exist in the child; its sessions belong to the parent.
    global _default_pool, _default_lock
    _default_pool = None
    _default_lock = threading.Lock()
    _all_pools.clear()


def close_all_pools() -> None:
    """Close every pool of this process (stdio children included); also run at interpreter exit."""
    for pool in list(_all_pools):
        try:
            pool.close(timeout=10)
        except Exception:
            pass


os.register_at_fork(after_in_child=_forget_pools_in_child)
atexit.register(close_all_pools)


# --------------------------------------------------------------------------- LangChain tools


def _langchain_tool(pool: McpPool, mcp_id: str, tool: types.Tool) -> BaseTool:
    from llamon_agent.mcp.lc_tools import langchain_tool

    async def call(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        return await pool.call_tool_raw(mcp_id, name, arguments)

    lc_tool = langchain_tool(tool, call)
    coroutine = cast("Callable[..., Coroutine[Any, Any, Any]]", lc_tool.coroutine)

    # A sync twin lets plain threads .invoke() the tool: the same coroutine, run on the pool loop.
    @functools.wraps(coroutine)
    def run_sync(*args: Any, **kwargs: Any) -> Any:
        return pool._submit(coroutine(*args, **kwargs)).result()

    lc_tool.func = run_sync
    return lc_tool
