"""The impact analysis form: what to replay, over which days, for whom."""

from __future__ import annotations

from typing import cast

from django import forms
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _

from governance.services import DRAFT, MAX_DAYS, MAX_FILTER_CHARS
from rules.models import RuleSet


class ImpactForm(forms.Form):
    """The shapes only; the service checks the values again (the API and the command share it)."""

    version = forms.ChoiceField(label=_("Version"), help_text=_("The draft, or a published version."))
    days = forms.IntegerField(
        label=_("Days"),
        min_value=1,
        max_value=MAX_DAYS,
        initial=7,
        help_text=format_lazy(_("1 to {max}."), max=MAX_DAYS),
    )
    agent = forms.ChoiceField(required=False, label=_("Agent"), help_text=_("Only this agent's runs."))
    chatbot_id = forms.CharField(required=False, max_length=MAX_FILTER_CHARS, label="chatbotId")
    user_id = forms.CharField(required=False, max_length=MAX_FILTER_CHARS, label="userId")

    def __init__(self, *args, rule_set: RuleSet, agent_names: list[str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        numbers = list(rule_set.versions.order_by("-number").values_list("number", flat=True)[:200])
        # Both are ChoiceFields; django-stubs types form.fields values as Field.
        version = cast(forms.ChoiceField, self.fields["version"])
        version.choices = [(DRAFT, _("draft (revision %(revision)s)") % {"revision": rule_set.revision})] + [
            (str(n), f"v{n}") for n in numbers
        ]
        agent = cast(forms.ChoiceField, self.fields["agent"])
        agent.choices = [("", _("every agent"))] + [(n, n) for n in agent_names]
