"""`llamon run` as a subprocess for the web-side tests: a served project, `llamon new`, an A2A message."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import free_port

VENV_LLAMON = Path(sys.executable).with_name("llamon")
LLAMON = [str(VENV_LLAMON)] if VENV_LLAMON.exists() else [sys.executable, "-m", "llamon_agent.cli"]


class Served:
    """One `llamon run` subprocess and its log."""

    def __init__(self, path: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.log = path.parent / f"{path.name}.log"
        self.process = subprocess.Popen(
            [*LLAMON, "run", str(path), "--port", str(self.port)],
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
            env=env,
        )

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"`llamon run` exited {self.process.returncode}:\n{self.output()}")
            try:
                if httpx.get(self.url + ".well-known/agent-card.json", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"`llamon run` did not serve within {timeout_s} s:\n{self.output()}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()


def new_project(template: str, target: Path) -> Path:
    result = subprocess.run(
        [*LLAMON, "new", "--template", template, str(target)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return target


async def a2a_send(url: str, text: str, metadata: dict[str, Any]) -> str:
    from a2a.client import ClientConfig, create_client
    from a2a.helpers import get_message_text, new_text_part
    from a2a.types import Message, Role, SendMessageRequest

    client = await create_client(url, client_config=ClientConfig(streaming=False))
    message = Message(role=Role.ROLE_USER, parts=[new_text_part(text)], message_id=str(uuid.uuid4()))
    message.metadata.update(metadata)
    replies = [event async for event in client.send_message(SendMessageRequest(message=message))]
    return get_message_text(replies[0].message)
