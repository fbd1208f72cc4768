"""A rule set's content by hash, for rules kept in git (``llamon rules pull`` / ``push``).

A pull records the SHA-256 of the content it pulled (draft rules in order, cases, description),
and the directory commits it in ``ruleset.json``. A push sends it back as its base, and is refused
only when the set changed on the workbench since that content *in a way the push would undo*: a
three-way check, item by item (each rule, each case, the description, the rules' order), of the
base content, the workbench's content now and the pushed one, as git merges. So a push from a fresh
clone after earlier merges were pushed goes through (the pushed files hold those changes), and a
change made on the workbench meanwhile is refused, with the lines to resolve.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.utils.translation import gettext as _

from llamon_agent.rules_code import content_hash, content_normal
from rules.errors import RuleError, StaleEditError
from rules.exporting import rule_set_content, rule_set_content_replace, rule_set_export_json
from rules.models import RuleSet, RuleSetContent

CONTENTS_KEPT = 200  # per rule set: a base older than the 200 latest distinct contents must be pulled again
MAX_ANCESTORS = 50


def content_record(rule_set: RuleSet, document: Mapping[str, Any]) -> str:
    """Remember ``document`` as a content of ``rule_set`` (once per hash); its hash."""
    digest = content_hash(document)
    _, created = RuleSetContent.objects.get_or_create(
        rule_set=rule_set, content_hash=digest, defaults={"document": dict(document)}
    )
    if created:
        old = RuleSetContent.objects.filter(rule_set=rule_set).order_by("-created_at", "-id")[CONTENTS_KEPT:]
        RuleSetContent.objects.filter(pk__in=list(old.values_list("pk", flat=True))).delete()
    return digest


def rule_set_pull(rule_set: RuleSet) -> dict[str, Any]:
    """What ``llamon rules pull`` reads (rules.exporting.rule_set_content) with its content's hash, recorded."""
    content = rule_set_content(rule_set)
    content["content_sha256"] = content_record(rule_set, content["document"])
    return content


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 200 else text[:199] + "…"


def _item_lines(kind: str, name: str, base: Any, now: Any, pushed: Any) -> list[str]:
    if base is None:
        return [f"+ {kind} {name}: added on the workbench since the pull; the push would delete it"]
    if now is None:
        return [f"- {kind} {name}: deleted on the workbench since the pull; the push would bring it back"]
    lines = []
    for key in now:
        if base.get(key) != now.get(key):
            has = "not there" if pushed is None else _show(pushed.get(key))
            lines.append(
                f"~ {kind} {name}: {key} changed on the workbench since the pull: "
                f"{_show(base.get(key))} -> {_show(now.get(key))}; the push has {has}"
            )
    return lines


def content_conflicts(
    base: Mapping[str, Any], now: Mapping[str, Any], pushed: Mapping[str, Any]
) -> list[str]:
    """What changed on the workbench between ``base`` and ``now`` that ``pushed`` does not have,
    one line each (three-way, item by item); empty when the push keeps every such change."""
    b, n, p = content_normal(base), content_normal(now), content_normal(pushed)
    lines: list[str] = []
    if b["description"] != n["description"] and p["description"] != n["description"]:
        lines.append(
            f"~ description changed on the workbench since the pull: {_show(b['description'])} -> "
            f"{_show(n['description'])}; the push has {_show(p['description'])}"
        )
    for kind, key in (("rule", "rules"), ("case", "cases")):
        for name in dict.fromkeys([*b[key], *n[key]]):
            was, is_now, will = b[key].get(name), n[key].get(name), p[key].get(name)
            if was != is_now and will != is_now:
                lines += _item_lines(kind, name, was, is_now, will)
    common = set(b["order"]) & set(n["order"]) & set(p["order"])

    def relative(order: list[str]) -> list[str]:
        return [name for name in order if name in common]

    if relative(b["order"]) != relative(n["order"]) and relative(p["order"]) != relative(n["order"]):
        lines.append(
            f"~ order changed on the workbench since the pull: {', '.join(relative(n['order']))}; "
            f"the push has {', '.join(relative(p['order']))}"
        )
    return lines


class ContentConflictError(StaleEditError):
    """A push from git would undo changes made on the workbench since its base: a 409 with the lines."""


def rule_set_content_push(
    *, actor: Any, rule_set: RuleSet, data: Mapping[str, Any], bases: list[str]
) -> tuple[RuleSet, str]:
    """Replace the draft and the cases with ``data`` (``llamon rules push``); returns the set and the
    new content's hash.

    ``bases`` are content hashes the pushed directory went through, newest first (its git history,
    then the one its pull recorded): the first one the workbench recorded (by a pull or a push) is
    the base. Refused (ContentConflictError, nothing written) when the set changed since that base in
    a way the push would undo; the message lists each such change."""
    if not isinstance(data, Mapping):
        raise RuleError(_("The document must be a JSON object."), field="data")
    with transaction.atomic():
        locked = RuleSet.objects.select_for_update().get(pk=rule_set.pk)
        known = {
            c.content_hash: c
            for c in RuleSetContent.objects.filter(rule_set=locked, content_hash__in=bases[:MAX_ANCESTORS])
        }
        base = next((known[h] for h in bases if h in known), None)
        if base is None:
            raise StaleEditError(
                _(
                    "The workbench does not know the content the directory was pulled at (%(base)s): "
                    "pull into a clean checkout, merge your edits and push again."
                )
                % {"base": (bases[-1] if bases else "")[:12]},
                field="base",
            )
        now = rule_set_export_json(locked)
        conflicts = content_conflicts(base.document, now, data)
        if conflicts:
            raise ContentConflictError(
                _(
                    "The rule set %(name)r changed on the workbench since the content the directory "
                    "was pulled at, and the push would undo it. Pull into a clean checkout, merge "
                    "these changes and push again:"
                )
                % {"name": locked.name}
                + "\n"
                + "\n".join(conflicts),
                field="base",
            )
        saved = rule_set_content_replace(actor=actor, rule_set=locked, data=data, revision=locked.revision)
        digest = content_record(saved, rule_set_export_json(saved))
    return saved, digest
