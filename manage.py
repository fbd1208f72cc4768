#!/usr/bin/env python
"""Django's command-line utility; configuration errors print one line naming the variable.

Without ``LLAMON_ENV`` a command run from a git checkout with no production variables set uses
development settings, and says so on stderr (``llamon_web.config.manage_env_default`` has the rule);
anywhere else the default stays ``prod``.
"""

import os
import sys
from pathlib import Path


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "llamon_web.settings")
    base_dir = Path(__file__).resolve().parent
    from dotenv import load_dotenv

    load_dotenv(base_dir / ".env", override=False)  # settings reads it too; real variables win
    from llamon_web.config import manage_env_default

    assumed = manage_env_default(base_dir, os.environ)
    if assumed:
        os.environ["LLAMON_ENV"] = assumed
        print(
            f"manage.py: LLAMON_ENV is not set: using {assumed} settings (a git checkout, no production "
            "variables). Set LLAMON_ENV=prod for production.",
            file=sys.stderr,
        )
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        settings.INSTALLED_APPS  # noqa: B018 - forces the settings module to load here
    except ImproperlyConfigured as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        sys.exit(2)
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
