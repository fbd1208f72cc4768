"""``manage.py messages``: refresh locale/ko/LC_MESSAGES/django.po from the code, then compile the .mo.

makemessages with the project's flags: no source locations (so a moved line does not change the
catalogue and merges stay clean), no obsolete entries, only the product's own code and templates.
Translate the new empty ``msgstr`` entries, run it again, and commit both files;
tests/test_i18n.py fails while any string is untranslated or the .mo is stale.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

LANGUAGES = ["ko"]
# Folders that hold no interface strings (or are not ours).
IGNORE = [
    ".venv/*",
    "var/*",
    "node_modules/*",
    "sdk/*",
    "examples/*",
    "tests/*",
    "benchmarks/*",
    "docs/*",
    "static/*",  # the project-wide CSS and JS (no gettext)
    "*/static/*",
    "*.egg-info/*",
    "build/*",
    ".git/*",
]
MAKEMESSAGES_OPTIONS: dict[str, Any] = {
    "locale": LANGUAGES,
    "ignore_patterns": IGNORE,
    "no_location": True,
    "no_obsolete": True,
    "extensions": ["html", "py"],
}


class Command(BaseCommand):
    help = "Refresh the Korean catalogue (locale/ko) from the code and compile it."

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("makemessages", verbosity=options["verbosity"], **MAKEMESSAGES_OPTIONS)
        for language in LANGUAGES:
            strip_creation_date(Path(settings.LOCALE_PATHS[0]) / language / "LC_MESSAGES" / "django.po")
        call_command(
            "compilemessages", locale=LANGUAGES, ignore_patterns=IGNORE, verbosity=options["verbosity"]
        )


def strip_creation_date(po: Path) -> None:
    """Drop the POT-Creation-Date header line: it changes on every run and would make every branch conflict."""
    text = po.read_text(encoding="utf-8")
    po.write_text(re.sub(r'"POT-Creation-Date: [^"]*"\n', "", text, count=1), encoding="utf-8")
