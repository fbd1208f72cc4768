"""The env-name allow-lists (llamon_agent.envnames) and the stdio stderr redaction, without Django."""

from __future__ import annotations

import pytest

from llamon_agent.envnames import EnvNamePolicy, parse_patterns
from llamon_agent.mcp.transports import STDERR_MARKER, _Link, redact_stderr

DEFAULT_KEYS = EnvNamePolicy(
    "LLAMON_LLM_KEY_ENVS", parse_patterns(["OPENAI_API_KEY", "LLAMON_LLM_KEY_*"], setting="X")
)


@pytest.mark.parametrize(
    "name",
    [
        "SECRET_KEY",
        "DATABASE_URL",
        "REDIS_URL",
        "LLAMON_ADMIN_PASSWORD",
        "LLAMON_REGISTRY_TOKEN",
        "LLAMON_LLM_KEY_TOKEN",
        "LLAMON_LLM_KEY_PASSWORD",
        "MY_TOKEN",
        "secret_key",
        "openai_api_key",
        "DJANGO_SETTINGS_MODULE",
        "CELERY_BROKER_URL",
        "LLAMON_ENV",
        "PATH",
        " OPENAI_API_KEY",
        "OPENAI_API_KEY\n",
        "A" * 101,
        "LLAMON_LLM_KEY_" + "A" * 90,
    ],
)
def test_the_default_key_policy_refuses(name: str) -> None:
    assert not DEFAULT_KEYS.allows(name)
    assert DEFAULT_KEYS.refusal(name)


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "LLAMON_LLM_KEY_VLLM", "LLAMON_LLM_KEY_ollama_2"])
def test_the_default_key_policy_admits(name: str) -> None:
    assert DEFAULT_KEYS.allows(name) and DEFAULT_KEYS.refusal(name) is None


def test_a_refusal_names_the_setting_and_the_allowed_names_and_never_a_pasted_value() -> None:
    reason = DEFAULT_KEYS.refusal("SOME_KEY") or ""
    assert "LLAMON_LLM_KEY_ENVS" in reason and "OPENAI_API_KEY, LLAMON_LLM_KEY_*" in reason
    assert "sk-live-abc" not in (DEFAULT_KEYS.refusal("sk-live-abc") or "sk-live-abc")


def test_an_explicit_entry_admits_a_token_name_but_a_prefix_does_not() -> None:
    policy = EnvNamePolicy("S", parse_patterns(["ORDERS_TOKEN", "ORDERS_*"], setting="S"))
    assert policy.allows("ORDERS_TOKEN") and policy.allows("ORDERS_KEY")
    assert not policy.allows("ORDERS_TOKEN_2") and not policy.allows("ORDERS_SECRET")


@pytest.mark.parametrize(
    "entry", ["SECRET_KEY", "LLAMON_ADMIN_PASSWORD", "DJANGO_*", "LLAMON_*", "bad name", "A*", "*"]
)
def test_the_operator_cannot_allow_the_apps_own_settings_or_nonsense(entry: str) -> None:
    with pytest.raises(ValueError, match="^S: "):
        parse_patterns([entry], setting="S")


def test_stderr_loses_the_values_the_child_was_given_and_token_like_strings() -> None:
    line = (
        "key=abc123 using child-secret-77 Bearer eyJhbGciOi.x sk-live-0123456789abcdef "
        "ghp_0123456789abcdefABCDEF llamon_abcdefgh12345678 AKIAABCDEFGHIJKLMNOP "
        "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTEyMzQ1"
    )
    redacted = redact_stderr(line, ["child-secret-77"])
    for leaked in [
        "abc123",
        "child-secret-77",
        "eyJhbGciOi",
        "sk-live",
        "ghp_",
        "llamon_abc",
        "AKIA",
        "c2VjcmV0",
    ]:
        assert leaked not in redacted, leaked
    assert redact_stderr("Traceback: /usr/lib/python3/site-packages/mcp/server.py line 12") == (
        "Traceback: /usr/lib/python3/site-packages/mcp/server.py line 12"
    )


def test_the_stderr_tail_comes_last_after_the_marker() -> None:
    link = _Link()
    link.finish("the session died")
    link.returncode = 3
    link.stderr_tail.append("boom")
    assert link.describe() == f"the session died (exit code 3){STDERR_MARKER}boom"
    assert link.describe(stderr=False) == "the session died (exit code 3)"
