"""Pinned tool outputs: the tester's Execute reuses a recorded output instead of calling the tool.

A pin is ``{"mcp_id": str, "tool_name": str, "params"?: object, "output": any JSON}``. A call
matches a pin with the same server, tool and params (compared as JSON); a pin without
``params`` matches any call of its tool. Exact pins win over tool-wide ones, earlier over later.
Pins come from a run's recorded pre-step calls ("Open in tester" with outputs), from a case, or
are typed in; they only change Execute (a dry run calls nothing anyway).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from django.utils.translation import gettext as _

from llamon_agent.prestep import call_checked
from rules.errors import RuleError, json_type_name
from servers.messages import unknown_tool_message

MAX_PINS = 100
MAX_PINNED_BYTES = 200_000  # all pins together, as UTF-8 JSON
_PIN_KEYS = frozenset({"mcp_id", "tool_name", "params", "output"})


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def pins_clean(value: Any, servers: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pins checked (shape, size, and that each tool is on its server); RuleError with a sentence."""
    if value is None:
        return []
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        raise RuleError(
            _("Pinned outputs must be a JSON list of objects, not %(value)s.")
            % {"value": json_type_name(value)},
            field="pinned",
        )
    if len(value) > MAX_PINS:
        raise RuleError(
            _("There are %(n_value)s pinned outputs; the limit is %(MAX_PINS)s.")
            % {"n_value": len(value), "MAX_PINS": MAX_PINS},
            field="pinned",
        )
    size = len(_canonical(value).encode())
    if size > MAX_PINNED_BYTES:
        raise RuleError(
            _("Pinned outputs are %(size)s bytes together; the limit is %(MAX_PINNED_BYTES)s.")
            % {"size": format(size, ","), "MAX_PINNED_BYTES": format(MAX_PINNED_BYTES, ",")},
            field="pinned",
        )
    out = []
    for i, pin in enumerate(value, start=1):
        where = _("Pinned output %(number)s") % {"number": i}
        if not isinstance(pin, dict):
            raise RuleError(
                _("%(where)s must be a JSON object, not %(pin)s.")
                % {"where": where, "pin": json_type_name(pin)},
                field="pinned",
            )
        unknown = sorted(set(pin) - _PIN_KEYS)
        if unknown:
            raise RuleError(
                _("%(where)s has unknown field(s) %(join)s; use mcp_id, tool_name, params, output.")
                % {"where": where, "join": ", ".join(unknown)},
                field="pinned",
            )
        for key in ("mcp_id", "tool_name"):
            if not isinstance(pin.get(key), str) or not pin[key]:
                raise RuleError(
                    _("%(where)s needs a %(key)s (a text).") % {"where": where, "key": key}, field="pinned"
                )
        if "output" not in pin:
            raise RuleError(
                _("%(where)s needs an output (the recorded result, any JSON).") % {"where": where},
                field="pinned",
            )
        if "params" in pin and not isinstance(pin["params"], dict):
            raise RuleError(
                _("%(where)s: params must be a JSON object (or left out to match any call of the tool).")
                % {"where": where},
                field="pinned",
            )
        server = servers.get(pin["mcp_id"])
        if server is None:
            raise RuleError(
                _("%(where)s: there is no MCP server %(mcp_id)r.")
                % {"where": where, "mcp_id": pin["mcp_id"]},
                field="pinned",
            )
        if not any(t.get("name") == pin["tool_name"] for t in server.tools):
            raise RuleError(
                _("%(where)s: %(reason)s")
                % {
                    "where": where,
                    "reason": unknown_tool_message(
                        pin["mcp_id"], pin["tool_name"], [str(t.get("name")) for t in server.tools]
                    ),
                },
                field="pinned",
            )
        out.append({k: pin[k] for k in ("mcp_id", "tool_name", "params", "output") if k in pin})
    return out


def pin_for(pins: Sequence[Mapping[str, Any]], mcp_id: str, tool_name: str, params: Any) -> Any:
    """The pin a call uses (exact params first, then a tool-wide pin), or None."""
    wanted = _canonical(params or {})
    tool_wide = None
    for pin in pins:
        if pin["mcp_id"] != mcp_id or pin["tool_name"] != tool_name:
            continue
        if "params" not in pin:
            tool_wide = tool_wide or pin
        elif _canonical(pin["params"]) == wanted:
            return pin
    return tool_wide


class PinnedToolBackend:
    """A pre-step backend that answers pinned calls from their recorded output and sends the rest on."""

    def __init__(self, inner: Any, pins: Sequence[Mapping[str, Any]], *, tools: Any = None) -> None:
        self.inner = inner
        self.pins = list(pins)
        # With pins, the tool lists come from ``tools`` (the database's, as a dry run reads them):
        # a run replayed from its recorded outputs does not need its servers up.
        self.tools = tools if tools is not None and self.pins else inner
        self.pinned_calls: list[tuple[str, str, str]] = []  # (mcp_id, tool_name, canonical params)

    def tools_for(self, mcp_id: str) -> Any:
        return self.tools.tools_for(mcp_id)

    def call_tool(self, mcp_id: str, tool_name: str, params: dict[str, Any]) -> Any:
        return self.call_tool_checked(mcp_id, tool_name, params)[0]

    def call_tool_checked(
        self, mcp_id: str, tool_name: str, params: dict[str, Any]
    ) -> tuple[Any, Sequence[str]]:
        """A pinned call's recorded output (no warning: it was checked when recorded), or the inner call."""
        pin = pin_for(self.pins, mcp_id, tool_name, params)
        if pin is None:
            return call_checked(self.inner, mcp_id, tool_name, params)
        self.pinned_calls.append((mcp_id, tool_name, _canonical(params or {})))
        return pin["output"], ()

    def was_pinned(self, mcp_id: str | None, tool_name: str | None, params: Any) -> bool:
        return (mcp_id, tool_name, _canonical(params or {})) in self.pinned_calls


def pins_from_steps(steps: Sequence[Any]) -> list[dict[str, Any]]:
    """Pins of a run's pre-step calls that succeeded (rule steps), in order, one per distinct call."""
    out: list[dict[str, Any]] = []
    seen: set[tuple[str, str, str]] = set()
    for step in steps:
        if step.kind != "rule" or step.status != "ok" or not step.tool_name:
            continue
        params = (step.input or {}).get("params") if isinstance(step.input, dict) else None
        key = (step.mcp_id, step.tool_name, _canonical(params or {}))
        if key in seen:
            continue
        seen.add(key)
        out.append(
            {
                "mcp_id": step.mcp_id,
                "tool_name": step.tool_name,
                "params": params or {},
                "output": step.output,
            }
        )
    return out
