"""Cases assert the whole outcome: ``other_calls`` ("forbid" | "allow") and the owner's ``notice``.

Expand-only: two new columns, nothing renamed or dropped, ``expected`` untouched (the release
before this one refuses unknown keys in it and still reads the table during the upgrade).

Each existing case is set as strict as its last run allows: a case whose last outcome shows no
call beyond its ``must_fire`` list now also asserts that nothing else fires ("forbid"; a stored
``{}`` becomes "nothing fires"); a case whose last run had other calls keeps allowing them
("allow"), naming them, so that no case starts failing because of the upgrade alone. A case that
never ran becomes strict. Each gets a notice its owner sees on the cases page until the case is
edited (rules.cases.case_notice_text).
"""

from django.db import migrations, models

import core.fields


def _fired(outcome):
    if not isinstance(outcome, dict) or outcome.get("error"):
        return None
    return [r for r in outcome.get("records") or [] if isinstance(r, dict) and r.get("status") == "fired"]


def _label(call):
    tool, server = call.get("tool_name"), call.get("mcp_id")
    return f"{tool} on {server}" if server else str(tool)


def _extra_calls(expected, outcome):
    """The calls of the last outcome no must_fire entry accounts for (None: unknown)."""
    fired = _fired(outcome)
    if fired is None:
        return None
    left = list(fired)
    wants = expected.get("must_fire") if isinstance(expected, dict) else None
    for want in wants if isinstance(wants, list) else []:
        if not isinstance(want, dict):
            continue
        for i, rec in enumerate(left):
            same_server = not want.get("mcp_id") or want.get("mcp_id") == rec.get("mcp_id")
            if rec.get("tool_name") == want.get("tool_name") and same_server:
                del left[i]
                break
    return left


def tighten(apps, schema_editor):
    TestCase = apps.get_model("rules", "TestCase")
    for case in TestCase.objects.all().iterator():
        extra = _extra_calls(case.expected, case.last_outcome)
        empty = isinstance(case.expected, dict) and not case.expected.get("must_fire")
        if extra:
            case.other_calls = "allow"
            case.notice = {
                "code": "migrated_allow",
                "calls": sorted({_label(r) for r in extra})[:10],
                "empty": empty,
            }
        else:
            case.other_calls = "forbid"
            code = "migrated_forbid_unrun" if case.last_outcome is None else "migrated_forbid"
            case.notice = {"code": code, "calls": [], "empty": empty}
        case.save(update_fields=["other_calls", "notice"])


class Migration(migrations.Migration):
    dependencies = [("rules", "0006_tester_recent_inputs")]

    operations = [
        migrations.AddField(
            model_name="testcase",
            name="other_calls",
            field=models.CharField(db_default="forbid", default="forbid", max_length=10),
        ),
        migrations.AddField(
            model_name="testcase",
            name="notice",
            field=core.fields.OrderedJSONField(blank=True, default=None, null=True),
        ),
        migrations.RunPython(tighten, migrations.RunPython.noop),
    ]
