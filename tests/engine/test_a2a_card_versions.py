"""Issue 18: a project served by ``llamon run`` is usable by A2A 0.3 clients and by 1.x clients.

A react project made by ``llamon new`` is served by a real ``llamon run`` subprocess (demo
MCP servers over stdio from its registry.yaml). Two real clients talk to it:

* a2a-sdk 0.3.x, in its own virtualenv (tests/support/side_venvs.py), runs
  tests/servers/a2a_v03_client.py: its card resolver validates the card with the 0.3 model
  (which requires ``url``), then it sends ``message/send`` and reads the answer;
* this project's a2a-sdk 1.x: ``create_client`` + ``SendMessage``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port
from tests.support.side_venvs import A2A_03

ROOT = Path(__file__).resolve().parents[2]
CLIENT_V03 = ROOT / "tests" / "servers" / "a2a_v03_client.py"
VENV_LLAMON = Path(sys.executable).with_name("llamon")
LLAMON = [str(VENV_LLAMON)] if VENV_LLAMON.exists() else [sys.executable, "-m", "llamon_agent.cli"]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``llamon run`` on a fresh react project; yields its A2A URL."""
    project = tmp_path_factory.mktemp("a2a") / "support-agent"
    made = subprocess.run(
        [*LLAMON, "new", "--template", "react", str(project)], capture_output=True, text=True, timeout=60
    )
    assert made.returncode == 0, made.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMON_") and k != "MCP_ID"}
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    log = project.parent / "serve.log"
    process = subprocess.Popen(
        [*LLAMON, "run", str(project), "--port", str(port)],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            if process.poll() is not None:
                raise AssertionError(f"`llamon run` exited {process.returncode}:\n{log.read_text()}")
            try:
                if httpx.get(url + ".well-known/agent-card.json", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"`llamon run` did not serve within 90 s:\n{log.read_text()}")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.mark.slow
def test_a_10_and_a_03_client_get_the_card_and_the_answer(served: str, subtests: pytest.Subtests) -> None:
    """One test for the one `llamon run` server (a module fixture is set up again on every test
    process that runs one of its tests)."""
    with subtests.test("the card has a 1.0 and a 0.3 interface"):
        card = httpx.get(served + ".well-known/agent-card.json").json()
        assert card["supportedInterfaces"] == [
            {"url": served, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": served, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        ]
        # The 0.3 shape, which the SDK adds for a 0.3 interface: a 0.3 client requires `url`.
        assert (card["url"], card["preferredTransport"], card["protocolVersion"]) == (
            served,
            "JSONRPC",
            "0.3",
        )
    with subtests.test("an a2a-sdk 0.3 client loads the card and gets the answer"):
        _v03_client_gets_the_answer(served)
    with subtests.test("an a2a-sdk 1.x client still gets the answer"):
        _1x_client_gets_the_answer(served)


def _v03_client_gets_the_answer(served: str) -> None:
    python = A2A_03.python()
    result = subprocess.run(
        [str(python), str(CLIENT_V03), served, "주문 조회 A-1001 부탁해", json.dumps({"userId": "C-1001"})],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["sdk"].startswith("0.3.")
    assert out["card"]["name"] == "support-agent" and out["card"]["url"] == served
    reply = out["reply"]
    assert reply["role"] == "agent" and reply["metadata"]["status"] == "succeeded"
    # The pre-step called get_order on the demo order-service: its result is in the answer.
    assert "확정 호출 결과" in reply["text"] and "A-1001" in reply["text"]


def _1x_client_gets_the_answer(served: str) -> None:
    from a2a.client import ClientConfig, create_client
    from a2a.helpers import get_message_text, new_text_part
    from a2a.types import Message, Role, SendMessageRequest

    async def send() -> str:
        client = await create_client(served, client_config=ClientConfig(streaming=False))
        message = Message(
            role=Role.ROLE_USER, parts=[new_text_part("주문 조회 A-1002")], message_id=uuid.uuid4().hex
        )
        replies = [event async for event in client.send_message(SendMessageRequest(message=message))]
        return get_message_text(replies[0].message)

    answer = asyncio.run(send())
    assert "확정 호출 결과" in answer and "A-1002" in answer
