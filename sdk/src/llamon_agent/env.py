"""Small environment helpers shared by Flow projects and the CLI (no Django, no heavy imports)."""

from __future__ import annotations

import os
from pathlib import Path

from dotenv import dotenv_values

# A directory holding one of these is a project root: the walk for `.env` stops there.
PROJECT_ROOT_MARKERS = ("pyproject.toml", ".git")


def find_dotenv_file(start: str | os.PathLike[str] | None = None) -> Path | None:
    """The nearest `.env` from ``start`` (a file or directory; default the cwd) up to the project root."""
    directory = Path(start).resolve() if start is not None else Path.cwd().resolve()
    if not directory.is_dir():
        directory = directory.parent
    while True:
        candidate = directory / ".env"
        if candidate.is_file():
            return candidate
        if any((directory / marker).exists() for marker in PROJECT_ROOT_MARKERS):
            return None
        if directory.parent == directory:  # filesystem root
            return None
        directory = directory.parent


def resolve_env_override(name: str, fallback: str, source_file: str | os.PathLike[str] | None = None) -> str:
    """``name`` from the process environment, else from the nearest `.env` above ``source_file``, else ``fallback``.

    Only the nearest `.env` is read (as python-dotenv's ``find_dotenv`` does), and the walk
    stops at the first directory holding ``pyproject.toml`` or ``.git``, so a project never
    picks up a `.env` from a parent checkout. An empty value counts as unset: an empty
    ``MCP_ID`` is never what anybody meant.
    """
    value = os.environ.get(name)
    if value:
        return value
    dotenv_file = find_dotenv_file(source_file)
    if dotenv_file is not None:
        # Same parser and defaults as pydantic-settings (Settings), so one `.env` reads the same in both.
        value = dotenv_values(dotenv_file, encoding="utf-8").get(name)
        if value:
            return value
    return fallback
