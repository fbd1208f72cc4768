"""docs/deploy.md's services under two faults: the database stopped 20 s during 30 runs, and a
worker stopped the way systemd stops the documented unit (SIGTERM to its whole group), mid-run.

The web (the doc's gunicorn line), two workers and beat (the doc's systemd ExecStart lines; the
units keep systemd's default KillMode=control-group) run on Redis and a PostgreSQL server of the
test's own, which it stops and starts again (the PostgreSQL leg's shared server cannot be stopped
under the other tests). Each run's pre-step calls a tool that sleeps, so the faults land mid-run.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.conftest import OutputCollector, free_port, require_executable, wait_for_port
from tests.support.pg_cluster import PgCluster

pytestmark = [pytest.mark.slow, pytest.mark.database, pytest.mark.timeout(420)]

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "deploy.md").read_text()
MISBEHAVING = ROOT / "tests" / "servers" / "misbehaving.py"
TERMINAL = {"succeeded", "failed", "timed_out", "cancelled"}
SETUP = """
import json, sys
from django.contrib.auth.models import Group, User
from accounts.token_services import token_create
from agents.models import Agent
from rules import services as rules
from servers.models import McpServer
user = User.objects.create_user("deploy-editor", password=None)
user.groups.add(Group.objects.get(name="editor"))
McpServer.objects.create(
    mcp_id="misbehaving", transport="stdio", command=sys.executable, args=[%(server)r], timeout_s=60,
    tools=[{"name": "hang", "description": "", "input_schema": {}}],
)
rule_set = rules.rule_set_create(actor=user, name="faults")
rules.rule_create(
    actor=user, rule_set=rule_set, name="slow", mcp_id="misbehaving", tool_name="hang",
    when="len(query) > 0", params='{"seconds": 3}',
)
agent = Agent.objects.create(name="faults", system_prompt="p", rule_set=rule_set, rule_set_mode="draft")
print(json.dumps({"token": token_create(actor=user, name="faults").secret, "agent": agent.pk}))
"""


def _unit_line(key: str, containing: str) -> str:
    """The value of ``key=`` in the doc's systemd unit whose ExecStart contains ``containing``."""
    units = re.findall(r"```ini\n(.*?)```", DOC, re.S)
    assert units, "docs/deploy.md has no systemd units"
    for unit in re.split(r"\n(?=# /etc/systemd)", units[0]):
        if containing in unit:
            found = re.search(rf"^{key}=(.*)$", unit, re.M)
            assert found, f"the {containing} unit in docs/deploy.md has no {key}="
            return found.group(1).strip()
    raise AssertionError(f"docs/deploy.md has no unit running {containing}")


def _exec_start(containing: str, instance: str, state_dir: Path) -> list[str]:
    """The unit's ExecStart as systemd would run it here: this checkout's celery, %i and %%h expanded,
    /var/lib/llamon (the beat unit's StateDirectory) under the test's folder."""
    line = _unit_line("ExecStart", containing).replace("%i", instance).replace("%%", "%")
    line = line.replace("/var/lib/llamon", str(state_dir))
    argv = line.split()
    argv[0] = str(Path(sys.executable).parent / Path(argv[0]).name)
    return argv


class Services:
    def __init__(self, tmp_path: Path) -> None:
        redis_exe = require_executable("redis-server", "redis-server")
        self.pg = PgCluster()
        self.pg.create()
        self.redis_port, self.web_port = free_port(), free_port()
        self.procs: list[subprocess.Popen] = []
        self.outputs: list[OutputCollector] = []
        self.redis = subprocess.Popen(
            [
                redis_exe,
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.redis_port),
                "--save",
                "",
                "--dir",
                str(tmp_path),
            ],
            stdout=subprocess.DEVNULL,
        )
        wait_for_port(self.redis_port, proc=self.redis)
        self.state_dir = tmp_path / "state"
        self.state_dir.mkdir()  # systemd's StateDirectory=llamon
        self.env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            "HOME": str(tmp_path),
            "LLAMON_ENV": "prod",
            "SECRET_KEY": secrets.token_urlsafe(48),
            "ALLOWED_HOSTS": "127.0.0.1",
            "LLAMON_VAR_DIR": str(tmp_path / "var"),
            "LLAMON_BIND": f"127.0.0.1:{self.web_port}",
            "WEB_CONCURRENCY": "2",
            "DATABASE_URL": self.pg.url,
            "REDIS_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            # The reaper every second, and a lost message re-sent 2 s after: recovery within the test.
            "LLAMON_REAPER_PERIOD_S": "1",
            "LLAMON_RUN_CLAIM_GRACE_S": "2",
            "PYTHONUNBUFFERED": "1",
        }
        if os.environ.get("PYTHONPATH"):
            self.env["PYTHONPATH"] = os.environ["PYTHONPATH"]

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def spawn(self, argv: list[str]) -> tuple[subprocess.Popen, OutputCollector]:
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own process group, as a systemd unit's cgroup
        )
        output = OutputCollector(proc)
        self.procs.append(proc)
        self.outputs.append(output)
        return proc, output

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self.redis.terminate()
        self.redis.wait(timeout=10)
        self.pg.remove()


@pytest.fixture
def services(tmp_path):
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        pytest.skip(
            "runs in the PostgreSQL leg (make test-postgres): it stops a PostgreSQL server of its own"
        )
    built = Services(tmp_path)
    try:
        yield built
    finally:
        built.close()


def _wait(condition, what: str, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"{what} did not happen within {timeout_s} s")


def test_a_database_outage_and_a_systemd_stop_fail_no_run(services, capsys) -> None:
    services.manage("migrate", "--noinput")
    made = json.loads(services.manage("shell", "-c", SETUP % {"server": str(MISBEHAVING)}).splitlines()[-1])
    [web_command] = re.findall(r"<!-- web-command.*?-->\s*```sh\n(.*?)\n```", DOC, re.S)
    web, _ = services.spawn([str(Path(sys.executable).parent / "gunicorn"), *web_command.split()[1:]])
    wait_for_port(services.web_port, timeout_s=60, proc=web)
    assert "\nKillMode=" not in DOC  # the default, control-group: SIGTERM to every process of the unit
    stop_timeout_s = min(int(_unit_line("TimeoutStopSec", "worker")), 120)
    workers = []
    for instance in ("1", "2"):
        proc, output = services.spawn(_exec_start(" worker ", instance, services.state_dir))
        output.wait_for("ready.", timeout_s=60)
        workers.append(proc)
    services.spawn(_exec_start(" beat ", "", services.state_dir))

    api = httpx.Client(
        base_url=f"http://127.0.0.1:{services.web_port}",
        headers={"Authorization": f"Bearer {made['token']}", "X-Forwarded-Proto": "https"},
        timeout=30,
    )

    def start(label: str, count: int) -> list[int]:
        ids = []
        for i in range(count):
            answer = api.post("/api/runs", json={"agent": made["agent"], "query": f"{label} {i}"})
            assert answer.status_code == 202, answer.text
            ids.append(answer.json()["id"])
        return ids

    def runs(ids: list[int]) -> list[dict]:
        return [api.get(f"/api/runs/{run_id}").json() for run_id in ids]

    # 1. The database stopped for 20 s with 30 runs started, some running.
    batch = start("outage", 30)
    _wait(lambda: sum(r["status"] == "running" for r in runs(batch)) >= 4, "4 runs running", 60)
    services.pg.stop()
    codes: Counter[str] = Counter()
    down_until = time.monotonic() + 20
    while time.monotonic() < down_until:
        for method, path in (("POST", "/api/runs"), ("GET", "/api/runs"), ("GET", "/healthz")):
            body = {"agent": made["agent"], "query": "while down"} if method == "POST" else None
            answer = api.request(method, path, json=body)
            codes[f"{method} {path} {answer.status_code}"] += 1
        time.sleep(0.5)
    services.pg.start()
    ended = _wait(
        lambda: (found := runs(batch)) and all(r["status"] in TERMINAL for r in found) and found,
        "every run of the outage batch ending",
        180,
    )
    outcomes = Counter(f"{r['status']} {r['error_kind']}".strip() for r in ended)
    with capsys.disabled():
        print(
            f"\ndatabase stopped 20 s during 30 runs: responses while down {dict(codes)}; runs {dict(outcomes)}"
        )
    assert {code.rsplit(" ", 1)[1] for code in codes} == {"503"}, codes  # never a 500
    assert not any(r["error_kind"] == "worker_lost" for r in ended), outcomes  # no worker died
    assert all(r["status"] == "succeeded" or r["error_kind"] == "database" for r in ended), outcomes

    # 2. Worker 1 stopped as systemd stops the unit (control-group: SIGTERM to the whole group)
    # while 8 runs run, 4 on it.
    batch = start("release", 8)
    _wait(lambda: sum(r["status"] == "running" for r in runs(batch)) == 8, "8 runs running", 60)
    stopped = workers[0]
    os.killpg(stopped.pid, signal.SIGTERM)  # every process; SIGKILL to what is left after the timeout
    try:
        stopped.wait(timeout=stop_timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(stopped.pid, signal.SIGKILL)
        raise AssertionError(f"the worker did not stop within TimeoutStopSec ({stop_timeout_s} s)") from None
    ended = _wait(
        lambda: (found := runs(batch)) and all(r["status"] in TERMINAL for r in found) and found,
        "every run of the release batch ending",
        120,
    )
    outcomes = Counter(f"{r['status']} {r['error_kind']}".strip() for r in ended)
    with capsys.disabled():
        print(f"worker stopped the systemd way mid-run: runs {dict(outcomes)}")
    assert outcomes == Counter({"succeeded": 8}), outcomes
