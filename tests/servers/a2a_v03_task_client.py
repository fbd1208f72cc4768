"""An A2A 0.3 client (a2a-sdk 0.3.x) that streams one message and then reads its task back.

Run by tests/engine/test_serve_tasks.py with the python of the a2a-sdk 0.3 side virtualenv
(tests/support/side_venvs.py). It loads the card, sends ``message/stream`` (the card says
``streaming: true``), then ``tasks/get`` for the streamed task and ``tasks/get`` for an unknown id.
Prints one JSON object: ``{"sdk", "events": [{"kind", "state", "text"}], "task": {...},
"unknown": "<error>"}``; a failure exits non-zero with the traceback on stderr.

    python a2a_v03_task_client.py http://127.0.0.1:PORT/ "주문 조회 A-1001"
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from importlib.metadata import version

import httpx
from a2a.client import A2ACardResolver, A2AClientError, ClientConfig, ClientFactory
from a2a.types import Message, Part, Role, TaskQueryParams, TextPart


def _text(parts: list[Part] | None) -> str:
    return "".join(p.root.text for p in parts or [] if isinstance(p.root, TextPart))


async def main(base_url: str, text: str) -> dict:
    async with httpx.AsyncClient(timeout=30) as http:
        card = await A2ACardResolver(http, base_url).get_agent_card()
        client = ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(card)
        message = Message(role=Role.user, parts=[Part(root=TextPart(text=text))], message_id=uuid.uuid4().hex)
        events = []
        task_id = None
        async for event in client.send_message(message):
            if isinstance(event, Message):
                raise SystemExit(f"expected task events, got a Message: {event!r}")
            task, update = event
            task_id = task.id
            if update is None:
                events.append({"kind": "task", "state": task.status.state.value, "text": ""})
            elif update.kind == "status-update":
                status = update.status
                events.append(
                    {
                        "kind": "status-update",
                        "state": status.state.value,
                        "text": _text(status.message.parts if status.message else None),
                        "final": update.final,
                        "metadata": status.message.metadata if status.message else None,
                    }
                )
            else:
                events.append({"kind": "artifact-update", "state": "", "text": _text(update.artifact.parts)})
        task = await client.get_task(TaskQueryParams(id=task_id))
        try:
            await client.get_task(TaskQueryParams(id="no-such-task"))
            unknown = ""
        except A2AClientError as exc:
            unknown = f"{type(exc).__name__}: {exc}"
        return {
            "sdk": version("a2a-sdk"),
            "streaming": card.capabilities.streaming,
            "events": events,
            "task": {
                "id": task.id,
                "state": task.status.state.value,
                "artifacts": [_text(a.parts) for a in task.artifacts or []],
                "metadata": task.status.message.metadata if task.status.message else None,
            },
            "unknown": unknown,
        }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2])), ensure_ascii=False))
