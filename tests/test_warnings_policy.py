"""Deprecations fail the tests (pyproject.toml, filterwarnings): upgrades are never a surprise."""

import tomllib
import warnings

import pytest
from django.utils.deprecation import RemovedInDjango60Warning, RemovedInDjango61Warning

from tests.conftest import ROOT

# Every package of the product (the import contracts' root packages), so a new app is covered
# by the policy as soon as it is one of them.
PROJECT_PACKAGES = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
    "root_packages"
]


@pytest.mark.parametrize("category", [RemovedInDjango60Warning, RemovedInDjango61Warning])
def test_a_django_deprecation_fails_the_test_wherever_it_comes_from(category: type[Warning]) -> None:
    with pytest.raises(category):
        warnings.warn_explicit("old API", category, "x.py", 1, module="some_library.module")


@pytest.mark.parametrize(
    "module",
    ["django.db.models", "llamon_agent.prestep", "rules.services", "agents", "governance.services", "tests.x"]
    + [f"{package}.some_module" for package in PROJECT_PACKAGES],
)
@pytest.mark.parametrize("category", [DeprecationWarning, PendingDeprecationWarning])
def test_a_deprecation_raised_from_django_or_the_project_fails_the_test(
    module: str, category: type[Warning]
) -> None:
    with pytest.raises(category):
        warnings.warn_explicit("old API", category, "x.py", 1, module=module)


def test_a_third_party_deprecation_is_not_taken_for_ours() -> None:
    # "djangorestframework" and "rules_engine" only start like our package names.
    with warnings.catch_warnings(record=True) as caught:
        warnings.warn_explicit("old API", DeprecationWarning, "x.py", 1, module="rules_engine.core")
        warnings.warn_explicit("old API", DeprecationWarning, "x.py", 1, module="djangorestframework")
    assert len(caught) == 2
