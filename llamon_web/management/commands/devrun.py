"""`make run`: set up the development database and run every service until Ctrl-C.

The web server, one Celery worker, Celery beat and the HTTP demo MCP server run in ONE process
group of their own; Ctrl-C (or SIGTERM) stops that whole group, grandchildren included (the
runserver reloader's child, the worker's pool processes, stdio MCP children), and waits for it.

A worker, beat or demo MCP server that dies is started again (into the same group) after a
back-off of 1, 2, 4, 8 s; one that dies again and again within RESTART_QUICK_S of starting is
given up after RESTART_MAX_QUICK deaths, and then everything stops with a message that says so.
The web server dying still stops everything: without it there is nothing to use.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from accounts.services import admin_ensure
from llamon_web.demo import DEMO_HTTP_PORT, demo_http_tools, demo_load
from llamon_web.health import service_checks

STOP_GRACE_S = 10.0
RESTARTABLE = frozenset({"worker", "beat", "demo-mcp"})
RESTART_QUICK_S = 30.0  # a service that lived less than this died "quickly"
RESTART_MAX_QUICK = 5  # quick deaths in a row before giving up
RESTART_BACKOFF_MAX_S = 30.0


@dataclass
class RestartPolicy:
    """When to start a dead service again: exponential back-off, then give up on quick deaths.

    ``died(lived_s)`` returns the delay before the restart, or None to give up. A service that
    lived RESTART_QUICK_S or longer before dying starts over at the shortest delay.
    """

    quick_deaths: int = 0
    restarts: int = 0

    def died(self, lived_s: float) -> float | None:
        self.quick_deaths = self.quick_deaths + 1 if lived_s < RESTART_QUICK_S else 0
        if self.quick_deaths >= RESTART_MAX_QUICK:
            return None
        self.restarts += 1
        return min(RESTART_BACKOFF_MAX_S, 2.0 ** max(0, self.quick_deaths - 1))


class Command(BaseCommand):
    help = "Migrate, create the admin user, load the demo and run web + worker + beat + demo MCP server."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=os.environ.get("LLAMON_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("LLAMON_PORT", "8000")))
        parser.add_argument(
            "--mcp-port", type=int, default=int(os.environ.get("LLAMON_DEMO_MCP_PORT", DEMO_HTTP_PORT))
        )
        parser.add_argument(
            "--no-reload",
            action="store_true",
            default=os.environ.get("LLAMON_RELOAD", "1").strip().lower() in {"0", "false", "no", "off"},
            help="run the web server without autoreload (also LLAMON_RELOAD=0)",
        )

    def handle(self, *args, **options):
        self._stop = False
        for check in service_checks():
            if not check.ok:
                raise CommandError(check.detail)
        call_command("migrate", interactive=False, verbosity=0)
        password_env = os.environ.get("LLAMON_ADMIN_PASSWORD") or None
        user, password = admin_ensure(password=password_env)
        demo_load(http_port=options["mcp_port"])

        procs = self._start_services(options)
        pgid = procs[0].pid
        try:
            listed = demo_http_tools()  # the HTTP demo server answers only now that it is started
        except BaseException:
            self._stop_group(pgid, procs)  # never leave the services running behind a failed start
            raise
        if listed:
            self.stdout.write(listed)
        url = f"http://{options['host']}:{options['port']}/"
        self.stdout.write("")
        self.stdout.write(self.style.SUCCESS(f"llamon-web is running at {url}"))
        if password and not password_env:
            self.stdout.write(f"  login: {user.get_username()} / {password}   (generated now and shown once)")
        elif password_env:
            self.stdout.write(f"  login: {user.get_username()} / the password in LLAMON_ADMIN_PASSWORD")
        else:
            self.stdout.write(
                f"  login: {user.get_username()} (password shown on the first run; "
                "set LLAMON_ADMIN_PASSWORD to choose one)"
            )
        self.stdout.write(
            f"  broker: {'Redis ' + settings.REDIS_URL if settings.REDIS_URL else 'embedded (filesystem)'}"
        )
        self.stdout.write(f"  services: process group {pgid}; press Ctrl-C to stop them all")
        self.stdout.flush()

        signal.signal(signal.SIGINT, self._request_stop)
        signal.signal(signal.SIGTERM, self._request_stop)
        exit_code = 0
        try:
            exit_code = self._supervise(pgid, procs)
        finally:
            self._stop_group(pgid, procs)
        if exit_code:
            sys.exit(exit_code)

    def _supervise(self, pgid: int, procs: list[subprocess.Popen]) -> int:
        """Watch the services until Ctrl-C; restart the restartable ones. Returns the exit code."""
        policies = {name: RestartPolicy() for name in self._names}
        started = {name: time.monotonic() for name in self._names}
        due: dict[str, float] = {}  # service -> when to start it again
        while not self._stop:
            now = time.monotonic()
            for i, name in enumerate(self._names):
                proc = procs[i]
                if name in due:
                    if now >= due[name]:
                        del due[name]
                        procs[i] = self._spawn(name, pgid)
                        started[name] = time.monotonic()
                        self.stdout.write(f"{name} restarted (pid {procs[i].pid})")
                        self.stdout.flush()
                    continue
                if proc.poll() is None:
                    continue
                lived = now - started[name]
                if name not in RESTARTABLE:
                    self.stderr.write(f"{name} exited with status {proc.returncode}; stopping everything")
                    return 1
                delay = policies[name].died(lived)
                if delay is None:
                    self.stderr.write(
                        f"{name} exited with status {proc.returncode} and has died {RESTART_MAX_QUICK} times "
                        f"within {RESTART_QUICK_S:.0f} s of starting; not restarting it again, stopping everything"
                    )
                    return 1
                self.stderr.write(
                    f"{name} exited with status {proc.returncode} after {lived:.1f} s; "
                    f"restarting it in {delay:.0f} s (restart {policies[name].restarts})"
                )
                self.stderr.flush()
                due[name] = now + delay
            time.sleep(0.2)
        return 0

    def _request_stop(self, signum: int, frame: object) -> None:
        self._stop = True

    def _start_services(self, options: dict) -> list[subprocess.Popen]:
        python = sys.executable
        base = Path(settings.BASE_DIR)
        web = [python, str(base / "manage.py"), "runserver", f"{options['host']}:{options['port']}"]
        if options["no_reload"]:
            web.append("--noreload")
        commands = {
            "web": web,
            "worker": [
                python,
                "-m",
                "celery",
                "-A",
                "llamon_web",
                "worker",
                "-l",
                "info",
                "--concurrency",
                "2",
            ],
            "beat": [
                python,
                "-m",
                "celery",
                "-A",
                "llamon_web",
                "beat",
                "-l",
                "info",
                "--schedule",
                settings.CELERY_BEAT_SCHEDULE_FILENAME,
            ],
            "demo-mcp": [
                python,
                "-m",
                "llamon_agent.demo_servers.order_service",
                "--http",
                "--host",
                "127.0.0.1",
                "--port",
                str(options["mcp_port"]),
            ],
        }
        self._names = list(commands)
        self._commands = commands
        procs: list[subprocess.Popen] = []
        for name in commands:
            # The first service founds the group; the others join it.
            procs.append(self._spawn(name, 0 if not procs else procs[0].pid))
        return procs

    def _spawn(self, name: str, group: int) -> subprocess.Popen:
        return subprocess.Popen(self._commands[name], cwd=Path(settings.BASE_DIR), process_group=group)

    def _stop_group(self, pgid: int, procs: list[subprocess.Popen]) -> None:
        self.stdout.write("stopping web, worker, beat and the demo MCP server ...")
        _signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline and _group_alive(pgid):
            for proc in procs:
                proc.poll()  # reap direct children so they don't linger as zombies
            time.sleep(0.1)
        if _group_alive(pgid):
            self.stderr.write("some services did not stop in time; killing them")
            _signal_group(pgid, signal.SIGKILL)
        for proc in procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.stdout.write("stopped.")


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _group_alive(pgid: int) -> bool:
    """True while any process (zombies aside) is still in the group."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # fields[0] is the state, fields[2] the process group id
        if fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False
