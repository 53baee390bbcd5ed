"""`McpReplayInstrumentor`: reads the configuration once, then patches three public seams.

`instrument()` with an invalid keyword raises (the app wrote it); a configuration error found in
the environment is logged at ERROR naming the variable and field, and the plugin runs fail-closed:
nothing repeats, spans still record. `_instrument()` never raises for the environment, so the
auto-instrumentation loader goes on to load the instrumentors after this one.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.instrumentation.utils import unwrap
from opentelemetry.metrics import get_meter
from opentelemetry.trace import get_tracer
from wrapt import wrap_function_wrapper

from otel_mcp_replay import runtime as _runtime
from otel_mcp_replay.budget import RetryBudgets
from otel_mcp_replay.config import resolve
from otel_mcp_replay.package import _instruments
from otel_mcp_replay.runtime import Instruments, Runtime
from otel_mcp_replay.telemetry import INSTRUMENTATION_NAME
from otel_mcp_replay.version import __version__

_PATCHES = (
    ("httpx2", "AsyncClient.send", "otel_mcp_replay.patches.httpx2_send", "send"),
    ("mcp.client.session", "ClientSession.call_tool", "otel_mcp_replay.patches.session", "call_tool"),
    ("mcp.client.sse", "sse_client", "otel_mcp_replay.patches.sse", "sse_client"),
    ("mcp.client.stdio", "stdio_client", "otel_mcp_replay.patches.stdio", "stdio_client"),
    # `Client(StdioServerParameters(...))` calls the name it imported into its own module.
    ("mcp.client.client", "stdio_client", "otel_mcp_replay.patches.stdio", "stdio_client"),
)


class McpReplayInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Enforces the app's replay declarations on the mcp client and records every attempt.

    Keyword arguments of `instrument()`: `tracer_provider`, `meter_provider`, and the settings
    `servers`, `max_attempts`, `max_wait_ms`, `retry_on_throttle`, `retry_budget`, each overriding
    its `OTEL_PYTHON_MCP_REPLAY_*` environment variable.
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        resolved = resolve(kwargs, os.environ)  # raises only for what the keywords say
        tracer = get_tracer(INSTRUMENTATION_NAME, __version__, tracer_provider=kwargs.get("tracer_provider"))
        meter = get_meter(INSTRUMENTATION_NAME, __version__, meter_provider=kwargs.get("meter_provider"))
        _runtime.install(
            Runtime(
                tracer=tracer,
                instruments=Instruments.on(meter),
                servers=resolved.servers,
                settings=resolved.settings,
                budgets=RetryBudgets(resolved.settings.retry_budget),
                fail_closed=resolved.fail_closed,
            )
        )
        import importlib

        for module, name, patch_module, patch in _PATCHES:
            wrap_function_wrapper(module, name, getattr(importlib.import_module(patch_module), patch))

    def _uninstrument(self, **kwargs: Any) -> None:
        import importlib

        for module, name, _, _ in _PATCHES:
            owner, _, attr = name.rpartition(".")
            target: object = importlib.import_module(module)
            if owner:
                target = getattr(target, owner)
            unwrap(target, attr)
        _runtime.install(None)
