"""``manage.py chain_head``: print the evidence chain's head (signed when a key is set) to anchor it elsewhere."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.chain import chain_head, chain_public_key, new_signing_key


class Command(BaseCommand):
    help = (
        "Print the evidence chain's head as JSON (Ed25519-signed when LLAMON_CHAIN_SIGNING_KEY is set). "
        "Keep it outside this database (a ticket, an e-mail, write-once storage); later, "
        "`manage.py verify_records --anchor FILE` proves the chain still extends it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--new-key", action="store_true", help="Print a fresh key for LLAMON_CHAIN_SIGNING_KEY instead."
        )
        parser.add_argument(
            "--public-key",
            action="store_true",
            help="Print the public key (base64) an auditor passes to tools/verify_evidence.py --public-key.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["public_key"]:
            key = chain_public_key()
            if key is None:
                raise CommandError(
                    "No LLAMON_CHAIN_SIGNING_KEY is set: heads and exports are unsigned, there is no key to hand over."
                )
            self.stdout.write(key)
            return
        if options["new_key"]:
            self.stdout.write(new_signing_key())
            return
        self.stdout.write(json.dumps(chain_head(), ensure_ascii=False))
