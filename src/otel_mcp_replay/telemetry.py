"""Every name this plugin writes into telemetry, in one place.

The rule: a key, an event name or a word that reaches a span, an event or a metric is spelled here
and nowhere else, exactly as docs/contract.md fixes it; the collector configuration's tests read them
from this module, so a key added here without its allow-list entry fails a test.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

INSTRUMENTATION_NAME: Final = "otel_mcp_replay"

# Span names.
CALL_SPAN_PREFIX: Final = "tools/call"  # the call's span: "tools/call {tool}"
ATTEMPT_SPAN_PREFIX: Final = "mcp.replay.attempt"  # one INTERNAL span per HTTP attempt

# Attempt span attributes.
MCP_METHOD_NAME: Final = "mcp.method.name"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
JSONRPC_REQUEST_ID: Final = "jsonrpc.request.id"
ATTEMPT: Final = "mcp.replay.attempt"
HTTP_RESEND_COUNT: Final = "http.request.resend_count"
HTTP_STATUS_CODE: Final = "http.response.status_code"
FAILURE: Final = "mcp.replay.failure"
EFFECT: Final = "mcp.replay.effect"
PERMISSION_BY: Final = "mcp.replay.permission.by"
PERMISSION_ON: Final = "mcp.replay.permission.on"
PERMISSION_ASSUMES: Final = "mcp.replay.permission.assumes"
DECLINED: Final = "mcp.replay.declined"
WAIT_MS: Final = "mcp.replay.wait_ms"

# The call span's failure: the exception's type only (its message may quote the server).
ERROR_TYPE: Final = "error.type"

# The call span carries the policy too (low cardinality, useful to filter in a backend).
POLICY: Final = "mcp.replay.policy"

# The record event and its keys.
RECORD_EVENT: Final = "mcp.tool.request_attempts"
RECORD_REFUSED_EVENT: Final = "mcp.tool.request_attempts.refused"
SENT: Final = "mcp.replay.sent"
VERDICT: Final = "mcp.replay.verdict"
MAY_HAVE_RUN: Final = "mcp.replay.may_have_run"
ENDPOINT: Final = "mcp.replay.endpoint"
OMITTED: Final = "mcp.replay.omitted"
# A multi-round call (SEP-2322) is one call span holding one record per round: 1 for the first.
ROUND: Final = "mcp.replay.round"
ATTEMPTS_STATUS: Final = "mcp.replay.attempts.status"
ATTEMPTS_FAILURE: Final = "mcp.replay.attempts.failure"
ATTEMPTS_EFFECT: Final = "mcp.replay.attempts.effect"
ATTEMPTS_PERMISSION: Final = "mcp.replay.attempts.permission"
ATTEMPTS_WAIT_MS: Final = "mcp.replay.attempts.wait_ms"

# Scalar keys of the record, then its columns: together, the whole allow-list.
RECORD_SCALAR_KEYS: Final = (
    POLICY,
    SENT,
    EFFECT,
    VERDICT,
    MAY_HAVE_RUN,
    ENDPOINT,
    OMITTED,
    GEN_AI_TOOL_NAME,
    JSONRPC_REQUEST_ID,
    ROUND,
)
RECORD_COLUMN_KEYS: Final = (
    ATTEMPTS_STATUS,
    ATTEMPTS_FAILURE,
    ATTEMPTS_EFFECT,
    ATTEMPTS_PERMISSION,
    ATTEMPTS_WAIT_MS,
)
RECORD_KEYS: Final = RECORD_SCALAR_KEYS + RECORD_COLUMN_KEYS

ATTEMPT_SPAN_KEYS: Final = (
    MCP_METHOD_NAME,
    GEN_AI_TOOL_NAME,
    JSONRPC_REQUEST_ID,
    ATTEMPT,
    HTTP_RESEND_COUNT,
    HTTP_STATUS_CODE,
    FAILURE,
    EFFECT,
    PERMISSION_BY,
    PERMISSION_ON,
    PERMISSION_ASSUMES,
    DECLINED,
    WAIT_MS,
)
CALL_SPAN_KEYS: Final = (MCP_METHOD_NAME, GEN_AI_TOOL_NAME, JSONRPC_REQUEST_ID, POLICY, ERROR_TYPE, DECLINED)

# The words each key may hold: each a type mypy checks at every use, and its tuple for run time.
TOOLS_CALL_METHOD: Final = "tools/call"  # the method whose requests are tool calls
Policy = Literal["compatibility", "app-authorized"]
FailureKind = Literal["throttle", "session-busy", "network", "error"]
DeclarableKind = Literal["throttle", "network"]
Effect = Literal["none", "unknown", "applied"]
PermissionBy = Literal["app", "compatibility", "adapter"]
AttemptPermission = Literal["first", "app", "compatibility", "adapter"]
Assumption = Literal["refused-before-execution"]
DeclinedReason = Literal["not-retryable", "not-permitted", "changes-without-key", "budget"]
CallDeclinedReason = Literal["repeat-of-unknown"]  # on the call span: the repeat guard refused it
# `input-required`: the round was answered with InputRequiredResult, the server asking for more input.
CallVerdict = Literal["completed", "tool-error", "failed", "input-required"]
Adapter = Literal["agentcore-runtime"]
GuardStoreOperation = Literal["arm", "check", "clear"]  # the repeat guard's store operations
GuardStoreFailure = Literal["timeout", "error", "credential"]  # why one fell back

POLICIES: Final[tuple[Policy, ...]] = get_args(Policy)
FAILURES: Final[tuple[FailureKind, ...]] = get_args(FailureKind)
DECLARABLE_KINDS: Final[tuple[DeclarableKind, ...]] = get_args(DeclarableKind)
EFFECTS: Final[tuple[Effect, ...]] = get_args(Effect)
PERMISSIONS_BY: Final[tuple[PermissionBy, ...]] = get_args(PermissionBy)
ATTEMPT_PERMISSIONS: Final[tuple[AttemptPermission, ...]] = get_args(AttemptPermission)
ASSUMPTIONS: Final[tuple[Assumption, ...]] = get_args(Assumption)
DECLINED_REASONS: Final[tuple[DeclinedReason, ...]] = get_args(DeclinedReason)
CALL_DECLINED_REASONS: Final[tuple[CallDeclinedReason, ...]] = get_args(CallDeclinedReason)
VERDICTS: Final[tuple[CallVerdict, ...]] = get_args(CallVerdict)
ADAPTERS: Final[tuple[Adapter, ...]] = get_args(Adapter)
GUARD_STORE_OPERATIONS: Final[tuple[GuardStoreOperation, ...]] = get_args(GuardStoreOperation)
GUARD_STORE_FAILURES: Final[tuple[GuardStoreFailure, ...]] = get_args(GuardStoreFailure)

MAX_RECORD_ROWS: Final = 100

# Metrics.
METRIC_ATTEMPTS: Final = "mcp.client.replay.attempts"
METRIC_WAIT: Final = "mcp.client.replay.wait"
METRIC_CALLS: Final = "mcp.client.replay.calls"
METRIC_RECORDS_REFUSED: Final = "mcp.client.replay.records.refused"
METRIC_GUARD_STORE_FALLBACKS: Final = "mcp.client.replay.guard.store.fallbacks"
# Its attributes: which store operation fell back (GUARD_STORE_OPERATIONS), and why (GUARD_STORE_FAILURES).
GUARD_STORE_OPERATION: Final = "mcp.replay.guard.store.operation"
GUARD_STORE_FAILURE: Final = "mcp.replay.guard.store.failure"

# The session id is hashed, never raw (redaction).
MCP_SESSION_ID: Final = "mcp.session.id"
