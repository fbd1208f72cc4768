"""A fresh `make run` signs its evidence: development makes a chain signing key once under var/
(mode 0600, git-ignored, never printed); production without one is warned by `check --deploy`."""

from __future__ import annotations

import base64
import os
import stat
import subprocess
import sys
import threading

from django.core import checks

from core.chain import chain_public_key
from llamon_web.config import dev_key_file, dev_signing_key
from tests.conftest import ROOT


def _manage(var_dir, *args: str, **env: str) -> subprocess.CompletedProcess:
    full = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DJANGO_SETTINGS_MODULE", "REDIS_URL", "DATABASE_URL", "LLAMON_CHAIN_SIGNING_KEY"}
    }
    full.update(LLAMON_ENV="dev", LLAMON_VAR_DIR=str(var_dir), **env)
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=full, capture_output=True, text=True, timeout=60
    )


def test_development_without_a_key_makes_one_under_var_keeps_it_private_and_signs_with_it(tmp_path) -> None:
    first = _manage(tmp_path, "chain_head", "--public-key")
    assert first.returncode == 0, first.stderr
    key_file = tmp_path / "chain_signing_key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    seed = key_file.read_text().strip()
    assert len(base64.urlsafe_b64decode(seed)) == 32
    public = first.stdout.strip()
    assert len(base64.b64decode(public)) == 32 and seed not in first.stdout + first.stderr
    # The same key on every later start (the web server, the worker and beat read the one file).
    assert dev_signing_key(key_file) == base64.urlsafe_b64decode(seed)
    ignored = subprocess.run(["git", "check-ignore", "-q", "var/chain_signing_key"], cwd=ROOT)
    assert ignored.returncode == 0, "var/chain_signing_key must never be committed"


def test_processes_starting_together_all_read_the_one_key_that_won(tmp_path) -> None:
    path, made, seen = tmp_path / "var" / "key", iter(range(1000)), []
    barrier = threading.Barrier(8)

    def start() -> None:
        barrier.wait()
        seen.append(dev_key_file(path, lambda: f"key-{next(made)}"))

    threads = [threading.Thread(target=start) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(seen)) == 1 and path.read_text() == seen[0]
    assert sorted(p.name for p in path.parent.iterdir()) == ["key"]  # no temporary file left behind


def test_a_damaged_key_file_is_a_clear_error_not_a_new_key(tmp_path) -> None:
    (tmp_path / "chain_signing_key").write_text("not a key")
    result = _manage(tmp_path, "check")
    assert (
        result.returncode == 2
        and "chain_signing_key is not the base64 of a 32-byte Ed25519 key" in result.stderr
    )
    assert "Traceback" not in result.stderr


def test_check_deploy_warns_when_production_has_no_signing_key(settings) -> None:
    settings.LLAMON_CHAIN_SIGNING_KEY = None
    found = checks.run_checks(include_deployment_checks=True, tags=[checks.Tags.security])
    assert "core.W001" in {message.id for message in found}
    settings.LLAMON_CHAIN_SIGNING_KEY = bytes(32)
    found = checks.run_checks(include_deployment_checks=True, tags=[checks.Tags.security])
    assert "core.W001" not in {message.id for message in found} and chain_public_key()
