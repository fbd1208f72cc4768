"""How the pool reaches a server: the stdio child with its pumps and stderr tail, and the pinned streamable-HTTP client."""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import re
import signal
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import httpx

from llamon_agent.mcp.errors import (
    McpConnectionError,
)
from llamon_agent.mcp.protocol import CONNECTION_CLOSED, PARSE_ERROR, RequestId
from llamon_agent.mcp.spec import McpServerSpec
from llamon_agent.mcp.wiretap import Wiretap
from llamon_agent.net import DEFAULT_POLICY, DestinationRefused, guarded_async_client

logger = logging.getLogger("llamon_agent.mcp")
# Called with a URL before each connect; raises to refuse it. It may return the addresses it
# checked: the connection then goes to those, so the name is not resolved a second time (a name
# that changes between the check and the connect cannot redirect it: DNS rebinding). Without
# one, the engine's default policy (llamon_agent.net.DEFAULT_POLICY) checks the URL.
HttpGuard = Callable[[str], Sequence[str] | None]
_GRACEFUL_EXIT_S = 2.0  # a child gets this long to exit after its stdin closes (MCP stdio shutdown)
_KILL_WAIT_S = 2.0  # then SIGTERM, and SIGKILL after this long
_STDERR_TAIL_LINES = 20
_ID_RE = re.compile(r'"id"\s*:\s*(-?\d+|"[^"\\]*")')
_ALWAYS_PASSED_ENV = ("PATH", "HOME")


@dataclass(eq=False)
class _Link:
    """What the pool knows about one open connection: liveness, why it ended, undelivered requests."""

    done: asyncio.Event = field(default_factory=asyncio.Event)
    closed: asyncio.Event = field(default_factory=asyncio.Event)  # torn down: exit code and stderr are final
    cause: str = ""
    kill: bool = False  # end without the graceful stdin-close wait (the child is frozen)
    unsent: set[RequestId] = field(default_factory=set)
    pid: int | None = None
    returncode: int | None = None
    stderr_tail: collections.deque[str] = field(
        default_factory=lambda: collections.deque(maxlen=_STDERR_TAIL_LINES)
    )
    tap: Wiretap = field(default_factory=Wiretap)  # the JSON-RPC messages of watched requests

    def finish(self, cause: str, *, kill: bool = False) -> None:
        """Mark the connection as ending; the first cause is the one reported."""
        if not self.done.is_set():
            self.cause = cause
            self.done.set()
        self.kill = self.kill or kill

    def describe(self, *, stderr: bool = True) -> str:
        """The cause plus the exit code and the tail of the child's stderr, for error messages.

        The stderr tail always comes last, after :data:`STDERR_MARKER`, so that an app can cut
        it off for people who may not see it (it can hold what the child was given).
        """
        text = self.cause or "the connection ended"
        if self.returncode is not None:
            text += f" (exit code {self.returncode})"
        if stderr and self.stderr_tail:
            text += STDERR_MARKER + " | ".join(self.stderr_tail)
        return text


# What precedes a stdio child's stderr tail in every error message; everything after it is stderr.
STDERR_MARKER = "; last stderr lines: "
# Token-like strings a child may print: API keys (sk-..., llamon_..., ghp_..., xox...-, AKIA...),
# JWTs, "Bearer x", "password=x"-style pairs and long unbroken base64/hex runs with a digit.
_TOKENISH = re.compile(
    r"(?i)\b(?:sk|pk|rk)-[A-Za-z0-9_-]{8,}"
    r"|\bllamon_[A-Za-z0-9_-]{8,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{16,}"
    r"|\bxox[abprs]-[A-Za-z0-9-]{8,}"
    r"|\bAKIA[0-9A-Z]{16}\b"
    r"|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"
    r"|\bbearer\s+\S+"
    r"|\b(?:password|passwd|pwd|secret|token|api[_-]?key|key)\b\s*[=:]\s*\S+"
    r"|(?<![A-Za-z0-9+_=-])(?=[A-Za-z0-9+_=-]*\d)[A-Za-z0-9+_=-]{32,}"
)


def redact_stderr(line: str, secrets: Sequence[str] = ()) -> str:
    """``line`` with the given secret values and token-like strings replaced by ``[redacted]``."""
    for value in secrets:
        if value:
            line = line.replace(value, "[redacted]")
    return _TOKENISH.sub("[redacted]", line)


# ``${NAME}`` in a stdio server's arguments: the value of NAME, one of the variables the server is
# given (its ``env`` names), put in only here, in the process that starts the child. Stored and
# shown arguments keep the placeholder, never the secret.
PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def placeholder_names(args: Sequence[str]) -> list[str]:
    """The variable names the ``${NAME}`` placeholders of ``args`` refer to, in order, once each."""
    return list(dict.fromkeys(m.group(1) for arg in args for m in PLACEHOLDER.finditer(arg)))


def expand_args(spec: McpServerSpec, env: Mapping[str, str]) -> list[str]:
    """``spec.args`` with each ``${NAME}`` replaced by NAME's value in ``env`` (the child's environment).

    A name the server is not given (not in ``spec.env``) or that is not set is an error naming it.
    """
    for name in placeholder_names(spec.args):
        if name not in spec.env:
            raise McpConnectionError.about(
                f"argument placeholder ${{{name}}} names a variable the server is not given: "
                f"add {name} to its environment variable names",
                mcp_id=spec.mcp_id,
            )
        if name not in env:
            raise McpConnectionError.about(
                f"argument placeholder ${{{name}}}: {name} is not set in this process's environment",
                mcp_id=spec.mcp_id,
            )
    return [PLACEHOLDER.sub(lambda m: env[m.group(1)], arg) for arg in spec.args]


def child_env(spec: McpServerSpec, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a stdio child: PATH, HOME and the variables the spec names, nothing else."""
    source = os.environ if environ is None else environ
    env = {name: source[name] for name in _ALWAYS_PASSED_ENV if name in source}
    env.setdefault("PATH", os.defpath)
    for name in spec.env:
        if name in source:
            env[name] = source[name]
    return env


# --------------------------------------------------------------------------- stdio transport


@asynccontextmanager
async def _stdio_transport(
    spec: McpServerSpec, link: _Link, *, max_message_bytes: int
) -> AsyncIterator[tuple[Any, Any]]:
    # Our own transport rather than mcp's stdio_client: that one adds LOGNAME/SHELL/TERM/USER
    # to the child's env, lets a garbled reply hang its request until the timeout, does not
    # bound message size and does not tell us which request failed to be written.
    env = child_env(spec)
    command = [spec.command or "", *expand_args(spec, env)]
    # What the child was given may come back on its stderr: never let it reach a message or a log.
    # Longest first, so a value containing another is replaced whole.
    secrets = sorted((env[n] for n in spec.env if len(env.get(n, "")) >= 4), key=len, reverse=True)
    try:
        process = await anyio.open_process(command, env=env, start_new_session=True)
    except OSError as exc:
        raise McpConnectionError.about(
            f"could not start {command[0]!r}: {exc.strerror or exc}", mcp_id=spec.mcp_id
        ) from None
    link.pid = process.pid
    read_writer, read_stream = anyio.create_memory_object_stream[dict[str, Any] | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[dict[str, Any]](0)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_pump_stdout, process, read_writer, link, max_message_bytes)
            tg.start_soon(_pump_stdin, process, write_reader, link)
            tg.start_soon(_pump_stderr, process, link, spec.mcp_id, secrets)
            try:
                yield read_stream, write_stream
            finally:
                # Shielded: even a cancelled supervisor (pool closing) must not orphan the child.
                with anyio.CancelScope(shield=True):
                    await _stop_process(process, link)
                tg.cancel_scope.cancel()
    finally:
        for stream in (read_writer, read_stream, write_stream, write_reader):
            await stream.aclose()


async def _stop_process(process: Any, link: _Link) -> None:
    if process.returncode is None:
        try:
            await process.stdin.aclose()
        except Exception:
            pass
        if not link.kill:
            with anyio.move_on_after(_GRACEFUL_EXIT_S):
                await process.wait()
    if process.returncode is None:
        try:
            await _kill_group(process, _KILL_WAIT_S)
        except ProcessLookupError:
            pass
    with anyio.move_on_after(_KILL_WAIT_S):
        await process.aclose()  # also closes its pipes, so no transport outlives the loop
    link.returncode = process.returncode


async def _pump_stdout(process: Any, sink: Any, link: _Link, max_bytes: int) -> None:
    buffer = bytearray()
    try:
        async for chunk in process.stdout:
            scan_from = len(buffer)  # only the new chunk can hold a newline we have not seen
            buffer += chunk
            while (newline := buffer.find(b"\n", scan_from)) >= 0:
                line = bytes(buffer[:newline])
                del buffer[: newline + 1]
                scan_from = 0
                await _deliver_line(line, sink)
            if len(buffer) > max_bytes:
                link.finish(f"the server sent a message larger than {max_bytes} bytes", kill=True)
                return
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
        pass
    except Exception as exc:  # the pump must never crash the supervisor's task group
        logger.debug("stdout reader stopped: %r", exc)
    finally:
        link.finish("the server process exited or closed its stdout")
        await sink.aclose()


async def _kill_group(process: Any, wait_s: float) -> None:
    """SIGTERM the child's process group (it has its own: start_new_session), SIGKILL after ``wait_s``."""
    try:
        group = os.getpgid(process.pid)
    except ProcessLookupError:
        return
    os.killpg(group, signal.SIGTERM)
    with anyio.move_on_after(wait_s):
        while True:
            try:
                os.killpg(group, 0)
            except ProcessLookupError:
                return
            await anyio.sleep(0.05)
    try:
        os.killpg(group, signal.SIGKILL)
    except ProcessLookupError:
        pass


def message_problem(data: Any) -> str | None:
    """Why ``data`` (parsed JSON) is not a JSON-RPC 2.0 message, or None when it is one."""
    if not isinstance(data, dict):
        return f"a JSON-RPC message is an object, not {type(data).__name__}"
    if data.get("jsonrpc") != "2.0":
        return 'jsonrpc must be "2.0"'
    if "method" in data:
        return None if isinstance(data["method"], str) else "method must be a string"
    if not isinstance(data.get("id"), int | str) or isinstance(data.get("id"), bool):
        return "a reply needs an id (a number or a string)"
    if "error" in data:
        error = data["error"]
        ok = (
            isinstance(error, dict)
            and isinstance(error.get("code"), int)
            and isinstance(error.get("message"), str)
        )
        return None if ok else "error must be an object with an integer code and a string message"
    return None if "result" in data else "a reply needs a result or an error"


def parse_message(text: str) -> dict[str, Any] | None:
    """``text`` as a JSON-RPC message; for a malformed one that names a request id, a parse-error
    reply to that request (so its caller fails now instead of timing out); else None."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        problem: str | None = f"not JSON: {exc.msg}"
        data = None
    else:
        problem = message_problem(data)
    if problem is None:
        return cast(dict[str, Any], data)
    request_id = _guess_request_id(text)
    if request_id is None:
        return None
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": PARSE_ERROR, "message": f"malformed JSON-RPC reply ({problem}): {text[:120]!r}"},
    }


async def _deliver_line(line: bytes, sink: Any) -> None:
    text = line.decode("utf-8", errors="replace").strip()
    if not text:
        return
    message = parse_message(text)
    if message is None:
        # mcp's own client skips such lines too (servers sometimes print banners on stdout).
        logger.warning("ignored a line on an MCP server's stdout that is not JSON-RPC: %.200s", text)
        return
    await sink.send(message)


def _guess_request_id(text: str) -> RequestId | None:
    """The id of a reply that failed to parse, so that its caller fails now instead of timing out."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("id"), int | str):
        return cast(RequestId, data["id"])
    match = _ID_RE.search(text)
    if match is None:
        return None
    raw = match.group(1)
    return raw.strip('"') if raw.startswith('"') else int(raw)


async def _pump_stdin(process: Any, source: Any, link: _Link) -> None:
    async with source:
        async for message in source:
            data = json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n"
            try:
                await process.stdin.send(data.encode("utf-8"))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                if "method" in message and "id" in message:
                    link.unsent.add(message["id"])
                link.finish("could not write to the server's stdin (the process exited)")
                return


async def _pump_stderr(process: Any, link: _Link, mcp_id: str, secrets: Sequence[str] = ()) -> None:
    # Drained so a chatty child never blocks on a full pipe; the tail goes into error messages.
    pending = b""
    try:
        async for chunk in process.stderr:
            *lines, pending = (pending + chunk).split(b"\n")
            pending = pending[-4096:]
            for raw in lines:
                line = redact_stderr(raw.decode("utf-8", errors="replace").rstrip(), secrets)
                if line:
                    link.stderr_tail.append(line[:300])
                    logger.debug("[%s stderr] %s", mcp_id, line)
    except Exception:
        pass


# --------------------------------------------------------------------------- HTTP transport


class _TaggingTransport(httpx.AsyncBaseTransport):
    """httpx transport that tells the pool which requests never reached the server."""

    def __init__(self, link: _Link, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner
        self._link = link

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return await self._inner.handle_async_request(request)
        except httpx.ConnectError as exc:
            if request.method == "POST":
                request_id = _guess_request_id(request.content.decode("utf-8", errors="replace"))
                if request_id is not None:
                    self._link.unsent.add(request_id)
            self._link.finish(
                str(exc) if isinstance(exc, DestinationRefused) else "could not connect to the server"
            )
            raise
        except (httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError):
            self._link.finish("the server closed the connection")
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()


@asynccontextmanager
async def _http_transport(
    spec: McpServerSpec, link: _Link, *, guard: HttpGuard | None
) -> AsyncIterator[tuple[Any, Any]]:
    url = spec.url or ""
    check = guard or DEFAULT_POLICY.check
    try:
        # In a thread: the guard may resolve the host name, which blocks.
        checked = await anyio.to_thread.run_sync(check, url)
    except Exception as exc:
        raise McpConnectionError.about(f"refused to connect to {url}: {exc}", mcp_id=spec.mcp_id) from None
    # The session connects to these addresses only (a guard returning None leaves the name to httpx),
    # and refuses any request (a redirect included) that leaves the server of ``url``.
    client = guarded_async_client(
        url,
        pinned=list(checked or []),
        transport=lambda inner: _TaggingTransport(link, inner),
        headers=spec.header_pairs(dict(os.environ)),
        timeout=httpx.Timeout(30.0, read=300.0),
    )
    async with client, _StreamableHttp(url, client).open() as streams:
        yield streams


_JSON = "application/json"
_SSE = "text/event-stream"
_SESSION_HEADER = "mcp-session-id"
_TERMINATE_S = 2.0
SESSION_TERMINATED = 32600  # the reply a request gets when the server answers 404: it forgot our session


class _StreamableHttp:
    """MCP's streamable HTTP transport, client side: each message POSTed to ``url``; a request's reply
    comes back as JSON or on an SSE stream (with the server's own requests and notifications for it).

    The session id the server hands out on ``initialize`` and the negotiated protocol revision go
    with every later message; a 404 to a request means the server no longer knows the session
    (it restarted). Sending ``notifications/cancelled`` also closes the cancelled request's stream,
    so a server that cannot match the notification (a stateless one) sees the client leave. No GET
    stream is opened: the pool uses nothing a server sends outside a request. The session is
    ended with DELETE on close. A failed POST (connect error, non-2xx status) ends the transport,
    as the SDK's own client does.
    """

    def __init__(self, url: str, client: httpx.AsyncClient) -> None:
        self.url = url
        self.client = client
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self.streams: dict[RequestId, anyio.CancelScope] = {}

    @asynccontextmanager
    async def open(self) -> AsyncIterator[tuple[Any, Any]]:
        read_writer, read_stream = anyio.create_memory_object_stream[dict[str, Any] | Exception](0)
        write_stream, write_reader = anyio.create_memory_object_stream[dict[str, Any]](0)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._writer, write_reader, read_writer, tg)
                try:
                    yield read_stream, write_stream
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._terminate()
                    tg.cancel_scope.cancel()
        finally:
            for stream in (read_writer, read_stream, write_stream, write_reader):
                await stream.aclose()

    def _headers(self) -> dict[str, str]:
        headers = {"accept": f"{_JSON}, {_SSE}", "content-type": _JSON}
        if self.session_id:
            headers[_SESSION_HEADER] = self.session_id
        if self.protocol_version:
            headers["mcp-protocol-version"] = self.protocol_version
        return headers

    async def _writer(self, source: Any, sink: Any, tg: Any) -> None:
        async with source:
            async for message in source:
                if "method" in message and "id" in message:
                    tg.start_soon(self._request, message, sink)
                else:
                    await self._post(message, sink)
                    if message.get("method") == "notifications/cancelled":
                        cancelled = (message.get("params") or {}).get("requestId")
                        scope = self.streams.get(cancelled) if isinstance(cancelled, int | str) else None
                        if scope is not None:
                            scope.cancel()

    async def _request(self, message: dict[str, Any], sink: Any) -> None:
        with anyio.CancelScope() as scope:
            self.streams[message["id"]] = scope
            try:
                await self._post(message, sink)
            finally:
                self.streams.pop(message["id"], None)

    async def _post(self, message: dict[str, Any], sink: Any) -> None:
        body = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()
        request_id = message["id"] if "method" in message and "id" in message else None
        async with self.client.stream("POST", self.url, content=body, headers=self._headers()) as response:
            if response.status_code == 202:
                return
            if response.status_code == 404:
                if request_id is not None:
                    await sink.send(_error_reply(request_id, SESSION_TERMINATED, "Session terminated"))
                return
            _raise_for_status(response)
            if message.get("method") == "initialize":
                self.session_id = response.headers.get(_SESSION_HEADER) or self.session_id
            if request_id is None:
                return  # a notification or a reply to the server: nothing comes back
            kind = response.headers.get("content-type", "").lower()
            handshake = message.get("method") == "initialize"
            if kind.startswith(_JSON):
                text = (await response.aread()).decode("utf-8", "replace")
                await self._deliver(text, request_id, sink, handshake)
            elif kind.startswith(_SSE):
                async for data in _sse_messages(response):
                    if await self._deliver(data, request_id, sink, handshake):
                        return
                await sink.send(
                    _error_reply(
                        request_id, CONNECTION_CLOSED, "the server ended the reply stream before answering"
                    )
                )
            else:
                await sink.send(
                    _error_reply(request_id, PARSE_ERROR, f"unexpected content type {kind or '(none)'!r}")
                )

    async def _deliver(self, text: str, request_id: RequestId, sink: Any, handshake: bool = False) -> bool:
        """Pass on the message(s) in ``text``; True once the reply to ``request_id`` has passed."""
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        items = data if isinstance(data, list) else [data]
        if data is None or not items:
            message = parse_message(text) or _error_reply(request_id, PARSE_ERROR, "malformed JSON-RPC reply")
            items = [message]
        answered = False
        for item in items:
            problem = message_problem(item)
            if problem is not None:
                item = _error_reply(
                    request_id, PARSE_ERROR, f"malformed JSON-RPC reply ({problem}): {text[:120]!r}"
                )
            if item.get("id") == request_id and "method" not in item:
                answered = True
                if handshake and isinstance(item.get("result"), dict) and "protocolVersion" in item["result"]:
                    self.protocol_version = str(item["result"]["protocolVersion"])
            await sink.send(item)
        return answered

    async def _terminate(self) -> None:
        if not self.session_id:
            return
        with anyio.move_on_after(_TERMINATE_S):
            try:
                await self.client.delete(self.url, headers=self._headers())
            except Exception as exc:
                logger.debug("ending the MCP HTTP session failed: %r", exc)


def _error_reply(request_id: RequestId, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def _raise_for_status(response: httpx.Response) -> None:
    if response.is_redirect:
        location = response.headers.get("location", "")
        raise httpx.HTTPStatusError(
            f"Redirect to {location} not followed; use that URL as the endpoint if it is the intended server",
            request=response.request,
            response=response,
        )
    response.raise_for_status()


async def _sse_messages(response: httpx.Response) -> AsyncIterator[str]:
    """The data of each ``message`` event of an SSE stream (events of other types and empty ones skipped)."""
    event, data = "message", list[str]()
    async for line in response.aiter_lines():
        if not line:
            if event == "message" and "".join(data).strip():
                yield "\n".join(data)
            event, data = "message", []
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
    if event == "message" and "".join(data).strip():
        yield "\n".join(data)
