"""The wheel carries the checkout's top-level ``templates/``, ``static/`` and ``locale/`` inside
``llamon_web/``, where Django's app directories template loader, static finder and locale lookup
find them once installed (a checkout reads the top-level folders: llamon_web/settings.py). The rest
of the build is configured in pyproject.toml."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
PROJECT_WIDE = ("templates", "static", "locale")


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        for name in PROJECT_WIDE:
            shutil.copytree(ROOT / name, Path(self.build_lib) / "llamon_web" / name, dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildPy})
