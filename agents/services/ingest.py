"""Trace ingest: runs of served agents and flows (`llamon run`), posted as they happen."""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts.roles import has_role
from agents.errors import (
    AgentConflictError,
    AgentError,
)
from agents.evidence import run_end
from agents.models import Agent, IngestCredential, Run
from agents.redaction import run_redactor
from agents.services.runs import request_check_size, request_lookup_ids
from core.audit import audit_record
from llamon_agent.tools import AgentRequest
from rules.models import RuleSetVersion

logger = logging.getLogger(__name__)


INGEST_PREFIX = "llamon_ingest_"
INGEST_RE = re.compile(r"^llamon_ingest_([0-9a-f]{8})_[A-Za-z0-9_-]{20,}$")


def _secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@transaction.atomic
def ingest_credential_issue(*, actor: Any, agent_name: str) -> tuple[IngestCredential, str]:
    """Issue a served agent's ingest credential for ``agent_name`` (admin; None: the operator's
    command); returns it with its secret, shown once. Audited."""
    if actor is not None and not has_role(actor, "admin"):
        raise PermissionDenied(_("Only an admin issues ingest credentials."))
    name = (agent_name or "").strip()
    if not name or len(name) > 100:
        raise AgentError(
            _("Name the served agent the credential is for (1 to 100 characters)."), field="agent_name"
        )
    _not_a_worker_agent(name, field="agent_name")
    prefix = secrets.token_hex(4)
    secret = f"{INGEST_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
    credential = IngestCredential.objects.create(
        agent_name=name,
        prefix=prefix,
        token_hash=_secret_hash(secret),
        created_by_name=actor.get_username() if actor is not None else "system",
    )
    audit_record(
        actor=actor, action="ingest_credential.issue", obj=credential, after={"agent": name, "prefix": prefix}
    )
    return credential, secret


@transaction.atomic
def ingest_credential_revoke(*, actor: Any, credential: IngestCredential) -> IngestCredential:
    """Revoke an ingest credential at once (admin; None: the operator's command). Audited."""
    if actor is not None and not has_role(actor, "admin"):
        raise PermissionDenied(_("Only an admin revokes ingest credentials."))
    IngestCredential.objects.filter(pk=credential.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    credential.refresh_from_db()
    audit_record(
        actor=actor, action="ingest_credential.revoke", obj=credential, after={"prefix": credential.prefix}
    )
    return credential


def _not_a_worker_agent(name: str, *, field: str | None = None) -> None:
    """The workbench's agents run on workers: none of their runs comes through ingest."""
    if Agent.objects.filter(name=name).exists():
        raise AgentConflictError(
            _(
                "%(agent)s is an agent of this workbench: its runs run on workers and cannot be ingested. A served agent needs a name of its own."
            )
            % {"agent": name},
            field=field,
        )


def _served_version(version: dict[str, str] | None) -> dict[str, Any]:
    """The run's columns for the version a served agent says it serves. A version this workbench
    holds must be the same content (its hash); a rule set it holds must have that version."""
    if not version:
        return {}
    fields: dict[str, Any] = {
        "rule_set_name": version["rule_set"],
        "rule_set_ref": version["ref"],
        "rule_set_hash": version["content_hash"],
    }
    if not version["ref"].startswith("v"):
        return fields  # a draft's content changes: nothing here to compare it with
    number = int(version["ref"][1:])
    known = RuleSetVersion.objects.filter(rule_set__name=version["rule_set"])
    if not known.exists():
        return fields  # rules from elsewhere: carried as the agent says
    held = known.filter(number=number).first()
    if held is None:
        raise AgentError(
            _("Rule set %(rule_set)s has no version %(ref)s in this workbench.")
            % {"rule_set": version["rule_set"], "ref": version["ref"]},
            field="version.ref",
        )
    if held.content_hash != version["content_hash"]:
        raise AgentError(
            _(
                "Version %(ref)s of rule set %(rule_set)s has the content hash %(hash)s here, not the one sent: the served rules are not that version."
            )
            % {"ref": version["ref"], "rule_set": version["rule_set"], "hash": held.content_hash[:16]},
            field="version.content_hash",
        )
    fields["rule_set_version"] = held
    return fields


def ingest_credential_authenticate(secret: str) -> IngestCredential | None:
    """The live credential a secret stands for, or None (compared in constant time)."""
    match = INGEST_RE.match(secret or "")
    if match is None:
        return None
    wanted, found = _secret_hash(secret), None
    for candidate in IngestCredential.objects.filter(prefix=match.group(1)):
        if hmac.compare_digest(candidate.token_hash, wanted):
            found = candidate
    return found if found is not None and found.revoked_at is None else None


@transaction.atomic
def run_ingest(
    *,
    credential: IngestCredential,
    run: Run | None,
    events: list[Any],
    source: str = Run.Source.SERVED,
    agent: Agent | None = None,
    agent_name: str = "",
    request: AgentRequest | None = None,
    finish: dict[str, Any] | None = None,
    version: dict[str, str] | None = None,
) -> tuple[Run, bool]:
    """Create a served/flow run (``run`` None) or add to one: store TraceEvents as steps, redacted; maybe finish it.

    Returns (run, created). Steps go through the same DbStepSink as worker runs, so an end event
    completes the step its start event created in an earlier batch. ``finish`` is
    ``{status, answer, error, error_kind}``; a finished run takes no more events. ``version``
    (``{rule_set, ref, content_hash}``, with the first batch only) is the rule-set version the
    served agent serves: stored on the run, so its page, exports and decision record carry it.
    """
    from agents.sink import DbStepSink

    created = run is None
    if run is None:
        if source not in (Run.Source.SERVED, Run.Source.FLOW):
            raise AgentError(_("Ingested runs have the source 'served' or 'flow'."), field="source")
        # The credential names the one agent it ingests for: a run under any other is refused,
        # so a worker agent's (or a protected agent's) runs cannot be made up by anyone else.
        named = agent.name if agent is not None else agent_name.strip()
        if named and named != credential.agent_name:
            raise PermissionDenied(
                _(
                    "This ingest credential is for the agent %(agent)s only; it cannot ingest runs of %(other)s."
                )
                % {"agent": credential.agent_name, "other": named}
            )
        _not_a_worker_agent(credential.agent_name)
        if request is None and not events and finish is None:
            raise AgentError(
                _(
                    "A new ingested run needs its 'request', some 'events' or its 'finish': this body holds nothing to record."
                ),
                field="events",
            )
        request = request or AgentRequest(query="")
        request_check_size(request)
        served = _served_version(version)
        run = Run.objects.create(
            **served,
            agent_name=credential.agent_name,
            ingested_by=credential,
            source=source,
            status=Run.Status.RUNNING,
            query=request.query,
            context=request.context,
            a2a_data=request.a2a_data,
            a2a_files=request.a2a_files,
            started_at=timezone.now(),
            heartbeat_at=timezone.now(),
            **request_lookup_ids(request),
        )
    else:
        if version is not None:
            raise AgentError(
                _("The version a served agent serves is sent with its run's first batch only."),
                field="version",
            )
        run = Run.objects.select_for_update().get(pk=run.pk)  # one batch at a time: seq numbers stay unique
        if run.source == Run.Source.WORKER:
            raise AgentConflictError(
                _("Run %(pk)s ran on a worker; only served and flow runs take ingested events.")
                % {"pk": run.pk}
            )
        if run.finished:
            raise AgentConflictError(
                _("Run %(pk)s has already finished (%(status)s); it takes no more events.")
                % {"pk": run.pk, "status": run.status}
            )
        if run.ingested_by_id != credential.pk:
            # Another agent's credential (or a person) could otherwise write steps into, or end, this run.
            raise PermissionDenied(
                _(
                    "Run %(pk)s was not started with this ingest credential: only its own credential adds to it."
                )
                % {"pk": run.pk}
            )
    redact = run_redactor(run)
    sink = DbStepSink(run, redact=redact, resume=True)
    for event in events:
        sink.emit(event)
    prestep = sum(1 for e in events if e.kind == "rule" and e.phase == "end" and e.status == "ok")
    counts = {
        "heartbeat_at": timezone.now(),  # every batch is a sign of life (see runs_reap)
        "llm_calls": F("llm_calls") + sink.counts["llm"],
        "tool_calls": F("tool_calls") + sink.counts["tool"],
        "prestep_calls": F("prestep_calls") + prestep,
    }
    if finish is not None:
        run_end(
            run.pk,
            where={"finished_at__isnull": True},
            status=finish["status"],
            answer=redact(finish.get("answer") or ""),
            error=redact(finish.get("error") or "")[:10_000],
            error_kind=(finish.get("error_kind") or "")[:20],
            **counts,
        )
    else:
        Run.objects.filter(pk=run.pk).update(**counts)
    run.refresh_from_db()
    return run, created
