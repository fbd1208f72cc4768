"""Forms of the MCP server pages: the server form and the "call tool" form built from an input schema."""

from __future__ import annotations

import json
import re
from typing import Any

from django import forms
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _

from core.json_messages import json_error_reason
from llamon_agent import strictjson
from llamon_agent.mcp.schemas import schema_errors
from servers.models import McpServer
from servers.selectors import command_line
from servers.services import TIMEOUT_MAX_S, TIMEOUT_MIN_S

_NAME_SPLIT = re.compile(r"[\s,]+")
MAX_GENERATED_FIELDS = 50
_TIMEOUT_RANGE = format_lazy(
    _("The timeout must be between {min} and {max} seconds."),
    min=f"{TIMEOUT_MIN_S:g}",
    max=f"{TIMEOUT_MAX_S:g}",
)


def split_lines(text: str) -> list[str]:
    """One item per non-blank line, surrounding spaces removed (arguments may contain inner spaces)."""
    return [line.strip() for line in (text or "").splitlines() if line.strip()]


def split_names(text: str) -> list[str]:
    """Names separated by new lines, commas or spaces."""
    return [n for n in _NAME_SPLIT.split(text or "") if n]


class McpServerForm(forms.Form):
    """Add or edit a server. For stdio, ``confirmed_command`` must match the command line to save."""

    mcp_id = forms.CharField(
        label=_("Id"),
        max_length=64,
        help_text=_("Lowercase letters, digits, '-', '_' or '.'; rules refer to it."),
    )
    description = forms.CharField(
        label=_("Description"), required=False, widget=forms.Textarea(attrs={"rows": 2})
    )
    transport = forms.ChoiceField(
        label=_("Transport"), choices=McpServer.Transport.choices, widget=forms.RadioSelect, initial="stdio"
    )
    command = forms.CharField(
        label=_("Command"),
        required=False,
        max_length=500,
        help_text=_("The program only, e.g. /usr/bin/python3. It runs without a shell."),
    )
    args = forms.CharField(
        label=_("Arguments"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "class": "code"}),
        help_text=_("One argument per line (no shell quoting needed)."),
    )
    env_names = forms.CharField(
        label=_("Environment variable names"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "class": "code"}),
        help_text=_(
            "Names only (like LLAMON_MCP_ORDER_KEY), one per line: values come from the app's environment. "
            "Allowed names are set by the operator in LLAMON_MCP_ENV_NAMES."
        ),
    )
    url = forms.CharField(
        label=_("URL"), required=False, max_length=2000, help_text=_("e.g. https://mcp.example.com/mcp")
    )
    header_names = forms.CharField(
        label=_("Headers from environment variables"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "class": "code"}),
        help_text=_(
            "Header-Name=ENV_NAME, or just ENV_NAME for a bearer token; one per line "
            "(names allowed by LLAMON_MCP_ENV_NAMES)."
        ),
    )
    timeout_s = forms.FloatField(
        label=_("Timeout (seconds)"),
        initial=30.0,
        min_value=TIMEOUT_MIN_S,
        max_value=TIMEOUT_MAX_S,
        error_messages={"min_value": _TIMEOUT_RANGE, "max_value": _TIMEOUT_RANGE, "invalid": _TIMEOUT_RANGE},
    )
    enabled = forms.BooleanField(
        label=_("Enabled"),
        required=False,
        initial=True,
        help_text=_("Only enabled servers are bound by the pre-step."),
    )
    confirmed_command = forms.CharField(required=False, widget=forms.HiddenInput)

    @classmethod
    def for_server(cls, server: McpServer) -> McpServerForm:
        """An unbound form showing a saved server (its command line already confirmed)."""
        initial = {
            "mcp_id": server.mcp_id,
            "description": server.description,
            "transport": server.transport,
            "command": server.command,
            "args": "\n".join(server.args),
            "env_names": "\n".join(server.env_names),
            "url": server.url,
            "header_names": "\n".join(server.header_names),
            "timeout_s": server.timeout_s,
            "enabled": server.enabled,
            "confirmed_command": command_line(command=server.command, args=server.args),
        }
        return cls(initial=initial)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("transport") == McpServer.Transport.STDIO and not (data.get("command") or "").strip():
            self.add_error("command", _("Enter the command to run (the program, without its arguments)."))
        if data.get("transport") == McpServer.Transport.HTTP and not (data.get("url") or "").strip():
            self.add_error("url", _("Enter the server's URL, like https://mcp.example.com/mcp."))
        return data

    def preview_command_line(self) -> str:
        """The command line as typed so far (also on an invalid form), for the preview."""
        source = self.data if self.is_bound else self.initial
        if source.get("transport", "stdio") != McpServer.Transport.STDIO:
            return ""
        return command_line(
            command=(source.get("command") or "").strip(), args=split_lines(source.get("args", ""))
        )

    def command_confirmed(self) -> bool:
        """Whether the person has seen the exact command line being saved (always true for http)."""
        if self.cleaned_data.get("transport") != McpServer.Transport.STDIO:
            return True
        return self.cleaned_data.get("confirmed_command", "") == self.preview_command_line()

    def service_kwargs(self) -> dict[str, Any]:
        """The cleaned form as keyword arguments of mcp_server_create / mcp_server_update."""
        data = self.cleaned_data
        return {
            "mcp_id": data["mcp_id"].strip(),
            "description": data["description"],
            "transport": data["transport"],
            "command": data["command"].strip(),
            "args": split_lines(data["args"]),
            "env_names": split_names(data["env_names"]),
            "url": data["url"].strip(),
            "header_names": split_names(data["header_names"]),
            "timeout_s": data["timeout_s"],
            "enabled": data["enabled"],
        }


# --------------------------------------------------------------------------- the "call tool" form


class _Omit:
    """Marks an optional argument left empty: it is left out of the call."""


OMIT = _Omit()


def _json_value(text: str) -> Any:
    try:
        return strictjson.loads(text)
    except strictjson.JSONInputError as exc:
        if (err := exc.decode_error) is not None:
            raise forms.ValidationError(
                _("This is not valid JSON: %(msg)s (line %(lineno)s, column %(colno)s).")
                % {"msg": json_error_reason(err.msg), "lineno": err.lineno, "colno": err.colno}
            ) from None
        raise forms.ValidationError(_("This JSON is refused: %(exc)s.") % {"exc": exc}) from None


class JsonField(forms.CharField):
    """A textarea holding one JSON value (arrays, objects and schemas the form cannot map)."""

    widget = forms.Textarea(attrs={"rows": 3, "class": "code"})

    def to_python(self, value: Any) -> Any:
        text = super().to_python(value)
        if text in self.empty_values:
            return OMIT
        return _json_value(text)

    def validate(self, value: Any) -> None:
        if value is OMIT and self.required:
            raise forms.ValidationError(self.error_messages["required"], code="required")


def schema_kind(prop: dict[str, Any]) -> str:
    """How a property is edited: enum, string, integer, number, boolean or json."""
    if isinstance(prop.get("enum"), list) and prop["enum"]:
        return "enum"
    kind = prop.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    if kind is None:
        # pydantic writes Optional[X] as anyOf [X, null].
        options = [o for o in prop.get("anyOf") or [] if isinstance(o, dict) and o.get("type") != "null"]
        if len(options) == 1 and len(prop.get("anyOf")) == 2:
            return schema_kind(options[0])
    return kind if kind in {"string", "integer", "number", "boolean"} else "json"


class ToolCallForm(forms.Form):
    """One field per input-schema property; ``params`` describes each for the template."""

    def __init__(self, schema: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params: list[dict[str, Any]] = []
        self._names: dict[str, str] = {}
        props = schema.get("properties") if isinstance(schema, dict) else None
        required = set(schema.get("required") or []) if isinstance(schema, dict) else set()
        if not isinstance(props, dict) or len(props) > MAX_GENERATED_FIELDS:
            # No usable properties: edit the whole argument object as JSON.
            self.fields["arguments_json"] = JsonField(
                label=_("Arguments (JSON object)"), required=False, initial="{}"
            )
            self._names["arguments_json"] = ""
            self.params.append(
                {"field": "arguments_json", "name": "arguments", "kind": "json", "required": False}
            )
            return
        for index, (name, prop) in enumerate(props.items()):
            prop = prop if isinstance(prop, dict) else {}
            field_name = f"arg_{index}"
            kind = schema_kind(prop)
            self.fields[field_name] = _field_for(kind, prop, required=name in required)
            self._names[field_name] = str(name)
            self.params.append(
                {
                    "field": field_name,
                    "name": str(name),
                    "kind": kind,
                    "required": name in required,
                    # Untrusted text from the server: templates escape it (never help_text, which Django does not).
                    "description": str(prop.get("description") or ""),
                }
            )

    def bound_params(self) -> list[dict[str, Any]]:
        """``params`` with each bound field attached (for the template)."""
        return [{**p, "bound": self[p["field"]]} for p in self.params]

    def arguments(self) -> dict[str, Any]:
        """The call's arguments from the cleaned form; empty optional fields are left out."""
        if "arguments_json" in self._names:
            value = self.cleaned_data.get("arguments_json")
            return {} if value is OMIT else value
        out: dict[str, Any] = {}
        for field, value in self.cleaned_data.items():
            empty_number = value is None and isinstance(
                self.fields[field], forms.IntegerField | forms.FloatField
            )
            if value is not OMIT and not empty_number:
                out[self._names[field]] = value
        return out


def _field_for(kind: str, prop: dict[str, Any], *, required: bool) -> forms.Field:
    default = prop.get("default")
    common: dict[str, Any] = {"required": required, "label": ""}
    if kind == "enum":
        choices = [(json.dumps(v, ensure_ascii=False), str(v)) for v in prop["enum"]]
        if not required:
            choices.insert(0, ("", "(leave out)"))
        return forms.TypedChoiceField(
            choices=choices,
            coerce=json.loads,
            empty_value=OMIT,
            initial=json.dumps(default, ensure_ascii=False) if default is not None else None,
            **common,
        )
    if kind == "boolean":
        choices = [("true", "true"), ("false", "false")]
        if not required:
            choices.insert(0, ("", "(leave out)"))
        return forms.TypedChoiceField(
            choices=choices,
            coerce=lambda v: v == "true",
            empty_value=OMIT,
            initial=("true" if default else "false") if isinstance(default, bool) else None,
            **common,
        )
    if kind == "integer":
        return forms.IntegerField(initial=default, **common)
    if kind == "number":
        return forms.FloatField(initial=default, **common)
    if kind == "string":
        return forms.CharField(
            strip=False, initial=default, empty_value=OMIT if not required else "", **common
        )
    return JsonField(
        initial=json.dumps(default, ensure_ascii=False) if default is not None else None, **common
    )


class RawArgumentsForm(forms.Form):
    """The call's arguments typed as one JSON object, checked against the tool's input schema (jsonschema).

    Beside :class:`ToolCallForm` on the same page (``mode=json``); the text is kept as typed, so
    an error never loses it, and the object keeps the key order it was typed in.
    """

    arguments_raw = forms.CharField(
        label="Arguments (JSON object)",
        required=False,
        strip=False,
        max_length=200_000,
        widget=forms.Textarea(attrs={"rows": 10, "class": "code", "spellcheck": "false"}),
    )

    def __init__(self, schema: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.schema = schema if isinstance(schema, dict) else {}

    def clean_arguments_raw(self) -> dict[str, Any]:
        text = self.cleaned_data.get("arguments_raw") or ""
        if not text.strip():
            raise forms.ValidationError(
                _('Type the arguments as a JSON object, like {"q": "refund"} ({} for none).')
            )
        value = _json_value(text)
        if not isinstance(value, dict):
            raise forms.ValidationError(
                _("The arguments must be a JSON object ({...}), not %(json_kind)s.")
                % {"json_kind": _json_kind(value)}
            )
        errors = schema_errors(self.schema, value)
        if errors:
            raise forms.ValidationError(
                ["These arguments do not fit the tool's input schema:", *errors], code="schema"
            )
        return value

    def arguments(self) -> dict[str, Any]:
        """The parsed object, keys in the order typed."""
        return self.cleaned_data["arguments_raw"]


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return "a number"
