"""A PostgreSQL cluster of its own (Debian's binaries), for a test that stops and starts the server.

The shared test cluster of the PostgreSQL leg cannot be stopped: the other test processes use it.
As root the server runs as the `postgres` user that Debian's package creates (as .ci/with-postgres).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.conftest import free_port


def pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


class PgCluster:
    def __init__(self) -> None:
        binaries = pg_bin()
        assert binaries is not None, "PostgreSQL is not installed: run `apt-get install postgresql`"
        self.bin = binaries
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="llamon-pgfault-"))
        self.as_owner = ["runuser", "-u", "postgres", "--"] if os.getuid() == 0 else []
        if self.as_owner:
            shutil.chown(self.dir, "postgres")
        self.url = f"postgres://llamon@127.0.0.1:{self.port}/llamon"

    def _run(self, *argv: str) -> None:
        subprocess.run([*self.as_owner, *argv], check=True, capture_output=True, timeout=120)

    def create(self) -> None:
        data = str(self.dir / "data")
        self._run(str(self.bin / "initdb"), "-D", data, "-U", "llamon", "--auth=trust", "-E", "UTF8")
        self.start()
        self._run(
            str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "llamon", "llamon"
        )

    def start(self) -> None:
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories= -c fsync=off"
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.dir / "data"),
            "-l",
            str(self.dir / "log"),
            "-w",
            "-o",
            options,
            "start",
        )

    def stop(self) -> None:
        """What a restart or a failover does to the clients: every connection dropped at once."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        try:
            self.stop()
        except subprocess.CalledProcessError:
            pass  # already stopped
        shutil.rmtree(self.dir, ignore_errors=True)
