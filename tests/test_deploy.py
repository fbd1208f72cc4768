"""docs/deploy.md, followed to the letter: the release commands, then gunicorn as the docs start it,
with production settings on 127.0.0.1, serving a page, its static files and the API with a token."""

from __future__ import annotations

import os
import re
import secrets
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port, wait_for_port
from tests.support.reverse_proxy import reverse_proxy

# Its gunicorn and release commands connect to DATABASE_URL: the PostgreSQL leg runs it too.
pytestmark = [pytest.mark.slow, pytest.mark.database]

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "deploy.md"
TOKEN_SCRIPT = """
from django.contrib.auth.models import Group, User
from accounts.token_services import token_create
user = User.objects.create_user("deploy-viewer", password=None)
user.groups.add(Group.objects.get(name="viewer"))
User.objects.create_user("kim", password="kim-s3cret-pw").groups.add(Group.objects.get(name="viewer"))
print(token_create(actor=user, name="deploy test").secret)
"""


def _doc_block(marker: str) -> list[list[str]]:
    """The command lines of the fenced block after ``<!-- marker`` in docs/deploy.md."""
    match = re.search(rf"<!-- {marker}\b.*?-->\s*```sh\n(.*?)```", DOC.read_text(), re.S)
    assert match, f"docs/deploy.md has no {marker} block"
    return [shlex.split(line) for line in match.group(1).splitlines() if line.strip()]


def _local(argv: list[str]) -> list[str]:
    """The doc says ``python`` and ``gunicorn``: this checkout's interpreter and its gunicorn."""
    bin_dir = Path(sys.executable).parent
    if argv[0] == "python":
        return [sys.executable, *argv[1:]]
    return [str(bin_dir / argv[0]), *argv[1:]]


def _login(proxy_port: int, client_address: str, password: str, forged: str = "") -> int:
    """Kim's login through the proxy from ``client_address`` (any 127.x.y.z is this machine): its
    status (302 in, 200 wrong password, 429 locked). Cookies by hand: prod marks them Secure, and
    the proxy stands for the TLS end."""
    transport = httpx.HTTPTransport(local_address=client_address)
    base = f"http://127.0.0.1:{proxy_port}"
    forwarded = {"X-Forwarded-For": forged} if forged else {}
    with httpx.Client(base_url=base, transport=transport, headers=forwarded, timeout=30) as client:
        form = client.get("/accounts/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
        assert form.status_code == 200 and token, form.text[:300]
        cookie = form.headers["set-cookie"].split(";", 1)[0]
        answer = client.post(
            "/accounts/login/",
            data={"username": "kim", "password": password, "csrfmiddlewaretoken": token.group(1)},
            headers={"Cookie": cookie, "Referer": f"https://127.0.0.1:{proxy_port}/accounts/login/"},
        )
        return answer.status_code


def test_the_documented_production_server_serves_pages_static_files_and_the_api(tmp_path) -> None:
    port = free_port()
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LLAMON_ENV": "prod",
        "SECRET_KEY": secrets.token_urlsafe(48),
        "ALLOWED_HOSTS": "127.0.0.1",
        "LLAMON_VAR_DIR": str(tmp_path / "var"),
        "LLAMON_BIND": f"127.0.0.1:{port}",
        "WEB_CONCURRENCY": "2",
        "LLAMON_WEB_THREADS": "2",
    }
    if os.environ.get("DATABASE_URL"):  # the PostgreSQL run: deploy on PostgreSQL too
        env["DATABASE_URL"] = os.environ["DATABASE_URL"]
    for argv in _doc_block("release-commands"):
        done = subprocess.run(_local(argv), cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
    made = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", TOKEN_SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip().splitlines()[-1]

    [web_command] = _doc_block("web-command")
    server = subprocess.Popen(_local(web_command), cwd=ROOT, env=env, start_new_session=True)
    try:
        wait_for_port(port, timeout_s=60, proc=server)
        # As the TLS proxy in front sends it: without the header prod redirects to https.
        proxy = {"X-Forwarded-Proto": "https"}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=proxy, timeout=30) as client:
            login = client.get("/accounts/login/")
            assert login.status_code == 200 and 'name="password"' in login.text
            assert "gunicorn" in login.headers.get("server", "")
            assert "default-src 'self'" in login.headers["content-security-policy"]
            css = re.search(r'href="(/static/[^"]+\.css)"', login.text)
            assert css, login.text[:500]
            static = client.get(css.group(1))  # whitenoise: a hashed name, cached for good
            assert static.status_code == 200 and "max-age=315360000" in static.headers["cache-control"]
            assert client.get("/api/runs").status_code == 401
            runs = client.get("/api/runs", headers={"Authorization": f"Bearer {token}"})
            assert runs.status_code == 200, runs.text
            assert runs.json()["items"] == [] and runs.json()["next_cursor"] is None
            plain = httpx.get(f"http://127.0.0.1:{port}/accounts/login/", follow_redirects=False)
            assert plain.status_code == 301 and plain.headers["location"].startswith("https://")
            # ... but not the load balancer's health check, which speaks plain http and wants 200.
            health = httpx.get(f"http://127.0.0.1:{port}/healthz", follow_redirects=False)
            assert health.status_code == 200 and health.json()["status"] == "ok", health.text
        # Behind a reverse proxy (FORWARDED_ALLOW_IPS is 127.0.0.1, the proxy's address): one
        # client's failed logins lock that client, not everyone, and a forged header dodges nothing.
        with reverse_proxy(port) as proxy_port:
            failures = [_login(proxy_port, "127.0.0.2", "wrong") for _ in range(5)]
            assert failures == [200, 200, 200, 200, 429]  # the fifth failure locks
            assert _login(proxy_port, "127.0.0.2", "kim-s3cret-pw") == 429
            assert _login(proxy_port, "127.0.0.2", "kim-s3cret-pw", forged="127.0.0.3") == 429
            assert _login(proxy_port, "127.0.0.3", "kim-s3cret-pw") == 302
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
