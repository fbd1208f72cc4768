"""With production settings (LLAMON_ENV=prod, a real secret, a signing key, ALLOWED_HOSTS) `manage.py check --deploy` reports nothing."""

from __future__ import annotations

import base64
import secrets
import string
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_check_deploy_reports_nothing_with_production_settings(tmp_path) -> None:
    alphabet = string.ascii_letters + string.digits + "!@#%^&*(-_=+)"
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LLAMON_ENV": "prod",
        "SECRET_KEY": "".join(secrets.choice(alphabet) for _ in range(60)),
        "ALLOWED_HOSTS": "llamon.example.com",
        "LLAMON_VAR_DIR": str(tmp_path / "var"),
        "LLAMON_CHAIN_SIGNING_KEY": base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
        "DJANGO_SETTINGS_MODULE": "llamon_web.settings",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "DEBUG"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "System check identified no issues" in output, output
