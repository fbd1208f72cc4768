"""Writes for agents and runs, a module per concern; import them from here (``from agents import services``).

- ``runs``: the run lifecycle (create, publish, rerun, replay, cancel; a worker's claim, heartbeat,
  finish and execute) and a run kept as a case or opened in the tester;
- ``delivery``: signs of life: worker heartbeats, runs that lost their worker or their message
  (reap, redeliver);
- ``retention``: deleting runs past the retention period;
- ``agents``: saving and deleting agents;
- ``connections``: the model connections admins define;
- ``privacy``: the redaction and retention settings;
- ``ingest``: runs of served agents and flows, posted as they happen;
- ``rollout``: staged rollout and shadow mode;
- ``changes``: protected agents' change requests, their review and their one application.
"""

from __future__ import annotations

from agents.models import CONNECTION_FIELDS
from agents.services.agents import (
    AGENT_FIELDS,
    DEFAULT_SYSTEM_PROMPT,
    agent_delete,
    agent_save,
    agent_save_values,
    agent_values,
)
from agents.services.changes import (
    agent_protect,
    change_request_review,
    change_request_withdraw,
)
from agents.services.connections import (
    connection_delete,
    connection_save,
    connection_values,
)
from agents.services.delivery import (
    runs_reap,
    runs_redeliver,
    worker_heartbeat_record,
)
from agents.services.export import (
    run_export_document,
    runs_export,
)
from agents.services.ingest import (
    ingest_credential_authenticate,
    ingest_credential_issue,
    ingest_credential_revoke,
    run_ingest,
)
from agents.services.privacy import (
    privacy_preview,
    privacy_preview_run,
    privacy_update,
)
from agents.services.retention import (
    RETENTION_BATCH,
    runs_delete_expired,
)
from agents.services.rollout import (
    GUARD_ERROR_PERCENT,
    GUARD_MIN_RUNS,
    MAX_CHATBOT_ID_CHARS,
    MAX_ROLLOUT_CHATBOTS,
    ROLLOUT_FIELDS,
    rollout_guard_check,
    rollout_keep,
    rollout_promote,
    rollout_publish,
    rollout_rollback,
    rollout_set,
    shadow_set,
)
from agents.services.runs import (
    request_check_size,
    request_lookup_ids,
    run_cancel,
    run_claim,
    run_create,
    run_execute,
    run_finish,
    run_heartbeat,
    run_publish,
    run_replay,
    run_rerun,
    run_save_as_case,
    run_tester_inputs,
)

__all__ = [
    "ingest_credential_authenticate",
    "ingest_credential_issue",
    "ingest_credential_revoke",
    "worker_heartbeat_record",
    "request_check_size",
    "request_lookup_ids",
    "run_create",
    "runs_export",
    "run_export_document",
    "run_publish",
    "run_rerun",
    "run_replay",
    "run_cancel",
    "run_claim",
    "run_heartbeat",
    "run_finish",
    "run_execute",
    "run_save_as_case",
    "run_tester_inputs",
    "runs_reap",
    "runs_redeliver",
    "RETENTION_BATCH",
    "runs_delete_expired",
    "AGENT_FIELDS",
    "DEFAULT_SYSTEM_PROMPT",
    "agent_save",
    "agent_save_values",
    "agent_values",
    "agent_delete",
    "agent_protect",
    "change_request_review",
    "change_request_withdraw",
    "CONNECTION_FIELDS",
    "connection_save",
    "connection_values",
    "connection_delete",
    "privacy_preview",
    "privacy_preview_run",
    "privacy_update",
    "run_ingest",
    "MAX_ROLLOUT_CHATBOTS",
    "MAX_CHATBOT_ID_CHARS",
    "ROLLOUT_FIELDS",
    "GUARD_ERROR_PERCENT",
    "GUARD_MIN_RUNS",
    "rollout_guard_check",
    "rollout_keep",
    "rollout_set",
    "rollout_promote",
    "rollout_publish",
    "rollout_rollback",
    "shadow_set",
]
