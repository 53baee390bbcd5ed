"""The environment variables this instrumentation reads, each also an `opentelemetry-instrument` flag."""

OTEL_PYTHON_MCP_REPLAY_SERVERS = "OTEL_PYTHON_MCP_REPLAY_SERVERS"
"""The `servers` mapping (endpoint URL -> declaration) as inline JSON."""

OTEL_PYTHON_MCP_REPLAY_CONFIG = "OTEL_PYTHON_MCP_REPLAY_CONFIG"
"""Path to a TOML or JSON file holding {"servers": {...}}."""

OTEL_PYTHON_MCP_REPLAY_MAX_ATTEMPTS = "OTEL_PYTHON_MCP_REPLAY_MAX_ATTEMPTS"
"""Attempts including the first (default 3)."""

OTEL_PYTHON_MCP_REPLAY_MAX_WAIT_MS = "OTEL_PYTHON_MCP_REPLAY_MAX_WAIT_MS"
"""Cap on total waiting in one call, in milliseconds (default 10000)."""

OTEL_PYTHON_MCP_REPLAY_RETRY_ON_THROTTLE = "OTEL_PYTHON_MCP_REPLAY_RETRY_ON_THROTTLE"
"""`false` turns the compatibility 429 rule off."""

OTEL_PYTHON_MCP_REPLAY_RETRY_BUDGET = "OTEL_PYTHON_MCP_REPLAY_RETRY_BUDGET"
"""Per-endpoint token bucket `TOKENS,RATIO` (default `100,0.1`) or `off`."""

OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_S = "OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_S"
"""Seconds the repeat guard remembers a call that may have run (default 600); `0` turns it off."""

OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_STORE = "OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_STORE"
"""A `redis://`/`rediss://` URL: the repeat guard shared by every process naming it (extra `[redis]`)."""

OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_SECRET = "OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_SECRET"
"""The HMAC key (>= 16 bytes) every process sharing the store shares; required with a store."""

OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_STORE_TIMEOUT_MS = "OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_STORE_TIMEOUT_MS"
"""The bound on each operation of the repeat guard's store, in milliseconds (default 50)."""

OTEL_PYTHON_MCP_REPLAY_REDACT_KEYS = "OTEL_PYTHON_MCP_REPLAY_REDACT_KEYS"
"""Comma list of RE2 patterns on attribute keys (any case) whose values are masked (`\\,`: a comma)."""

OTEL_PYTHON_MCP_REPLAY_REDACT_VALUES = "OTEL_PYTHON_MCP_REPLAY_REDACT_VALUES"
"""Comma list of RE2 patterns whose matching substrings are masked (`\\,`: a comma)."""

OTEL_PYTHON_MCP_REPLAY_REDACT_CONTENT = "OTEL_PYTHON_MCP_REPLAY_REDACT_CONTENT"
"""`false` keeps other instrumentations' GenAI content attributes (tool arguments, results, messages)."""

OTEL_PYTHON_MCP_REPLAY_RECORD = "OTEL_PYTHON_MCP_REPLAY_RECORD"
"""Where a call's record goes: `span_event` (default), `log` (a log-based event) or `both`."""

OTEL_PYTHON_MCP_REPLAY_SESSION_KEY = "OTEL_PYTHON_MCP_REPLAY_SESSION_KEY"
"""Key (>= 16 bytes) of the hash that replaces `mcp.session.id`; random per process when unset."""
