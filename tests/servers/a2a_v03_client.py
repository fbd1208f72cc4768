"""An A2A 0.3 client (a2a-sdk 0.3.x): load the agent card, send one message, print what came back.

Run by tests/engine/test_a2a_card_versions.py with the python of a virtualenv holding
``a2a-sdk==0.3.*`` (never this project's own a2a-sdk 1.x). Prints one JSON object:
``{"sdk", "card": {...}, "reply": {"text", "metadata"}}``; a failure exits non-zero with
the traceback on stderr.

    python a2a_v03_client.py http://127.0.0.1:PORT/ "주문 조회 A-1001" '{"userId": "C-1001"}'
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from importlib.metadata import version

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import Message, Part, Role, TextPart


async def main(base_url: str, text: str, metadata: dict) -> dict:
    async with httpx.AsyncClient(timeout=30) as http:
        # The 0.3 resolver validates the card with 0.3's AgentCard model (``url`` is required).
        card = await A2ACardResolver(http, base_url).get_agent_card()
        client = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
        message = Message(
            role=Role.user,
            parts=[Part(root=TextPart(text=text))],
            message_id=uuid.uuid4().hex,
            metadata=metadata,
        )
        replies = [event async for event in client.send_message(message)]
        reply = replies[0]
        if not isinstance(reply, Message):
            raise SystemExit(f"expected one Message, got {reply!r}")
        texts = [p.root.text for p in reply.parts if isinstance(p.root, TextPart)]
        return {
            "sdk": version("a2a-sdk"),
            "card": card.model_dump(mode="json", exclude_none=True),
            "reply": {"text": "".join(texts), "metadata": reply.metadata, "role": reply.role.value},
        }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3])))))
