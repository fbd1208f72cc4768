"""The embedded broker (atomicfs://, llamon_web/broker.py) never loses or tears a message.

kombu's stock filesystem transport lost 16 of 1,073 messages in benchmarks/bench_broker.py:
a consumer read a file its publisher had created but not yet written.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
from pathlib import Path
from queue import Empty

import pytest
from kombu import Connection

from llamon_web import broker

pytestmark = pytest.mark.timeout(120)
QUEUE = "t"


def _options(base: Path) -> dict:
    for sub in ("queue", "processed", "control"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    return {
        "data_folder_in": str(base / "queue"),
        "data_folder_out": str(base / "queue"),
        "processed_folder": str(base / "processed"),
        "control_folder": str(base / "control"),
        "store_processed": False,
        "polling_interval": 0.01,
    }


def _produce(options: dict, start: int, count: int) -> None:
    with Connection("atomicfs://", transport_options=options) as conn:
        queue = conn.SimpleQueue(QUEUE)
        for i in range(start, start + count):
            queue.put({"i": i, "pad": "x" * (i % 4096)})  # sizes vary: some writes take longer
        queue.close()


def _consume(options: dict, done, out) -> None:
    received, errors = [], []
    with Connection("atomicfs://", transport_options=options) as conn:
        queue = conn.SimpleQueue(QUEUE)
        idle = 0
        while True:
            try:
                message = queue.get(block=True, timeout=0.1)
            except queue.Empty:
                idle = idle + 1 if done.is_set() else 0
                if idle > 10:
                    break
                continue
            except Exception as exc:  # a torn message
                errors.append(repr(exc))
                continue
            idle = 0
            received.append(message.payload["i"])
            message.ack()
        queue.close()
    out.put((received, errors))


def test_no_message_is_lost_or_doubled_under_concurrent_producers_and_consumers(tmp_path) -> None:
    broker.register()
    options = _options(tmp_path)
    ctx = mp.get_context("fork")
    done, out = ctx.Event(), ctx.Queue()
    consumers = [ctx.Process(target=_consume, args=(options, done, out)) for _ in range(2)]
    producers = [ctx.Process(target=_produce, args=(options, k * 1000, 600)) for k in range(3)]
    for proc in consumers + producers:
        proc.start()
    for proc in producers:
        proc.join(60)
        assert proc.exitcode == 0
    done.set()
    received, errors = [], []
    for _ in consumers:
        got, errs = out.get(timeout=60)
        received += got
        errors += errs
    for proc in consumers:
        proc.join(10)
    sent = {k * 1000 + i for k in range(3) for i in range(600)}
    assert errors == []
    assert sorted(received) == sorted(sent)  # every message once: none lost, none doubled
    assert os.listdir(options["data_folder_in"]) == []
    assert os.listdir(options["processed_folder"]) == []


def test_a_reader_never_sees_a_message_that_is_still_being_written(tmp_path, monkeypatch) -> None:
    broker.register()
    options = _options(tmp_path)
    written, go = threading.Event(), threading.Event()
    real_fsync = os.fsync

    def paused_fsync(fd: int) -> None:  # the publisher stops after writing, before the rename
        written.set()
        assert go.wait(30)
        real_fsync(fd)

    monkeypatch.setattr(broker.os, "fsync", paused_fsync)
    with (
        Connection("atomicfs://", transport_options=options) as writer_conn,
        Connection("atomicfs://", transport_options=options) as reader_conn,
    ):
        writer, reader = writer_conn.default_channel, reader_conn.default_channel
        payload = {"body": "x" * 100_000}
        thread = threading.Thread(target=writer._put, args=(QUEUE, payload))
        thread.start()
        try:
            assert written.wait(30)
            on_disk = os.listdir(options["data_folder_in"])
            assert len(on_disk) == 1 and on_disk[0].startswith(broker.TMP_PREFIX)  # the bytes are there
            with pytest.raises(Empty):
                reader._get(QUEUE)  # ... and the reader does not take them
            assert reader._size(QUEUE) == 0
        finally:
            go.set()
            thread.join(30)
        assert reader._get(QUEUE) == payload  # once renamed, whole
        with pytest.raises(Empty):
            reader._get(QUEUE)
