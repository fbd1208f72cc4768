"""docs/architecture.md's table of the parts names every module the code has.

Each folder's row must name, in backticks, every module (``name.py``) and package (``name/``) of
that folder, except the layer modules every app has, which the page lists once (the paragraph
after the table) and this test reads from there. A module added without a word in the page, or
a page naming a module that is gone, fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
FOLDERS = [
    "sdk/src/llamon_agent",
    "llamon_web",
    "core",
    "accounts",
    "servers",
    "rules",
    "agents",
    "governance",
]
NOT_CODE = {"__pycache__", "static", "locale", "py.typed", "ruff.toml"}


def _text() -> str:
    return DOC.read_text(encoding="utf-8")


def _row(folder: str) -> str:
    rows = [line for line in _text().splitlines() if line.startswith(f"| `{folder}/` |")]
    assert len(rows) == 1, f"docs/architecture.md has no single row for {folder}/"
    return rows[0].split(" | ")[1]  # the "owns" column


def _layer_modules() -> set[str]:
    paragraph = _text().split("Every app has the same layer modules", 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"`([a-z_]+(?:\.py|/))`", paragraph))


def _named(row: str) -> set[str]:
    """Every file or folder name the row writes in backticks (``management/commands/devrun.py``
    names ``management/``; ``templatetags/llamon.py`` names ``templatetags/``)."""
    names: set[str] = set()
    for quoted in re.findall(r"`([^`]+)`", row):
        for word in quoted.split():
            first = word.split("/", 1)
            names.add(first[0] + "/" if len(first) == 2 else first[0])
    return names


def _modules(folder: str) -> set[str]:
    found = set()
    for path in (ROOT / folder).iterdir():
        if path.name in NOT_CODE or path.name.startswith((".", "__")) or path.name.endswith(".egg-info"):
            continue
        if path.is_dir():
            found.add(path.name + "/")
        elif path.suffix == ".py":
            found.add(path.name)
    return found


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_module_is_named_in_its_row(folder: str) -> None:
    layers = _layer_modules() if folder not in ("sdk/src/llamon_agent",) else set()
    named = _named(_row(folder))
    missing = sorted(_modules(folder) - named - layers)
    assert not missing, f"docs/architecture.md, row {folder}/: say what these are: {missing}"


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_module_the_row_names_exists(folder: str) -> None:
    """A module the row names is in the folder, one of its packages (``services/``: ``runs.py``) or
    the repository's root (``manage.py``)."""
    own = {n for n in _named(_row(folder)) if re.fullmatch(r"[a-z_0-9]+\.py", n)}
    gone = sorted(n for n in own if not (ROOT / n).exists() and not any((ROOT / folder).rglob(n)))
    assert not gone, f"docs/architecture.md, row {folder}/: names modules that are not there: {gone}"


def test_the_layer_modules_are_listed() -> None:
    assert {"models.py", "services.py", "api.py", "views.py", "migrations/", "templates/"} <= _layer_modules()
