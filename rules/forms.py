"""Forms of the rule workbench: each turns bad input into a message a person can act on."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from core.json_messages import json_error_reason
from core.models import AuditEvent
from core.userinput import FilterDateTimeField
from llamon_agent import strictjson
from llamon_agent.expr import (
    MAX_QUERY_CHARS,
    ExprError,
    check_cost,
    check_rule_name,
    compile_params,
    compile_when,
)
from llamon_agent.tools import AgentRequest
from rules import samples
from rules.errors import RuleError
from rules.expr_messages import expr_reason, expr_text

CODE = {"class": "code", "spellcheck": "false", "autocomplete": "off", "autocapitalize": "off"}


class RuleSetForm(forms.Form):
    name = forms.CharField(max_length=100)
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))


class RuleForm(forms.Form):
    """One rule of the draft; `when` and `params` are compiled here so errors show inline."""

    # Labels: the error list under the form names the field with them.
    name = forms.CharField(label=_("Name"), max_length=100, widget=forms.TextInput(attrs=CODE))
    description = forms.CharField(
        label=_("Description"), required=False, widget=forms.Textarea(attrs={"rows": 2})
    )
    mcp_id = forms.CharField(label=_("Server"), max_length=64)
    tool_name = forms.CharField(
        label=_("Tool"), max_length=200, widget=forms.TextInput(attrs={**CODE, "list": "tool-options"})
    )
    when = forms.CharField(
        label=_("When"),
        widget=forms.Textarea(attrs={**CODE, "rows": 3, "data-expr-editor": "when"}),
        help_text=_('Fires when true, e.g. "주문" in query'),
    )
    params = forms.CharField(
        label=_("Params"),
        initial="{}",
        widget=forms.Textarea(attrs={**CODE, "rows": 3, "data-expr-editor": "params"}),
        help_text=_('A dict, e.g. {"query": query}'),
    )
    stop = forms.BooleanField(
        label=_("Stop"), required=False, help_text=_("When this rule fires, later rules are not evaluated.")
    )
    enabled = forms.BooleanField(label=_("Enabled"), required=False, initial=True)
    revision = forms.IntegerField(label=_("Revision"), required=False, widget=forms.HiddenInput)

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        try:
            check_rule_name(name)
        except ExprError as exc:
            raise forms.ValidationError(expr_reason(exc)) from None
        return name

    def clean_when(self) -> str:
        return _compiled(self.cleaned_data["when"], compile_when)

    def clean_params(self) -> str:
        return _compiled(self.cleaned_data["params"], compile_params)


def _compiled(source: str, compiler: Any) -> str:
    try:
        check_cost(compiler(source))  # a rule authored here must fit the per-rule limit
    except ExprError as exc:
        raise forms.ValidationError(expr_text(exc)) from None
    return source


class TesterForm(forms.Form):
    """A sample request: query, context, DataParts (or a whole pasted A2A message) and FileParts."""

    _sample: samples.Sample | None = None  # the request, read by clean()

    query = forms.CharField(
        label=_("Query"), required=False, max_length=MAX_QUERY_CHARS, widget=forms.Textarea(attrs={"rows": 2})
    )
    context = forms.CharField(
        label=_("Context"),
        required=False,
        widget=forms.Textarea(attrs={**CODE, "rows": 3}),
        help_text=_('A JSON object, e.g. {"userId": "C-1001"}'),
    )
    data = forms.CharField(
        label=_("DataParts"),
        required=False,
        widget=forms.Textarea(attrs={**CODE, "rows": 3}),
        help_text=_(
            "A JSON list of objects (one per DataPart), one object, or a whole A2A message (0.3 or 1.0)"
        ),
    )
    files = forms.CharField(
        label=_("FileParts"),
        required=False,
        widget=forms.Textarea(attrs={**CODE, "rows": 2}),
        help_text=_('A JSON list of {"name", "mimeType", "uri"}'),
    )

    pinned = forms.CharField(
        label=_("Pinned tool outputs"),
        required=False,
        widget=forms.Textarea(attrs={**CODE, "rows": 2}),
        help_text=_(
            'Execute answers these calls from the recorded output instead of calling the tool: a JSON list of {"mcp_id", "tool_name", "params" (optional: any call of the tool), "output"}'
        ),
    )

    def clean_pinned(self) -> list[dict[str, Any]]:
        return _checked(
            samples.pins_check, _json_field(self.cleaned_data["pinned"], "Pinned tool outputs", default=None)
        )

    def clean_context(self) -> dict[str, Any]:
        return _checked(
            samples.context_check, _json_field(self.cleaned_data["context"], "Context", default={})
        )

    def clean_data(self) -> Any:
        return _checked(samples.data_check, _json_field(self.cleaned_data["data"], "DataParts", default=None))

    def clean_files(self) -> list[dict[str, Any]] | None:
        return _checked(
            samples.files_check, _json_field(self.cleaned_data["files"], "FileParts", default=None)
        )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.errors:
            return cleaned
        try:
            self._sample = samples.sample_read(
                query=cleaned.get("query") or "",
                context=cleaned.get("context"),
                data=cleaned.get("data"),
                files=cleaned.get("files"),
            )
        except RuleError as exc:
            self.add_error(exc.field, exc.message)
        return cleaned

    def a2a_extracted(self) -> dict[str, Any] | None:
        """What the pre-step takes from a pasted A2A message (None when none was pasted), for the
        page to show: its query, context and parts, and whether the Query and Context boxes win."""
        if self._sample is None or self._sample.message is None:
            return None
        message, data = self._sample.message, self.cleaned_data
        return {
            "query": message.query,
            "context": message.context,
            "data_parts": len(message.a2a_data or []),
            "file_parts": len(message.a2a_files or []),
            "query_box_wins": bool(data.get("query")) and data.get("query") != message.query,
            "context_box_keys": sorted(set(data.get("context") or {}) & set(message.context)),
        }

    def to_request(self) -> AgentRequest:
        """The request the pre-step sees (rules.samples.sample_read, after is_valid())."""
        assert self._sample is not None, "to_request() after is_valid()"
        return self._sample.request


def _checked(check: Any, value: Any) -> Any:
    """One of rules.samples' checks, its refusal as this field's error."""
    try:
        return check(value)
    except RuleError as exc:
        raise forms.ValidationError(exc.message) from None


def _json_field(text: str, label: str, *, default: Any) -> Any:
    if not text or not text.strip():
        return default
    try:
        return strictjson.loads(text)
    except strictjson.JSONInputError as exc:
        if (err := exc.decode_error) is not None:
            raise forms.ValidationError(
                _("%(label)s is not valid JSON: %(msg)s at line %(lineno)s, column %(colno)s.")
                % {
                    "label": label,
                    "msg": json_error_reason(err.msg),
                    "lineno": err.lineno,
                    "colno": err.colno,
                }
            ) from None
        raise forms.ValidationError(f"{label}: {exc}.") from None


def change_reason_field() -> forms.CharField:
    """Why a change is asked, for its approvers (used when a protected agent makes it a change request)."""
    return forms.CharField(
        required=False,
        max_length=2000,
        label=_("Why (for the approvers)"),
        help_text=_("On a protected agent this change waits for approval: say why it is needed."),
        widget=forms.Textarea(attrs={"rows": 2}),
    )


class PublishForm(forms.Form):
    message = forms.CharField(
        required=False,
        max_length=500,
        widget=forms.TextInput(attrs={"placeholder": _("What changed and why")}),
    )
    revision = forms.IntegerField(label=_("Revision"), required=False, widget=forms.HiddenInput)
    reason = change_reason_field()


def _audit_column(name: str) -> int:
    """The length of an audit column: a longer filter text can match nothing (the API says the same)."""
    return AuditEvent._meta.get_field(name).max_length or 0


class AuditFilterForm(forms.Form):
    actor = forms.CharField(required=False, label=_("Actor"), max_length=_audit_column("actor_name"))
    object_type = forms.CharField(
        required=False, label=_("Object type"), max_length=_audit_column("object_type")
    )
    action = forms.CharField(required=False, label=_("Action"), max_length=_audit_column("action"))
    since = FilterDateTimeField(
        required=False, label=_("Since"), widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    until = FilterDateTimeField(
        required=False, label=_("Until"), widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    query = forms.CharField(required=False, label=_("Object"), max_length=_audit_column("object_repr"))
