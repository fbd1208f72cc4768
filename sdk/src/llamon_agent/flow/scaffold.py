"""``llamon new``: copy a project template (``llamon_agent/flow/templates/<name>/``) into a directory.

Template files are data, not code of this package: each is stored as ``<name>.tmpl`` (so
that neither ruff nor pytest nor setuptools' package finder takes them for our own
modules) and a leading ``dot-`` stands for ``.`` (``dot-env.example.tmpl`` ->
``.env.example``), because package-data globs skip dot files. ``_common/`` is copied first,
then the template's own files. ``{{name}}``-style placeholders are replaced.
"""

from __future__ import annotations

import json
import keyword
import re
import sys
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

TEMPLATES = ("react", "graph-sequential", "graph-parallel", "graph-conditional", "graph-http-pipeline")
COMMON = "_common"
SUFFIX = ".tmpl"
DOT_PREFIX = "dot-"
DEMO_SCRIPTS = {
    "order-service": "order_service.py",
    "customer-crm": "customer_crm.py",
    "knowledge-base": "knowledge_base.py",
}
_PLACEHOLDER = re.compile(r"\{\{([a-z_]+)\}\}")


class ScaffoldError(Exception):
    """The project cannot be created (unknown template, target not empty); one readable line."""


def default_demo_dir() -> Path:
    """The demo MCP servers this package ships (``llamon_agent/demo_servers``): on mcp 1.x or 2."""
    return Path(__file__).resolve().parents[1] / "demo_servers"


def new_project(
    template: str,
    target: str | Path,
    *,
    name: str | None = None,
    demo_dir: str | Path | None = None,
    python: str | None = None,
    force: bool = False,
) -> list[Path]:
    """Create a project from ``template`` in ``target``; returns the files written."""
    if template not in TEMPLATES:
        raise ScaffoldError(f"unknown template {template!r}: choose one of {', '.join(TEMPLATES)}")
    target = Path(target).resolve()
    if target.exists() and not target.is_dir():
        raise ScaffoldError(f"{target} exists and is not a directory")
    if target.exists() and any(target.iterdir()) and not force:
        raise ScaffoldError(f"{target} is not empty (use --force to write into it anyway)")
    project_name = name or target.name
    demo_base = Path(demo_dir).resolve() if demo_dir is not None else default_demo_dir()
    values = {
        "name": project_name,
        "template": template,
        "python": json.dumps(python or sys.executable),
        **{_var(mcp_id): json.dumps(str(demo_base / script)) for mcp_id, script in DEMO_SCRIPTS.items()},
    }
    root = resources.files("llamon_agent.flow") / "templates"
    written: list[Path] = []
    for base in (root / COMMON, root / template):
        for source, relative in _walk(base, ""):
            destination = target / relative
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_text(_render(source.read_text(encoding="utf-8"), values), encoding="utf-8")
            if destination not in written:
                written.append(destination)
    return written


def _var(mcp_id: str) -> str:
    name = mcp_id.replace("-", "_")
    assert name.isidentifier() and not keyword.iskeyword(name)
    return name


def _walk(directory: Traversable, prefix: str) -> list[tuple[Traversable, str]]:
    out: list[tuple[Traversable, str]] = []
    for entry in sorted(directory.iterdir(), key=lambda e: e.name):
        if entry.name == "__pycache__":
            continue
        name = entry.name
        if name.startswith(DOT_PREFIX):
            name = "." + name[len(DOT_PREFIX) :]
        if entry.is_dir():
            out.extend(_walk(entry, f"{prefix}{name}/"))
        elif name.endswith(SUFFIX):
            out.append((entry, prefix + name[: -len(SUFFIX)]))
    return out


def _render(text: str, values: dict[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise ScaffoldError(f"template placeholder {{{{{key}}}}} has no value")
        return values[key]

    return _PLACEHOLDER.sub(replace, text)
