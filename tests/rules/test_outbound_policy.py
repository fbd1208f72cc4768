"""The web app's outbound clients obey its URL policy (LLAMON_ALLOW_PRIVATE_MCP, LLAMON_URL_RESOLVER).

The policy is set per test (``settings``), so the prod one (private addresses refused) is tested
even though settings_test allows them. Names resolve through FAKE_DNS only; traffic stays on
127.0.0.1 and every listener counts the connections it accepts.
"""

from __future__ import annotations

import pytest

from agents.models import Agent, ModelConnection
from agents.runtime import RulesRef, agent_spec
from llamon_agent.mcp import McpConnectionError, McpServerSpec
from llamon_agent.models import make_chat_model, model_error_message
from servers.pool import web_pool, web_pool_close
from servers.urlguard import configured_policy
from tests.support.fake_dns import FAKE_RESOLVER, fake_resolver
from tests.support.openai_fake import completion
from tests.support.outbound import Listener, redirecting_to

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fake_dns(settings) -> None:
    settings.LLAMON_URL_RESOLVER = FAKE_RESOLVER


def _llm_agent(base_url: str) -> Agent:
    connection = ModelConnection.objects.create(name="llm", base_url=base_url, model_names=["m"])
    return Agent.objects.create(
        name="llm",
        system_prompt="p",
        model_provider=Agent.Provider.OPENAI,
        model_connection=connection,
        model_name="m",
    )


def test_the_configured_policy_is_the_one_in_settings(settings) -> None:
    settings.LLAMON_ALLOW_PRIVATE_MCP = False
    assert configured_policy().allow_private is False and configured_policy().resolver is fake_resolver
    settings.LLAMON_ALLOW_PRIVATE_MCP = True
    assert configured_policy().allow_private is True


def test_an_agents_llm_client_under_the_prod_policy_never_connects_to_loopback(settings) -> None:
    """The check at run start is not the only one: the client itself refuses (and so after a rebinding)."""
    settings.LLAMON_ALLOW_PRIVATE_MCP = False
    with Listener(lambda m, p, h: (200, {}, completion())) as server:
        spec = agent_spec(_llm_agent(f"http://loop.example.com:{server.port}/v1"), RulesRef([], "", "", ""))
        with pytest.raises(Exception) as caught:
            make_chat_model(spec.model, url_policy=spec.url_policy).invoke("hi")
    assert server.connections == 0
    message = model_error_message(caught.value, spec.model)
    assert "loop.example.com (resolves to 127.0.0.1) is a loopback address (this machine)" in message


def test_an_agents_llm_client_connects_where_the_configured_resolver_says(settings) -> None:
    """loop.example.com exists only in FAKE_DNS: the request arrives only if the checked address is used."""
    settings.LLAMON_ALLOW_PRIVATE_MCP = True
    with Listener(lambda m, p, h: (200, {}, completion("via the checked address"))) as server:
        spec = agent_spec(_llm_agent(f"http://loop.example.com:{server.port}/v1"), RulesRef([], "", "", ""))
        answer = make_chat_model(spec.model, url_policy=spec.url_policy).invoke("hi")
    assert answer.content == "via the checked address"
    assert server.requests == [("POST", "/v1/chat/completions", f"loop.example.com:{server.port}")]


def test_an_agents_llm_client_does_not_follow_a_redirect(settings) -> None:
    settings.LLAMON_ALLOW_PRIVATE_MCP = True
    with Listener() as target, Listener(redirecting_to(f"{target.url}/v1/chat/completions", 307)) as server:
        spec = agent_spec(_llm_agent(f"{server.url}/v1"), RulesRef([], "", "", ""))
        with pytest.raises(Exception) as caught:
            make_chat_model(spec.model, url_policy=spec.url_policy).invoke("hi")
    assert target.connections == 0
    assert "answered a redirect (HTTP 307" in model_error_message(caught.value, spec.model)


def test_the_web_pool_does_not_follow_an_mcp_redirect_to_another_server(settings) -> None:
    settings.LLAMON_ALLOW_PRIVATE_MCP = True
    web_pool_close()
    with Listener() as target, Listener(redirecting_to(f"{target.url}/mcp", 307)) as server:
        try:
            pool = web_pool()
            pool.register(
                McpServerSpec(mcp_id="moved", transport="http", url=f"{server.url}/mcp", timeout_s=10)
            )
            with pytest.raises(McpConnectionError):
                pool.call_tool_sync("moved", "echo", {"value": "hi"})
        finally:
            web_pool_close()
    assert server.requests and target.connections == 0
