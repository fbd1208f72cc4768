"""A llamon project on disk: load it (``app/`` modules, `.env`, registry) and check it for problems.

Two kinds, told apart by their files (docs/flow.md):

* **react**: ``app/tools.py`` with ``DETERMINISTIC_TOOLS``; optionally ``app/agent.py`` with
  ``build_agent(settings) -> AgentSpec`` (else a default agent on the offline model).
* **flow**: ``app/graph.py`` with ``async def build_graph(settings)``; nodes in ``app/nodes.py``.

The project directory goes first on ``sys.path`` and its package is always called ``app``,
as in the seed, so loading a second project in the same process first forgets the first
one's ``app`` modules.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import re
import sys
import textwrap
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from llamon_agent.env import resolve_env_override
from llamon_agent.tools import is_rule, rule_info

if TYPE_CHECKING:
    from llamon_agent.react import AgentSpec
    from llamon_agent.settings import Settings

ProjectKind = Literal["react", "flow"]
DEFAULT_REGISTRY_FILE = "registry.yaml"
NEVER_CALLED = "함수가 아예 호출되지 않음"  # the seed's troubleshooting row, quoted in the warning


class ProjectLoadError(Exception):
    """The directory cannot be loaded as a project at all (missing, no ``app/``, broken module)."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a project, shown as one line ``file:line: message``."""

    message: str
    file: str | None = None
    line: int | None = None

    def __str__(self) -> str:
        where = self.file or ""
        if self.file and self.line:
            where = f"{self.file}:{self.line}"
        return f"{where}: {self.message}" if where else self.message


@dataclass
class Project:
    """A loaded project: its kind, name, modules, rules and settings."""

    path: Path
    kind: ProjectKind
    name: str
    modules: dict[str, ModuleType] = field(default_factory=dict)
    rules: list[Any] = field(default_factory=list)
    unlisted: list[Problem] = field(default_factory=list)  # decorated rules missing from DETERMINISTIC_TOOLS
    build_graph: Callable[..., Any] | None = None

    def settings(self, **overrides: Any) -> Settings:
        """Settings from the environment and the project's `.env`; ``registry.yaml`` when no registry is set."""
        return project_settings(self.path, **overrides)

    def agent_spec(self, settings: Settings) -> AgentSpec:
        """The react agent: ``app/agent.py``'s ``build_agent(settings)``, else a default offline agent."""
        from llamon_agent.models import ModelConfig
        from llamon_agent.prestep import DEFAULT_PRESTEP_INSTRUCTION
        from llamon_agent.react import AgentSpec

        agent_module = self.modules.get("app.agent")
        build = getattr(agent_module, "build_agent", None)
        if callable(build):
            spec = build(settings)
            if not isinstance(spec, AgentSpec):
                raise ProjectLoadError(
                    f"app/agent.py: build_agent() returned {type(spec).__name__}, not an llamon_agent.react.AgentSpec"
                )
            return spec
        return AgentSpec(
            name=self.name,
            system_prompt=f"You are a helpful support agent.\n{DEFAULT_PRESTEP_INSTRUCTION}",
            rules=self.rules,
            model=ModelConfig.from_settings(settings),
        )

    def mcp_ids(self, settings: Settings | None = None) -> list[str]:
        """The MCP servers the project needs: its rules' (react) or its ``*MCP_ID`` overrides (flow)."""
        ids = [rule_info(rule).mcp_id for rule in self.rules if is_rule(rule)]
        if self.kind == "react" and settings is not None:
            try:
                ids.extend(self.agent_spec(settings).react_mcp_ids)
            except Exception:
                pass  # reported by check/run when the agent itself is built
        if self.kind == "flow":
            ids.extend(mcp_id for _, _, mcp_id in env_mcp_ids(self.path))
        return list(dict.fromkeys(ids))


# --------------------------------------------------------------------------- settings


# The first line of an app/tools.py exported by llamon-web (rules/exporting.py writes it).
EXPORTED_HEADER = re.compile(
    r"Routing rules exported from llamon-web rule set (?P<q>['\"])(?P<name>.{1,100}?)(?P=q) "
    r"(?:version (?P<number>[1-9][0-9]{0,8})|\(draft revision (?P<revision>[0-9]{1,9})\)) "
    r"\(content sha256 (?P<hash>[0-9a-f]{64})\)\."
)


def served_version(project: Project) -> dict[str, str] | None:
    """The rule-set version ``app/tools.py`` was exported from (its first line, as llamon-web
    writes it): ``{"rule_set", "ref", "content_hash"}``, or None for rules written by hand (or
    exported before the header held the whole hash). Sent with every served run's trace."""
    module = project.modules.get("app.tools")
    first = ((getattr(module, "__doc__", None) or "").strip().splitlines() or [""])[0]
    match = EXPORTED_HEADER.fullmatch(first)
    if match is None:
        return None
    number, revision = match.group("number"), match.group("revision")
    return {
        "rule_set": match.group("name"),
        "ref": f"v{number}" if number else f"draft@{revision}",
        "content_hash": match.group("hash"),
    }


def project_settings(path: str | os.PathLike[str], **overrides: Any) -> Settings:
    """``Settings`` of a project: environment first, then its `.env`; a relative registry file is under the project."""
    from llamon_agent.settings import Settings

    root = Path(path).resolve()
    settings = Settings(_env_file=root / ".env", **overrides)
    registry_file = settings.registry_file
    if registry_file is not None and not Path(registry_file).is_absolute():
        settings = settings.model_copy(update={"registry_file": root / registry_file})
    elif registry_file is None and not settings.registry_url and (root / DEFAULT_REGISTRY_FILE).is_file():
        # Convenience for a fresh `llamon new` project: its example registry, unless one is configured.
        settings = settings.model_copy(update={"registry_file": root / DEFAULT_REGISTRY_FILE})
    return settings


# --------------------------------------------------------------------------- loading


def project_kind(path: Path) -> ProjectKind:
    """``flow`` when ``app/graph.py`` exists, ``react`` when ``app/tools.py`` does; else ProjectLoadError."""
    if not path.is_dir():
        raise ProjectLoadError(f"{path}: no such directory")
    if (path / "app" / "graph.py").is_file():
        return "flow"
    if (path / "app" / "tools.py").is_file():
        return "react"
    raise ProjectLoadError(
        f"{path}: not a llamon project (expected app/tools.py for a react agent or app/graph.py for a flow; "
        "make one with `llamon new`)"
    )


def load_project(path: str | os.PathLike[str]) -> Project:
    """Import a project's ``app`` modules; ProjectLoadError (one readable line) when that fails."""
    project, problems = _load(Path(path).resolve())
    fatal = [p for p in problems if p is not None]
    if project is None or fatal:
        raise ProjectLoadError("; ".join(str(p) for p in fatal) or f"{path}: cannot be loaded")
    return project


def _load(root: Path) -> tuple[Project | None, list[Problem]]:
    """The project and the problems that kept a module from loading (syntax, import, missing names)."""
    kind = project_kind(root)
    problems = [p for p in (_syntax_problem(root, f) for f in sorted((root / "app").rglob("*.py"))) if p]
    if problems:
        return None, problems
    _forget_app_modules()
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    else:  # first, so that this project's `app` wins over any other on the path
        sys.path.remove(str(root))
        sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    wanted = ["app.graph"] if kind == "flow" else ["app.tools"]
    if (root / "app" / "agent.py").is_file():
        wanted.append("app.agent")
    modules: dict[str, ModuleType] = {}
    for name in wanted:
        try:
            modules[name] = importlib.import_module(name)
        except Exception as exc:
            return None, [_import_problem(root, name, exc)]
    # Every app module loaded by now (nodes.py through graph.py, helpers through tools.py).
    for name, module in list(sys.modules.items()):
        if (name == "app" or name.startswith("app.")) and module is not None:
            modules.setdefault(name, module)
    project = Project(path=root, kind=kind, name=_project_name(root, modules), modules=modules)
    if kind == "react":
        tools = modules["app.tools"]
        listed = getattr(tools, "DETERMINISTIC_TOOLS", None)
        if listed is None:
            return None, [
                Problem("no DETERMINISTIC_TOOLS list: list the routing functions there", "app/tools.py")
            ]
        if not isinstance(listed, list | tuple):
            return None, [Problem("DETERMINISTIC_TOOLS must be a list of routing functions", "app/tools.py")]
        for i, rule in enumerate(listed):
            if not is_rule(rule):
                return None, [
                    Problem(
                        f"DETERMINISTIC_TOOLS[{i}] ({getattr(rule, '__name__', repr(rule))}) is not a routing rule: "
                        "decorate it with @deterministic_tool(mcp_id=...)",
                        "app/tools.py",
                    )
                ]
        project.rules = list(listed)
        project.unlisted = _unlisted_rules(root, modules, project.rules)
    else:
        build = getattr(modules["app.graph"], "build_graph", None)
        if build is None:
            return None, [Problem("no build_graph: define `async def build_graph(settings)`", "app/graph.py")]
        if not inspect.iscoroutinefunction(build):
            return None, [
                Problem(
                    "build_graph must be a coroutine function: `async def build_graph(settings)`",
                    "app/graph.py",
                    _line_of(build),
                )
            ]
        project.build_graph = build
    return project, []


def _forget_app_modules() -> None:
    for name in [n for n in sys.modules if n == "app" or n.startswith("app.")]:
        del sys.modules[name]


def _project_name(root: Path, modules: dict[str, ModuleType]) -> str:
    for name in ("app.agent", "app.graph", "app.tools"):
        value = getattr(modules.get(name), "NAME", None)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return root.name


def _syntax_problem(root: Path, file: Path) -> Problem | None:
    try:
        source = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return Problem(f"cannot be read: {exc}", _rel(root, file))
    try:
        compile(source, str(file), "exec", dont_inherit=True)
    except SyntaxError as exc:
        return Problem(f"syntax error: {exc.msg}", _rel(root, file), exc.lineno)
    return None


def _import_problem(root: Path, module: str, exc: BaseException) -> Problem:
    """Where in the project the import failed (the innermost frame in a project file)."""
    file, line = f"app/{module.split('.', 1)[1]}.py", None
    for frame in traceback.extract_tb(exc.__traceback__):
        path = Path(frame.filename)
        if path.is_relative_to(root):
            file, line = _rel(root, path), frame.lineno
    text = " ".join(str(exc).split())
    return Problem(f"{type(exc).__name__}: {text}" if text else type(exc).__name__, file, line)


def _unlisted_rules(root: Path, modules: dict[str, ModuleType], listed: list[Any]) -> list[Problem]:
    """``@deterministic_tool`` functions defined in the project but missing from DETERMINISTIC_TOOLS."""
    listed_ids = {id(rule) for rule in listed}
    problems: list[Problem] = []
    seen: set[int] = set()
    for module_name, module in sorted(modules.items()):
        for value in vars(module).values():
            if not is_rule(value) or id(value) in listed_ids or id(value) in seen:
                continue
            if getattr(value, "__module__", None) != module_name:
                continue  # imported from another module: reported where it is defined
            seen.add(id(value))
            info = rule_info(value)
            problems.append(
                Problem(
                    f"{info.name} is decorated with @deterministic_tool(mcp_id={info.mcp_id!r}) but is not in "
                    f"DETERMINISTIC_TOOLS, so it is never called ({NEVER_CALLED})",
                    _rel(root, Path(inspect.getsourcefile(value) or module.__file__ or "")),
                    _line_of(value),
                )
            )
    return problems


def _line_of(obj: Any) -> int | None:
    try:
        return inspect.getsourcelines(obj)[1]
    except (OSError, TypeError):
        return None


def _rel(root: Path, file: Path) -> str:
    try:
        return str(file.resolve().relative_to(root))
    except ValueError:
        return str(file)


# --------------------------------------------------------------------------- flow mcp_ids


def env_mcp_ids(root: Path) -> list[tuple[str, int, str]]:
    """``(file, line, mcp_id)`` for each ``resolve_env_override("...MCP_ID", "fallback", ...)`` in ``app/``.

    Read from the source (nothing is run): a flow binds its servers inside ``build_graph``,
    which would start them; the override names tell which ids it will ask the registry for.
    """
    found: list[tuple[str, int, str]] = []
    for file in sorted((root / "app").rglob("*.py")):
        try:
            tree = ast.parse(file.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name != "resolve_env_override" or len(node.args) < 2:
                continue
            var, fallback = node.args[0], node.args[1]
            if not (
                isinstance(var, ast.Constant) and isinstance(var.value, str) and var.value.endswith("MCP_ID")
            ):
                continue
            default = (
                fallback.value
                if isinstance(fallback, ast.Constant) and isinstance(fallback.value, str)
                else ""
            )
            value = resolve_env_override(var.value, default, source_file=file)
            if value:
                found.append((_rel(root, file), node.lineno, value))
    return found


# --------------------------------------------------------------------------- check


@dataclass
class CheckReport:
    """What ``llamon check`` found: problems (exit 1), notes (informational), or a load failure (exit 2)."""

    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    project: Project | None = None

    @property
    def exit_code(self) -> int:
        """0 clean, 1 problems (a project that cannot be found at all raises ProjectLoadError: exit 2)."""
        return 1 if self.problems else 0


TOOL_LIST_TIMEOUT_S = 10.0  # per server; one that does not answer in time is a warning, not a problem


async def check_project(
    path: str | os.PathLike[str], settings: Settings | None = None, *, ask_servers: bool = True
) -> CheckReport:
    """Load a project and report its problems (unlisted rules, unknown mcp_ids and tools, broken modules, ...).

    With ``ask_servers`` every registry server the project uses is started (or reached) and asked for
    its tool list (concurrently, TOOL_LIST_TIMEOUT_S each): one that cannot answer is a problem, and
    so is a rule returning a ``tool_name`` its server does not offer.
    """
    from llamon_agent.mcp.registry import registry_from_settings

    root = Path(path).resolve()
    report = CheckReport()
    project, problems = _load(root)  # ProjectLoadError (exit 2) propagates
    report.problems.extend(problems)
    if project is None:
        report.notes.append("the project did not load; fix the problems above, then check again")
        return report
    report.project = project
    report.problems.extend(project.unlisted)
    try:
        settings = settings or project.settings()
    except Exception as exc:
        report.problems.append(Problem(f"settings: {exc}", ".env"))
        return report
    wanted: list[tuple[str, int | None, str, str]]
    if project.kind == "react":
        try:
            project.agent_spec(settings)
        except Exception as exc:
            report.problems.append(
                Problem(f"build_agent failed: {type(exc).__name__}: {exc}", "app/agent.py")
            )
        wanted = _react_mcp_ids(root, project, settings)
    else:
        wanted = [(f, line, mcp_id, "MCP_ID") for f, line, mcp_id in env_mcp_ids(root)]
    if not wanted:
        return report
    if not (settings.registry_file or settings.registry_url):
        report.notes.append(
            "no MCP registry is configured (LLAMON_REGISTRY_FILE or LLAMON_REGISTRY_URL): mcp_ids were not checked"
        )
        return report
    registry = registry_from_settings(settings)
    where = (
        f"registry file {settings.registry_file}"
        if settings.registry_file
        else f"registry {settings.registry_url}"
    )
    try:
        known = await registry.all()
    except Exception as exc:
        report.problems.append(Problem(f"the registry could not be read: {exc}"))
        return report
    for file, line, mcp_id, what in wanted:
        if mcp_id not in known:
            report.problems.append(
                Problem(
                    f"{what} uses mcp_id {mcp_id!r}, which the {where} does not know "
                    f"(known: {', '.join(sorted(known)) or 'none'})",
                    file,
                    line,
                )
            )
    if ask_servers:
        used = {mcp_id: (file, line) for file, line, mcp_id, _ in reversed(wanted) if mcp_id in known}
        calls = (
            [c for c in _rule_tool_calls(root, project) if c[2] in known] if project.kind == "react" else []
        )
        if used:
            await _ask_servers(report, used, calls, {mcp_id: known[mcp_id] for mcp_id in used}, settings)
    return report


async def _ask_servers(
    report: CheckReport,
    used: dict[str, tuple[str, int | None]],
    calls: list[tuple[str, int | None, str, str, str]],
    specs: dict[str, Any],
    settings: Settings,
) -> None:
    """Start (or reach) every server the project uses and ask it for its tools, as `llamon run` will.

    A server that cannot start, be reached or answer in time is a problem at the first place that
    uses it (a served request would fail there); a rule's literal ``tool_name`` its server does not
    offer is a problem with a "did you mean".
    """
    import asyncio

    from llamon_agent.expr.messages import close_matches, quoted_list
    from llamon_agent.served_pool import served_pool

    pool = served_pool(settings)
    try:
        for spec in specs.values():
            pool.register(spec)

        async def names(mcp_id: str) -> list[str]:
            tools = await asyncio.wait_for(pool.list_tools(mcp_id), TOOL_LIST_TIMEOUT_S)
            return [tool.name for tool in tools]

        ids = sorted(specs)
        answers = await asyncio.gather(*(names(mcp_id) for mcp_id in ids), return_exceptions=True)
    finally:
        await pool.aclose()
    offered: dict[str, list[str]] = {}
    for mcp_id, answer in zip(ids, answers, strict=True):
        if isinstance(answer, BaseException):
            reason = (
                f"no answer within {TOOL_LIST_TIMEOUT_S:.0f} s"
                if isinstance(answer, TimeoutError)
                else str(answer) or type(answer).__name__
            )
            file, line = used[mcp_id]
            report.problems.append(
                Problem(f"MCP server {mcp_id!r} could not start or list its tools: {reason}", file, line)
            )
        else:
            offered[mcp_id] = answer
    for file, line, mcp_id, tool_name, rule in calls:
        tools = offered.get(mcp_id)
        if tools is None or tool_name in tools:
            continue
        close = close_matches(tool_name, tools)
        hint = f"; did you mean {quoted_list(close)}?" if close else ""
        report.problems.append(
            Problem(
                f"rule {rule} calls tool {tool_name!r}, which {mcp_id} does not offer{hint} "
                f"(its tools: {', '.join(sorted(tools)) or 'none'})",
                file,
                line,
            )
        )


def _rule_tool_calls(root: Path, project: Project) -> list[tuple[str, int | None, str, str, str]]:
    """(file, line, mcp_id, tool_name, rule) for each tool name a rule states literally.

    An expression rule has its ``tool_name``; a function rule's are the string values of the
    ``"tool_name"`` keys of the dicts it builds (a name computed at run time cannot be checked).
    """
    out: list[tuple[str, int | None, str, str, str]] = []
    for rule in project.rules:
        info = rule_info(rule)
        tool_name = getattr(rule, "tool_name", None)
        if isinstance(tool_name, str):
            out.append(("app/tools.py", None, info.mcp_id, tool_name, info.name))
            continue
        if not inspect.isfunction(rule):
            continue
        try:
            lines, start = inspect.getsourcelines(rule)
            file = inspect.getsourcefile(rule)
            tree = ast.parse(textwrap.dedent("".join(lines)))
        except (OSError, TypeError, SyntaxError):
            continue
        where = _rel(root, Path(file)) if file else "app/tools.py"
        for node in ast.walk(tree):
            if not isinstance(node, ast.Dict):
                continue
            for key, value in zip(node.keys, node.values, strict=True):
                if (
                    isinstance(key, ast.Constant)
                    and key.value == "tool_name"
                    and isinstance(value, ast.Constant)
                    and isinstance(value.value, str)
                ):
                    out.append((where, start + value.lineno - 1, info.mcp_id, value.value, info.name))
    return out


def _react_mcp_ids(
    root: Path, project: Project, settings: Settings
) -> list[tuple[str, int | None, str, str]]:
    out: list[tuple[str, int | None, str, str]] = []
    for rule in project.rules:
        info = rule_info(rule)
        file = inspect.getsourcefile(rule) if inspect.isfunction(rule) else None
        out.append(
            (
                _rel(root, Path(file)) if file else "app/tools.py",
                _line_of(rule) if file else None,
                info.mcp_id,
                f"rule {info.name}",
            )
        )
    try:
        react_ids = list(project.agent_spec(settings).react_mcp_ids)
    except Exception:
        react_ids = []
    out.extend(("app/agent.py", None, mcp_id, "the ReAct loop") for mcp_id in react_ids)
    return out
