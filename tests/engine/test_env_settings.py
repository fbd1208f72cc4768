"""resolve_env_override (environment > nearest .env up to the project root > fallback) and Settings."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import SecretStr

from llamon_agent.env import find_dotenv_file, resolve_env_override
from llamon_agent.settings import Settings, SettingsError


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # The developer's own LLAMON_* variables or a .env in the cwd must not leak into these tests.
    for name in list(os.environ):
        if name.startswith("LLAMON_") or name in {"MCP_ID", "OTHER_ID", "MY_LLM_KEY"}:
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def _project(tmp_path: Path, marker: str = "pyproject.toml") -> tuple[Path, Path]:
    """A project root (with ``marker``) and a source file two directories below it."""
    root = tmp_path / "outer" / "project"
    source = root / "app" / "flows" / "graph.py"
    source.parent.mkdir(parents=True)
    source.write_text("# a Flow graph\n")
    (root / marker).mkdir() if marker == ".git" else (root / marker).write_text("")
    return root, source


def test_environment_beats_dotenv_beats_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, source = _project(tmp_path)
    assert resolve_env_override("MCP_ID", "fallback-id", source_file=source) == "fallback-id"
    (root / ".env").write_text("MCP_ID=from-dotenv\n")
    assert resolve_env_override("MCP_ID", "fallback-id", source_file=source) == "from-dotenv"
    monkeypatch.setenv("MCP_ID", "from-environment")
    assert resolve_env_override("MCP_ID", "fallback-id", source_file=source) == "from-environment"


def test_nearest_dotenv_wins_and_only_it_is_read(tmp_path: Path) -> None:
    root, source = _project(tmp_path)
    (root / ".env").write_text("MCP_ID=from-root\nOTHER_ID=only-in-root\n")
    (root / "app" / ".env").write_text("MCP_ID=from-app\n")
    assert resolve_env_override("MCP_ID", "fb", source_file=source) == "from-app"
    # Only the nearest file is read, as python-dotenv's find_dotenv does.
    assert resolve_env_override("OTHER_ID", "fb", source_file=source) == "fb"
    assert find_dotenv_file(source) == root / "app" / ".env"


@pytest.mark.parametrize("marker", ["pyproject.toml", ".git"])
def test_walk_stops_at_the_project_root(tmp_path: Path, marker: str) -> None:
    root, source = _project(tmp_path, marker)
    (root.parent / ".env").write_text("MCP_ID=from-outside-the-project\n")
    assert resolve_env_override("MCP_ID", "fb", source_file=source) == "fb"
    assert find_dotenv_file(source) is None


def test_walk_continues_above_when_there_is_no_project_marker(tmp_path: Path) -> None:
    source = tmp_path / "a" / "b" / "c.py"
    source.parent.mkdir(parents=True)
    source.write_text("")
    (tmp_path / ".env").write_text("MCP_ID=two-levels-up\n")
    assert resolve_env_override("MCP_ID", "fb", source_file=source) == "two-levels-up"


def test_dotenv_syntax_export_quotes_and_comments(tmp_path: Path) -> None:
    root, source = _project(tmp_path)
    (root / ".env").write_text(
        "# a comment line\n"
        "export MCP_ID='order-service'  # trailing comment\n"
        'OTHER_ID="with spaces # not a comment"\n'
        "EMPTY=\n",
        encoding="utf-8",
    )
    assert resolve_env_override("MCP_ID", "fb", source_file=source) == "order-service"
    assert resolve_env_override("OTHER_ID", "fb", source_file=source) == "with spaces # not a comment"
    # An empty value counts as unset: an empty mcp_id is never what anybody meant.
    assert resolve_env_override("EMPTY", "fb", source_file=source) == "fb"


def test_without_source_file_the_walk_starts_at_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, source = _project(tmp_path)
    (root / ".env").write_text("MCP_ID=from-root\n")
    monkeypatch.chdir(source.parent)
    assert resolve_env_override("MCP_ID", "fb") == "from-root"


def test_resolve_env_override_is_exported_from_the_package() -> None:
    import llamon_agent

    assert llamon_agent.resolve_env_override is resolve_env_override


def test_settings_defaults() -> None:
    settings = Settings()
    assert settings.llm_provider == "offline"
    assert settings.llm_model == "gpt-4o-mini"
    assert settings.llm_api_key_env == "OPENAI_API_KEY"
    assert settings.llm_timeout_s == 60
    assert settings.registry_url is settings.registry_file is settings.registry_token is None
    assert settings.trace_url is settings.trace_token is None


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMON_REGISTRY_URL", "http://127.0.0.1:8000/api/registry")
    monkeypatch.setenv("LLAMON_REGISTRY_TOKEN", "s3cret-token")
    monkeypatch.setenv("LLAMON_LLM_PROVIDER", "openai-compatible")
    monkeypatch.setenv("LLAMON_LLM_BASE_URL", "http://127.0.0.1:11434/v1")
    monkeypatch.setenv("LLAMON_LLM_TIMEOUT_S", "12.5")
    settings = Settings()
    assert settings.registry_url == "http://127.0.0.1:8000/api/registry"
    assert isinstance(settings.registry_token, SecretStr)
    assert settings.registry_token.get_secret_value() == "s3cret-token"
    assert "s3cret-token" not in repr(settings)
    assert settings.llm_provider == "openai-compatible"
    assert settings.llm_timeout_s == 12.5


def test_settings_from_dotenv_in_the_cwd_ignores_other_variables(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(
        "DATABASE_URL=sqlite:///x.db\nOPENAI_API_KEY=sk-not-ours\nLLAMON_REGISTRY_FILE=registry.yaml\n"
        "LLAMON_LLM_PROVIDER=scripted\n"
    )
    settings = Settings()
    assert settings.registry_file == Path("registry.yaml")
    assert settings.llm_provider == "scripted"


def test_keyword_arguments_beat_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMON_REGISTRY_FILE", "from-env.yaml")
    monkeypatch.setenv("LLAMON_LLM_MODEL", "env-model")
    settings = Settings(registry_file=tmp_path / "registry.json", llm_model="kw-model")
    assert settings.registry_file == tmp_path / "registry.json"
    assert settings.llm_model == "kw-model"


def test_invalid_settings_name_the_variable_and_the_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMON_LLM_PROVIDER", "gpt")
    monkeypatch.setenv("LLAMON_LLM_TIMEOUT_S", "-1")
    monkeypatch.setenv("LLAMON_REGISTRY_URL", "ftp://registry")
    with pytest.raises(SettingsError) as info:
        Settings()
    message = str(info.value)
    assert message.startswith("Invalid llamon settings:")
    assert (
        "LLAMON_LLM_PROVIDER (llm_provider): Input should be 'offline', 'scripted' or 'openai-compatible'"
        in message
    )
    assert "(got 'gpt')" in message
    assert "LLAMON_LLM_TIMEOUT_S (llm_timeout_s): Input should be greater than 0" in message
    assert "LLAMON_REGISTRY_URL (registry_url): must be an http:// or https:// URL" in message
    assert isinstance(info.value, ValueError)


def test_pasting_the_api_key_itself_is_refused_without_echoing_it() -> None:
    with pytest.raises(SettingsError) as info:
        Settings(llm_api_key_env="sk-proj-abc123")
    assert "NAME of the environment variable" in str(info.value)
    assert "sk-proj-abc123" not in str(info.value)


def test_llm_api_key_is_read_from_the_named_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(llm_api_key_env="MY_LLM_KEY")
    assert settings.llm_api_key() is None
    monkeypatch.setenv("MY_LLM_KEY", "sk-test")
    key = settings.llm_api_key()
    assert key is not None and key.get_secret_value() == "sk-test"


def test_empty_values_in_dotenv_mean_unset(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("LLAMON_REGISTRY_URL=\nLLAMON_REGISTRY_FILE=\n")
    settings = Settings()
    assert settings.registry_url is None
    assert settings.registry_file is None
