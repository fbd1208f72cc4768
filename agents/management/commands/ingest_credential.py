"""``manage.py ingest_credential``: issue, list or revoke a served agent's ingest credential."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents import services
from agents.errors import AgentError
from agents.models import IngestCredential


class Command(BaseCommand):
    help = (
        "Issue, list or revoke the credential a served agent (llamon run) posts its runs with "
        "(LLAMON_TRACE_TOKEN). One credential ingests for one agent name; people's tokens cannot."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        issue = sub.add_parser("issue", help="print a new credential for AGENT (shown once)")
        issue.add_argument("agent")
        sub.add_parser("list", help="the credentials: prefix, agent, issued, revoked")
        revoke = sub.add_parser("revoke", help="revoke the credential with this prefix")
        revoke.add_argument("prefix")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["action"] == "issue":
                _credential, secret = services.ingest_credential_issue(
                    actor=None, agent_name=options["agent"]
                )
                self.stdout.write(secret)
            elif options["action"] == "list":
                for c in IngestCredential.objects.all():
                    revoked = f" revoked {c.revoked_at:%Y-%m-%d %H:%M}" if c.revoked_at else ""
                    self.stdout.write(
                        f"{c.prefix}  {c.agent_name}  issued {c.created_at:%Y-%m-%d %H:%M}{revoked}"
                    )
            else:
                credential = IngestCredential.objects.filter(prefix=options["prefix"]).first()
                if credential is None:
                    raise CommandError(f"No ingest credential has the prefix {options['prefix']!r}.")
                services.ingest_credential_revoke(actor=None, credential=credential)
                self.stdout.write(f"revoked {credential}")
        except AgentError as exc:
            raise CommandError(exc.message) from None
