"""Forms for agents and runs."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.conf import settings
from django.utils.translation import gettext_lazy as _

from agents.models import Agent, ModelConnection, PrivacySettings
from agents.services import DEFAULT_SYSTEM_PROMPT
from agents.services.agents import VALUE_FIELDS
from agents.subjects import SubjectError, subject_parse
from core import userinput
from core.json_messages import json_error_reason
from core.library_messages import regex_error_text
from core.templatetags.llamon import status_label
from core.userinput import FilterDateTimeField
from llamon_agent import strictjson
from rules.forms import TesterForm, change_reason_field
from rules.models import RuleSetVersion
from servers.models import McpServer

MASK_CHOICES = [  # llamon_agent.guardrails.MASK_PRESETS, in the order the Privacy page shows them
    ("kr_rrn", "주민등록번호"),
    ("kr_frn", "외국인등록번호"),
    ("kr_phone", _("Korean phone numbers (mobile and landline)")),
    ("account_number", _("account numbers")),
    ("card_number", _("card numbers (Luhn-checked)")),
    ("email", _("e-mail addresses (internationalised ones too)")),
    ("passport", _("passport numbers")),
    ("credential", _("passwords, tokens and keys (--password=, PGPASSWORD=, user:password@ in URLs)")),
]


class LinesField(forms.CharField):
    """One value per line (patterns, names)."""

    widget = forms.Textarea(attrs={"rows": 3, "class": "code"})

    def to_python(self, value: Any) -> list[str]:
        return [line.strip() for line in (value or "").splitlines() if line.strip()]

    def prepare_value(self, value: Any) -> str:
        return "\n".join(value) if isinstance(value, list) else (value or "")


class AgentForm(forms.ModelForm):
    input_blocked_patterns = LinesField(
        label=_("Input blocked patterns"),
        required=False,
        help_text=_("One RE2 pattern per line; a match refuses the request."),
    )
    output_blocked_patterns = LinesField(
        label=_("Output blocked patterns"),
        required=False,
        help_text=_("One RE2 pattern per line; a match refuses the answer."),
    )
    output_masks = forms.MultipleChoiceField(
        label=_("Output masks"), choices=MASK_CHOICES, required=False, widget=forms.CheckboxSelectMultiple
    )
    model_script = forms.CharField(
        label=_("Model script"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "class": "code"}),
        help_text=_(
            'Scripted model only: a JSON list of replies, e.g. [{"content": "...", "tool_calls": [{"name": "get_order", "args": {"query": "A-1001"}}]}]'
        ),
    )
    react_servers = userinput.ModelMultipleChoiceField(
        label=_("ReAct servers"),
        queryset=McpServer.objects.filter(enabled=True),
        required=False,
        widget=forms.CheckboxSelectMultiple,
    )
    revision = forms.IntegerField(label=_("Revision"), required=False, widget=forms.HiddenInput)
    change_reason = change_reason_field()

    class Meta:
        model = Agent
        fields = list(VALUE_FIELDS)  # what the API and the MCP endpoint set too, in the page's order
        field_classes = {
            "rule_set": userinput.ModelChoiceField,
            "pinned_version": userinput.ModelChoiceField,
            "model_connection": userinput.ModelChoiceField,
        }
        labels = {
            "name": _("Name"),
            "description": _("Description"),
            "system_prompt": _("System prompt"),
            "rule_set": _("Rule set"),
            "rule_set_mode": _("Rule set mode"),
            "pinned_version": _("Pinned version"),
            "model_provider": _("Model provider"),
            "model_name": _("Model name"),
            "temperature": _("Temperature"),
            "input_max_chars": _("Input max chars"),
            "max_iterations": _("Max iterations"),
            "answer_from_prestep": _("Answer from pre-step"),
        }
        widgets = {
            "system_prompt": forms.Textarea(attrs={"rows": 5}),
            "description": forms.Textarea(attrs={"rows": 2}),
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["pinned_version"].queryset = RuleSetVersion.objects.select_related("rule_set").order_by(
            "rule_set__name", "-number"
        )
        self.fields["pinned_version"].label_from_instance = lambda v: f"{v.rule_set.name} v{v.number}"
        connection = self.fields["model_connection"]
        connection.queryset = ModelConnection.objects.order_by("name")
        connection.label = _("Model connection")
        connection.label_from_instance = lambda c: f"{c.name} ({c.base_url}: {', '.join(c.model_names)})"
        connection.help_text = _(
            "OpenAI-compatible models only: the endpoint and key an admin defined (Agents → Model connections)."
        )
        self.fields["model_name"].help_text = _("One of the connection's models.")
        if not self.instance.pk and not self.initial.get("system_prompt"):
            self.initial["system_prompt"] = DEFAULT_SYSTEM_PROMPT
        if self.instance.pk:
            self.initial["model_script"] = (
                json.dumps(self.instance.model_script, ensure_ascii=False, indent=1)
                if self.instance.model_script
                else ""
            )
            self.initial["revision"] = self.instance.revision

    def clean_model_script(self) -> list[dict[str, Any]]:
        text = self.cleaned_data.get("model_script") or ""
        if not text.strip():
            return []
        try:
            value = strictjson.loads(text)
        except strictjson.JSONInputError as exc:
            if (err := exc.decode_error) is not None:
                raise forms.ValidationError(
                    _("Not valid JSON: %(msg)s at line %(lineno)s, column %(colno)s.")
                    % {"msg": json_error_reason(err.msg), "lineno": err.lineno, "colno": err.colno}
                ) from None
            raise forms.ValidationError(_("The script is refused: %(exc)s.") % {"exc": exc}) from None
        if not isinstance(value, list) or not all(isinstance(r, dict) for r in value):
            raise forms.ValidationError(_('The script is a JSON list of replies like {"content": "..."}.'))
        return value


class RunStartForm(TesterForm):
    """Start a run: the agent and a request (the same fields as the live tester)."""

    agent = userinput.ModelChoiceField(
        queryset=Agent.objects.order_by("name"), empty_label=None, label=_("Agent")
    )


class RunFilterForm(forms.Form):
    agent = userinput.ModelChoiceField(
        queryset=Agent.objects.order_by("name"), required=False, label=_("Agent")
    )
    status = forms.ChoiceField(choices=[("", _("any status"))], required=False, label=_("Status"))
    version = forms.RegexField(
        regex=r"^(v[1-9][0-9]{0,8}|draft@[0-9]{1,9})$",
        required=False,
        max_length=20,
        label=_("Served by version"),
        help_text=_("v4, or draft@12"),
        error_messages={"invalid": _("A version is written v4 (or draft@12 for a draft).")},
    )
    candidate = forms.ChoiceField(
        choices=[("", _("any")), ("yes", _("rollout candidate")), ("no", _("stable"))],
        required=False,
        label=_("Rollout side"),
    )
    rule = forms.CharField(required=False, label=_("Rule fired"))
    tool = forms.CharField(required=False, label=_("Tool called"))
    user_id = forms.CharField(required=False, label="userId")
    chatbot_id = forms.CharField(required=False, label="chatbotId")
    session_id = forms.CharField(required=False, label="sessionId")
    subject = forms.CharField(
        required=False,
        strip=False,  # the value as typed, checked as the API checks it (subject_parse)
        label=_("Subject"),
        help_text=_("key=value of the context or a DataPart, e.g. patientId=P-2002 (finished runs)"),
    )
    q = forms.CharField(required=False, label=_("Query text"))
    period = forms.ChoiceField(
        choices=[
            ("", _("any time")),
            ("24h", _("last 24 hours")),
            ("7d", _("last 7 days")),
            ("30d", _("last 30 days")),
        ],
        required=False,
        label=_("Period"),
    )
    since = FilterDateTimeField(
        required=False, label=_("Since"), widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    until = FilterDateTimeField(
        required=False, label=_("Until"), widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        from agents.models import Run

        self.fields["status"].choices = [("", _("any status"))] + [
            (v, status_label(v)) for v in Run.Status.values
        ]

    def clean_subject(self) -> str:
        text: str = self.cleaned_data["subject"]
        if text:
            try:
                subject_parse(text)
            except SubjectError as exc:
                raise forms.ValidationError(str(exc)) from None
        return text


class PrivacyForm(forms.ModelForm):
    redaction_patterns = LinesField(
        label=_("Redaction patterns"),
        required=False,
        help_text=_(
            "One RE2 pattern per line; matches are replaced by [redacted] in stored steps and answers."
        ),
    )
    mask_presets = forms.MultipleChoiceField(
        label=_("Mask presets"), choices=MASK_CHOICES, required=False, widget=forms.CheckboxSelectMultiple
    )
    preview = forms.CharField(
        label=_("Preview"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=_("Sample text to see what would be stored."),
    )

    class Meta:
        model = PrivacySettings
        fields = ["redaction_patterns", "mask_presets", "retention_days"]
        labels = {"retention_days": _("Retention days")}

    def clean_redaction_patterns(self) -> list[str]:
        import re2

        patterns = self.cleaned_data["redaction_patterns"]
        for pattern in patterns:
            try:
                re2.compile(pattern)
            except re2.error as exc:
                raise forms.ValidationError(
                    _("%(pattern)r is not a valid regular expression: %(exc)s")
                    % {"pattern": pattern, "exc": regex_error_text(exc)}
                ) from None
        return patterns


class RolloutForm(forms.Form):
    """Start or change a staged rollout (the services check the values again)."""

    version = forms.TypedChoiceField(coerce=int, label=_("Candidate version"))
    percent = forms.IntegerField(
        min_value=0,
        max_value=100,
        initial=10,
        label=_("Share of sessions (%)"),
        help_text=_("Sticky by sessionId; a run without sessionId draws its own bucket."),
    )
    chatbot_ids = LinesField(
        required=False,
        max_length=50_000,
        label="chatbotIds",
        help_text=_("One per line (at most 200): these chatbots always get the candidate."),
    )
    guard_error_percent = forms.IntegerField(
        min_value=0,
        max_value=100,
        required=False,
        initial=20,
        label=_("Guard: error rate (%)"),
        help_text=_(
            "Roll back on its own when more than this share of the candidate's runs fail (empty: no guard)."
        ),
    )
    guard_min_runs = forms.IntegerField(
        min_value=1,
        max_value=100_000,
        initial=20,
        required=False,
        label=_("Guard: after this many runs"),
        help_text=_("The guard judges the candidate once it has served this many runs."),
    )
    change_reason = change_reason_field()

    def __init__(self, *args: Any, versions: list[Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["version"].choices = [(v.number, f"v{v.number}") for v in versions]


class StagedPublishForm(forms.Form):
    """Publish the draft as a staged rollout on the one agent that serves "latest" (versions page)."""

    staged_publish = forms.BooleanField(widget=forms.HiddenInput, initial=True)
    revision = forms.IntegerField(required=False, widget=forms.HiddenInput)
    message = forms.CharField(required=False, max_length=500)
    percent = forms.IntegerField(min_value=0, max_value=100, initial=10, label=_("Share of sessions (%)"))
    change_reason = change_reason_field()


class ProtectForm(forms.Form):
    """An admin marks the agent protected and how many approvals its changes need."""

    protected = forms.BooleanField(required=False, label=_("Protected: changes need approval"))
    approvals_required = forms.IntegerField(min_value=1, max_value=10, initial=1, label=_("Approvals needed"))


class ReviewForm(forms.Form):
    """Approve or reject a change request, with a comment."""

    decision = forms.ChoiceField(choices=[("approve", _("Approve")), ("reject", _("Reject"))])
    comment = forms.CharField(
        required=False, max_length=2000, label=_("Comment"), widget=forms.Textarea(attrs={"rows": 2})
    )


class ShadowForm(forms.Form):
    """Name the shadow version (empty: shadow mode off)."""

    version = forms.TypedChoiceField(coerce=int, required=False, empty_value=None, label=_("Shadow version"))

    def __init__(self, *args: Any, versions: list[Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["version"].choices = [("", _("off")), *((v.number, f"v{v.number}") for v in versions)]


class ModelConnectionForm(forms.ModelForm):
    """A model connection (admin); agents.services.connection_save checks the values again."""

    model_names = LinesField(
        label=_("Models"),
        help_text=_("One model name per line: the models agents may use on this connection."),
    )
    revision = forms.IntegerField(label=_("Revision"), required=False, widget=forms.HiddenInput)

    class Meta:
        model = ModelConnection
        fields = ["name", "provider", "base_url", "api_key_env", "model_names", "max_tokens"]
        labels = {
            "name": _("Name"),
            "provider": _("Provider"),
            "base_url": _("Base URL"),
            "api_key_env": _("API key variable"),
            "max_tokens": _("Max tokens"),
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        allowed = ", ".join(settings.LLAMON_LLM_KEY_ENVS) or "-"
        self.fields["api_key_env"].help_text = _(
            "The NAME of the variable holding the key, one the operator allows: %(allowed)s. Its value is sent to this base URL only."
        ) % {"allowed": allowed}
        self.fields["max_tokens"].help_text = _("Optional: the most tokens one answer may use.")
        if self.instance.pk:
            self.initial["revision"] = self.instance.revision
