"""A big rule set import keeps the database's write lock only while it writes, not while it compiles.

On SQLite the write transaction holds the one write lock of the whole file: a 2,000-rule import
that compiled every rule inside it made a second editor's save fail with "database is locked".
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection

import llamon_agent.expr as expr
from core.models import AuditEvent
from rules.errors import RuleError
from rules.exporting import FORMAT, rule_set_import_json
from rules.models import Rule, RuleSet
from rules.services import rule_set_create

pytestmark = pytest.mark.django_db(transaction=True)  # the import runs in a thread, on its own connection
RULES = 2000


def _document(name: str, *, bad_at: int | None = None) -> dict:
    rules = [
        {
            "name": f"rule_{i}",
            "mcp_id": "orders",
            "tool_name": "get_order",
            "when": f"ctx.query == 'q{i}'" if i != bad_at else "ctx.query ==",
            "params": f'{{"n": {i}}}',
        }
        for i in range(RULES)
    ]
    return {"format": FORMAT, "name": name, "rules": rules}


def test_a_second_editor_can_save_while_a_2000_rule_import_runs(editor, monkeypatch) -> None:
    real, calls = expr.compile_when, 0
    halfway, release = threading.Event(), threading.Event()

    def compile_when(source: str):
        # Hold the import halfway through compiling: whatever it has locked by then stays locked.
        nonlocal calls
        calls += 1
        if calls == RULES // 2:
            halfway.set()
            release.wait(60)
        return real(source)

    monkeypatch.setattr(expr, "compile_when", compile_when)
    errors: list[BaseException] = []

    def run_import() -> None:
        try:
            rule_set_import_json(actor=editor, data=_document("big"))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
        finally:
            connection.close()

    importer = threading.Thread(target=run_import)
    importer.start()
    try:
        assert halfway.wait(60), "the import never started compiling"
        other = rule_set_create(actor=editor, name="saved meanwhile")  # a second connection's small write
    finally:
        release.set()
        importer.join(120)
    assert not errors, errors
    assert RuleSet.objects.filter(pk=other.pk).exists()
    big = RuleSet.objects.get(name="big")
    assert list(big.rules.order_by("position").values_list("name", flat=True)[:3]) == [
        "rule_0",
        "rule_1",
        "rule_2",
    ]
    assert big.rules.count() == RULES and big.rules.order_by("-position").first().position == RULES
    assert AuditEvent.objects.filter(action="rule_set.import", object_id=str(big.pk)).count() == 1
    ids = {str(pk) for pk in big.rules.values_list("pk", flat=True)}
    assert set(AuditEvent.objects.filter(action="rule.create").values_list("object_id", flat=True)) == ids


def test_a_bad_rule_at_the_end_of_a_2000_rule_import_writes_nothing(editor) -> None:
    events, rules = AuditEvent.objects.count(), Rule.objects.count()
    with pytest.raises(RuleError) as info:
        rule_set_import_json(actor=editor, data=_document("broken", bad_at=RULES - 1))
    assert info.value.message.startswith(f"Rule {RULES} 'rule_{RULES - 1}': when:")
    assert info.value.field == f"rules.{RULES - 1}.when"
    assert not RuleSet.objects.filter(name="broken").exists()
    assert (AuditEvent.objects.count(), Rule.objects.count()) == (events, rules)
