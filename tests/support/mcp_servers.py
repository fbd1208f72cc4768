"""Shared by the MCP server tests (tests/rules/, tests/api/): the demo servers' scripts, a
knowledge-base server made through the service, and the server form as a browser sends it."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from servers.models import McpServer
from servers.services import mcp_server_create

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "sdk" / "src" / "llamon_agent" / "demo_servers"
KB_SCRIPT = str(EXAMPLES / "knowledge_base.py")
ORDER_SCRIPT = str(EXAMPLES / "order_service.py")
HTMX = {"HTTP_HX_REQUEST": "true"}


def kb_server(admin, mcp_id: str = "knowledge-base", **overrides) -> McpServer:
    """The knowledge-base demo server over stdio, made by ``admin`` through the service."""
    fields = {"transport": "stdio", "command": sys.executable, "args": [KB_SCRIPT], "timeout_s": 30.0}
    fields.update(overrides)
    return mcp_server_create(actor=admin, mcp_id=mcp_id, **fields)


def server_form(**overrides) -> dict[str, str]:
    """The server form's fields for a knowledge-base stdio server, as the browser sends them."""
    data = {
        "mcp_id": "kb-form",
        "description": "",
        "transport": "stdio",
        "command": sys.executable,
        "args": KB_SCRIPT,
        "env_names": "",
        "url": "",
        "header_names": "",
        "timeout_s": "30",
        "enabled": "on",
        "action": "save",
    }
    data.update(overrides)
    return data


def confirmed(data: dict[str, str]) -> dict[str, str]:
    """The form as sent after the preview was seen (the hidden field carries the command line)."""
    args = [a.strip() for a in data["args"].splitlines() if a.strip()]
    return {**data, "confirmed_command": shlex.join([data["command"], *args])}
