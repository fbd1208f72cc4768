"""Chat models: the scripted and offline models, and openai-compatible against a local fake server.

All traffic goes to 127.0.0.1: ``FakeOpenAI`` is a stdlib HTTP server that answers
``/v1/chat/completions`` with canned completions (or garbage, on request).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.tools import tool
from pydantic import ValidationError

from llamon_agent.models import (
    NO_KEY_PLACEHOLDER,
    OFFLINE_ANSWER_HEADER,
    OFFLINE_NO_RESULTS,
    ModelConfig,
    ModelConfigError,
    OfflineChatModel,
    ScriptedChatModel,
    ScriptExhaustedError,
    make_chat_model,
    model_error_message,
    offline_answer,
    parse_results_block,
    read_api_key,
)
from llamon_agent.prestep import inject_results
from llamon_agent.settings import Settings
from tests.support.openai_fake import FakeOpenAI, closed_port_url, completion, openai_config

# --------------------------------------------------------------------------- the fake endpoint


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def llm_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("LLAMON_TEST_LLM_KEY", "sk-test-123")
    return "sk-test-123"


# --------------------------------------------------------------------------- config


def test_model_config_is_frozen_and_defaults_to_offline() -> None:
    config = ModelConfig()
    assert config.provider == "offline"
    with pytest.raises(ValidationError):
        config.model = "other"  # type: ignore[misc]


def test_model_config_from_settings_copies_the_llm_settings() -> None:
    settings = Settings(
        llm_provider="openai-compatible",
        llm_base_url="http://127.0.0.1:9999/v1",
        llm_model="qwen2.5",
        llm_api_key_env="MY_KEY",
        llm_timeout_s=12,
    )
    config = ModelConfig.from_settings(settings)
    assert config.provider == "openai-compatible"
    assert config.base_url == "http://127.0.0.1:9999/v1"
    assert config.model == "qwen2.5"
    assert config.api_key_env == "MY_KEY"
    assert config.timeout_s == 12


def test_api_key_env_must_be_a_variable_name_and_the_value_is_not_echoed() -> None:
    with pytest.raises(ValidationError) as info:
        ModelConfig(api_key_env="sk-live-abcdef123")
    assert "NAME of the environment variable" in str(info.value)
    assert "sk-live-abcdef123" not in str(info.value)


def test_base_url_must_be_http() -> None:
    with pytest.raises(ValidationError, match="http:// or https://"):
        ModelConfig(base_url="ftp://example.org")


def test_scripted_without_script_is_a_readable_error() -> None:
    with pytest.raises(ModelConfigError, match="needs a script"):
        make_chat_model(ModelConfig(provider="scripted"))


def test_malformed_script_is_rejected_when_configured() -> None:
    with pytest.raises(ValidationError, match="script reply 2"):
        ModelConfig(provider="scripted", script=[{"content": "ok"}, {"tool_calls": [{"args": {}}]}])
    with pytest.raises(ValidationError, match="unknown keys"):
        ModelConfig(provider="scripted", script=[{"text": "typo"}])


# --------------------------------------------------------------------------- scripted


@tool
def lookup(order_id: str) -> str:
    """Look up an order."""
    return order_id


def test_scripted_model_replays_replies_with_tool_calls_and_usage() -> None:
    model = make_chat_model(
        ModelConfig(
            provider="scripted",
            script=[
                {"content": "", "tool_calls": [{"name": "lookup", "args": {"order_id": "A-1"}}]},
                {"content": "done", "usage": {"input_tokens": 100, "output_tokens": 5}},
            ],
        )
    )
    assert isinstance(model, ScriptedChatModel)
    first = model.bind_tools([lookup]).invoke([HumanMessage("hi")])
    assert first.tool_calls == [
        {"name": "lookup", "args": {"order_id": "A-1"}, "id": "call_1_1", "type": "tool_call"}
    ]
    assert first.usage_metadata is not None and first.usage_metadata["total_tokens"] > 0
    second = model.invoke([HumanMessage("again")])
    assert second.content == "done"
    assert second.usage_metadata == {"input_tokens": 100, "output_tokens": 5, "total_tokens": 105}
    assert [c["tools"] for c in model.calls] == [["lookup"], []]
    assert model.remaining == 0


def test_scripted_model_that_runs_out_says_so() -> None:
    model = ScriptedChatModel(script=[{"content": "only"}])
    model.invoke("one")
    with pytest.raises(ScriptExhaustedError, match="has 1 replies and all were used"):
        model.invoke("two")


# --------------------------------------------------------------------------- offline

RESULTS = [
    {
        "rule": "route_order_lookup",
        "mcp_id": "order-service",
        "tool_name": "get_order",
        "params": {"query": "주문 조회"},
        "result": {"found": True, "order": {"order_id": "A-1001", "status": "shipped"}},
    },
    {
        "rule": "route_by_chatbot_id",
        "mcp_id": "customer-crm",
        "tool_name": "get_customer_profile",
        "params": {"customer_id": "C-1001"},
        "result": "line one\nline two",
    },
]


def test_results_block_round_trips_through_the_parser() -> None:
    system = inject_results('규칙: "확정 호출 결과"를 먼저 보세요.', RESULTS)
    items = parse_results_block(system)
    assert [(i["rule"], i["mcp_id"], i["tool_name"]) for i in items] == [
        ("route_order_lookup", "order-service", "get_order"),
        ("route_by_chatbot_id", "customer-crm", "get_customer_profile"),
    ]
    assert items[1]["result"] == "line one\nline two"
    assert parse_results_block("no block here") == []


def test_offline_model_answers_from_the_results_block() -> None:
    system = inject_results("You are a support agent.", RESULTS)
    reply = OfflineChatModel().invoke([SystemMessage(system), HumanMessage("주문 조회")])
    lines = reply.content.splitlines()
    assert lines[0] == OFFLINE_ANSWER_HEADER
    assert lines[1].startswith("1. get_order (order-service): ")
    assert "A-1001" in lines[1]
    assert lines[2] == "2. get_customer_profile (customer-crm): line one line two"
    assert not reply.tool_calls


def test_offline_model_without_results_gives_the_fixed_answer_and_ignores_tools() -> None:
    model = make_chat_model(ModelConfig(provider="offline"))
    bound = model.bind_tools([lookup])
    reply = bound.invoke([SystemMessage("plain prompt"), HumanMessage("hello")])
    assert reply.content == OFFLINE_NO_RESULTS
    assert reply.tool_calls == []
    assert offline_answer("") == OFFLINE_NO_RESULTS


def test_offline_answer_is_deterministic_and_truncates_long_results() -> None:
    long_results = [{**RESULTS[0], "result": "x" * 5000}]
    system = inject_results("", long_results)
    assert offline_answer(system) == offline_answer(system)
    assert len(offline_answer(system).splitlines()[1]) < 400


# --------------------------------------------------------------------------- openai-compatible


def test_missing_key_variable_is_named_in_the_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.delenv("LLAMON_TEST_LLM_KEY", raising=False)
    monkeypatch.chdir(tmp_path)  # no .env to fall back on
    (tmp_path / "pyproject.toml").write_text("")
    with pytest.raises(ModelConfigError, match="LLAMON_TEST_LLM_KEY is not set"):
        make_chat_model(openai_config("http://127.0.0.1:1/v1"))


def test_empty_key_variable_means_a_local_server_without_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMON_TEST_LLM_KEY", "")
    assert read_api_key("LLAMON_TEST_LLM_KEY") == NO_KEY_PLACEHOLDER
    assert read_api_key(None) == NO_KEY_PLACEHOLDER


def test_key_is_read_from_a_dotenv_file_when_not_exported(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.delenv("LLAMON_TEST_LLM_KEY", raising=False)
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / ".env").write_text("LLAMON_TEST_LLM_KEY=from-dotenv\n")
    monkeypatch.chdir(tmp_path)
    assert read_api_key("LLAMON_TEST_LLM_KEY") == "from-dotenv"


def test_openai_compatible_talks_to_the_local_endpoint(fake_openai: FakeOpenAI, llm_key: str) -> None:
    fake_openai.replies = [completion("반갑습니다")]
    model = make_chat_model(openai_config(fake_openai.base_url, temperature=0.2, max_tokens=64))
    reply = model.invoke([SystemMessage("sys"), HumanMessage("hi")])
    assert reply.content == "반갑습니다"
    assert reply.usage_metadata is not None
    assert reply.usage_metadata["input_tokens"] == 11 and reply.usage_metadata["output_tokens"] == 7
    (request,) = fake_openai.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["body"]["model"] == "fake-model"
    assert request["body"]["temperature"] == 0.2
    assert [m["role"] for m in request["body"]["messages"]] == ["system", "user"]
    assert fake_openai.headers[0]["authorization"] == f"Bearer {llm_key}"
    # The key never lives in the config.
    assert llm_key not in openai_config(fake_openai.base_url).model_dump_json()


def test_openai_compatible_returns_tool_calls(fake_openai: FakeOpenAI, llm_key: str) -> None:
    fake_openai.replies = [completion(None, [{"id": "c1", "name": "lookup", "args": {"order_id": "A-1"}}])]
    model = make_chat_model(openai_config(fake_openai.base_url))
    reply = model.bind_tools([lookup]).invoke("look it up")
    assert isinstance(reply, AIMessage)
    assert reply.tool_calls[0]["name"] == "lookup" and reply.tool_calls[0]["args"] == {"order_id": "A-1"}
    assert fake_openai.requests[0]["body"]["tools"][0]["function"]["name"] == "lookup"


def test_endpoint_down_gives_a_readable_error(llm_key: str) -> None:
    config = openai_config(closed_port_url(), timeout_s=3)
    with pytest.raises(Exception) as info:
        make_chat_model(config).invoke("hi")
    message = model_error_message(info.value, config)
    assert message.startswith(f"could not reach the LLM endpoint {config.base_url}")
    assert "Traceback" not in message


def test_garbage_answer_gives_a_readable_error(fake_openai: FakeOpenAI, llm_key: str) -> None:
    fake_openai.replies = ["<html>502 bad gateway</html>"]
    config = openai_config(fake_openai.base_url)
    with pytest.raises(Exception) as info:
        make_chat_model(config).invoke("hi")
    message = model_error_message(info.value, config)
    assert "not a chat completion" in message
    assert fake_openai.base_url in message
