"""``manage.py verify_records``: walk the evidence chain and name the first link that does not hold."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.chain import chain_anchor_check, chain_check_record, chain_verify


class Command(BaseCommand):
    help = (
        "Verify the evidence chain: every audit event and finished run is as it was recorded, "
        "no link is missing, changed or moved. Exit status 1 names the first broken link."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print the outcome as one JSON object.")
        parser.add_argument(
            "--anchor",
            metavar="FILE",
            help="A head printed earlier by `manage.py chain_head`: also prove the chain still extends it.",
        )
        parser.add_argument(
            "--public-key", help="The key a signed anchor must verify with (default: this workbench's own)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        def progress(links: int) -> None:
            if not options["json"] and options["verbosity"] > 1:
                self.stderr.write(f"verified {links} links")

        verdict = chain_verify(progress=progress)
        if verdict.ok and options["anchor"]:
            try:
                anchor = json.loads(Path(options["anchor"]).read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise CommandError(f"--anchor: cannot read {options['anchor']}: {exc}") from None
            if not isinstance(anchor, dict):
                raise CommandError("--anchor: the file must hold one chain head (a JSON object)")
            if reason := chain_anchor_check(anchor, public_key=options["public_key"]):
                verdict.fail(int(anchor.get("seq") or 0) or None, reason)
        chain_check_record(verdict)
        outcome = {
            "ok": verdict.ok,
            "links": verdict.links,
            "head_seq": verdict.head_seq,
            "head_hash": verdict.head_hash,
            "broken_seq": verdict.broken_seq,
            "detail": verdict.detail,
        }
        if options["json"]:
            self.stdout.write(json.dumps(outcome, ensure_ascii=False))
        elif verdict.ok:
            self.stdout.write(f"ok: {verdict.links} links, head #{verdict.head_seq} {verdict.head_hash}")
        if not verdict.ok:
            raise CommandError(f"broken: {verdict.detail}")
