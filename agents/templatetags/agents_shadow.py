"""``{% shadow_divergences rule_set %}``: shadow mode's counts and divergences of a rule set's versions.

Lets the rule set's version page (rules app) show what agents recorded in shadow, while the rules
app's code never imports the agents app (the import contracts in pyproject.toml).
"""

from __future__ import annotations

from typing import Any

from django import template

from agents import selectors

register = template.Library()


@register.inclusion_tag("agents/_shadow_tallies.html")
def shadow_divergences(rule_set: Any) -> dict[str, Any]:
    return {"tallies": selectors.shadow_tallies(rule_set=rule_set), "per_version": True}
