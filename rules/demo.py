"""The demo: the example MCP servers (and, as later parts land, the seed's rule set and agent)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.conf import settings

from rules.services import mcp_server_upsert

EXAMPLES = Path(settings.BASE_DIR) / "examples" / "mcp_servers"
DEMO_HTTP_PORT = 8765

DEMO_SERVERS: list[dict[str, Any]] = [
    {
        "mcp_id": "order-service",
        "description": "Demo orders: get_order, list_orders (stdio).",
        "script": "order_service.py",
    },
    {
        "mcp_id": "customer-crm",
        "description": "Demo customer profiles: get_customer_profile (stdio).",
        "script": "customer_crm.py",
    },
    {
        "mcp_id": "knowledge-base",
        "description": "Demo help articles in Korean and English: search_docs (stdio).",
        "script": "knowledge_base.py",
    },
]


def demo_load(*, http_port: int = DEMO_HTTP_PORT) -> list[tuple[str, bool]]:
    """Register the demo servers (idempotent); returns (mcp_id, created) pairs."""
    done = []
    for entry in DEMO_SERVERS:
        _, created = mcp_server_upsert(
            actor=None,
            mcp_id=entry["mcp_id"],
            description=entry["description"],
            transport="stdio",
            command=sys.executable,
            args=[str(EXAMPLES / entry["script"])],
            timeout_s=30.0,
        )
        done.append((entry["mcp_id"], created))
    _, created = mcp_server_upsert(
        actor=None,
        mcp_id="order-service-http",
        description="The order service over streamable HTTP (started by `make run`).",
        transport="http",
        url=f"http://127.0.0.1:{http_port}/mcp",
        timeout_s=30.0,
    )
    done.append(("order-service-http", created))
    return done
