"""``manage.py impact <rule-set> (--draft | --version N) --days N [...] [--json]``: an impact analysis for CI.

The analysis runs here, in this process (no worker needed), is stored and audited like one
started from the page, and prints its report. Exit codes:

- 0: no change, or only changes that were declared expected;
- 1: unexpected changes: a rule with changes that ``--expect-changes`` does not list
  (without ``--expect-changes`` and ``--allow-changes``, every change is unexpected);
- 2: the analysis could not be made (unknown rule set or version, days out of range, a bad filter).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.urls import reverse

from governance import services
from governance.errors import ImpactError
from governance.models import ImpactAnalysis
from rules.models import RuleSet


class Command(BaseCommand):
    help = "Replay the draft or a version of a rule set against recorded runs; exit 1 on unexpected changes."

    def add_base_argument(self, parser: CommandParser, *args: Any, **kwargs: Any) -> None:
        # Django's own --version (the Django version) would take the name this command needs.
        if "--version" not in args:
            super().add_base_argument(parser, *args, **kwargs)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("rule_set", help="The rule set's name.")
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--draft", action="store_true", help="Replay the draft.")
        which.add_argument("--version", type=int, dest="number", help="Replay this published version number.")
        parser.add_argument(
            "--days", type=int, default=7, help=f"The last N days (1 to {services.MAX_DAYS})."
        )
        parser.add_argument("--agent", default="", help="Only this agent's runs (its name).")
        parser.add_argument("--chatbot", default="", help="Only the runs with this chatbotId.")
        parser.add_argument("--user", default="", help="Only the runs with this userId.")
        expect = parser.add_mutually_exclusive_group()
        expect.add_argument(
            "--expect-changes",
            default="",
            metavar="RULE,...",
            help="Rules whose changes are expected; a change under any other rule exits 1.",
        )
        expect.add_argument("--allow-changes", action="store_true", help="Every change is expected (exit 0).")
        parser.add_argument("--json", action="store_true", help="Print the report as JSON (for CI).")

    def handle(self, *args: Any, **options: Any) -> None:
        rule_set = RuleSet.objects.filter(name=options["rule_set"]).first()
        if rule_set is None:
            raise CommandError(f"There is no rule set named {options['rule_set']!r}.", returncode=2)
        try:
            analysis = services.impact_start(
                actor=None,
                enqueue=False,
                rule_set=rule_set,
                version=services.DRAFT if options["draft"] else options["number"],
                days=options["days"],
                agent=options["agent"],
                chatbot_id=options["chatbot"],
                user_id=options["user"],
            )
        except ImpactError as exc:
            raise CommandError(exc.message, returncode=2) from None
        try:
            services.impact_execute(analysis_id=analysis.pk)
        except Exception as exc:
            raise CommandError(f"The analysis failed: {exc}", returncode=2) from exc
        analysis = ImpactAnalysis.objects.get(pk=analysis.pk)
        result = analysis.result or {}
        expected = {name.strip() for name in options["expect_changes"].split(",") if name.strip()}
        changed_rules = [group["rule"] for group in result.get("rules", [])]
        unexpected = [] if options["allow_changes"] else [r for r in changed_rules if r not in expected]
        report = {
            "analysis": analysis.pk,
            "url": reverse("governance:impact_detail", args=[analysis.pk]),
            "rule_set": rule_set.name,
            "candidate": analysis.candidate_ref,
            "candidate_hash": analysis.candidate_hash,
            "days": analysis.days,
            "unexpected_changes": unexpected,
            **result,
        }
        if options["json"]:
            self.stdout.write(json.dumps(report, ensure_ascii=False, indent=2))
        else:
            self.stdout.write(
                f"{rule_set.name} {analysis.candidate_ref}: {result.get('replayed', 0)} requests replayed, "
                f"{result.get('unchanged', 0)} unchanged, {result.get('changed', 0)} changed "
                f"({result.get('skipped', 0)} not replayed)."
            )
            for group in result.get("rules", []):
                counts = ", ".join(
                    f"{group[k]} {k}" for k in ("added", "removed", "changed", "error", "fixed") if group[k]
                )
                mark = " (unexpected)" if group["rule"] in unexpected else ""
                self.stdout.write(f"  {group['rule']}: {group['runs']} runs: {counts}{mark}")
        if unexpected:
            raise CommandError(
                f"Unexpected changes under rule(s): {', '.join(unexpected)}. "
                "List them with --expect-changes if they are intended.",
                returncode=1,
            )
