"""The live tester: one evaluation for every route (the page, the API, the MCP endpoint), what it
remembers between pages, and what a big rule set shows.

The tester's inputs (query, context, DataParts, FileParts) are kept in the user's session, one
entry per rule set. Server side rather than in localStorage so that they survive a save, a
reload and the no-JavaScript form post alike, and the editor renders them into the form before
any script runs (the first live run uses them). A session belongs to one login, so one user's
sample never shows to another.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from llamon_agent.expr import MAX_QUERY_CHARS
from llamon_agent.prestep import RuleRecord, RuleStatus
from llamon_agent.tools import AgentRequest
from rules import engine
from rules.cases import case_expected_from_outcome
from rules.errors import RuleError
from rules.models import RuleSet, RuleSetVersion, TesterInput
from rules.pins import PinnedToolBackend, pin_for

TESTER_FIELDS = ("query", "context", "data", "files", "pinned")
# What one rule set's remembered inputs may weigh in the session (the form's own caps are a bit
# lower: 32,000 query characters plus 200 KB of data); a bigger post is not remembered.
MAX_REMEMBERED_CHARS = 300_000
# Recent inputs (the tester's picker): how many a user keeps per rule set, and how long a live run
# as the user types goes on replacing the newest one (so a burst of keystrokes is one input).
RECENT_KEPT = 10
RECENT_TYPING_SECONDS = 30
# Skipped and not-reached rules listed before "show all" (rules.engine.records_shown, every route).
SKIPPED_SHOWN = engine.QUIET_SHOWN


@dataclass
class TesterResult:
    """One tester evaluation of a rule set's draft (with an unsaved rule edit, if any)."""

    snapshot: list[dict[str, Any]]
    servers: Mapping[str, Any]
    sample: AgentRequest
    evaluation: engine.Evaluation
    expected: dict[str, Any]  # what a regression case of this sample would expect
    backend: PinnedToolBackend | None  # set when executed
    edited: bool = False  # the unsaved edit changed what the draft does
    # Testing a published version (the one that served a run): the draft's decisions that differ.
    version: RuleSetVersion | None = None
    draft_differs: list[dict[str, Any]] = field(default_factory=list)
    # Which records an answer lists (rules.engine.records_shown): checked before evaluating.
    detail: str = "summary"
    offset: int = 0

    def explain(self, rules: Sequence[str]) -> dict[str, Any]:
        """Why each of these rules was skipped (or failed in its own `when`): the operand that said no."""
        return engine.explain_rules(self.snapshot, self.sample, list(rules), servers=self.servers)

    def answer(self) -> dict[str, Any]:
        """The answer the API and the MCP endpoint give: the evaluation as the page lists it
        (:func:`rules.engine.records_shown`), the request as parsed and the case it proposes.

        A ``summary`` stays small however many rules fire: it lists the first FIRED_SHOWN fired
        rules (``omitted["fired"]`` counts the others), and when it leaves some out it also leaves
        out what lists every call again: the LLM block (``block`` is "", ``block_chars`` its
        length) and the proposed case (``expected`` is null). ``detail: "all"`` gives all of them."""
        answer = self.evaluation.answer(
            detail=self.detail, offset=self.offset, fired_shown=engine.FIRED_SHOWN
        )
        cut = answer["omitted"].get("fired", 0) > 0
        return {
            **answer,
            "block": "" if cut else answer["block"],
            "block_chars": len(answer["block"]),
            "request": self.sample.to_json(),
            "expected": None if cut else self.expected,
        }

    def was_pinned(self, record: RuleRecord) -> bool:
        """Whether the record's call was answered from a pinned output rather than the tool."""
        return self.backend is not None and self.backend.was_pinned(
            record.mcp_id, record.tool_name, record.params
        )


def tester_evaluate(
    *,
    rule_set: RuleSet,
    sample: AgentRequest,
    execute: bool,
    draft: Mapping[str, Any] | None = None,
    original_name: str | None = None,
    pins: Sequence[Mapping[str, Any]] = (),
    version: RuleSetVersion | None = None,
    detail: str = "summary",
    offset: int | str = 0,
) -> TesterResult:
    """The pre-step of the rule set's draft on one sample, as every tester shows it.

    ``version``: test that published version instead (the one that served a run opened in the
    tester), with the draft beside it: ``draft_differs`` lists the rules the draft decides otherwise.

    ``draft`` is an unsaved rule edit (a RuleForm's cleaned data) replacing ``original_name`` (or
    appended). ``execute`` calls the tools, except the calls ``pins`` answer from recorded
    outputs. The proposed expectation always comes from a dry run: a case always runs dry, so it
    expects the calls, never a live tool's failure that no later dry run could reproduce.

    ``detail`` and ``offset`` say which skipped and not-reached rules the answer lists (every
    fired and failed one always): see :func:`rules.engine.records_shown`; RuleError when invalid."""
    offset = engine.detail_check(detail, offset)
    saved = engine.rule_set_snapshot(rule_set)
    draft_snapshot = saved
    if draft is not None:
        draft_snapshot = engine.apply_draft_edit(saved, dict(draft), original_name=original_name)
    snapshot = list(version.content) if version is not None else draft_snapshot
    servers = engine.servers_by_id(engine.snapshot_mcp_ids([*snapshot, *draft_snapshot]))
    dry = engine.evaluate(snapshot, sample, servers=servers, dry_run=True)
    differs = []
    if version is not None:
        beside = engine.evaluate(draft_snapshot, sample, servers=servers, dry_run=True)
        differs = decisions_differ(dry.outcome.records, beside.outcome.records)
    backend = None
    evaluation = dry
    if execute:
        backend = PinnedToolBackend(engine.live_backend(servers), pins, tools=engine.dry_backend(servers))
        evaluation = engine.evaluate(snapshot, sample, servers=servers, backend=backend, dry_run=False)
    # Only the error and the fired records make the expectation: not a JSON of every rule's record.
    fired = [rec.to_json() for rec in dry.outcome.fired]
    expected = case_expected_from_outcome({"error": dry.outcome.error, "records": fired})
    return TesterResult(
        snapshot,
        servers,
        sample,
        evaluation,
        expected,
        backend,
        edited=draft_snapshot != saved,
        version=version,
        draft_differs=differs,
        detail=detail,
        offset=offset,
    )


def live_calls(result: TesterResult, pins: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The calls an Execute of this (dry-run) result would make for real: those no pin answers."""
    return [
        {"mcp_id": rec.mcp_id, "tool_name": rec.tool_name, "params": rec.params}
        for rec in result.evaluation.outcome.records
        if rec.status is RuleStatus.FIRED
        and pin_for(list(pins), rec.mcp_id or "", rec.tool_name or "", rec.params or {}) is None
    ]


def live_calls_digest(calls: Sequence[Mapping[str, Any]]) -> str:
    """What a confirmation of Execute confirms: exactly these calls (another input asks again)."""
    text = json.dumps(list(calls), ensure_ascii=False, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def _decision(record: RuleRecord | None) -> dict[str, Any] | None:
    """What a rule decided: the call (server, tool, params), or its status when it called nothing."""
    if record is None:
        return None
    if record.status is RuleStatus.FIRED:
        return {"call": f"{record.mcp_id}.{record.tool_name}", "params": record.params}
    return {"status": str(record.status), "error": record.error}


def decisions_differ(version: Sequence[RuleRecord], draft: Sequence[RuleRecord]) -> list[dict[str, Any]]:
    """Per rule, in the version's order then the draft's new rules: where the two decide otherwise."""
    mine = {r.rule: r for r in version}
    theirs = {r.rule: r for r in draft}
    rows = []
    for name in dict.fromkeys([*mine, *theirs]):
        a, b = _decision(mine.get(name)), _decision(theirs.get(name))
        if a != b:
            rows.append({"rule": name, "version": a, "draft": b, "sides": [a, b]})
    return rows


def _session_key(rule_set_pk: int) -> str:
    return f"rules.tester.{rule_set_pk}"


def tester_inputs_load(session: Any, rule_set_pk: int) -> dict[str, str]:
    """The inputs last sent to this rule set's tester in this session (empty when none)."""
    stored = session.get(_session_key(rule_set_pk)) or {}
    return {f: stored[f] for f in TESTER_FIELDS if isinstance(stored.get(f), str)}


def tester_inputs_store(
    session: Any, rule_set_pk: int, post: Mapping[str, Any], *, prefix: str = "t"
) -> None:
    """Remember the tester's raw inputs (even invalid ones: the user is still typing)."""
    values = {f: post.get(f"{prefix}-{f}", "") for f in TESTER_FIELDS}
    values = {f: v if isinstance(v, str) else "" for f, v in values.items()}
    if sum(len(v) for v in values.values()) > MAX_REMEMBERED_CHARS:
        return
    key = _session_key(rule_set_pk)
    stored = session.get(key) or {}
    if isinstance(stored.get("origin"), dict):
        values["origin"] = stored["origin"]  # where loaded inputs came from stays until replaced
    if stored != values:
        session[key] = values


def tester_inputs_put(
    session: Any, rule_set_pk: int, values: Mapping[str, str], origin: dict[str, Any] | None
) -> None:
    """Load inputs into a rule set's tester ("Open in tester"): they replace what the user had there.

    ``origin`` says where they came from: ``{"run": pk, "masked": [[path, masked value], ...]}``;
    the tester warns about every masked value still in its inputs (see :func:`tester_masked_left`).
    """
    stored: dict[str, Any] = {f: str(values.get(f) or "") for f in TESTER_FIELDS}
    if origin is not None:
        stored["origin"] = origin
    session[_session_key(rule_set_pk)] = stored


def tester_origin_load(session: Any, rule_set_pk: int) -> dict[str, Any] | None:
    """Where the tester's inputs were loaded from (a run), or None."""
    origin = (session.get(_session_key(rule_set_pk)) or {}).get("origin")
    return origin if isinstance(origin, dict) else None


def tester_recent_record(
    *, user: Any, rule_set: RuleSet, values: Mapping[str, Any], typing: bool, origin: dict | None = None
) -> TesterInput | None:
    """Keep one tester input among the user's recent inputs for this rule set (the tester's picker).

    ``values`` are the tester's fields as typed (query, context, data, files, pinned); the caller
    records an input only once the tester took it (valid, evaluated). ``typing``: sent by the live
    run as the user types; such an input replaces the newest one while the typing goes on (within
    RECENT_TYPING_SECONDS), so a burst of keystrokes is one recent input, not one per letter. An
    input the user already has moves to the top. At most RECENT_KEPT are kept, the oldest dropped.
    ``origin`` (where inputs loaded from a run came from, with their masked values) is kept with it.
    Not audited: like the session, it is the user's own working state. Returns None for an empty
    input or an anonymous user; RuleError for an input that is not text or over the tester's caps.
    """
    if not getattr(user, "is_authenticated", False):
        return None
    kept: dict[str, Any] = {}
    for name in TESTER_FIELDS:
        value = values.get(name, "")
        if not isinstance(value, str):
            raise RuleError(
                _("A recent input is kept as the tester's texts; %(field)s is not a text.") % {"field": name}
            )
        kept[name] = value
    size = sum(len(v) for v in kept.values())
    if len(kept["query"]) > MAX_QUERY_CHARS or size > MAX_REMEMBERED_CHARS:
        raise RuleError(
            _(
                "The input is too big to keep among your recent inputs (%(size)s characters; the limit "
                "is %(limit)s, and %(query)s for the query)."
            )
            % {"size": f"{size:,}", "limit": f"{MAX_REMEMBERED_CHARS:,}", "query": f"{MAX_QUERY_CHARS:,}"}
        )
    if not any(v.strip() for v in kept.values()):
        return None
    if isinstance(origin, dict):
        kept["origin"] = origin
    digest = hashlib.sha256(json.dumps(kept, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
    now = timezone.now()
    try:
        with transaction.atomic():
            mine = TesterInput.objects.select_for_update().filter(user=user, rule_set=rule_set)
            entry = mine.filter(digest=digest).first()
            newest = mine.first()
            if entry is not None:
                entry.typing = entry.typing and typing
            elif (
                newest is not None
                and newest.typing
                and now - newest.used_at < timedelta(seconds=RECENT_TYPING_SECONDS)
            ):
                entry = newest  # the same burst of typing: the input it was becomes the input it is
                entry.values, entry.digest, entry.typing = kept, digest, typing
            else:
                entry = TesterInput(user=user, rule_set=rule_set, values=kept, digest=digest, typing=typing)
            entry.used_at = now
            entry.save()
            stale = list(mine.order_by("-used_at", "-id").values_list("pk", flat=True)[RECENT_KEPT:])
            if stale:
                TesterInput.objects.filter(pk__in=stale).delete()
    except IntegrityError:  # the same input recorded at once by a second request: it is kept
        return None
    return entry


def tester_recent_delete_before(cutoff: Any) -> int:
    """Forget every user's recent tester inputs last used before ``cutoff`` (the runs' retention
    period applies to them too: an input typed into the tester may hold a customer's data)."""
    return TesterInput.objects.filter(used_at__lt=cutoff).delete()[0]


def tester_recent_list(*, user: Any, rule_set: RuleSet) -> list[TesterInput]:
    """The user's recent inputs to this rule set's tester, newest first (never another user's)."""
    if not getattr(user, "is_authenticated", False):
        return []
    return list(TesterInput.objects.filter(user=user, rule_set=rule_set)[:RECENT_KEPT])


def tester_recent_get(*, user: Any, rule_set: RuleSet, pk: int | None) -> TesterInput | None:
    """One of the user's own recent inputs to this rule set (None for anyone else's, or none)."""
    if pk is None or not getattr(user, "is_authenticated", False):
        return None
    return TesterInput.objects.filter(user=user, rule_set=rule_set, pk=pk).first()


def masked_paths(real: Any, shown: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    """Where ``shown`` (the masked copy) differs from ``real``: (path, masked value) per leaf."""
    if isinstance(real, Mapping) and isinstance(shown, Mapping):
        return [p for k in real if k in shown for p in masked_paths(real[k], shown[k], (*path, k))]
    if isinstance(real, list) and isinstance(shown, list):
        return [
            p
            for i, (r, s) in enumerate(zip(real, shown, strict=False))
            for p in masked_paths(r, s, (*path, i))
        ]
    return [] if real == shown else [(path, shown)]


def path_label(path: Sequence[Any]) -> str:
    """``("context", "userId")`` -> ``context.userId``; ``("a2a_data", 0, "card")`` -> ``DataParts[0].card``."""
    names = {"a2a_data": "DataParts", "a2a_files": "FileParts"}
    out: list[str] = []
    for i, part in enumerate(path):
        if isinstance(part, int):
            out.append(f"[{part}]")
        else:
            out.append(("." if out else "") + (names.get(str(part), str(part)) if i == 0 else str(part)))
    return "".join(out)


def tester_masked_left(origin: Mapping[str, Any] | None, request_json: Mapping[str, Any]) -> list[str]:
    """The masked values from ``origin`` the tester's request still holds (by path), as labels."""
    left = []
    for path, masked in (origin or {}).get("masked") or []:
        value: Any = request_json
        for part in path:
            try:
                value = value[part]
            except (KeyError, IndexError, TypeError):
                value = None
                break
        if value == masked:
            left.append(path_label(path))
    return left


def tester_rows(result: TesterResult) -> engine.RecordsShown[RuleRecord]:
    """The page's rows: fired and error rows always, the others as the API lists them."""
    return engine.records_shown(result.evaluation.outcome.records, detail=result.detail, offset=result.offset)
