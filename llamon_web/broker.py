"""The embedded broker: kombu's filesystem transport with writes a reader can never see half-done.

kombu's own ``filesystem`` transport creates the message file under its final name and then
writes into it; a consumer listing the folder in between moves the empty (or partial) file
away, fails to decode it and the message is lost (benchmarks/bench_broker.py: hundreds of
10,000). Here a message is written to a hidden temporary name in the same folder (the
reader only takes ``<stamp>_<uuid>.<queue>.msg``), flushed to disk, then renamed into place:
a rename within one filesystem is atomic, so a reader sees the whole file or nothing.

The exchange tables in the control folder had the same tear (created empty, then written: a
publisher reading one in between failed with JSONDecodeError); they are replaced the same way,
their read-modify-write serialised by a lock file.

The reader claims a message by renaming it into the broker's own ``processed`` folder (same
filesystem, so two consumers can never both win), never into the system temp folder (which
may be another filesystem, where kombu's ``shutil.move`` silently copies).
"""

from __future__ import annotations

import errno
import fcntl
import os
import uuid
from queue import Empty
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, filesystem, virtual
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

SCHEME = "atomicfs"
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
TMP_PREFIX = ".tmp-"  # "partition('.')[2]" of this name never ends in ".msg" for a queue


def write_atomic(folder: str, name: str, data: bytes) -> None:
    """Write ``folder/name`` so that no reader ever sees it partly written (temp, fsync, rename)."""
    tmp = os.path.join(folder, f"{TMP_PREFIX}{uuid.uuid4().hex}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, os.path.join(folder, name))
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if exc.errno in DISK_FULL_ERRNOS:
            raise  # the disk, not the broker: the publisher says so (agents.errors.disk_full)
        raise ChannelError(f"Cannot add file {name!r} to directory {folder!r}: {exc}") from exc


class Channel(filesystem.Channel):
    """Atomic put (temp file, fsync, rename), an atomic claim on get, atomic exchange tables."""

    def _put(self, queue, payload, **kwargs):
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        write_atomic(self.data_folder_out, name, str_to_bytes(dumps(payload)))

    def _update_table(self, exchange, change) -> None:
        file = self._exchange_file(exchange)
        self.control_folder.mkdir(exist_ok=True)
        with open(self.control_folder / ".lock", "a") as lock_file:  # one writer of any table at a time
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX)
            try:
                queues = self.get_table(exchange)
                changed = change(queues)
                if changed is not None:
                    write_atomic(str(self.control_folder), file.name, str_to_bytes(dumps(changed)))
            finally:
                fcntl.flock(lock_file.fileno(), fcntl.LOCK_UN)

    def _queue_bind(self, exchange, routing_key, pattern, queue):
        value = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        self._update_table(exchange, lambda queues: None if value in queues else [value, *queues])

    def _delete(self, queue, exchange, routing_key, pattern, *args, **kwargs):
        virtual.Channel._delete(self, queue, exchange, routing_key, pattern, *args, **kwargs)
        value = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        self._update_table(
            exchange, lambda queues: [q for q in queues if q != value] if value in queues else None
        )

    def _get(self, queue):
        wanted = f"{queue}.msg"
        claimed_dir = self.processed_folder
        for filename in sorted(os.listdir(self.data_folder_in)):
            if filename.partition(".")[2] != wanted:
                continue
            claimed = os.path.join(claimed_dir, f"{filename}.{os.getpid()}")
            try:
                os.rename(os.path.join(self.data_folder_in, filename), claimed)
            except FileNotFoundError:
                continue  # another consumer took it first
            try:
                with open(claimed, "rb") as f:
                    payload = f.read()
                if not self.store_processed:
                    os.remove(claimed)
            except OSError as exc:
                raise ChannelError(f"Cannot read file {claimed!r} from queue.") from exc
            return loads(bytes_to_str(payload))
        raise Empty()


class Transport(filesystem.Transport):
    Channel = Channel
    driver_type = SCHEME
    driver_name = SCHEME


def register() -> None:
    """Make ``atomicfs://`` a kombu transport name (idempotent; every process imports the app)."""
    TRANSPORT_ALIASES.setdefault(SCHEME, f"{__name__}:Transport")
