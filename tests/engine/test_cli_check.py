"""`llamon check` and `llamon new`, in process: one line per problem, exit 0 / 1 / 2."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from llamon_agent.cli import main
from llamon_agent.flow.scaffold import TEMPLATES, new_project

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("LLAMON_REGISTRY_FILE", "LLAMON_REGISTRY_URL", "LLAMON_REGISTRY_TOKEN", "MCP_ID"):
        monkeypatch.delenv(name, raising=False)
    path_before = list(sys.path)
    yield
    sys.path[:] = path_before
    for name in [n for n in sys.modules if n == "app" or n.startswith("app.")]:
        del sys.modules[name]


def _check(
    path: Path, capsys: pytest.CaptureFixture[str], *, offline: bool = True
) -> tuple[int, list[str], str]:
    # Offline unless the test is about tool names: asking starts the demo servers (a second of CPU each).
    code = main(["check", *(["--offline"] if offline else []), str(path)])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


@pytest.fixture
def react(tmp_path: Path) -> Path:
    new_project("react", tmp_path / "agent")
    return tmp_path / "agent"


@pytest.fixture
def flow(tmp_path: Path) -> Path:
    new_project("graph-sequential", tmp_path / "flow")
    return tmp_path / "flow"


def test_fresh_projects_are_clean(react: Path, flow: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for path in (react, flow):
        code, lines, _ = _check(path, capsys)
        assert code == 0, lines
        assert lines[-1].startswith("ok: ")


def test_decorated_function_missing_from_the_list_is_reported(
    react: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tools = react / "app" / "tools.py"
    tools.write_text(
        tools.read_text()
        + '\n\n@deterministic_tool(mcp_id="order-service")\ndef route_refund(ctx):\n    return None\n',
        encoding="utf-8",
    )
    code, lines, _ = _check(react, capsys)
    assert code == 1
    assert len(lines) == 1
    assert lines[0].startswith("app/tools.py:")
    assert "route_refund" in lines[0] and "not in DETERMINISTIC_TOOLS" in lines[0]
    assert "함수가 아예 호출되지 않음" in lines[0]


def test_rule_on_an_mcp_id_the_registry_does_not_know(
    react: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tools = react / "app" / "tools.py"
    tools.write_text(
        tools.read_text().replace('mcp_id="customer-crm"', 'mcp_id="customer-crn"'), encoding="utf-8"
    )
    code, lines, _ = _check(react, capsys)
    assert code == 1
    assert (
        lines == [line for line in lines if "rule route_by_chatbot_id uses mcp_id 'customer-crn'" in line]
        and len(lines) == 1
    )
    assert "known: customer-crm, knowledge-base, order-service" in lines[0]


def test_a_tool_name_the_server_does_not_offer_is_reported_with_a_did_you_mean(
    react: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The servers are asked for their tools; one that cannot be reached is a problem of its own."""
    tools = react / "app" / "tools.py"
    tools.write_text(tools.read_text().replace('"get_order"', '"get_ordr"'), encoding="utf-8")
    registry = react / "registry.yaml"
    text = registry.read_text(encoding="utf-8")
    head, _, _ = text.partition("knowledge-base:")
    registry.write_text(
        head + "knowledge-base:\n  transport: http\n  url: http://127.0.0.1:9/mcp\n", encoding="utf-8"
    )
    code, lines, _ = _check(react, capsys, offline=False)
    assert code == 1
    unreachable = [line for line in lines if "MCP server 'knowledge-base' could not start" in line]
    typo = [line for line in lines if "get_ordr" in line]
    assert len(unreachable) == 1 and len(typo) == 1 and len(lines) == 2, lines
    assert unreachable[0].startswith("app/tools.py:")
    assert typo[0].startswith("app/tools.py:") and typo[0].split(":")[1].isdigit()
    assert "rule route_order_lookup calls tool 'get_ordr', which order-service does not offer" in typo[0]
    assert "did you mean 'get_order'?" in typo[0]
    # Offline, nothing is asked and the typo passes (as every check did before).
    assert _check(react, capsys)[0] == 0


def test_a_server_that_cannot_start_is_a_problem(flow: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A flow's server that dies on start (here: a demo server on an mcp it cannot import) fails
    the check where the flow names it; the same project with the server intact is clean."""
    assert _check(flow, capsys, offline=False)[0] == 0
    registry = flow / "registry.yaml"
    text = registry.read_text(encoding="utf-8")
    registry.write_text(text.replace("order_service.py", "no_such_server.py", 1), encoding="utf-8")
    code, lines, _ = _check(flow, capsys, offline=False)
    assert code == 1, lines
    assert len(lines) == 1 and lines[0].startswith("app/graph.py:"), lines
    assert "MCP server 'order-service' could not start or list its tools" in lines[0]
    assert _check(flow, capsys)[0] == 0  # offline: nothing is started


def test_flow_mcp_id_is_checked_against_the_registry(flow: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (flow / ".env").write_text("MCP_ID=order-servic\n", encoding="utf-8")
    code, lines, _ = _check(flow, capsys)
    assert code == 1
    assert lines[0].startswith("app/graph.py:") and "'order-servic'" in lines[0]


def test_missing_build_graph(flow: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph = flow / "app" / "graph.py"
    graph.write_text(
        graph.read_text().replace("async def build_graph", "async def make_graph"), encoding="utf-8"
    )
    code, lines, _ = _check(flow, capsys)
    assert (code, lines) == (1, ["app/graph.py: no build_graph: define `async def build_graph(settings)`"])


def test_sync_build_graph(flow: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (flow / "app" / "graph.py").write_text("def build_graph(settings):\n    return None\n", encoding="utf-8")
    code, lines, _ = _check(flow, capsys)
    assert (code, lines) == (
        1,
        ["app/graph.py:1: build_graph must be a coroutine function: `async def build_graph(settings)`"],
    )


def test_syntax_error_names_file_and_line(flow: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (flow / "app" / "nodes.py").write_text("def broken(:\n    pass\n", encoding="utf-8")
    code, lines, _ = _check(flow, capsys)
    assert code == 1
    assert lines == [lines[0]] and lines[0].startswith("app/nodes.py:1: syntax error")


def test_import_error_names_file_and_line(react: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tools = react / "app" / "tools.py"
    tools.write_text("import os\nimport no_such_module_xyz\n" + tools.read_text(), encoding="utf-8")
    code, lines, _ = _check(react, capsys)
    assert code == 1
    assert lines == ["app/tools.py:2: ModuleNotFoundError: No module named 'no_such_module_xyz'"]


def test_no_registry_is_a_note_not_a_problem(react: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (react / "registry.yaml").unlink()
    code, lines, err = _check(react, capsys)
    assert code == 0
    assert "mcp_ids were not checked" in err


def test_not_a_project_cannot_be_loaded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _check(tmp_path, capsys)
    assert code == 2 and "not a llamon project" in err
    code, _, err = _check(tmp_path / "missing", capsys)
    assert code == 2 and "no such directory" in err


def test_new_refuses_a_non_empty_directory_and_unknown_templates(
    react: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["new", "--template", "react", str(react)]) == 1
    assert "not empty" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["new", "--template", "graph-nope", str(react / "x")])


def test_every_template_has_its_files(tmp_path: Path) -> None:
    for template in TEMPLATES:
        written = {
            p.relative_to(tmp_path / template).as_posix() for p in new_project(template, tmp_path / template)
        }
        common = {
            ".env.example",
            ".gitignore",
            "README.md",
            "pyproject.toml",
            "registry.yaml",
            "app/__init__.py",
        }
        assert common <= written, template
        own = {"app/tools.py", "app/agent.py"} if template == "react" else {"app/nodes.py", "app/graph.py"}
        assert own <= written, template
        assert any(p.startswith("tests/test_") for p in written)
        assert not [
            p for p in written if p.endswith(".tmpl") or "{{" in (tmp_path / template / p).read_text()
        ]
