"""No module global is written at run time (issue 44): what a call or the redaction changes lives in
the runtime `instrument()` builds, in a seam's own state bound into it, or on the instrumentor.

Every module of src/otel_mcp_replay is imported and each of its globals fingerprinted: the object
bound (identity), and for a container or a plain object what it holds (len and items of a dict,
list, set, deque or weak container; `vars()` and `__slots__` of an object; a tuple's items), a few
levels down. Classes, functions, modules and loggers are compared by identity (a logger's level
cache is the logging module's); a ContextVar is context-local, and is left out. Then real work runs
through the plugin: instrument(), calls on the test server (a 429 then its 200, the answers as event
streams; one on the legacy SSE transport; one the law declines to repeat), the redaction of every
span, a span with a credential among them, then uninstrument(). The globals are compared again at
the end, and also while the calls are in flight, every few milliseconds: a weak container written
per call (its entries gone with the call) or a dict emptied when the call ends shows only then.
Each server answer waits a moment first, so there is always such a moment. And as the client sends
each request, after it was built and before the plugin's HTTP seam takes it: what is kept from the
build to the send, with no await between, shows only there. What changed is reported as module and
name, never a value.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import pkgutil
import types
import weakref
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextvars import ContextVar
from typing import Any

import anyio
import mcp.client.sse
import pytest
from mcp import ClientSession
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_mcp_replay
from harness.client import Client, McpError, http, is_error
from harness.faults import Throttle
from harness.server import running_server
from otel_mcp_replay import McpReplayInstrumentor
from otel_mcp_replay import telemetry as t
from otel_mcp_replay.redaction import MASK, RedactingSpanProcessor, RedactionRules

pytestmark = pytest.mark.anyio

DEPTH = 4  # how far into a global's containers and attributes the fingerprint reads
SAMPLE_EVERY_S = 0.003
ANSWER_DELAY_S = 0.03  # each request waits this long at the server: the calls are in flight meanwhile
# Compared by identity only; a logger's level cache is the logging module's.
_IDENTITY_ONLY = (
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.ModuleType,
    logging.Logger,
)


class _Same:
    """A leaf of a fingerprint: equal only to the very same object (held, so its id is not reused)."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.value is self.value

    def __hash__(self) -> int:
        return id(self.value)


def fingerprint(value: object, depth: int = DEPTH) -> object:
    """What `value` is and holds, as far as `depth` levels: equal fingerprints, nothing changed."""
    if depth == 0 or isinstance(value, _IDENTITY_ONLY):
        return _Same(value)
    if isinstance(value, (str, bytes, int, float, complex, bool, type(None))):
        return _Same(value)
    if isinstance(value, (dict, weakref.WeakKeyDictionary, weakref.WeakValueDictionary)):
        return (_Same(value), len(value), _pairs(value.items(), depth - 1))
    if isinstance(value, (list, tuple, deque)):
        return (_Same(value), len(value), tuple(fingerprint(item, depth - 1) for item in value))
    if isinstance(value, (set, frozenset, weakref.WeakSet)):
        return (_Same(value), len(value), frozenset(_Same(item) for item in value))
    return (_Same(value), _attributes(value, depth - 1))


def _pairs(items: Iterable[tuple[object, object]], depth: int) -> tuple[object, ...]:
    return tuple((_Same(key), fingerprint(item, depth)) for key, item in items)


def _attributes(value: object, depth: int) -> tuple[object, ...]:
    """A plain object's `vars()` and `__slots__` values, by name (none for a C object that has neither)."""
    names = {name for cls in type(value).__mro__ for name in _slots_of(cls)}
    held = dict(getattr(value, "__dict__", {}))
    missing = object()
    held.update({name: getattr(value, name, missing) for name in names if name != "__dict__"})
    return tuple((name, fingerprint(held[name], depth)) for name in sorted(held))


def _slots_of(cls: type) -> tuple[str, ...]:
    slots = vars(cls).get("__slots__", ())
    return (slots,) if isinstance(slots, str) else tuple(slots)


def _watched(module: types.ModuleType) -> Iterator[tuple[str, object]]:
    """A module's globals but Python's own bookkeeping (`__builtins__`, `__warningregistry__`, ...)
    and its context variables."""
    for name, value in list(vars(module).items()):
        if not (name.startswith("__") and name.endswith("__")) and not isinstance(value, ContextVar):
            yield name, value


class GlobalsWatch:
    """The globals of `modules` as they were when made; `check()` adds to `changed` every (module,
    name) bound, unbound, rebound or holding other things since."""

    def __init__(self, modules: Iterable[types.ModuleType]) -> None:
        self.modules = list(modules)
        self.before = {m.__name__: {n: fingerprint(v) for n, v in _watched(m)} for m in self.modules}
        self.changed: set[tuple[str, str]] = set()
        self.checks = 0

    def check(self) -> None:
        self.checks += 1
        for module in self.modules:
            before = self.before[module.__name__]
            now = dict(_watched(module))
            for name in before.keys() | now.keys():
                if name not in before or name not in now or fingerprint(now[name]) != before[name]:
                    self.changed.add((module.__name__, name))

    @contextlib.asynccontextmanager
    async def sampling(self) -> AsyncIterator[None]:
        """Checks every SAMPLE_EVERY_S while the block runs (in its event loop: between its awaits,
        never half-way through a write), and once as it ends."""

        async def sample() -> None:
            while True:
                self.check()
                await anyio.sleep(SAMPLE_EVERY_S)

        async with anyio.create_task_group() as group:
            group.start_soon(sample)
            try:
                yield
            finally:
                group.cancel_scope.cancel()
        self.check()


@contextlib.contextmanager
def checked_at_each_send(watch: GlobalsWatch) -> Iterator[None]:
    """`watch.check()` as the client sends each request, before the seam installed on
    `AsyncClient.send` (the plugin's) sees it. Put back before that seam is removed."""
    seam = vars(http.AsyncClient)["send"]

    def send(client: Any, *args: Any, **kwargs: Any) -> Any:
        watch.check()
        return seam.__get__(client, type(client))(*args, **kwargs)

    http.AsyncClient.send = send  # type: ignore[method-assign]
    try:
        yield
    finally:
        http.AsyncClient.send = seam  # type: ignore[method-assign]


def every_module() -> list[types.ModuleType]:
    names = [otel_mcp_replay.__name__]
    names += [info.name for info in pkgutil.walk_packages(otel_mcp_replay.__path__, "otel_mcp_replay.")]
    return [importlib.import_module(name) for name in sorted(names)]


def answering_late(app: Callable[..., Any]) -> Callable[..., Any]:
    """ASGI middleware: each HTTP request waits ANSWER_DELAY_S before the server sees it."""

    async def delayed(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await anyio.sleep(ANSWER_DELAY_S)
        await app(scope, receive, send)

    return delayed


async def _calls(streamable_url: str, sse_url: str, faults: Any, sse_faults: Any) -> None:
    """The work: a 429 then its 200 and a plain call (answers as event streams), a call whose 429
    the law declines (a changing tool, no key), and a 429 then its 202 on the legacy SSE transport."""
    async with Client(streamable_url) as client:
        faults.add("search", Throttle("0"))
        assert not is_error(await client.call_tool("search", {"query": "throttled"}))
        assert not is_error(await client.call_tool("search", {"query": "plain"}))
        faults.add("send_email", Throttle("0"))
        with pytest.raises(McpError):
            await client.call_tool("send_email", {"to": "a", "body": "b"})
    async with (
        mcp.client.sse.sse_client(sse_url) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        sse_faults.add("search", Throttle("0"))
        assert not is_error(await session.call_tool("search", {"query": "legacy"}))


def _redacted_credential(tracer_provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    with tracer_provider.get_tracer("app").start_as_current_span("app-work") as span:
        span.set_attribute("http.request.header.authorization", ("Bearer s3cr3t-token",))
    assert exporter.get_finished_spans()[-1].attributes["http.request.header.authorization"] == (MASK,)


async def test_no_module_global_is_written_at_run_time() -> None:
    watch = GlobalsWatch(every_module())
    instrumentor = McpReplayInstrumentor()
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(
        RedactingSpanProcessor(
            SimpleSpanProcessor(exporter),
            RedactionRules(),
            vouches=instrumentor.vouches,  # as the configurator hands them
            task_ids=instrumentor.task_ids,
        )
    )
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    with (
        running_server("streamable", middleware=answering_late) as server,
        running_server("sse", middleware=answering_late) as sse_server,
    ):
        search = {"search": {"on": ["throttle"]}}
        servers = {
            server.url: {"policy": "app-authorized", "tools": {**search, "send_email": {"changes": True}}},
            sse_server.url: {"policy": "app-authorized", "tools": search},
        }
        instrumentor.instrument(
            tracer_provider=tracer_provider, meter_provider=meter_provider, servers=servers
        )
        try:
            with checked_at_each_send(watch):
                async with watch.sampling():
                    with anyio.fail_after(30):
                        await _calls(server.url, sse_server.url, server.faults, sse_server.faults)
                    _redacted_credential(tracer_provider, exporter)
        finally:
            instrumentor.uninstrument()
        assert server.counters.executions("search") == 2 and sse_server.counters.executions("search") == 1
    watch.check()
    assert watch.checks > 10  # sampled while the calls were in flight, not only before and after
    # Each call ran through the plugin, its record through the redaction: the attempts' statuses.
    recorded = [
        event.attributes[t.ATTEMPTS_STATUS]
        for span in exporter.get_finished_spans()
        for event in span.events
        if event.name == t.RECORD_EVENT and event.attributes is not None
    ]
    assert sorted(recorded) == [(200,), (429,), (429, 200), (429, 202)]
    assert sorted(watch.changed) == []


# -- the check can fail --------------------------------------------------------------------------


class _Holder:
    __slots__ = ("seen",)

    def __init__(self) -> None:
        self.seen: list[str] = []


class _Key:
    """A weakly held key, as a call is to a weak per-call map."""


async def test_a_module_global_written_at_run_time_is_found() -> None:
    secret = "never-in-the-report"
    module = types.ModuleType("throwaway")
    module.STATE = {}  # type: ignore[attr-defined]
    module.PER_CALL = weakref.WeakKeyDictionary()  # type: ignore[attr-defined]
    module.HOLDER = _Holder()  # type: ignore[attr-defined]
    module.SLOT = [None]  # type: ignore[attr-defined]
    module.REBOUND = "a"  # type: ignore[attr-defined]
    module.ORDERED = OrderedDict(a=1, b=2)  # type: ignore[attr-defined]
    module.CURRENT = ContextVar("current", default=None)  # type: ignore[attr-defined]
    module.UNTOUCHED = {"k": [1, 2]}  # type: ignore[attr-defined]
    watch = GlobalsWatch([module])
    async with watch.sampling():
        module.STATE["k"] = secret
        module.HOLDER.seen.append(secret)
        module.SLOT[0] = secret
        module.REBOUND = "b"
        module.ORDERED.move_to_end("a")
        module.ADDED = 1  # type: ignore[attr-defined]
        module.CURRENT.set(secret)  # context-local: not module state
        key = _Key()
        module.PER_CALL[key] = secret  # a weak per-call map: gone with its key, seen only meanwhile
        await anyio.sleep(SAMPLE_EVERY_S * 5)
        del key
    assert len(module.PER_CALL) == 0  # the end alone would not see it
    assert sorted(watch.changed) == [
        ("throwaway", name) for name in ("ADDED", "HOLDER", "ORDERED", "PER_CALL", "REBOUND", "SLOT", "STATE")
    ]
    assert secret not in repr(watch.changed)
