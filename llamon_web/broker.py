"""The embedded broker: kombu's filesystem transport with writes a reader can never see half-done.

kombu's own ``filesystem`` transport creates the message file under its final name and then
writes into it; a consumer listing the folder in between moves the empty (or partial) file
away, fails to decode it and the message is lost (benchmarks/bench_broker.py: hundreds of
10,000). Here a message is written to a hidden temporary name in the same folder (the
reader only takes ``<stamp>_<uuid>.<queue>.msg``), flushed to disk, then renamed into place:
a rename within one filesystem is atomic, so a reader sees the whole file or nothing.

The reader claims a message by renaming it into the broker's own ``processed`` folder (same
filesystem, so two consumers can never both win), never into the system temp folder (which
may be another filesystem, where kombu's ``shutil.move`` silently copies).
"""

from __future__ import annotations

import os
import uuid
from queue import Empty
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

SCHEME = "atomicfs"
TMP_PREFIX = ".tmp-"  # "partition('.')[2]" of this name never ends in ".msg" for a queue


class Channel(filesystem.Channel):
    """Atomic put (temp file, fsync, rename) and an atomic claim on get."""

    def _put(self, queue, payload, **kwargs):
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        folder = self.data_folder_out
        tmp = os.path.join(folder, f"{TMP_PREFIX}{uuid.uuid4().hex}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, str_to_bytes(dumps(payload)))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, os.path.join(folder, name))
        except OSError as exc:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise ChannelError(f"Cannot add file {name!r} to directory {folder!r}: {exc}") from exc

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
