"""McpPool against real MCP servers (tests/servers/misbehaving.py) over stdio and streamable HTTP."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from llamon_agent.mcp import pool as pool_module
from llamon_agent.mcp.adapters import PoolToolBackend
from llamon_agent.mcp.errors import (
    McpConnectionError,
    McpProtocolError,
    McpTimeoutError,
    McpToolError,
    PoolUsageError,
    UnknownServerError,
)
from llamon_agent.mcp.pool import McpPool, get_pool
from llamon_agent.mcp.results import DEFAULT_MAX_RESULT_BYTES
from llamon_agent.mcp.transports import child_env
from tests.engine.conftest import MISBEHAVING, HttpServer, children_running, stdio_spec, wait_until

pytestmark = pytest.mark.timeout(120)


# ---------------------------------------------------------------------------- basics


def test_lists_tools_and_calls_over_stdio(shared_pool: McpPool) -> None:
    names = {tool.name for tool in shared_pool.list_tools_sync("mis")}
    assert {"add", "echo", "hang", "exit_now", "malformed", "flood", "stderr_noise"} <= names
    assert shared_pool.call_tool_sync("mis", "add", {"a": 2, "b": 3}) == {"sum": 5}


def test_str_tool_returns_a_string_and_json_text_is_parsed(shared_pool: McpPool) -> None:
    assert shared_pool.call_tool_sync("mis", "echo", {"value": "안녕"}) == "안녕"
    assert shared_pool.call_tool_sync("mis", "echo_text", {"value": '{"a": 1}'}) == {"a": 1}


def test_tool_error_is_a_tool_error_naming_server_and_tool(shared_pool: McpPool) -> None:
    with pytest.raises(McpToolError, match="MCP server 'mis', tool 'fail': .*it broke"):
        shared_pool.call_tool_sync("mis", "fail", {"message": "it broke"})


def test_unregistered_server_is_unknown(shared_pool: McpPool) -> None:
    with pytest.raises(UnknownServerError, match="unknown MCP server 'nope'.*known servers: mis"):
        shared_pool.call_tool_sync("nope", "add", {})


def test_list_tools_is_cached_until_refreshed(shared_pool: McpPool) -> None:
    first = shared_pool.list_tools_sync("mis")
    assert shared_pool.list_tools_sync("mis") == first
    assert [t.name for t in shared_pool.list_tools_sync("mis", refresh=True)] == [t.name for t in first]


def test_huge_output_and_stderr_noise_do_not_break_the_session(shared_pool: McpPool) -> None:
    flooded = shared_pool.call_tool_sync("mis", "flood", {"n_bytes": 3_000_000})
    assert isinstance(flooded, str) and flooded.startswith("x" * DEFAULT_MAX_RESULT_BYTES)  # cut at the cap
    assert flooded.endswith("[truncated: the tool returned 3,000,014 bytes; the first 262,144 are kept]")
    assert shared_pool.call_tool_sync("mis", "stderr_noise", {"lines": 3000}) == "ok"
    assert shared_pool.call_tool_sync("mis", "add", {"a": 1, "b": 1}) == {"sum": 2}


def test_lists_tools_and_calls_over_http(http_server: HttpServer) -> None:
    pool = McpPool()
    try:
        pool.register(http_server.spec())
        assert "hang" in {tool.name for tool in pool.list_tools_sync("mis-http")}
        assert pool.call_tool_sync("mis-http", "add", {"a": 20, "b": 22}) == {"sum": 42}
    finally:
        pool.close()


# ---------------------------------------------------------------------------- timeouts


@pytest.mark.timeout(60)
def test_hanging_tool_times_out_within_its_bound_and_the_next_call_works(pool: McpPool) -> None:
    pool.call_tool_sync("mis", "add", {"a": 0, "b": 0})
    pid = pool.stats_sync("mis")["pid"]
    with pytest.raises(McpTimeoutError, match="tool 'hang': no answer within 0.5s"):
        pool.call_tool_sync("mis", "hang", {"seconds": 30}, timeout=0.5)
    assert pool.call_tool_sync("mis", "add", {"a": 1, "b": 2}) == {"sum": 3}
    assert pool.stats_sync("mis")["pid"] == pid  # a cancellable hang does not cost the session


@pytest.mark.timeout(60)
def test_a_tool_that_freezes_the_server_gets_the_server_restarted(pool: McpPool) -> None:
    pool.call_tool_sync("mis", "add", {"a": 0, "b": 0})
    frozen_pid = pool.stats_sync("mis")["pid"]
    with pytest.raises(McpTimeoutError):
        pool.call_tool_sync("mis", "hang_blocking", {"seconds": 60}, timeout=0.5)
    assert pool.call_tool_sync("mis", "add", {"a": 1, "b": 2}) == {"sum": 3}
    assert pool.stats_sync("mis")["pid"] != frozen_pid
    assert frozen_pid not in children_running()


@pytest.mark.timeout(60)
def test_http_hanging_tool_times_out_and_the_next_call_works(http_server: HttpServer) -> None:
    pool = McpPool()
    try:
        pool.register(http_server.spec())
        with pytest.raises(McpTimeoutError, match="no answer within 0.5s"):
            pool.call_tool_sync("mis-http", "hang", {"seconds": 30}, timeout=0.5)
        assert pool.call_tool_sync("mis-http", "add", {"a": 1, "b": 2}) == {"sum": 3}
    finally:
        pool.close()


# ---------------------------------------------------------------------------- dying servers


def test_killed_stdio_server_is_reconnected_on_the_next_call(pool: McpPool) -> None:
    pool.call_tool_sync("mis", "add", {"a": 0, "b": 0})
    old_pid = pool.stats_sync("mis")["pid"]
    os.kill(old_pid, signal.SIGKILL)
    wait_until(lambda: not pool.stats_sync("mis")["alive"], what="the pool to notice the dead child")
    assert pool.call_tool_sync("mis", "add", {"a": 1, "b": 2}) == {"sum": 3}
    stats = pool.stats_sync("mis")
    assert stats["connects"] == 2 and stats["pid"] != old_pid


def test_server_exiting_mid_call_gives_a_clear_error_then_reconnects(pool: McpPool) -> None:
    with pytest.raises(
        McpConnectionError, match="tool 'exit_now': the session died during the call.*exit code 3"
    ):
        pool.call_tool_sync("mis", "exit_now", {"code": 3})
    assert pool.call_tool_sync("mis", "add", {"a": 1, "b": 2}) == {"sum": 3}


def test_killed_http_server_is_reconnected_on_the_next_call(http_server: HttpServer) -> None:
    pool = McpPool()
    try:
        pool.register(http_server.spec())
        assert pool.call_tool_sync("mis-http", "add", {"a": 1, "b": 1}) == {"sum": 2}
        http_server.kill()
        with pytest.raises(McpConnectionError, match="MCP server 'mis-http'"):
            pool.call_tool_sync("mis-http", "add", {"a": 1, "b": 1})
        http_server.start()
        assert pool.call_tool_sync("mis-http", "add", {"a": 2, "b": 2}) == {"sum": 4}
        assert pool.stats_sync("mis-http")["connects"] >= 2
    finally:
        pool.close()


def test_http_server_restarted_behind_our_back_is_transparent(http_server: HttpServer) -> None:
    pool = McpPool()
    try:
        pool.register(http_server.spec())
        assert pool.call_tool_sync("mis-http", "add", {"a": 1, "b": 1}) == {"sum": 2}
        http_server.kill()
        http_server.start()
        # Either the pool noticed the drop, or the new server answers "Session terminated":
        # both mean the call never ran, so it goes to a new session.
        assert pool.call_tool_sync("mis-http", "add", {"a": 2, "b": 3}) == {"sum": 5}
    finally:
        pool.close()


def test_server_that_cannot_start_is_a_connection_error() -> None:
    pool = McpPool(connect_timeout_s=10)
    try:
        pool.register(stdio_spec("broken", command="/nonexistent/mcp-server"))
        with pytest.raises(
            McpConnectionError, match="MCP server 'broken': could not start '/nonexistent/mcp-server'"
        ):
            pool.list_tools_sync("broken")
        pool.register(
            stdio_spec("crashes", args=["-c", "import sys; print('boom', file=sys.stderr); sys.exit(7)"])
        )
        with pytest.raises(McpConnectionError, match="MCP server 'crashes'.*boom"):
            pool.list_tools_sync("crashes")
    finally:
        pool.close()


def test_the_start_up_limit_is_the_servers_own_timeout() -> None:
    """A server slow to start (thousands of tools): its session may take its ``timeout_s`` to open,
    not a fixed 30 s; one that takes longer than its own setting is refused with that setting."""
    pool = McpPool()  # no pool-wide limit: each server's timeout_s
    try:
        slow = [str(MISBEHAVING), "--start-delay", "1.5"]
        pool.register(stdio_spec("patient", args=slow, timeout_s=20))
        pool.register(stdio_spec("impatient", args=slow, timeout_s=0.5))
        assert "add" in [tool.name for tool in pool.list_tools_sync("patient")]
        with pytest.raises(McpConnectionError, match=r"MCP server 'impatient': .*within 0\.5s"):
            pool.list_tools_sync("impatient")
    finally:
        pool.close()


def test_oversized_message_ends_the_session_with_a_clear_error(pool: McpPool) -> None:
    small = McpPool(max_message_bytes=1_000_000)
    try:
        small.register(stdio_spec())
        with pytest.raises(McpConnectionError, match="larger than 1000000 bytes"):
            small.call_tool_sync("mis", "flood", {"n_bytes": 2_000_000})
        assert small.call_tool_sync("mis", "add", {"a": 1, "b": 1}) == {"sum": 2}
    finally:
        small.close()


# ---------------------------------------------------------------------------- malformed replies


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("bad_result", "malformed tools/call reply: content: Input should be a valid list"),
        ("broken_json", "malformed JSON-RPC reply"),
        ("bad_image", "the image block is not valid base64"),
    ],
)
def test_malformed_replies_are_protocol_errors_and_the_session_survives(
    shared_pool: McpPool, kind: str, message: str
) -> None:
    with pytest.raises(McpProtocolError, match=f"MCP server 'mis', tool 'malformed': {message}"):
        shared_pool.call_tool_sync("mis", "malformed", {"kind": kind}, timeout=10)
    assert shared_pool.call_tool_sync("mis", "add", {"a": 1, "b": 1}) == {"sum": 2}


# ---------------------------------------------------------------------------- concurrency


def test_concurrent_calls_from_threads_share_one_session(pool: McpPool) -> None:
    def worker(n: int) -> list[str]:
        return [pool.call_tool_sync("mis", "echo", {"value": f"{n}-{i}"}) for i in range(20)]

    with ThreadPoolExecutor(max_workers=8) as executor:
        results = list(executor.map(worker, range(8)))
    assert results == [[f"{n}-{i}" for i in range(20)] for n in range(8)]
    assert pool.stats_sync("mis")["connects"] == 1


def test_async_api_works_from_asyncio_run_in_several_threads(pool: McpPool) -> None:
    async def scenario(n: int) -> list[dict[str, int]]:
        return await asyncio.gather(*(pool.call_tool("mis", "add", {"a": n, "b": i}) for i in range(20)))

    with ThreadPoolExecutor(max_workers=4) as executor:
        results = list(executor.map(lambda n: asyncio.run(scenario(n)), range(4)))
    assert results == [[{"sum": n + i} for i in range(20)] for n in range(4)]
    assert asyncio.run(pool.list_tools("mis"))
    assert pool.stats_sync("mis")["connects"] == 1


def test_sync_api_on_the_pool_loop_raises_instead_of_deadlocking(pool: McpPool) -> None:
    async def on_pool_loop() -> None:
        pool.call_tool_sync("mis", "add", {"a": 1, "b": 1})

    loop = pool._ensure_loop()
    future = asyncio.run_coroutine_threadsafe(on_pool_loop(), loop)
    with pytest.raises(PoolUsageError, match="would deadlock"):
        future.result(timeout=10)


# ---------------------------------------------------------------------------- LangChain


def test_langchain_tools_run_on_the_pooled_session_from_any_thread_or_loop(pool: McpPool) -> None:
    tools = {tool.name: tool for tool in pool.langchain_tools_sync("mis")}
    add = tools["add"]
    assert add.args_schema["required"] == ["a", "b"]
    pid = pool.stats_sync("mis")["pid"]

    assert "5" in str(add.invoke({"a": 2, "b": 3}))  # sync, from this thread
    assert "9" in str(asyncio.run(add.ainvoke({"a": 4, "b": 5})))  # async, from another loop
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(add.invoke({"a": 6, "b": 7})))
    thread.start()
    thread.join(30)
    assert "13" in str(out[0])

    stats = pool.stats_sync("mis")
    assert stats["connects"] == 1 and stats["pid"] == pid  # no new session per call


# ---------------------------------------------------------------------------- stdio safety


def test_stdio_child_gets_only_named_variables_plus_path_and_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMON_TEST_NAMED", "visible")
    monkeypatch.setenv("LLAMON_TEST_SECRET", "must-not-leak")
    pool = McpPool()
    try:
        pool.register(stdio_spec(env=["LLAMON_TEST_NAMED", "LLAMON_TEST_UNSET"]))
        env = set(pool.call_tool_sync("mis", "whoami", {})["env"])
    finally:
        pool.close()
    assert {"LLAMON_TEST_NAMED", "PATH", "HOME"} <= env
    # LC_CTYPE: the child Python sets it itself (PEP 538 locale coercion), we do not pass it.
    assert env <= {"LLAMON_TEST_NAMED", "PATH", "HOME", "LC_CTYPE"}


def test_child_env_is_built_from_names_only() -> None:
    spec = stdio_spec(env=["TOKEN"])
    environ = {
        "PATH": "/bin",
        "HOME": "/root",
        "TOKEN": "t",
        "AWS_SECRET_ACCESS_KEY": "x",
        "SHELL": "/bin/sh",
    }
    assert child_env(spec, environ) == {"PATH": "/bin", "HOME": "/root", "TOKEN": "t"}


def test_allow_list_refuses_a_stdio_spawn_with_a_clear_reason() -> None:
    seen: list[str] = []

    def allowed(spec) -> bool:  # type: ignore[no-untyped-def]
        seen.append(spec.mcp_id)
        return False

    before = set(children_running())
    pool = McpPool(stdio_allowed=allowed)
    try:
        pool.register(stdio_spec())
        with pytest.raises(
            McpConnectionError, match="MCP server 'mis': refusing to start stdio command .*allow-list"
        ):
            pool.call_tool_sync("mis", "add", {"a": 1, "b": 1})
    finally:
        pool.close()
    assert seen == ["mis"]
    assert set(children_running()) <= before


def test_http_guard_sees_the_url_and_can_refuse_the_connect(http_server: HttpServer) -> None:
    seen: list[str] = []

    def guard(url: str) -> None:
        seen.append(url)
        raise ValueError("loopback addresses are not allowed")

    pool = McpPool(http_guard=guard)
    try:
        pool.register(http_server.spec())
        with pytest.raises(
            McpConnectionError, match="refused to connect to .*loopback addresses are not allowed"
        ):
            pool.list_tools_sync("mis-http")
    finally:
        pool.close()
    assert seen == [http_server.url]


# ---------------------------------------------------------------------------- lifecycle


def test_changed_spec_replaces_the_session_and_unregister_stops_it() -> None:
    pool = McpPool()
    try:
        pool.register(stdio_spec())
        pool.call_tool_sync("mis", "add", {"a": 0, "b": 0})
        first_pid = pool.stats_sync("mis")["pid"]
        pool.register(stdio_spec())  # same spec: nothing happens
        assert pool.stats_sync("mis")["pid"] == first_pid
        pool.register(stdio_spec(timeout_s=15))
        pool.call_tool_sync("mis", "add", {"a": 0, "b": 0})
        assert pool.stats_sync("mis")["pid"] != first_pid
        wait_until(lambda: first_pid not in children_running(), what="the replaced child to exit")
        second_pid = pool.stats_sync("mis")["pid"]
        pool.unregister("mis")
        with pytest.raises(UnknownServerError):
            pool.call_tool_sync("mis", "add", {"a": 0, "b": 0})
        wait_until(lambda: second_pid not in children_running(), what="the unregistered child to exit")
    finally:
        pool.close()


def test_close_leaves_no_child_processes() -> None:
    pool = McpPool()
    for n in range(3):
        pool.register(stdio_spec(f"mis-{n}"))
        pool.call_tool_sync(f"mis-{n}", "add", {"a": n, "b": 0})
    pids = [pool.stats_sync(f"mis-{n}")["pid"] for n in range(3)]
    assert set(pids) <= set(children_running())
    pool.close()
    assert not set(pids) & set(children_running())
    with pytest.raises(PoolUsageError, match="closed"):
        pool.call_tool_sync("mis-0", "add", {"a": 1, "b": 1})


def test_aclose_from_a_foreign_loop_stops_everything() -> None:
    async def scenario() -> int:
        pool = McpPool()
        pool.register(stdio_spec())
        assert await pool.call_tool("mis", "add", {"a": 1, "b": 1}) == {"sum": 2}
        pid = (await pool.stats("mis"))["pid"]
        await pool.aclose()
        return pid

    assert asyncio.run(scenario()) not in children_running()


def test_forked_child_does_not_reuse_the_parent_pool() -> None:
    parent_pool = get_pool()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report and leave without running pytest's teardown
        verdict = b"ok"
        try:
            if get_pool() is parent_pool:
                verdict = b"reused"
            try:
                parent_pool.call_tool_sync("mis", "add", {})
                verdict = b"no-error"
            except PoolUsageError:
                pass
        except BaseException as exc:  # pragma: no cover - reported to the parent
            verdict = repr(exc).encode()
        os.write(write_fd, verdict)
        os._exit(0)
    os.close(write_fd)
    os.waitpid(pid, 0)
    with os.fdopen(read_fd, "rb") as pipe:
        assert pipe.read() == b"ok"
    assert get_pool() is parent_pool


# ---------------------------------------------------------------------------- pre-step backend


def test_pool_tool_backend_serves_bound_servers_only(shared_pool: McpPool) -> None:
    backend = PoolToolBackend(shared_pool, ["mis", "not-registered"])
    assert backend.tools_for("other") is None
    assert backend.tools_for("not-registered") is None
    tools = backend.tools_for("mis")
    assert tools is not None and "add" in {t.name for t in tools}
    assert isinstance(next(t for t in tools if t.name == "add").args_schema, dict)
    assert backend.call_tool("mis", "add", {"a": 1, "b": 2}) == {"sum": 3}
    with pytest.raises(McpToolError):
        backend.call_tool("mis", "no_such_tool", {})
    with pytest.raises(UnknownServerError):
        backend.call_tool("other", "add", {})
    assert asyncio.run(backend.acall_tool("mis", "add", {"a": 2, "b": 2})) == {"sum": 4}


def test_default_pool_is_one_per_process() -> None:
    assert get_pool() is get_pool()
    assert pool_module.get_pool is get_pool


def test_prestep_runs_a_seed_rule_through_the_pool_backend(shared_pool: McpPool) -> None:
    from llamon_agent import prestep
    from llamon_agent.tools import DeterministicContext, deterministic_tool

    @deterministic_tool(mcp_id="mis")
    def add_rule(ctx: DeterministicContext) -> dict[str, object] | None:
        if "add" in {t.name for t in ctx.mcp_tools} and "더하기" in ctx.query:
            return {"tool_name": "add", "params": {"a": 40, "b": 2}}
        return None

    request = DeterministicContext(query="더하기 해줘")
    outcome = prestep.run_prestep([add_rule], request, backend=PoolToolBackend(shared_pool, ["mis"]))
    assert outcome.ok and outcome.results[0]["result"] == {"sum": 42}
    unbound = prestep.run_prestep([add_rule], request, backend=PoolToolBackend(shared_pool, []))
    assert not unbound.ok and "MCP 'mis'" in unbound.error


# ---------------------------------------------------------------------------- output schemas


def test_a_scalar_structured_result_keeps_its_json_type(shared_pool: McpPool) -> None:
    assert shared_pool.call_tool_sync("mis", "count", {"n": 42}) == 42
    assert shared_pool.call_tool_checked_sync("mis", "count", {"n": 0}) == (0, [])


def test_a_result_that_breaks_the_output_schema_is_handed_on_with_a_warning(shared_pool: McpPool) -> None:
    # MCP's own client refuses such a result; the pool hands it on and says why it does not fit.
    value, warnings = shared_pool.call_tool_checked_sync("mis", "off_schema", {}, timeout=10)
    assert value == {"total": "twelve"}
    assert warnings == ["total: 'twelve' is not of type 'integer'"]
    assert shared_pool.call_tool_sync("mis", "off_schema", {}, timeout=10) == {"total": "twelve"}
    backend = PoolToolBackend(shared_pool, ["mis"])
    assert backend.call_tool_checked("mis", "off_schema", {}) == (value, warnings)
    assert shared_pool.call_tool_sync("mis", "add", {"a": 1, "b": 1}) == {"sum": 2}  # the session lives on


def test_the_prestep_records_the_warning_and_hands_the_result_on(shared_pool: McpPool, caplog) -> None:
    from llamon_agent.prestep import run_prestep
    from llamon_agent.tools import AgentRequest, deterministic_tool
    from llamon_agent.trace import ListSink

    @deterministic_tool(mcp_id="mis")
    def totals(ctx):
        return {"tool_name": "off_schema", "params": {}}

    sink = ListSink()
    outcome = run_prestep(
        [totals], AgentRequest(query="합계"), backend=PoolToolBackend(shared_pool, ["mis"]), sink=sink
    )
    assert outcome.ok and outcome.results[0]["result"] == {"total": "twelve"}
    (record,) = outcome.records
    assert record.warnings == ("total: 'twelve' is not of type 'integer'",)
    assert record.to_json()["warnings"] == ["total: 'twelve' is not of type 'integer'"]
    (end,) = [e for e in sink.of_kind("rule") if e.status != "running"]
    assert end.meta["warnings"] == ["total: 'twelve' is not of type 'integer'"]
    assert "does not fit its output schema" in caplog.text

    @deterministic_tool(mcp_id="mis")
    def sums(ctx):
        return {"tool_name": "add", "params": {"a": 1, "b": 2}}

    fits = run_prestep([sums], AgentRequest(query="x"), backend=PoolToolBackend(shared_pool, ["mis"]))
    assert "warnings" not in fits.records[0].to_json()  # runs that fit are stored as before


def test_the_react_loop_records_the_warning_and_hands_the_result_on(shared_pool: McpPool, caplog) -> None:
    """A tool the model calls is checked against its output schema as a pre-step call is: the
    result goes to the model as sent, the tool step carries the warning, a fitting one none."""
    from llamon_agent.models import ModelConfig
    from llamon_agent.react import AgentSpec, run_agent
    from llamon_agent.tools import AgentRequest
    from llamon_agent.trace import ListSink

    script = [
        {"tool_calls": [{"name": "off_schema", "args": {}, "id": "c1"}]},
        {"tool_calls": [{"name": "add", "args": {"a": 1, "b": 2}, "id": "c2"}]},
        {"content": "twelve, and 3"},
    ]
    spec = AgentSpec(
        name="mis",
        system_prompt="p",
        rules=[],
        model=ModelConfig(provider="scripted", script=script),
        react_mcp_ids=["mis"],
    )
    sink = ListSink()
    result = run_agent(
        spec,
        AgentRequest(query="합계"),
        backend=PoolToolBackend(shared_pool, ["mis"]),
        react_tools=shared_pool.langchain_tools_sync("mis"),
        sink=sink,
    )
    assert result.status == "succeeded", result.error
    off, fits = [e for e in sink.of_kind("tool") if e.phase == "end"]
    assert off.status == "ok" and "twelve" in off.output
    assert off.meta["warnings"] == ["total: 'twelve' is not of type 'integer'"]
    assert "warnings" not in fits.meta
    assert "tool off_schema: the result does not fit its output schema" in caplog.text
