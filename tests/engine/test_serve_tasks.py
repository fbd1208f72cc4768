"""Issue 29 item 6: a served agent answers with a Task when asked, streams it, keeps it for
``tasks/get`` (bounded), and cancels it; a plain blocking send still gets one Message.

In process (``httpx.ASGITransport`` against ``build_app``), with the 1.0 (``A2A-Version: 1.0``)
and 0.3 JSON-RPC methods; a2a-sdk 1.x's own client streams; and an a2a-sdk 0.3 client from its
side virtualenv streams and reads the task back from a uvicorn server on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest

from llamon_agent.serve import BoundedTaskStore, Outcome, build_app
from llamon_agent.tools import AgentRequest
from llamon_agent.trace import TraceSink
from tests.conftest import free_port
from tests.support.serve import react_runner, route_missing, route_order
from tests.support.side_venvs import A2A_03

pytestmark = pytest.mark.timeout(60)
ROOT = Path(__file__).resolve().parents[2]
URL = "http://127.0.0.1:8001/"
V10 = {"A2A-Version": "1.0"}
ANSWER = '확정 호출 결과를 바탕으로 답변합니다:\n1. get_order (order-service): {"order": "A-1001", "status": "shipped"}'
SUCCEEDED = {"status": "succeeded", "error": "", "errorKind": ""}


class HeldRunner:
    """A runner whose answer waits ``hold_s`` seconds (unless cancelled first): for tasks/cancel."""

    name = "held"
    kind: Literal["react", "flow"] = "react"
    source: Literal["served", "flow"] = "served"
    description = "waits"

    def __init__(self, hold_s: float = 30) -> None:
        self.hold_s = hold_s
        self.cancelled = 0

    async def answer(self, request: AgentRequest, sink: TraceSink | None) -> Outcome:
        try:
            await asyncio.sleep(self.hold_s)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return Outcome("succeeded", "late", "")


def message(text: str = "주문 조회", *, v03: bool = False) -> dict[str, Any]:
    if v03:
        return {
            "kind": "message",
            "role": "user",
            "messageId": uuid.uuid4().hex,
            "parts": [{"kind": "text", "text": text}],
        }
    return {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]}


class Rpc:
    """JSON-RPC calls to the app in process, all on one event loop (the handler keeps tasks on it)."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def __call__(self, method: str, params: Any, *, v03: bool = False) -> dict[str, Any]:
        payload = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        response = await self.client.post("/", json=payload, headers={} if v03 else V10)
        assert response.status_code == 200, response.text
        return response.json()

    async def stream(self, method: str, params: Any, *, v03: bool = False) -> list[dict[str, Any]]:
        payload = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        response = await self.client.post("/", json=payload, headers={} if v03 else V10)
        assert response.status_code == 200 and response.headers["content-type"].startswith(
            "text/event-stream"
        )
        return [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]

    async def settled(self, task_id: str, *, v03: bool = False) -> dict[str, Any]:
        """tasks/get until the task is no longer submitted or working."""
        for _ in range(200):
            if v03:
                task = (await self("tasks/get", {"id": task_id}, v03=True))["result"]
                if task["status"]["state"] not in ("submitted", "working"):
                    return task
            else:
                task = (await self("GetTask", {"id": task_id}))["result"]
                if task["status"]["state"] not in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"):
                    return task
            await asyncio.sleep(0.02)
        raise AssertionError(f"task {task_id} did not finish: {task}")


def run(app: Any, scenario: Any) -> Any:
    async def go() -> Any:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8001") as client:
            return await scenario(Rpc(client))

    return asyncio.run(go())


def test_a_blocking_send_still_gets_one_message_and_no_task_id_that_leads_nowhere() -> None:
    app = build_app(react_runner([route_order]), URL)

    async def scenario(rpc: Rpc) -> None:
        reply = (await rpc("SendMessage", {"message": message()}))["result"]["message"]
        assert reply["parts"][0]["text"] == ANSWER and reply["metadata"] == SUCCEEDED
        assert "taskId" not in reply  # was a task id that GetTask answered with -32001
        old = (await rpc("message/send", {"message": message(v03=True)}, v03=True))["result"]
        assert old["kind"] == "message" and old["metadata"] == SUCCEEDED and "taskId" not in old

    run(app, scenario)


def test_a_send_that_does_not_wait_gets_a_task_that_tasks_get_reads_when_done() -> None:
    app = build_app(react_runner([route_order]), URL)

    async def scenario(rpc: Rpc) -> None:
        params = {"message": message(), "configuration": {"returnImmediately": True}}
        task = (await rpc("SendMessage", params))["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
        done = await rpc.settled(task["id"])
        assert done["status"]["state"] == "TASK_STATE_COMPLETED"
        assert done["status"]["message"]["parts"][0]["text"] == ANSWER
        assert done["status"]["message"]["metadata"] == SUCCEEDED
        [artifact] = done["artifacts"]
        assert artifact["name"] == "answer" and artifact["parts"][0]["text"] == ANSWER
        # The pre-step's line was a "working" status; it is in the history after the request.
        assert [m["parts"][0]["text"] for m in done["history"]] == [
            "주문 조회",
            "Deterministic pre-step 완료: 1건",
        ]
        # A 0.3 client: blocking false, then tasks/get.
        params03 = {"message": message(v03=True), "configuration": {"blocking": False}}
        task03 = (await rpc("message/send", params03, v03=True))["result"]
        assert task03["kind"] == "task" and task03["status"]["state"] == "submitted"
        done03 = await rpc.settled(task03["id"], v03=True)
        assert (
            done03["status"]["state"] == "completed" and done03["artifacts"][0]["parts"][0]["text"] == ANSWER
        )

    run(app, scenario)


def test_message_stream_sends_status_updates_then_the_answer() -> None:
    app = build_app(react_runner([route_order]), URL)

    async def scenario(rpc: Rpc) -> None:
        events = [e["result"] for e in await rpc.stream("SendStreamingMessage", {"message": message()})]
        assert [next(iter(e)) for e in events] == [
            "task",
            "statusUpdate",
            "statusUpdate",
            "artifactUpdate",
            "statusUpdate",
        ]
        assert events[0]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
        working, prestep, answer, completed = (next(iter(e.values())) for e in events[1:])
        assert working["status"]["state"] == prestep["status"]["state"] == "TASK_STATE_WORKING"
        assert prestep["status"]["message"]["parts"][0]["text"] == "Deterministic pre-step 완료: 1건"
        assert answer["artifact"]["parts"][0]["text"] == ANSWER
        assert completed["status"]["state"] == "TASK_STATE_COMPLETED"
        assert completed["status"]["message"]["metadata"] == SUCCEEDED
        stored = (await rpc("GetTask", {"id": completed["taskId"]}))["result"]
        assert stored["status"]["state"] == "TASK_STATE_COMPLETED"

        old = [
            e["result"] for e in await rpc.stream("message/stream", {"message": message(v03=True)}, v03=True)
        ]
        assert [e["kind"] for e in old] == [
            "task",
            "status-update",
            "status-update",
            "artifact-update",
            "status-update",
        ]
        assert old[-1]["final"] is True and old[-1]["status"]["state"] == "completed"
        assert old[-1]["status"]["message"]["parts"][0]["text"] == ANSWER
        stored03 = (await rpc("tasks/get", {"id": old[0]["id"]}, v03=True))["result"]
        assert stored03["status"]["state"] == "completed"

    run(app, scenario)


def test_a_failed_run_is_a_failed_task_with_its_error() -> None:
    app = build_app(react_runner([route_order, route_missing]), URL)

    async def scenario(rpc: Rpc) -> None:
        events = [e["result"] for e in await rpc.stream("SendStreamingMessage", {"message": message()})]
        final = events[-1]["statusUpdate"]["status"]
        assert final["state"] == "TASK_STATE_FAILED"
        error = "MCP 'missing-server'의 tool이 로드되지 않음"
        assert final["message"]["parts"][0]["text"] == error
        assert final["message"]["metadata"] == {"status": "failed", "error": error, "errorKind": "failed"}
        assert not [e for e in events if "artifactUpdate" in e]  # no answer artifact for a failed run

    run(app, scenario)


def test_tasks_cancel_cancels_the_run() -> None:
    runner = HeldRunner()
    app = build_app(runner, URL)

    async def scenario(rpc: Rpc) -> None:
        params = {"message": message(), "configuration": {"returnImmediately": True}}
        task = (await rpc("SendMessage", params))["result"]["task"]
        for _ in range(100):  # until the run is under way
            if (await rpc("GetTask", {"id": task["id"]}))["result"]["status"][
                "state"
            ] == "TASK_STATE_WORKING":
                break
            await asyncio.sleep(0.01)
        cancelled = (await rpc("CancelTask", {"id": task["id"]}))["result"]
        assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
        assert runner.cancelled == 1
        stored = (await rpc("GetTask", {"id": task["id"]}))["result"]
        assert stored["status"]["state"] == "TASK_STATE_CANCELED"
        assert stored["status"]["message"]["metadata"]["status"] == "cancelled"
        # A finished task cannot be cancelled; an unknown one is not found (0.3 too).
        again = await rpc("CancelTask", {"id": task["id"]})
        assert again["error"]["code"] == -32002
        assert (await rpc("tasks/cancel", {"id": "nope"}, v03=True))["error"]["code"] == -32001

    run(app, scenario)


def test_a_client_can_resubscribe_to_a_running_task_but_not_list_tasks() -> None:
    runner = HeldRunner(hold_s=0.2)
    app = build_app(runner, URL)

    async def scenario(rpc: Rpc) -> None:
        params = {"message": message(), "configuration": {"returnImmediately": True}}
        task_id = (await rpc("SendMessage", params))["result"]["task"]["id"]
        events = [e["result"] for e in await rpc.stream("SubscribeToTask", {"id": task_id})]
        assert events[0]["task"]["id"] == task_id
        assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        params03 = {"message": message(v03=True), "configuration": {"blocking": False}}
        task03 = (await rpc("message/send", params03, v03=True))["result"]["id"]
        events03 = [e["result"] for e in await rpc.stream("tasks/resubscribe", {"id": task03}, v03=True)]
        assert events03[0]["kind"] == "task" and events03[-1]["status"]["state"] == "completed"
        # No caller identities: a list would show everyone's requests and answers to anyone.
        refused = (await rpc("ListTasks", {}))["error"]
        assert refused["code"] == -32004 and "GetTask" in refused["message"]

    run(app, scenario)


def test_finished_tasks_are_forgotten_beyond_the_bound() -> None:
    store = BoundedTaskStore(kept=2)
    app = build_app(react_runner([route_order]), URL, task_store=store)

    async def scenario(rpc: Rpc) -> None:
        ids = []
        for _ in range(3):
            events = await rpc.stream("SendStreamingMessage", {"message": message()})
            ids.append(events[0]["result"]["task"]["id"])
        assert len(store) == 2
        assert (await rpc("GetTask", {"id": ids[0]}))["error"]["code"] == -32001  # the oldest went
        for task_id in ids[1:]:
            assert (await rpc("GetTask", {"id": task_id}))["result"]["status"][
                "state"
            ] == "TASK_STATE_COMPLETED"

    run(app, scenario)


def test_finished_tasks_expire_after_their_ttl_and_running_ones_stay() -> None:
    from a2a.server.context import ServerCallContext
    from a2a.types import Task, TaskState, TaskStatus

    now = [1000.0]
    store = BoundedTaskStore(kept=10, ttl_s=60, clock=lambda: now[0])
    context = ServerCallContext()

    def task(task_id: str, state: int) -> Task:
        return Task(id=task_id, context_id="c", status=TaskStatus(state=state))

    async def go() -> None:
        await store.save(task("done", TaskState.TASK_STATE_COMPLETED), context)
        await store.save(task("running", TaskState.TASK_STATE_WORKING), context)
        now[0] += 59
        assert await store.get("done", context) is not None
        now[0] += 2
        assert await store.get("done", context) is None
        assert await store.get("running", context) is not None  # never evicted while it runs
        assert len(store) == 0

    asyncio.run(go())


def test_hostile_task_requests_get_json_rpc_errors() -> None:
    app = build_app(react_runner([route_order]), URL)

    async def scenario(rpc: Rpc) -> None:
        assert (await rpc("GetTask", {"id": "no-such-task"}))["error"]["code"] == -32001
        assert (await rpc("tasks/get", {"id": "no-such-task"}, v03=True))["error"]["code"] == -32001
        task_id = (await rpc.stream("SendStreamingMessage", {"message": message()}))[0]["result"]["task"][
            "id"
        ]
        assert (await rpc("GetTask", {"id": task_id, "historyLength": -1}))["error"]["code"] == -32602
        assert (await rpc("GetTask", {"id": task_id, "historyLength": 10**12}))["error"]["code"] == -32602
        huge = (await rpc("GetTask", {"id": task_id, "historyLength": 2**31 - 1}))["result"]
        assert len(huge["history"]) == 2
        assert (await rpc("GetTask", {"id": ["x"]}))["error"]["code"] == -32602
        assert (await rpc("GetTask", "x"))["error"]["code"] in (-32600, -32602)
        # The 0.3 adapter calls bad params an invalid request.
        bad03 = await rpc("tasks/get", {"id": task_id, "historyLength": "many"}, v03=True)
        assert bad03["error"]["code"] == -32600
        bad_config = {"message": message(), "configuration": {"historyLength": -5}}
        assert (await rpc("SendMessage", bad_config))["error"]["code"] == -32602
        # A message naming a task that does not exist is refused, not run.
        orphan = {**message(), "taskId": "no-such-task"}
        assert (await rpc("SendMessage", {"message": orphan}))["error"]["code"] == -32001

    run(app, scenario)


def test_an_a2a_1x_client_streams_the_task() -> None:
    from a2a.client import ClientConfig, create_client
    from a2a.helpers import get_message_text, new_text_part
    from a2a.types import GetTaskRequest, Message, Role, SendMessageRequest, TaskState

    app = build_app(react_runner([route_order]), URL)

    async def go() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=URL) as http:
            client = await create_client(URL, client_config=ClientConfig(streaming=True, httpx_client=http))
            request = Message(
                role=Role.ROLE_USER, parts=[new_text_part("주문 조회")], message_id=uuid.uuid4().hex
            )
            events = [event async for event in client.send_message(SendMessageRequest(message=request))]
            kinds = [event.WhichOneof("payload") for event in events]
            assert kinds == ["task", "status_update", "status_update", "artifact_update", "status_update"]
            final = events[-1].status_update.status
            assert final.state == TaskState.TASK_STATE_COMPLETED and get_message_text(final.message) == ANSWER
            task = await client.get_task(GetTaskRequest(id=events[0].task.id))
            assert task.status.state == TaskState.TASK_STATE_COMPLETED

    asyncio.run(go())


@pytest.fixture
def served_on_loopback() -> Iterator[str]:
    """The app on 127.0.0.1 (uvicorn in a thread of this process): for a client in another process."""
    import uvicorn

    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    config = uvicorn.Config(
        build_app(react_runner([route_order]), url),
        host="127.0.0.1",
        port=port,
        lifespan="off",
        log_level="warning",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(500):
        if server.started:
            break
        threading.Event().wait(0.01)
    assert server.started, "uvicorn did not start"
    yield url
    server.should_exit = True
    thread.join(10)


def test_an_a2a_03_client_streams_and_reads_the_task(served_on_loopback: str) -> None:
    python = A2A_03.python()
    client = ROOT / "tests" / "servers" / "a2a_v03_task_client.py"
    result = subprocess.run(
        [str(python), str(client), served_on_loopback, "주문 조회 A-1001"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["sdk"].startswith("0.3.") and out["streaming"] is True
    events = out["events"]
    assert [(e["kind"], e["state"]) for e in events] == [
        ("task", "submitted"),
        ("status-update", "working"),
        ("status-update", "working"),
        ("artifact-update", ""),
        ("status-update", "completed"),
    ]
    assert events[2]["text"] == "Deterministic pre-step 완료: 1건"
    assert events[-1]["final"] is True and events[-1]["metadata"] == SUCCEEDED
    assert "확정 호출 결과" in events[-1]["text"]
    assert out["task"]["state"] == "completed" and "확정 호출 결과" in out["task"]["artifacts"][0]
    assert out["unknown"].startswith("A2AClientJSONRPCError") and "-32001" in out["unknown"]


def test_one_callers_large_tasks_push_out_only_its_own() -> None:
    """A caller (here: unauthenticated, from one address) that sends large messages without
    waiting keeps at most its byte budget of finished tasks; another caller's task stays."""
    store = BoundedTaskStore(kept=1000, bytes_per_caller=1_000_000)
    app = build_app(react_runner([route_order]), URL, task_store=store)
    big = "주문 조회 " + "x" * 200_000  # ~200 KB of request kept in each task's history

    async def go() -> None:
        def client(address: str) -> httpx.AsyncClient:
            transport = httpx.ASGITransport(app=app, client=(address, 40000))
            return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8001")

        async with client("10.0.0.2") as other, client("10.0.0.1") as flooder:
            quiet, loud = Rpc(other), Rpc(flooder)
            kept = (await quiet.stream("SendStreamingMessage", {"message": message()}))[0]
            kept_id = kept["result"]["task"]["id"]
            ids = []
            for _ in range(12):
                events = await loud.stream("SendStreamingMessage", {"message": message(big)})
                ids.append(events[0]["result"]["task"]["id"])
            assert 0 < store.bytes_of("address:10.0.0.1") <= 1_000_000
            assert len(store) < 12  # the flood's oldest went
            assert (await loud("GetTask", {"id": ids[0]}))["error"]["code"] == -32001
            assert (await loud("GetTask", {"id": ids[-1]}))["result"]["status"][
                "state"
            ] == "TASK_STATE_COMPLETED"
            done = (await quiet("GetTask", {"id": kept_id}))["result"]
            assert done["status"]["state"] == "TASK_STATE_COMPLETED"  # the other caller's is kept

    asyncio.run(go())
