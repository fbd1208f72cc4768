"""Forms of the rule workbench: each turns bad input into a message a person can act on."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from core.json_messages import json_error_reason
from core.models import AuditEvent
from core.userinput import FilterDateTimeField
from llamon_agent import strictjson
from llamon_agent.a2a import A2AFormatError, to_request
from llamon_agent.expr import (
    MAX_DATA_BYTES,
    MAX_QUERY_CHARS,
    ExprError,
    check_cost,
    check_rule_name,
    compile_params,
    compile_when,
)
from llamon_agent.tools import AgentRequest
from rules.errors import json_type_name
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

    _message: AgentRequest | None = None  # a pasted A2A message, parsed by clean()

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
        from rules.engine import servers_by_id
        from rules.errors import RuleError
        from rules.pins import pins_clean

        value = _json_field(self.cleaned_data["pinned"], "Pinned tool outputs", default=None)
        ids = [p.get("mcp_id") for p in value if isinstance(p, dict)] if isinstance(value, list) else []
        if isinstance(value, dict):
            ids = [value.get("mcp_id")]
        try:
            return pins_clean(value, servers_by_id([i for i in ids if isinstance(i, str)]))
        except RuleError as exc:
            raise forms.ValidationError(exc.message) from None

    def clean_context(self) -> dict[str, Any]:
        value = _json_field(self.cleaned_data["context"], "Context", default={})
        if not isinstance(value, dict):
            raise forms.ValidationError(
                _('Context must be a JSON object like {"userId": "C-1001"}, not %(value)s.')
                % {"value": json_type_name(value)}
            )
        return value

    def clean_data(self) -> Any:
        value = _json_field(self.cleaned_data["data"], "DataParts", default=None)
        if value is None or _looks_like_a2a_message(value):
            return value
        if isinstance(value, dict):
            return [value]
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            raise forms.ValidationError(
                _("DataParts must be a JSON object, a list of objects, or an A2A message.")
            )
        return value or None

    def clean_files(self) -> list[dict[str, Any]] | None:
        value = _json_field(self.cleaned_data["files"], "FileParts", default=None)
        if value is None:
            return None
        if isinstance(value, dict):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            raise forms.ValidationError(
                _(
                    'FileParts must be a JSON list of objects like {"name": "a.pdf", "mimeType": "application/pdf", "uri": "https://..."}.'
                )
            )
        allowed = {"name", "mimeType", "uri", "size"}
        for i, item in enumerate(value, start=1):
            unknown = set(item) - allowed
            if unknown:
                raise forms.ValidationError(
                    _("FilePart %(i)s: unknown field(s) %(join)s; use name, mimeType, uri, size.")
                    % {"i": i, "join": ", ".join(sorted(unknown))}
                )
        return [{k: item.get(k) for k in ("name", "mimeType", "uri", "size")} for item in value] or None

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.errors:
            return cleaned
        size = len(
            json.dumps(
                [cleaned.get("context"), cleaned.get("data"), cleaned.get("files")], ensure_ascii=False
            ).encode()
        )
        if size > MAX_DATA_BYTES:
            raise forms.ValidationError(
                _(
                    "Context, DataParts and FileParts together are %(size)s bytes; the limit is %(MAX_DATA_BYTES)s."
                )
                % {"size": format(size, ","), "MAX_DATA_BYTES": format(MAX_DATA_BYTES, ",")}
            )
        if isinstance(cleaned.get("data"), dict):
            # A pasted A2A message is parsed now so that its errors land on the DataParts field.
            try:
                self._message = to_request(cleaned["data"])
            except A2AFormatError as exc:
                self.add_error("data", _("Not a valid A2A message: %(reason)s") % {"reason": exc})
        return cleaned

    def a2a_extracted(self) -> dict[str, Any] | None:
        """What the pre-step takes from a pasted A2A message (None when none was pasted), for the
        page to show: its query, context and parts, and whether the Query and Context boxes win."""
        if self._message is None:
            return None
        message, data = self._message, self.cleaned_data
        return {
            "query": message.query,
            "context": message.context,
            "data_parts": len(message.a2a_data or []),
            "file_parts": len(message.a2a_files or []),
            "query_box_wins": bool(data.get("query")) and data.get("query") != message.query,
            "context_box_keys": sorted(set(data.get("context") or {}) & set(message.context)),
        }

    def to_request(self) -> AgentRequest:
        """The request the pre-step sees; a pasted A2A message goes through llamon_agent.a2a.to_request."""
        data = self.cleaned_data
        query, context = data.get("query") or "", dict(data.get("context") or {})
        a2a_data, files = data.get("data"), data.get("files")
        if isinstance(a2a_data, dict):  # a whole A2A message, parsed once by clean()
            message = self._message if self._message is not None else to_request(a2a_data)
            query = query or message.query
            context = {**message.context, **context}
            files = files if files is not None else message.a2a_files
            a2a_data = message.a2a_data
        return AgentRequest(query=query, context=context, a2a_data=a2a_data, a2a_files=files)


def _looks_like_a2a_message(value: Any) -> bool:
    return isinstance(value, dict) and (
        "parts" in value or "message" in value or "jsonrpc" in value or "params" in value
    )


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
