"""Outbound HTTP (llamon_agent.net): every client reaches only its server, at the addresses the guard checked.

For each client the product owns (LLM, MCP streamable HTTP, registry, trace exporter): a real
listener on 127.0.0.1 that redirects elsewhere -> refused with a clear error, and the target
never gets a connection; a name whose resolution changes after the check -> the client connects
to the checked address only. Names resolve through the tests' resolvers, never real DNS.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import httpx
import pytest

from llamon_agent.mcp import McpPool, McpServerSpec
from llamon_agent.mcp.errors import McpConnectionError, RegistryError
from llamon_agent.mcp.registry import HttpRegistry
from llamon_agent.models import ModelConfig, make_chat_model, model_error_message
from llamon_agent.net import DestinationRefused, guarded_async_client, guarded_client
from llamon_agent.trace import TraceEvent
from llamon_agent.trace_http import HttpTraceExporter
from llamon_agent.urlguard import UrlPolicy
from tests.conftest import free_port, wait_for_port
from tests.support.openai_fake import completion
from tests.support.outbound import FlippingResolver, Listener, redirecting_to

ROOT = Path(__file__).resolve().parents[2]
PRIVATE_OK = UrlPolicy(allow_private=True, resolver=lambda host, port: ["127.0.0.1"])
METADATA = "169.254.169.254"


def rebinding_policy(*, prod: bool = False) -> tuple[UrlPolicy, FlippingResolver]:
    """First look-up: 127.0.0.1 (where the listener is); every later one: the metadata address."""
    resolver = FlippingResolver(["127.0.0.1"], [METADATA])
    return UrlPolicy(allow_private=not prod, resolver=resolver), resolver


# --------------------------------------------------------------------------- the transport itself


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_to_another_port_is_refused_and_never_connected(status: int) -> None:
    with (
        Listener() as target,
        Listener(redirecting_to(f"{target.url}/latest/meta-data", status)) as server,
        guarded_client(server.url, PRIVATE_OK, follow_redirects=True) as client,
        pytest.raises(DestinationRefused, match=f"may only reach http://127.0.0.1:{server.port}"),
    ):
        client.post(f"{server.url}/v1/chat/completions", json={"q": 1})
    assert len(server.requests) == 1
    assert target.connections == 0


def test_a_redirect_to_the_metadata_address_is_refused_with_a_clear_error() -> None:
    with (
        Listener(redirecting_to(f"http://{METADATA}/latest/meta-data/")) as server,
        guarded_client(server.url, PRIVATE_OK, follow_redirects=True) as client,
        pytest.raises(DestinationRefused) as caught,
    ):
        client.get(f"{server.url}/v1/models")
    assert f"refused to send a request to http://{METADATA}:80" in str(caught.value)
    assert "a redirect to another host or port is not followed" in str(caught.value)


def test_a_redirect_on_the_same_server_is_followed_at_the_checked_address() -> None:
    def reply(method: str, path: str, host: str):
        return (307, {"Location": "/v1/models/"}, {}) if path == "/v1/models" else (200, {}, {"path": path})

    policy, resolver = rebinding_policy()
    with Listener(reply) as server:
        url = f"http://llm.rebind.test:{server.port}"
        # The second hop is checked again; the name now says metadata: refused, not connected.
        with (
            guarded_client(url, policy, follow_redirects=True) as client,
            pytest.raises(DestinationRefused, match="cloud metadata"),
        ):
            client.get(f"{url}/v1/models")
    assert resolver.calls == ["llm.rebind.test", "llm.rebind.test"]
    assert server.requests == [("GET", "/v1/models", f"llm.rebind.test:{server.port}")]


def test_a_rebound_name_reaches_only_the_address_checked_for_each_request() -> None:
    """The name has no DNS record: only the checked address can make the first request arrive."""
    policy, resolver = rebinding_policy()
    with Listener() as server:
        url = f"http://llm.rebind.test:{server.port}/v1/models"
        with guarded_client(url, policy) as client:
            assert client.get(url).json() == {"ok": True}
            with pytest.raises(DestinationRefused, match=f"llm.rebind.test \\(resolves to {METADATA}\\)"):
                client.get(url)
    assert server.requests == [("GET", "/v1/models", f"llm.rebind.test:{server.port}")]
    assert server.connections == 1 and len(resolver.calls) == 2


def test_the_prod_policy_refuses_a_name_that_resolves_to_loopback_before_connecting() -> None:
    prod = UrlPolicy(allow_private=False, resolver=lambda host, port: ["127.0.0.1"])
    with (
        Listener() as server,
        guarded_client(f"http://llm.example.test:{server.port}", prod) as client,
        pytest.raises(DestinationRefused, match="is a loopback address .* LLAMON_ALLOW_PRIVATE_MCP"),
    ):
        client.get(f"http://llm.example.test:{server.port}/v1/models")
    assert server.connections == 0


def test_the_next_checked_address_is_tried_when_the_first_does_not_answer() -> None:
    """``localhost`` is often ::1 then 127.0.0.1; a server on 127.0.0.1 only must still be reached."""
    policy = UrlPolicy(allow_private=True, resolver=lambda host, port: ["::1", "127.0.0.1"])
    with Listener() as server, guarded_client(f"http://dual.test:{server.port}", policy) as client:
        assert client.get(f"http://dual.test:{server.port}/").status_code == 200
    assert server.requests == [("GET", "/", f"dual.test:{server.port}")]


def test_the_async_client_is_guarded_the_same_way() -> None:
    policy, resolver = rebinding_policy()

    async def go(rebound: str, redirecting: str) -> int:
        async with guarded_async_client(rebound, policy) as client:
            status = (await client.get(rebound)).status_code
            with pytest.raises(DestinationRefused, match="cloud metadata"):
                await client.get(rebound)
        async with guarded_async_client(redirecting, PRIVATE_OK, follow_redirects=True) as client:
            with pytest.raises(DestinationRefused, match="may only reach"):
                await client.get(redirecting)
        return status

    with Listener() as target, Listener(redirecting_to(target.url)) as redirecting, Listener() as server:
        assert asyncio.run(go(f"http://llm.rebind.test:{server.port}/", redirecting.url)) == 200
    assert server.requests == [("GET", "/", f"llm.rebind.test:{server.port}")]
    assert redirecting.requests and target.connections == 0


# --------------------------------------------------------------------------- the LLM client


def _model(base_url: str, policy: UrlPolicy):
    config = ModelConfig(provider="openai-compatible", base_url=base_url, api_key_env=None, timeout_s=10)
    return config, make_chat_model(config, url_policy=policy)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_llm_client_does_not_follow_a_redirect_off_its_endpoint(mode: str) -> None:
    """The openai SDK's own client follows redirects: before the fix this reached ``target``."""
    with Listener() as target, Listener(redirecting_to(f"{target.url}/v1/chat/completions", 307)) as server:
        config, model = _model(f"{server.url}/v1", PRIVATE_OK)
        with pytest.raises(Exception) as caught:
            if mode == "sync":
                model.invoke("hi")
            else:
                asyncio.run(model.ainvoke("hi"))
    assert target.connections == 0 and server.requests
    assert model_error_message(caught.value, config) == (
        f"the LLM endpoint {server.url}/v1 answered a redirect (HTTP 307 to {target.url}/v1/chat/completions), "
        "which is not followed: set the base URL to the address that answers"
    )


def test_the_llm_client_connects_to_the_checked_address_of_a_rebound_name() -> None:
    policy, resolver = rebinding_policy()
    with Listener(lambda m, p, h: (200, {}, completion("checked"))) as server:
        config, model = _model(f"http://llm.rebind.test:{server.port}/v1", policy)
        assert model.invoke("hi").content == "checked"
        with pytest.raises(Exception) as caught:
            model.invoke("again")  # the name now resolves to the metadata address
    assert server.requests == [("POST", "/v1/chat/completions", f"llm.rebind.test:{server.port}")]
    assert "cloud metadata address; it is always refused" in model_error_message(caught.value, config)


def test_the_llm_client_under_the_prod_policy_refuses_loopback_without_connecting() -> None:
    prod = UrlPolicy(allow_private=False, resolver=lambda host, port: ["127.0.0.1"])
    with Listener(lambda m, p, h: (200, {}, completion())) as server:
        config, model = _model(f"http://llm.example.test:{server.port}/v1", prod)
        with pytest.raises(Exception) as caught:
            model.invoke("hi")
    assert server.connections == 0
    assert "is a loopback address (this machine)" in model_error_message(caught.value, config)


# --------------------------------------------------------------------------- the registry client


def test_the_registry_client_answers_a_redirect_with_an_error_and_does_not_follow_it() -> None:
    with Listener() as target, Listener(redirecting_to(f"{target.url}/api/registry/orders")) as server:
        registry = HttpRegistry(server.url, "t", url_policy=PRIVATE_OK)
        with pytest.raises(RegistryError, match="answered a redirect .*not followed"):
            asyncio.run(registry.get(["orders"]))
    assert target.connections == 0


def test_the_registry_client_connects_to_the_checked_address_of_a_rebound_name() -> None:
    entry = {"transport": "http", "url": "http://127.0.0.1:9/mcp"}
    policy, resolver = rebinding_policy()
    with Listener(lambda m, p, h: (200, {}, entry)) as server:
        registry = HttpRegistry(f"http://registry.rebind.test:{server.port}", "t", url_policy=policy)
        assert asyncio.run(registry.get(["orders"]))["orders"].url == entry["url"]
        with pytest.raises(RegistryError, match="could not be reached: .*cloud metadata address"):
            asyncio.run(registry.get(["orders"]))
    assert server.requests == [("GET", "/api/registry/orders", f"registry.rebind.test:{server.port}")]


# --------------------------------------------------------------------------- the trace exporter


def _event() -> TraceEvent:
    return TraceEvent(id="e1", kind="tool", name="t", phase="start", start=time.time())


def test_the_trace_exporter_does_not_follow_a_redirect() -> None:
    with Listener() as target, Listener(redirecting_to(f"{target.url}/api/runs/ingest", 307)) as server:
        exporter = HttpTraceExporter(server.url, "t", flush_interval=0.01, url_policy=PRIVATE_OK)
        sink = exporter.sink(source="served", agent_name="demo")
        sink.emit(_event())
        sink.finish("succeeded", answer="ok")
        sink.join(10)
        exporter.close()
    assert sink.failed and target.connections == 0


def test_the_trace_exporter_connects_to_the_checked_address_of_a_rebound_name(caplog) -> None:
    policy, resolver = rebinding_policy()
    with Listener(lambda m, p, h: (201, {}, {"run_id": 5})) as server:
        exporter = HttpTraceExporter(f"http://web.rebind.test:{server.port}", "t", url_policy=policy)
        sink = exporter.sink(source="served", agent_name="demo")
        sink._send([_event().to_json()], None)  # one batch at a time: each is one checked request
        sink._send([_event().to_json()], None)
        exporter.close()
    assert sink.run_id == 5 and sink.failed
    assert server.requests == [("POST", "/api/runs/ingest", f"web.rebind.test:{server.port}")]
    assert resolver.calls == ["web.rebind.test", "web.rebind.test"]  # refused once, not retried
    assert "cloud metadata address" in caplog.text


# --------------------------------------------------------------------------- MCP streamable HTTP


def test_the_mcp_pool_refuses_a_redirect_to_another_server() -> None:
    with Listener() as target, Listener(redirecting_to(f"{target.url}/mcp", 307)) as server:
        pool = McpPool(http_guard=PRIVATE_OK.check)
        try:
            pool.register(
                McpServerSpec(mcp_id="moved", transport="http", url=f"{server.url}/mcp", timeout_s=10)
            )
            with pytest.raises(McpConnectionError):
                pool.call_tool_sync("moved", "echo", {"value": "hi"})
        finally:
            pool.close()
    assert server.requests and target.connections == 0


def test_the_mcp_pool_without_a_guard_still_refuses_the_metadata_address() -> None:
    """The engine's default policy applies when no guard is given: nothing is sent there."""
    pool = McpPool()
    try:
        pool.register(
            McpServerSpec(mcp_id="meta", transport="http", url=f"http://{METADATA}/mcp", timeout_s=10)
        )
        with pytest.raises(McpConnectionError, match="cloud metadata address; it is always refused"):
            pool.call_tool_sync("meta", "echo", {"value": "hi"})
    finally:
        pool.close()


def test_the_mcp_pool_connects_to_the_checked_address_of_a_rebound_name() -> None:
    import subprocess

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "servers" / "misbehaving.py"), "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # localhost is what the server's Host-header protection accepts; the resolver decides the address.
    resolver = FlippingResolver(["127.0.0.1"], [METADATA])
    pool = McpPool(http_guard=UrlPolicy(allow_private=True, resolver=resolver).check)
    try:
        wait_for_port(port, proc=server)
        pool.register(McpServerSpec(mcp_id="pinned", transport="http", url=f"http://localhost:{port}/mcp"))
        assert pool.call_tool_sync("pinned", "echo", {"value": "hi"}) == "hi"
        assert pool.call_tool_sync("pinned", "echo", {"value": "again"}) == "again"  # same checked session
    finally:
        pool.close()
        server.terminate()
        server.wait(timeout=10)
    assert resolver.calls == ["localhost"]


def test_a_refusal_is_an_httpx_connect_error() -> None:
    """Every client already reports ConnectError as "could not reach": a refusal reads the same way."""
    assert issubclass(DestinationRefused, httpx.ConnectError)
