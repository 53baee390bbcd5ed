"""Every name this plugin writes into telemetry, in one place.

The rule: a key, an event name or a word that reaches a span, an event or a metric is spelled here
and nowhere else, exactly as docs/contract.md fixes it; the collector configuration's tests read them
from this module, so a key added here without its allow-list entry fails a test.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

INSTRUMENTATION_NAME: Final = "otel_mcp_replay"

# Span names: the MCP conventions' client span "{mcp.method.name} {target}", and the HTTP
# conventions' client span "{method}" (the POST that carries one attempt).
CALL_SPAN_PREFIX: Final = "tools/call"  # the call's CLIENT span: "tools/call {tool}"
ATTEMPT_SPAN_NAME: Final = "POST"  # one CLIENT span per HTTP attempt: the HTTP client span of its POST

# The conventions' keys (MCP, GenAI, JSON-RPC, HTTP, network), on the call and attempt spans.
MCP_METHOD_NAME: Final = "mcp.method.name"
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
JSONRPC_REQUEST_ID: Final = "jsonrpc.request.id"
MCP_PROTOCOL_VERSION: Final = "mcp.protocol.version"
RPC_RESPONSE_STATUS_CODE: Final = "rpc.response.status_code"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"
NETWORK_TRANSPORT: Final = "network.transport"
NETWORK_PROTOCOL_NAME: Final = "network.protocol.name"
NETWORK_PROTOCOL_VERSION: Final = "network.protocol.version"
HTTP_REQUEST_METHOD: Final = "http.request.method"
URL_FULL: Final = "url.full"
# Where the httpx instrumentation says a POST went in the stable conventions, besides server.*:
NETWORK_PEER_ADDRESS: Final = "network.peer.address"
NETWORK_PEER_PORT: Final = "network.peer.port"
HTTP_RESEND_COUNT: Final = "http.request.resend_count"
HTTP_STATUS_CODE: Final = "http.response.status_code"
EXECUTE_TOOL: Final = "execute_tool"  # gen_ai.operation.name of a tool call
TOOL_ERROR: Final = "tool_error"  # error.type of a call whose result has isError
TASK_CANCELLED: Final = "cancelled"  # error.type of a task-backed call whose task was cancelled
TCP: Final = "tcp"
PIPE: Final = "pipe"  # network.transport of a call over stdio
HTTP: Final = "http"
# The words above that the conventions' keys hold (no key of their own).
CONVENTION_WORDS: Final = (EXECUTE_TOOL, TOOL_ERROR, TASK_CANCELLED, TCP, PIPE, HTTP)

# The session id is hashed, never raw (legacy-era sessions only: the conventions keep it off
# 2026-07-28 calls).
MCP_SESSION_ID: Final = "mcp.session.id"

# Attempt span attributes: the replay facts.
ATTEMPT: Final = "mcp.replay.attempt"
FAILURE: Final = "mcp.replay.failure"
EFFECT: Final = "mcp.replay.effect"
PERMISSION_BY: Final = "mcp.replay.permission.by"
PERMISSION_ON: Final = "mcp.replay.permission.on"
PERMISSION_ASSUMES: Final = "mcp.replay.permission.assumes"
DECLINED: Final = "mcp.replay.declined"
WAIT_MS: Final = "mcp.replay.wait_ms"

# A span's failure: a JSON-RPC code, a status, `tool_error` or a type, never a message.
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
# A task-backed call's (SEP-2663) two more, in every such record and in no other: its task, by a
# keyed hash (a task id may be a bearer token), and the last status seen of it.
TASK: Final = "mcp.replay.task"
TASK_STATUS: Final = "mcp.replay.task.status"
RECORD_TASK_KEYS: Final = (TASK, TASK_STATUS)

ATTEMPT_SPAN_KEYS: Final = (
    HTTP_REQUEST_METHOD,
    URL_FULL,
    SERVER_ADDRESS,
    SERVER_PORT,
    NETWORK_PEER_ADDRESS,
    NETWORK_PEER_PORT,
    NETWORK_PROTOCOL_VERSION,
    HTTP_STATUS_CODE,
    HTTP_RESEND_COUNT,
    ERROR_TYPE,
    GEN_AI_TOOL_NAME,
    JSONRPC_REQUEST_ID,
    ATTEMPT,
    FAILURE,
    EFFECT,
    PERMISSION_BY,
    PERMISSION_ON,
    PERMISSION_ASSUMES,
    DECLINED,
    WAIT_MS,
)
CALL_SPAN_KEYS: Final = (
    MCP_METHOD_NAME,
    GEN_AI_OPERATION_NAME,
    GEN_AI_TOOL_NAME,
    JSONRPC_REQUEST_ID,
    MCP_PROTOCOL_VERSION,
    MCP_SESSION_ID,
    SERVER_ADDRESS,
    SERVER_PORT,
    NETWORK_TRANSPORT,
    NETWORK_PROTOCOL_NAME,
    NETWORK_PROTOCOL_VERSION,
    POLICY,
    SENT,
    EFFECT,
    VERDICT,
    MAY_HAVE_RUN,
    DECLINED,
    ERROR_TYPE,
    RPC_RESPONSE_STATUS_CODE,
)

# The words each key may hold: each a type mypy checks at every use, and its tuple for run time.
TOOLS_CALL_METHOD: Final = "tools/call"  # the method whose requests are tool calls
TASKS_GET_METHOD: Final = "tasks/get"  # a task's poll (SEP-2663): a pure, idempotent read
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
TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]  # SEP-2663's
Adapter = Literal["agentcore-runtime"]
GuardStoreOperation = Literal["arm", "check", "clear"]  # the repeat guard's store operations
# Why one fell back: no answer within the bound; the store not reached (refused connections, down,
# no master known); or refused: the store answered with an error it will repeat (a credential, a
# permission, a read-only replica, out of memory, a redirect not followed, a TLS verification).
GuardStoreFailure = Literal["timeout", "unreachable", "refused"]

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
TASK_STATUSES: Final[tuple[TaskStatus, ...]] = get_args(TaskStatus)
ADAPTERS: Final[tuple[Adapter, ...]] = get_args(Adapter)
GUARD_STORE_OPERATIONS: Final[tuple[GuardStoreOperation, ...]] = get_args(GuardStoreOperation)
GUARD_STORE_FAILURES: Final[tuple[GuardStoreFailure, ...]] = get_args(GuardStoreFailure)

MAX_RECORD_ROWS: Final = 100

# Metrics: the conventions' durations, then the replay's own. The HTTP client duration is the one the
# HTTP conventions in force name (http_conventions.py): the stable one, or the old one in ms, or both.
METRIC_OPERATION_DURATION: Final = "mcp.client.operation.duration"
METRIC_HTTP_DURATION: Final = "http.client.request.duration"  # for the POSTs whose span is an attempt's
METRIC_HTTP_DURATION_OLD: Final = "http.client.duration"  # the same, in the old conventions (ms)
# The MCP conventions' advisory buckets (seconds) for a request; the HTTP ones are the helpers'.
OPERATION_DURATION_BUCKETS: Final = (
    *(0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0),
    *(10.0, 30.0, 60.0, 120.0, 300.0),
)
# A wait is at least the policy's first backoff: seconds-scale buckets from there to the cap.
WAIT_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
METRIC_ATTEMPTS: Final = "mcp.client.replay.attempts"
METRIC_WAIT: Final = "mcp.client.replay.wait"
METRIC_CALLS: Final = "mcp.client.replay.calls"
METRIC_RECORDS_REFUSED: Final = "mcp.client.replay.records.refused"
METRIC_GUARD_STORE_FALLBACKS: Final = "mcp.client.replay.guard.store.fallbacks"
# Its attributes: which store operation fell back (GUARD_STORE_OPERATIONS), and why (GUARD_STORE_FAILURES).
GUARD_STORE_OPERATION: Final = "mcp.replay.guard.store.operation"
GUARD_STORE_FAILURE: Final = "mcp.replay.guard.store.failure"
# Calls the repeat guard forgot within their window, its memory being full (guard.py's byte bound).
METRIC_GUARD_FORGOTTEN: Final = "mcp.client.replay.guard.forgotten"
