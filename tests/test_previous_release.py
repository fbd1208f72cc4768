"""Upgrades without downtime: the previous release keeps working on this release's schema.

During an upgrade `migrate` runs while the previous release still serves (docs/deploy.md), so no
migration may rename or drop what that release reads (docs/development.md, "Migrations"). This
test takes the previous release's code from git history (PREVIOUS_RELEASE), lets it make its
schema and data, applies this release's migrations, then runs the previous release's reads and a
write against the result: the API list and detail of agents and runs, the run page, an agent
created through its API. On SQLite; on PostgreSQL when DATABASE_URL is set (`.ci/with-postgres`),
in a database of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import uuid
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

# The release before this one: the commit before agents.0012 (which renamed the agent's endpoint
# columns). Move it forward at each release.
PREVIOUS_RELEASE = "5b7ee7d^"

ISOLATE = """
import sys

def _editable(obj):
    owner = getattr(obj, "__self__", obj)
    return str(getattr(owner, "__module__", "")).startswith("__editable__")

sys.meta_path[:] = [f for f in sys.meta_path if not _editable(f)]
sys.path_hooks[:] = [h for h in sys.path_hooks if not _editable(h)]
sys.path_importer_cache.clear()
"""
MAKE_DATA = """
import json
from django.contrib.auth.models import Group, User
from accounts.token_services import token_create
from agents.models import Agent, Run, RunStep
user = User.objects.create_user("upgrader", password="pw")
user.groups.add(Group.objects.get(name="editor"))
agent = Agent.objects.create(
    name="before-upgrade", system_prompt="p", model_provider="openai-compatible",
    model_base_url="http://127.0.0.1:9/v1", model_api_key_env="OPENAI_API_KEY",
)
run = Run.objects.create(agent=agent, agent_name=agent.name, query="hello", status="succeeded", answer="hi")
from django.utils import timezone
RunStep.objects.create(run=run, seq=1, kind="answer", name="answer", status="ok", started_at=timezone.now())
print(json.dumps({"agent": agent.pk, "run": run.pk, "token": token_create(actor=user, name="t").secret}))
"""

READ_AND_WRITE = """
import json, os
from django.contrib.auth.models import User
from django.test import Client
made = json.loads(os.environ["MADE"])
api = Client(HTTP_AUTHORIZATION="Bearer " + made["token"], HTTP_HOST="127.0.0.1")
page = Client(HTTP_HOST="127.0.0.1")
page.force_login(User.objects.get(username="upgrader"))
codes = {}
for url in ("/api/agents", f"/api/agents/{made['agent']}", "/api/runs", f"/api/runs/{made['run']}"):
    answer = api.get(url)
    codes[url] = answer.status_code
    if url == f"/api/agents/{made['agent']}" and answer.status_code == 200:
        codes["base_url"] = answer.json().get("model_base_url")
from django.urls import reverse
codes["run page"] = page.get(reverse("agents:run_detail", args=[made["run"]])).status_code
created = api.post(
    "/api/agents", {"name": "during-upgrade", "system_prompt": "p"}, content_type="application/json"
)
codes["create agent"] = created.status_code
if created.status_code != 201:
    import sys; print(created.content[-2000:], file=sys.stderr)
print(json.dumps(codes))
"""


def _export(revision: str, into: Path) -> Path:
    """The tree of ``revision`` (git archive), outside the checkout."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", revision], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


@pytest.fixture
def database() -> Iterator[dict[str, str]]:
    """The environment naming a database of this test's own: a SQLite file (LLAMON_VAR_DIR), or a
    new PostgreSQL database on DATABASE_URL's server."""
    url = os.environ.get("DATABASE_URL")
    if not url:
        yield {}
        return
    import psycopg

    name = f"previous_release_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield {"DATABASE_URL": url.rsplit("/", 1)[0] + "/" + name}
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def test_the_previous_release_reads_and_writes_on_this_releases_schema(tmp_path: Path, database) -> None:
    previous = _export(PREVIOUS_RELEASE, tmp_path / "previous")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LLAMON_", "DJANGO_", "PYTEST_")) and k not in ("DATABASE_URL", "PYTHONPATH")
    }
    env.update(database, LLAMON_ENV="dev", LLAMON_VAR_DIR=str(tmp_path / "var"))

    # The venv's editable installs of this checkout map its packages by name (setuptools' finder,
    # after PYTHONPATH): a package the previous release lacks, such as rules.templatetags, would be
    # found in this checkout. A sitecustomize (run after the .pth files) takes those finders away.
    isolate = tmp_path / "isolate"
    isolate.mkdir()
    (isolate / "sitecustomize.py").write_text(ISOLATE)

    def manage(tree: Path, *args: str, **extra: str) -> str:
        # The previous release runs its own code and its own SDK (sdk/src), not this checkout's.
        paths = (
            {"PYTHONPATH": os.pathsep.join(map(str, (isolate, tree, tree / "sdk" / "src")))}
            if tree != ROOT
            else {}
        )
        done = subprocess.run(
            [sys.executable, str(tree / "manage.py"), *args],
            cwd=tree,
            env={**env, **paths, **extra},
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert done.returncode == 0, (
            f"{tree.name} manage.py {args[:2]}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
        return done.stdout

    manage(previous, "migrate", "--no-input")
    made = manage(previous, "shell", "-c", MAKE_DATA).strip().splitlines()[-1]
    manage(ROOT, "migrate", "--no-input")  # this release's migrations, the previous one still serving
    codes = json.loads(manage(previous, "shell", "-c", READ_AND_WRITE, MADE=made).strip().splitlines()[-1])
    assert codes == {
        "/api/agents": 200,
        f"/api/agents/{json.loads(made)['agent']}": 200,
        "base_url": "http://127.0.0.1:9/v1",
        "/api/runs": 200,
        f"/api/runs/{json.loads(made)['run']}": 200,
        "run page": 200,
        "create agent": 201,
    }, codes
