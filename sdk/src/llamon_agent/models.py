"""Chat models for agents: an OpenAI-compatible endpoint, a scripted model and an offline model.

``make_chat_model(ModelConfig(...))`` returns a LangChain ``BaseChatModel``:

* ``openai-compatible``: langchain-openai's ``ChatOpenAI`` against any server that speaks
  ``/v1/chat/completions`` (OpenAI, vLLM, Ollama, llama.cpp). The key is read from the
  environment variable *named* by ``api_key_env`` when the model is made; the config never
  holds it.
* ``scripted``: replays a fixed list of replies (text and tool calls) in order: tests,
  replays of recorded runs and benchmarks. It reports token usage so traces show tokens.
* ``offline``: no network, no tools. It answers from the ``확정 호출 결과`` block the
  pre-step put into its system message, or says politely that it cannot answer without one.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from llamon_agent.prestep import RESULTS_HEADER

if TYPE_CHECKING:
    from langchain_core.language_models import LanguageModelInput
    from langchain_core.runnables import Runnable

    from llamon_agent.settings import Settings
    from llamon_agent.urlguard import UrlPolicy

Provider = Literal["offline", "scripted", "openai-compatible"]

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# What local servers (vLLM, Ollama, llama.cpp) accept when they check no key at all; the
# openai client refuses to start without *some* key.
NO_KEY_PLACEHOLDER = "EMPTY"

OFFLINE_MODEL_NAME = "offline"
SCRIPTED_MODEL_NAME = "scripted"
OFFLINE_ANSWER_HEADER = "확정 호출 결과를 바탕으로 답변합니다:"
OFFLINE_NO_RESULTS = (
    "죄송합니다. 오프라인 모드에서는 확정 호출 결과가 있어야 답변할 수 있는데, "
    "이 요청에는 확정 호출 결과가 없어 답변을 드릴 수 없습니다."
)
OFFLINE_RESULT_CHARS = 300  # per call in the offline answer: a summary, not the whole payload


class ModelConfigError(ValueError):
    """A chat model that cannot be made (bad config, missing key variable); the message says why."""


class ScriptExhaustedError(RuntimeError):
    """The scripted model was called more often than its script has replies."""


class ModelConfig(BaseModel):
    """How to make an agent's chat model. Holds the NAME of the key variable, never the key."""

    # hide_input_in_errors: a key pasted into api_key_env must not come back in an error message.
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    provider: Provider = "offline"
    base_url: str | None = None
    model: str = "gpt-4o-mini"
    api_key_env: str | None = "OPENAI_API_KEY"
    timeout_s: float = Field(default=60.0, gt=0, le=3600)
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, gt=0)
    script: list[dict[str, Any]] | None = None

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip()
        if not re.match(r"^https?://[^\s/]+", value):
            raise ValueError(f"base_url must be an http:// or https:// URL (got {value!r})")
        return value

    @field_validator("api_key_env")
    @classmethod
    def _is_a_variable_name(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        if not ENV_NAME_RE.match(value):
            # The usual mistake is pasting the key itself; it is not echoed back.
            raise ValueError(
                "api_key_env is the NAME of the environment variable holding the key "
                "(like OPENAI_API_KEY), not the key itself"
            )
        return value

    @field_validator("script")
    @classmethod
    def _script_is_well_formed(cls, value: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        if value is not None:
            for n, reply in enumerate(value, start=1):
                _check_reply(n, reply)
        return value

    @classmethod
    def from_settings(cls, settings: Settings) -> ModelConfig:
        """The model config given by ``LLAMON_LLM_*`` settings."""
        return cls(
            provider=settings.llm_provider,
            base_url=settings.llm_base_url,
            model=settings.llm_model,
            api_key_env=settings.llm_api_key_env,
            timeout_s=settings.llm_timeout_s,
        )

    @property
    def display_name(self) -> str:
        """The name traces show for this model."""
        if self.provider == "openai-compatible":
            return self.model
        return self.provider


def make_chat_model(config: ModelConfig, *, url_policy: UrlPolicy | None = None) -> BaseChatModel:
    """A chat model for ``config``; :class:`ModelConfigError` when it cannot be made.

    ``url_policy``: where the openai-compatible client may connect (None: the engine's default,
    :data:`llamon_agent.net.DEFAULT_POLICY`); see :func:`_openai_compatible`.
    """
    if config.provider == "offline":
        return OfflineChatModel()
    if config.provider == "scripted":
        if config.script is None:
            raise ModelConfigError("the scripted model needs a script: a list of replies")
        return ScriptedChatModel(script=config.script)
    return _openai_compatible(config, url_policy)


OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"


def _openai_compatible(config: ModelConfig, url_policy: UrlPolicy | None = None) -> BaseChatModel:
    from langchain_openai import ChatOpenAI

    from llamon_agent.net import guarded_async_client, guarded_client

    key = read_api_key(config.api_key_env)
    kwargs: dict[str, Any] = {}
    if config.temperature is not None:
        kwargs["temperature"] = config.temperature
    if config.max_tokens is not None:
        kwargs["max_tokens"] = config.max_tokens
    # The variables the openai client would read itself: the guarded clients must know the server.
    base_url = (
        config.base_url
        or os.environ.get("OPENAI_API_BASE")
        or os.environ.get("OPENAI_BASE_URL")
        or OPENAI_DEFAULT_BASE_URL
    )
    return ChatOpenAI(
        model=config.model,
        base_url=base_url,
        api_key=key,  # type: ignore[arg-type]
        timeout=config.timeout_s,
        # One retry covers a dropped keep-alive connection; more would only delay the
        # readable error of an endpoint that is really down.
        max_retries=1,
        # vLLM, Ollama and llama.cpp speak chat completions, not OpenAI's Responses API.
        use_responses_api=False,
        # The openai client follows redirects and resolves the name itself: these clients reach
        # only the endpoint's server, at addresses the policy checked (llamon_agent.net).
        http_client=guarded_client(base_url, url_policy),
        http_async_client=guarded_async_client(base_url, url_policy),
        **kwargs,
    )


def read_api_key(env_name: str | None) -> str:
    """The key in the variable ``env_name`` (environment, then the nearest `.env`).

    ``None`` means "no key" and a variable set to the empty string means the same: local
    servers check none, so a placeholder is sent. A variable that is not set at all is an
    error that names it (a forgotten export must not turn into anonymous 401s).
    """
    if env_name is None:
        return NO_KEY_PLACEHOLDER
    value = os.environ.get(env_name)
    if value is None:
        value = _dotenv_value(env_name)
    if value is None:
        raise ModelConfigError(
            f"the LLM API key variable {env_name} is not set: export {env_name}=<key> "
            f"(or set it to the empty string for a local server that needs no key)"
        )
    return value or NO_KEY_PLACEHOLDER


def _dotenv_value(name: str) -> str | None:
    from dotenv import dotenv_values

    from llamon_agent.env import find_dotenv_file

    path = find_dotenv_file()
    if path is None:
        return None
    return dotenv_values(path).get(name)


# --------------------------------------------------------------------------- scripted


def _check_reply(n: int, reply: Any) -> None:
    where = f"script reply {n}"
    if not isinstance(reply, Mapping):
        raise ValueError(f"{where} must be an object with 'content' and/or 'tool_calls'")
    extra = set(reply) - {"content", "tool_calls", "usage"}
    if extra:
        raise ValueError(f"{where} has unknown keys {sorted(extra)} (use content, tool_calls, usage)")
    if not isinstance(reply.get("content", ""), str):
        raise ValueError(f"{where}: 'content' must be a string")
    calls = reply.get("tool_calls", [])
    if not isinstance(calls, list):
        raise ValueError(f"{where}: 'tool_calls' must be a list")
    for call in calls:
        if not isinstance(call, Mapping) or not isinstance(call.get("name"), str) or not call["name"]:
            raise ValueError(f"{where}: each tool call needs a 'name'")
        if not isinstance(call.get("args", {}), Mapping):
            raise ValueError(f"{where}: tool call {call['name']!r} has 'args' that are not an object")
    usage = reply.get("usage")
    if usage is not None and not (
        isinstance(usage, Mapping)
        and all(isinstance(usage.get(k, 0), int) for k in ("input_tokens", "output_tokens"))
    ):
        raise ValueError(f"{where}: 'usage' must be {{'input_tokens': int, 'output_tokens': int}}")


def _estimate_tokens(text: str) -> int:
    # A rough, deterministic stand-in (about 4 characters a token) so scripted runs show
    # plausible token counts in traces and benchmarks.
    return math.ceil(len(text) / 4) if text else 0


def _messages_text(messages: Sequence[BaseMessage]) -> str:
    return "\n".join(m.text if isinstance(m.content, list) else str(m.content) for m in messages)


class ScriptedChatModel(BaseChatModel):
    """Replays ``script`` replies in order; records what each call saw (messages and tools).

    ``bind_tools`` binds the tools as a call argument instead of returning ``self``, so each
    recorded call knows which tools it was offered (``calls[i]["tools"]``).
    """

    script: list[dict[str, Any]]
    model_name: str = SCRIPTED_MODEL_NAME
    # BaseChatModel would otherwise try to stream, and this model has nothing to stream.
    disable_streaming: bool | Literal["tool_calling"] = True

    _position: int = PrivateAttr(default=0)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _calls: list[dict[str, Any]] = PrivateAttr(default_factory=list)

    @field_validator("script")
    @classmethod
    def _script_is_well_formed(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for n, reply in enumerate(value, start=1):
            _check_reply(n, reply)
        return value

    @property
    def _llm_type(self) -> str:
        return "llamon-scripted"

    @property
    def calls(self) -> list[dict[str, Any]]:
        """One entry per call made: ``{"messages": [(role, text)], "tools": [names]}``."""
        with self._lock:
            return list(self._calls)

    @property
    def remaining(self) -> int:
        """Replies not used yet."""
        with self._lock:
            return len(self.script) - self._position

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | Any],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Offer ``tools`` to the next calls (recorded, never executed by the model)."""
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        tools = kwargs.get("tools") or []
        with self._lock:
            index = self._position
            if index >= len(self.script):
                raise ScriptExhaustedError(
                    f"the scripted model has {len(self.script)} replies and all were used "
                    f"(this is call {index + 1})"
                )
            self._position += 1
            self._calls.append(
                {
                    "messages": [(m.type, m.text) for m in messages],
                    "tools": [t.get("function", {}).get("name", "") for t in tools],
                }
            )
        reply = self.script[index]
        content = reply.get("content", "")
        tool_calls = [
            {
                "name": call["name"],
                "args": dict(call.get("args", {})),
                "id": call.get("id") or f"call_{index + 1}_{j + 1}",
                "type": "tool_call",
            }
            for j, call in enumerate(reply.get("tool_calls", []))
        ]
        usage = reply.get("usage")
        if usage is not None:
            input_tokens, output_tokens = usage.get("input_tokens", 0), usage.get("output_tokens", 0)
        else:
            input_tokens = _estimate_tokens(_messages_text(messages))
            output_tokens = _estimate_tokens(content + json.dumps([c["args"] for c in tool_calls]))
        message = AIMessage(
            content=content,
            tool_calls=tool_calls,
            usage_metadata={
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "total_tokens": input_tokens + output_tokens,
            },
            response_metadata={"model_name": self.model_name},
        )
        return ChatResult(generations=[ChatGeneration(message=message)])


# --------------------------------------------------------------------------- offline

_ITEM_RE = re.compile(r"^\d+\. (?P<rule>\S+) \((?P<mcp_id>.+?) / (?P<tool>.+)\)$")
_FIELD_RE = re.compile(r"^   (?P<field>params|result): (?P<value>.*)$")
_CONTINUATION = "     "  # render_results_block indents continuation lines of a value this way


def parse_results_block(system_text: str) -> list[dict[str, str]]:
    """The calls listed in the ``확정 호출 결과`` block of a system message (``[]`` when absent).

    Each item is ``{"rule", "mcp_id", "tool_name", "params", "result"}`` as rendered text.
    """
    lines = system_text.splitlines()
    # inject_results appends the block last; the user's own prompt may quote the header.
    starts = [i for i, line in enumerate(lines) if line.strip() == RESULTS_HEADER]
    if not starts:
        return []
    items: list[dict[str, str]] = []
    current_field: str | None = None
    for line in lines[starts[-1] + 1 :]:
        item = _ITEM_RE.match(line)
        if item is not None:
            items.append(
                {
                    "rule": item["rule"],
                    "mcp_id": item["mcp_id"],
                    "tool_name": item["tool"],
                    "params": "",
                    "result": "",
                }
            )
            current_field = None
            continue
        if not items:
            continue
        field = _FIELD_RE.match(line)
        if field is not None:
            current_field = field["field"]
            items[-1][current_field] = field["value"]
        elif current_field is not None and line.startswith(_CONTINUATION):
            items[-1][current_field] += "\n" + line[len(_CONTINUATION) :]
    return items


def offline_answer(system_text: str) -> str:
    """The offline model's answer for a system message: a summary of each pre-step call."""
    items = parse_results_block(system_text)
    if not items:
        return OFFLINE_NO_RESULTS
    lines = [OFFLINE_ANSWER_HEADER]
    for n, item in enumerate(items, start=1):
        result = " ".join(item["result"].split())  # one line per call
        if len(result) > OFFLINE_RESULT_CHARS:
            result = result[: OFFLINE_RESULT_CHARS - 1] + "…"
        lines.append(f"{n}. {item['tool_name']} ({item['mcp_id']}): {result}")
    return "\n".join(lines)


class OfflineChatModel(BaseChatModel):
    """Needs no network and never calls tools: answers from the pre-step results it was given."""

    model_name: str = OFFLINE_MODEL_NAME
    disable_streaming: bool | Literal["tool_calling"] = True

    @property
    def _llm_type(self) -> str:
        return "llamon-offline"

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | Any],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Tools are accepted and ignored: the offline model answers, it does not act."""
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        system = "\n".join(m.text for m in messages if isinstance(m, SystemMessage))
        message = AIMessage(content=offline_answer(system), response_metadata={"model_name": self.model_name})
        return ChatResult(generations=[ChatGeneration(message=message)])


# --------------------------------------------------------------------------- errors

ERROR_DETAIL_CHARS = 300


def model_error_message(exc: BaseException, config: ModelConfig | None = None) -> str:
    """A one-line reason for a failed model call (endpoint down, HTTP error, garbage), no traceback."""
    where = f" {config.base_url}" if config is not None and config.base_url else ""
    if isinstance(exc, ScriptExhaustedError | ModelConfigError):
        return str(exc)
    try:
        import openai
    except ImportError:  # pragma: no cover - langchain-openai depends on it
        openai = None  # type: ignore[assignment]
    if openai is not None:
        if isinstance(exc, openai.APITimeoutError):
            timeout = f" within {config.timeout_s:g}s" if config is not None else ""
            return f"the LLM endpoint{where} did not answer{timeout}"
        if isinstance(exc, openai.APIConnectionError):
            return f"could not reach the LLM endpoint{where}: {_short(_root_cause(exc))}"
        if isinstance(exc, openai.AuthenticationError):
            key = f" (read from {config.api_key_env})" if config is not None and config.api_key_env else ""
            return f"the LLM endpoint{where} refused the API key{key}: HTTP {exc.status_code}"
        if isinstance(exc, openai.APIStatusError) and 300 <= exc.status_code < 400:
            location = exc.response.headers.get("location", "?")
            return (
                f"the LLM endpoint{where} answered a redirect (HTTP {exc.status_code} to {_short(location)}), "
                "which is not followed: set the base URL to the address that answers"
            )
        if isinstance(exc, openai.APIStatusError):
            return f"the LLM endpoint{where} answered HTTP {exc.status_code}: {_short(exc.message)}"
        if isinstance(exc, openai.APIResponseValidationError):
            return f"the LLM endpoint{where} answered something that is not a chat completion: {_short(exc)}"
    if config is not None and config.provider == "openai-compatible":
        # A 200 whose body is HTML, plain text or JSON of another shape ends up here as
        # whatever the client tripped over while reading it.
        return (
            f"the LLM endpoint{where} answered something that is not a chat completion "
            f"({type(exc).__name__}: {_short(exc)})"
        )
    return f"{type(exc).__name__}: {_short(exc)}"


RATE_LIMITED = "rate_limit"


def model_error_kind(exc: BaseException) -> str:
    """``"rate_limit"`` when the model endpoint refused the call for its rate limit (HTTP 429), else
    ``""``: a refusal any version would get on the same traffic, not a fault of the agent's own."""
    status = getattr(exc, "status_code", None)
    return RATE_LIMITED if status == 429 else ""


def _root_cause(exc: BaseException) -> BaseException:
    # openai says only "Connection error."; the httpx/OSError underneath says "Connection refused".
    seen: set[int] = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        inner = exc.__cause__ or exc.__context__
        if inner is None:
            break
        exc = inner
    return exc


def _short(value: Any) -> str:
    text = " ".join(str(value).split()) or type(value).__name__
    return text if len(text) <= ERROR_DETAIL_CHARS else text[: ERROR_DETAIL_CHARS - 1] + "…"
