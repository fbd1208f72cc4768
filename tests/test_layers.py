"""The layering checks of `make lint` cover the whole product: lint-imports fails on an import cycle
inside any package (the "acyclic_siblings" contract of pyproject.toml), function-level imports
included; ruff's banned-api keeps every app out of the engine."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from tests.conftest import ROOT

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
CYCLES = next(c for c in CONFIG["contracts"] if c["type"] == "acyclic_siblings")


def _lint(tmp_path: Path, modules: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """lint-imports with the project's cycle contract, over a throwaway package ``pkg``."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, source in modules.items():
        (package / f"{name}.py").write_text(source)
    (tmp_path / ".importlinter").write_text(
        f"[importlinter]\nroot_package = pkg\n\n[importlinter:contract:cycles]\n"
        f"name = {CYCLES['name']}\ntype = {CYCLES['type']}\nancestors = pkg\n"
    )
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )


def test_the_cycle_contract_covers_every_package_of_the_product() -> None:
    assert sorted(CYCLES["ancestors"]) == sorted(CONFIG["root_packages"])


def test_the_engine_bans_django_and_every_app() -> None:
    engine = tomllib.loads((ROOT / "sdk" / "src" / "llamon_agent" / "ruff.toml").read_text(encoding="utf-8"))
    banned = set(engine["lint"]["flake8-tidy-imports"]["banned-api"])
    assert banned == {"django", *CONFIG["root_packages"]} - {"llamon_agent"}


def test_a_cycle_through_a_function_level_import_fails_the_lint(tmp_path: Path) -> None:
    result = _lint(
        tmp_path,
        {
            "runtime": "from pkg import rollout\n",
            "rollout": "def run_rules():\n    from pkg.runtime import x  # hidden in a function\n",
        },
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "BROKEN" in result.stdout and "No cycles are allowed in pkg" in result.stdout


def test_one_way_imports_pass_the_lint(tmp_path: Path) -> None:
    result = _lint(tmp_path, {"runtime": "from pkg import rollout\n", "rollout": "X = 1\n"})
    assert result.returncode == 0, result.stdout + result.stderr
