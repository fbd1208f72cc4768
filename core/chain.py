"""The evidence chain: audit events and finished runs, hash-linked so that an edit shows.

Every audit event and every finished run's decision record is appended as a link: the SHA-256
of the record's content (``content_hash``), chained to the link before it (``prev_hash``), so
that ``record_hash = SHA-256(seq|kind|ref|content_hash|prev_hash)``. :func:`chain_verify`
walks the links in order, recomputes each record from the rows as they are now, and names the
first link that does not hold: a row changed or deleted, a link changed, removed or moved, a
row that is in no link. What this proves and what it does not: docs/evidence.md.

Apps say how to read their records back with :func:`chain_kind` (``agents`` registers runs);
core registers the audit log itself.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from core.content_hash import sha256
from core.models import AuditEvent, ChainCheck, ChainHead, ChainRecord

GENESIS = "0" * 64
BATCH = 500
# The kind of link that records a sanctioned deletion: its payload names the refs it removed,
# by kind ({"run": ["17", "18"]}), so that their absence is not a break.
DELETION = "deletion"


def link_hash(seq: int, kind: str, ref: str, content_hash: str, prev_hash: str) -> str:
    """A link's own hash: what the next link's ``prev_hash`` must be."""
    return hashlib.sha256(f"{seq}|{kind}|{ref}|{content_hash}|{prev_hash}".encode()).hexdigest()


@dataclass(frozen=True)
class Kind:
    """How to read back the records of one kind: ``current(refs)`` is {ref: content now} (a ref
    without a row is absent); ``unchained(after_ref)`` lists rows that should have a link and
    have none (rows newer than the first link of the kind)."""

    current: Callable[[list[str]], Mapping[str, Any]]
    unchained: Callable[[str], list[str]] | None = None
    label: Any = ""
    # The same record in the shapes older links were sealed with (a link matches any of them).
    older: Callable[[Any], list[Any]] | None = None


_KINDS: dict[str, Kind] = {}


def chain_kind(name: str, kind: Kind) -> None:
    """Register a kind of record (an app's ``ready()``)."""
    _KINDS[name] = kind


def _head_for_update() -> ChainHead:
    head = ChainHead.objects.select_for_update().filter(pk=1).first()
    if head is None:
        ChainHead.objects.get_or_create(pk=1)
        head = ChainHead.objects.select_for_update().get(pk=1)
    return head


def chain_lock() -> ChainHead:
    """Lock the chain's head for the rest of the transaction: writers of linked rows take it before
    they write, so that they write one at a time (core.audit numbers its rows by it)."""
    return _head_for_update()


def chain_append(*, kind: str, ref: str = "", content: Any, payload: Any = None) -> ChainRecord:
    """Append one link (inside the caller's transaction: the link stands or falls with the write).

    The head row is locked (PostgreSQL: SELECT ... FOR UPDATE; SQLite takes its write lock at
    BEGIN IMMEDIATE), so concurrent workers append one after the other and never fork the chain.
    """
    (record,) = chain_append_many(kind=kind, items=[(ref, content)], payload=payload)
    return record


def chain_append_many(*, kind: str, items: list[tuple[str, Any]], payload: Any = None) -> list[ChainRecord]:
    """Append one link per ``(ref, content)``, in order, under one lock of the head."""
    with transaction.atomic():
        head = _head_for_update()
        seq, prev = head.seq, head.record_hash
        records = []
        for ref, content in items:
            seq += 1
            content_hash = sha256(content)
            record_hash = link_hash(seq, kind, ref, content_hash, prev)
            records.append(
                ChainRecord(
                    seq=seq,
                    kind=kind,
                    ref=ref,
                    content_hash=content_hash,
                    prev_hash=prev,
                    record_hash=record_hash,
                    payload=payload,
                )
            )
            prev = record_hash
        ChainRecord.objects.bulk_create(records, batch_size=BATCH)
        ChainHead.objects.filter(pk=head.pk).update(seq=seq, record_hash=prev)
    return records


def chain_deletion(*, kind: str, refs: Iterable[str], reason: str) -> ChainRecord:
    """Record that rows are being deleted on purpose (retention), before deleting them."""
    payload = {"kind": kind, "refs": [str(r) for r in refs], "reason": reason}
    return chain_append(kind=DELETION, content=payload, payload=payload)


# --- The audit log ---------------------------------------------------------------------------------


def audit_content(event: AuditEvent) -> dict[str, Any]:
    """What an audit event's link covers (not the actor's id: deleting a user nulls it)."""
    return {
        "id": event.pk,
        "actor": event.actor_name,
        "action": event.action,
        "object_type": event.object_type,
        "object_id": event.object_id,
        "object_repr": event.object_repr,
        "before": event.before,
        "after": event.after,
        "created_at": event.created_at.isoformat(),
    }


def _audit_now(refs: list[str]) -> dict[str, Any]:
    ids = [int(r) for r in refs if r.isdigit()]
    return {str(e.pk): audit_content(e) for e in AuditEvent.objects.filter(pk__in=ids)}


def _audit_unchained(after_ref: str) -> list[str]:
    # Ids the database never hands out (<= 0) are rows written by hand, whenever they claim to be.
    if forged := list(AuditEvent.objects.filter(pk__lte=0).order_by("pk").values_list("pk", flat=True)[:10]):
        return [str(pk) for pk in forged]
    rows = AuditEvent.objects.filter(pk__gte=int(after_ref)).order_by("pk")
    links = ChainRecord.objects.filter(kind="audit")
    if rows.count() <= links.count():  # deletions are found link by link; this looks for insertions
        return []
    chained = set(_as_ints(links.values_list("ref", flat=True).iterator()))
    return [str(pk) for pk in rows.values_list("pk", flat=True).iterator() if pk not in chained][:10]


def _as_ints(refs: Iterable[str]) -> list[int]:
    return [int(r) for r in refs if r.isdigit()]


chain_kind("audit", Kind(current=_audit_now, unchained=_audit_unchained, label=gettext_lazy("audit event")))


# --- Verification ----------------------------------------------------------------------------------


@dataclass
class Verdict:
    ok: bool = True
    links: int = 0
    head_seq: int = 0
    head_hash: str = GENESIS
    broken_seq: int | None = None
    detail: str = ""
    excused: dict[str, set[str]] = field(default_factory=dict)

    def fail(self, seq: int | None, detail: str) -> Verdict:
        self.ok, self.broken_seq, self.detail = False, seq, detail
        return self


def _links() -> Iterator[list[ChainRecord]]:
    last = 0
    while batch := list(ChainRecord.objects.filter(seq__gt=last).order_by("seq")[:BATCH]):
        yield batch
        last = batch[-1].seq


def chain_verify(*, progress: Callable[[int], None] | None = None) -> Verdict:
    """Walk the chain from its first link; stop at the first that does not hold and say why."""
    verdict = Verdict()
    for record in ChainRecord.objects.filter(kind=DELETION).order_by("seq"):
        payload = record.payload if isinstance(record.payload, dict) else {}
        verdict.excused.setdefault(str(payload.get("kind")), set()).update(
            map(str, payload.get("refs") or [])
        )
    prev, expected = GENESIS, 1
    first_ref: dict[str, str] = {}
    for batch in _links():
        now: dict[str, Mapping[str, Any]] = {}
        for kind in {r.kind for r in batch} & _KINDS.keys():
            now[kind] = _KINDS[kind].current([r.ref for r in batch if r.kind == kind])
        for record in batch:
            if broken := _check_link(record, expected, prev, now, verdict.excused):
                return verdict.fail(record.seq if record.seq == expected else expected, broken)
            first_ref.setdefault(record.kind, record.ref)
            prev, expected = record.record_hash, record.seq + 1
            verdict.links += 1
        if progress:
            progress(verdict.links)
    verdict.head_seq, verdict.head_hash = expected - 1, prev
    head = ChainHead.objects.filter(pk=1).first()
    if head is not None and (head.seq, head.record_hash) != (verdict.head_seq, prev):
        return verdict.fail(
            verdict.head_seq + 1,
            _(
                "The chain ends at link #%(seq)s, but its head says #%(head)s: links were removed from the end."
            )
            % {"seq": verdict.head_seq, "head": head.seq},
        )
    for kind, ref in first_ref.items():
        unchained = _KINDS[kind].unchained if kind in _KINDS else None
        if unchained is not None and (extra := unchained(ref)):
            return verdict.fail(
                None,
                _("%(what)s %(refs)s is in no link of the chain: written outside the product.")
                % {"what": _KINDS[kind].label or kind, "refs": ", ".join(extra)},
            )
    return verdict


def _check_link(
    record: ChainRecord,
    expected: int,
    prev: str,
    now: Mapping[str, Mapping[str, Any]],
    excused: Mapping[str, set[str]],
) -> str | None:
    if record.seq != expected:
        return _("Link #%(seq)s is missing (the next link is #%(next)s).") % {
            "seq": expected,
            "next": record.seq,
        }
    if record.prev_hash != prev:
        return _("Link #%(seq)s does not follow link #%(before)s: links were changed or reordered.") % {
            "seq": record.seq,
            "before": record.seq - 1,
        }
    if link_hash(record.seq, record.kind, record.ref, record.content_hash, record.prev_hash) != (
        record.record_hash
    ):
        return _("Link #%(seq)s was changed after it was written.") % {"seq": record.seq}
    if record.payload is not None and sha256(record.payload) != record.content_hash:
        return _("Link #%(seq)s's content was changed after it was written.") % {"seq": record.seq}
    kind = _KINDS.get(record.kind)
    if kind is None:
        return None
    what = {"what": kind.label or record.kind, "ref": record.ref, "seq": record.seq}
    content = now.get(record.kind, {}).get(record.ref)
    if content is None:
        if record.ref in excused.get(record.kind, ()):
            return None
        return _("%(what)s %(ref)s (link #%(seq)s) was deleted.") % what
    if sha256(content) != record.content_hash and not any(
        sha256(shape) == record.content_hash for shape in (kind.older(content) if kind.older else [])
    ):
        return _("%(what)s %(ref)s (link #%(seq)s) was changed after it was recorded.") % what
    return None


def chain_check_record(verdict: Verdict) -> ChainCheck:
    """Keep the outcome of a verification (the pages show the last one)."""
    return ChainCheck.objects.create(
        ok=verdict.ok,
        links=verdict.links,
        head_seq=verdict.head_seq,
        head_hash=verdict.head_hash,
        broken_seq=verdict.broken_seq,
        detail=verdict.detail,
    )


def chain_last_check() -> ChainCheck | None:
    return ChainCheck.objects.first()


def chain_head() -> dict[str, Any]:
    """The chain's head as printed or sent elsewhere to anchor it; signed (Ed25519) when the
    operator set ``LLAMON_CHAIN_SIGNING_KEY``."""
    head = ChainHead.objects.filter(pk=1).first()
    out: dict[str, Any] = {
        "format": HEAD_FORMAT,
        "seq": head.seq if head else 0,
        "record_hash": head.record_hash if head else GENESIS,
        "at": timezone.now().isoformat(),
    }
    key = _signing_key()
    if key is not None:
        out["public_key"] = public_key_text(key.public_key())
        out["signature"] = base64.b64encode(key.sign(_head_message(out))).decode()
    return out


HEAD_FORMAT = "llamon-chain-head/1"


def _head_message(head: Mapping[str, Any]) -> bytes:
    return f"{HEAD_FORMAT}|{head['seq']}|{head['record_hash']}|{head['at']}".encode()


def _signing_key() -> Ed25519PrivateKey | None:
    seed = settings.LLAMON_CHAIN_SIGNING_KEY
    return Ed25519PrivateKey.from_private_bytes(seed) if seed else None


def chain_sign(message: bytes) -> dict[str, str] | None:
    """``{"public_key", "signature"}`` (base64) of ``message`` signed with the chain's key; None
    when no key is set (what is exported is then unsigned: see docs/evidence.md)."""
    key = _signing_key()
    if key is None:
        return None
    return {
        "public_key": public_key_text(key.public_key()),
        "signature": base64.b64encode(key.sign(message)).decode(),
    }


def public_key_text(key: Ed25519PublicKey) -> str:
    """A public key as base64 of its 32 raw bytes (what the about line and exported heads show)."""
    return base64.b64encode(key.public_bytes(Encoding.Raw, PublicFormat.Raw)).decode()


def chain_public_key() -> str | None:
    """This workbench's head-signing public key, or None when heads are not signed."""
    key = _signing_key()
    return public_key_text(key.public_key()) if key else None


def new_signing_key() -> str:
    """A fresh key for ``LLAMON_CHAIN_SIGNING_KEY`` (base64 of its 32-byte seed)."""
    raw = Ed25519PrivateKey.generate().private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    return base64.urlsafe_b64encode(raw).decode()


def chain_anchor_check(anchor: Mapping[str, Any], *, public_key: str | None = None) -> str | None:
    """Why the chain as it is now does not extend ``anchor`` (a head printed earlier), or None.

    A signed anchor is checked against ``public_key`` (default: this workbench's own); a chain
    rewritten after the anchor was taken has another hash at the anchor's position.
    """
    try:
        seq, record_hash = int(anchor["seq"]), str(anchor["record_hash"])
    except (KeyError, TypeError, ValueError):
        return _("The anchor is not a chain head (it needs seq and record_hash).")
    if "signature" in anchor:
        text = public_key or anchor.get("public_key") or ""
        try:
            key = Ed25519PublicKey.from_public_bytes(base64.b64decode(text))
            key.verify(base64.b64decode(str(anchor["signature"])), _head_message(anchor))
        except (ValueError, InvalidSignature, KeyError, TypeError):
            return _(
                "The anchor's signature does not verify: it was not signed by this key, or it was edited."
            )
        if public_key is None and text != chain_public_key():
            return _("The anchor was signed by another key than this workbench's.")
    if seq == 0:
        return None if record_hash == GENESIS else _("The anchor's first link is not the chain's start.")
    link = ChainRecord.objects.filter(seq=seq).values_list("record_hash", flat=True).first()
    if link is None:
        return _("The chain has no link #%(seq)s any more: links anchored before were removed.") % {
            "seq": seq
        }
    if link != record_hash:
        return _(
            "Link #%(seq)s is not the one anchored: the chain was rewritten after the head was taken."
        ) % {"seq": seq}
    return None
