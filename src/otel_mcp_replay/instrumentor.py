"""`McpReplayInstrumentor`: reads the configuration once, binds it into the seams, and wraps them.

`instrument()` with an invalid keyword raises (the app wrote it); a configuration error found in
the environment is logged at ERROR naming the variable and field, and the plugin runs fail-closed:
nothing repeats, spans still record. `_instrument()` never raises for the environment, so the
auto-instrumentation loader goes on to load the instrumentors after this one. Under a configuration
file (config_file.py) it is instrumented once, with the file's options: opentelemetry-instrument's
loop, which instruments it again with none, finds it done and passes quietly.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import sys
import weakref
from collections.abc import Callable, Collection
from typing import Any

from opentelemetry._logs import get_logger_provider
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.instrumentation.utils import unwrap
from opentelemetry.metrics import Counter, get_meter
from opentelemetry.trace import get_tracer, get_tracer_provider
from wrapt import wrap_function_wrapper

from otel_mcp_replay import environment_variables as ev
from otel_mcp_replay.config import configuration_of
from otel_mcp_replay.config_file import OTEL_CONFIG_FILE, FileOptions
from otel_mcp_replay.guard import RepeatGuard, SharedStore
from otel_mcp_replay.lines import LINE
from otel_mcp_replay.package import _instruments
from otel_mcp_replay.patches import (
    aws_distro,
    carrier,
    http_send,
    libraries,
    series,
    session,
    sse,
    stdio,
    wire,
)
from otel_mcp_replay.policy import RetryBudgets
from otel_mcp_replay.record import Vouches, refused_records_counter
from otel_mcp_replay.redaction import (
    RedactingLogRecordExporter,
    RedactingSpanExporter,
    RedactionRules,
    check_export_path,
)
from otel_mcp_replay.redaction.export_path import redact_exporters
from otel_mcp_replay.redaction.log_export_path import redact_log_exporters
from otel_mcp_replay.redaction.task_ids import TaskIds
from otel_mcp_replay.runtime import Instruments, Runtime
from otel_mcp_replay.settings import Settings
from otel_mcp_replay.store_url import address_of
from otel_mcp_replay.telemetry import GUARD_STORE_FAILURE, GUARD_STORE_OPERATION, INSTRUMENTATION_NAME
from otel_mcp_replay.version import __version__

_logger = logging.getLogger(__name__)

# Loaded by `opentelemetry-instrument` (its sitecustomize) and by `auto_instrumentation.initialize()`:
# the global provider is then whatever configurator ran, never one the app built in code.
_AUTO_INSTRUMENTATION = "opentelemetry.instrumentation.auto_instrumentation"
# The keywords opentelemetry-instrument's loop passes to every instrumentor: a call with no others
# asks for the instrumentation a configuration file already made.
_LOADER_KEYWORDS = frozenset(("skip_dep_check", "raise_exception_on_conflict"))


def _seams(runtime: Runtime) -> list[tuple[str, str, Callable[..., Any]]]:
    """Where the plugin wraps the mcp client: (module, attribute, wrapper with the runtime bound)."""
    http = libraries.HttpLibrary.of(
        importlib.import_module(LINE.http), LINE.synthetic_status, LINE.resolves_lost_answers
    )
    # 1.x only: the carrier's memory of messages sent during a call; 2.x carries the call itself.
    carriage = None if LINE.carries_context else carrier.Carriage(runtime)
    # The legacy-SSE connections the HTTP seam watches (patches/sse.py), on both lines.
    connections = sse.SseConnections()
    # Ids of the sessions the HTTP seam saw speaking streamable HTTP: the call seam needs no scope
    # for their calls (only where the SDK resolves a lost answer itself, `Line.resolves_lost_answers`).
    streamable_sessions: set[int] = set()
    # The request the client built last from a `json=` dict: kept by the build seam, taken by the HTTP seam.
    builds = http_send.BuiltRequests()
    sending = functools.partial(
        http_send.send, series.HttpSeam(runtime, http, carriage, connections, streamable_sessions), builds
    )
    calling = functools.partial(session.call_tool, runtime, streamable_sessions=streamable_sessions)
    seams: list[tuple[str, str, Callable[..., Any]]] = [
        (LINE.http, "AsyncClient.send", sending),
        (LINE.http, "AsyncClient._send_single_request", wire.reached_connection),
        (LINE.http, "AsyncClient.build_request", functools.partial(http_send.built, builds)),
        # The SDK's event-stream reader: the answers are read from the events it yields.
        (LINE.event_reader[0], LINE.event_reader[1], functools.partial(wire.events_read, http.watched)),
        ("mcp.client.session", "ClientSession.call_tool", calling),
        ("mcp.client.stdio", "stdio_client", stdio.stdio_client),
    ]
    seams += _line_seams(runtime, carriage)
    if LINE.carries_context:  # a tools/call sent past call_tool (1.x: the carrier's send_request seam)
        seams.append(
            (
                "mcp.client.session",
                "ClientSession.send_request",
                functools.partial(session.send_request, runtime, streamable_sessions=streamable_sessions),
            )
        )
    return seams


def _line_seams(
    runtime: Runtime, carriage: carrier.Carriage | None
) -> list[tuple[str, str, Callable[..., Any]]]:
    """The seams of the mcp line installed: 2.x's round driver and dispatcher, or 1.x's carrier."""
    seams: list[tuple[str, str, Callable[..., Any]]] = []
    if carriage is None:
        # `Client(StdioServerParameters(...))` calls the name it imported into its own module
        # (mcp >= 2.1; 2.0's Client imports it where it uses it).
        if hasattr(importlib.import_module("mcp.client.client"), "stdio_client"):
            seams.append(("mcp.client.client", "stdio_client", stdio.stdio_client))
        # The SDK's round driver (SEP-2322): its rounds are one app-level call.
        rounds = functools.partial(session.client_call_tool, runtime)
        seams.append(("mcp.client.client", "Client.call_tool", rounds))
        # A caller's cancel, told to the server: the call ends before the SDK waits on its transport.
        seams.append(("mcp.shared.jsonrpc_dispatcher", "JSONRPCDispatcher.notify", session.notify))
        # The SDK's own client span of a tools/call the plugin owns: the call span stands in for it.
        seams.append(("mcp.shared.jsonrpc_dispatcher", "otel_span", http_send.sdk_span))
        # A session closing ends its task-backed calls still open (tasks.py).
        exiting = functools.partial(session.session_exit, runtime)
        seams.append(("mcp.client.session", "ClientSession.__aexit__", exiting))
    else:  # 1.x: the call is carried to the task that POSTs it
        seams.append(
            (
                "mcp.client.session",
                "ClientSession.__init__",
                functools.partial(carrier.session_init, carriage),
            )
        )
        seams.append(
            (
                "mcp.shared.session",
                "BaseSession.send_request",
                functools.partial(carrier.send_request, carriage),
            )
        )
        seams.append(
            (
                "mcp.client.streamable_http",
                "StreamableHTTPTransport._handle_post_request",
                functools.partial(carrier.handle_post_request, carriage),
            )
        )
        seams.append(
            (
                "mcp.client.streamable_http",
                "StreamableHTTPTransport.post_writer",
                functools.partial(carrier.post_writer, carriage),
            )
        )
    return seams


def _guard(settings: Settings, instruments: Instruments) -> RepeatGuard | None:
    """The repeat guard (None: its window is 0), shared through its store when one is named."""
    if not settings.repeat_guard_s:
        return None
    shared = None
    if settings.repeat_guard_store is not None and settings.repeat_guard_secret is not None:
        bound_s = settings.repeat_guard_store_timeout_ms / 1000
        try:
            from otel_mcp_replay.guard_store import RedisStore

            store = RedisStore(address_of(settings.repeat_guard_store), bound_s)
        except ImportError:
            _logger.error(
                "otel-mcp-replay: %s needs the redis client (pip install 'otel-mcp-replay[redis]'); "
                "the repeat guard stays in-process",
                ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_STORE,
            )
        else:
            fallbacks = instruments.guard_store_fallbacks
            shared = SharedStore(
                store,
                settings.repeat_guard_secret.encode("utf-8", "surrogatepass"),
                bound_s,
                lambda operation, failure: fallbacks.add(
                    1, {GUARD_STORE_OPERATION: operation, GUARD_STORE_FAILURE: failure}
                ),
            )
    forgotten = instruments.guard_forgotten
    return RepeatGuard(settings.repeat_guard_s, shared=shared, forgot=lambda: forgotten.add(1))


class McpReplayInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Enforces the app's replay declarations on the mcp client and records every attempt.

    Keyword arguments of `instrument()`: `tracer_provider`, `meter_provider`, and the settings
    `servers`, `max_attempts`, `max_wait_ms`, `retry_on_throttle`, `retry_budget`,
    `repeat_guard_s`, `repeat_guard_store`, `repeat_guard_secret`, `repeat_guard_store_timeout_ms`,
    each overriding its `OTEL_PYTHON_MCP_REPLAY_*` environment variable, and the redaction's
    `redact_keys`, `redact_values` (lists of RE2 patterns) and `redact_content`, which set the rules
    of the redaction wrappers the plugin builds (`redacting`).
    """

    # The hook opentelemetry-configuration coerces the file's `mcp_replay` section through.
    configuration = FileOptions

    _wrapped: list[tuple[str, str]] = []
    # The runtime bound into the seams while instrumented (BaseInstrumentor makes one instrumentor
    # per process: the configurator's redaction wrappers count refused records on its meter).
    _runtime: Runtime | None = None
    # Exporters the app's spans reach without redaction, already told at WARNING (made on first use:
    # instrument() may run many times, each exporter is told once).
    _told_unredacted: weakref.WeakSet[object] | None = None
    # The records this process's calls filed, vouched for to the redaction wrappers given them (the
    # configurator's; made on first use, one per process as this instrumentor is: the wrappers may
    # be built before or after instrument(), and read the very vouches every runtime files into).
    _vouches: Vouches | None = None
    # The task ids this process's task-backed calls saw (tasks.py), masked by every redaction wrapper
    # (redaction/task_ids.py): the configurator's are handed them, an app's own finds them.
    _task_ids: TaskIds | None = None
    # The refused-records counter on the global meter provider's meter, for a redaction wrapper
    # that refuses a record while nothing is instrumented (made on first use).
    _refused_uninstrumented: Counter | None = None
    # The redaction rules in force for the wrappers this instrumentor built (made on first use), and
    # those wrappers, told the rules each instrument() sets.
    _redaction_rules: RedactionRules | None = None
    _redacting: weakref.WeakSet[Any] | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    @property
    def runtime(self) -> Runtime | None:
        """The runtime bound into the seams while instrumented."""
        return self._runtime

    @property
    def vouches(self) -> Vouches:
        """The records filed by the calls of this process, vouched for (`record.Vouches`)."""
        if self._vouches is None:
            self._vouches = Vouches()
        return self._vouches

    @property
    def task_ids(self) -> TaskIds:
        """The task ids the calls of this process saw (`redaction.task_ids.TaskIds`)."""
        found = self._task_ids
        if found is None:
            # Atomic: a wrapper that asks from its export thread meanwhile gets the very same one.
            made: TaskIds = self.__dict__.setdefault("_task_ids", TaskIds())
            return made
        return found

    def count_refused(self) -> None:
        """A record refused by the redaction allow-list (the configurator's wrappers' `on_refused`):
        counted on the meter of the runtime in force, else (the redaction runs without the plugin
        instrumented) on the global provider's."""
        runtime = self._runtime
        if runtime is not None:
            runtime.instruments.records_refused.add(1)
            return
        if self._refused_uninstrumented is None:
            self._refused_uninstrumented = refused_records_counter(get_meter(INSTRUMENTATION_NAME))
        self._refused_uninstrumented.add(1)

    @property
    def redaction_rules(self) -> RedactionRules:
        """The rules the plugin's redaction wrappers apply: the last instrument() set them; before,
        the environment's (never raising), or under a configuration file the built-in ones."""
        if self._redaction_rules is None:
            under_file = bool(os.environ.get(OTEL_CONFIG_FILE, "").strip())
            self._redaction_rules = RedactionRules() if under_file else RedactionRules.from_env_or_builtin()
        return self._redaction_rules

    def redacting(self, wrapper: Callable[..., Any], inner: Any) -> Any:
        """`wrapper(inner, rules, vouches=, task_ids=, on_refused=)` with this instrumentor's: the
        rules in force (and those a later instrument() sets), its vouches, task ids and count."""
        made = wrapper(
            inner,
            self.redaction_rules,
            vouches=self.vouches,
            task_ids=self.task_ids,
            on_refused=self.count_refused,
        )
        if self._redacting is None:
            self._redacting = weakref.WeakSet()
        self._redacting.add(made)
        return made

    def instrument(self, **kwargs: Any) -> Any:
        if (
            self.is_instrumented_by_opentelemetry
            and not set(kwargs) - _LOADER_KEYWORDS
            and os.environ.get(OTEL_CONFIG_FILE, "").strip()
        ):
            _logger.debug("otel-mcp-replay: instrumented from %s already", OTEL_CONFIG_FILE)
            return None
        return super().instrument(**kwargs)

    def _instrument(self, **kwargs: Any) -> None:
        configuration = configuration_of(kwargs, os.environ)  # raises only for what the keywords say
        if configuration.redaction is not None:
            self._redaction_rules = rules = RedactionRules.of(configuration.redaction)
            for wrapper in list(self._redacting or ()):
                wrapper.rules = rules  # one attribute: the export thread reads the old or the new
        if not configuration.enabled:
            _logger.info(
                "otel-mcp-replay: disabled by %s (enabled: false); mcp left untouched", OTEL_CONFIG_FILE
            )
            self._wrapped = []
            return
        tracer = get_tracer(INSTRUMENTATION_NAME, __version__, tracer_provider=kwargs.get("tracer_provider"))
        meter = get_meter(INSTRUMENTATION_NAME, __version__, meter_provider=kwargs.get("meter_provider"))
        instruments = Instruments.on(meter)
        runtime = Runtime(
            tracer=tracer,
            instruments=instruments,
            servers=configuration.servers,
            settings=configuration.settings,
            budgets=RetryBudgets(configuration.settings.retry_budget),
            fail_closed=configuration.fail_closed,
            guard=_guard(configuration.settings, instruments),
            vouches=self.vouches,
            task_ids=self.task_ids,
        )
        self._runtime = runtime
        if self._told_unredacted is None:
            self._told_unredacted = weakref.WeakSet()
        if kwargs.get("tracer_provider") is None and _AUTO_INSTRUMENTATION in sys.modules:
            # Whichever configurator built the provider (a distro's too): its exporters redact, with
            # the rules in force.
            redact_exporters(
                get_tracer_provider(), lambda exporter: self.redacting(RedactingSpanExporter, exporter)
            )
            # And its log records' exporters (a distro may turn log export on: AgentCore does).
            redact_log_exporters(
                get_logger_provider(), lambda exporter: self.redacting(RedactingLogRecordExporter, exporter)
            )
        # Spans exported past every redaction are said once, at WARNING, naming the fix.
        check_export_path(kwargs.get("tracer_provider"), told=self._told_unredacted)
        self._wrapped = []
        for module, name, wrapper in _seams(runtime):
            wrap_function_wrapper(module, name, wrapper)
            self._wrapped.append((module, name))
        if not LINE.carries_context:
            # aws-opentelemetry-distro's MCP client span of a call's request: the call span stands in.
            aws_distro.install()

    def _uninstrument(self, **kwargs: Any) -> None:
        aws_distro.uninstall()
        for module, name in self._wrapped:
            owner, _, attr = name.rpartition(".")
            target: object = importlib.import_module(module)
            if owner:
                target = getattr(target, owner)
            unwrap(target, attr)
        self._wrapped = []
        self._runtime = None
