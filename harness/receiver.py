"""Receive OTLP/HTTP exports on 127.0.0.1 and show what crossed the wire.

`OtlpReceiver` is a small OTLP/HTTP endpoint (stdlib HTTP server in a thread): it accepts protobuf
`POST /v1/traces`, `/v1/metrics` and `/v1/logs` (plain or gzip), keeps each request's raw bytes
(tests search them for secrets that must not leave the process), and decodes spans and metrics into
plain dicts. It can also play a dead backend (refuse with 503, or hang). `format_trace_tree`
renders received spans as indented trees, with the replay attempts and records in words.
"""

from __future__ import annotations

import gzip
import re
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, TypedDict

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.proto.trace.v1.trace_pb2 import Status as PbStatus

from otel_mcp_replay import telemetry as t

_HOST = "127.0.0.1"
_MAX_BODY = 64 * 1024 * 1024
Mode = Literal["ok", "refuse", "hang"]


class EventDict(TypedDict):
    name: str
    time_unix_nano: int
    attributes: dict[str, Any]


class SpanDict(TypedDict):
    trace_id: str
    span_id: str
    parent_span_id: str  # "" for a root span
    name: str
    kind: str  # INTERNAL, SERVER, CLIENT, PRODUCER, CONSUMER, UNSPECIFIED
    start_time_unix_nano: int
    end_time_unix_nano: int
    attributes: dict[str, Any]
    events: list[EventDict]
    status: dict[str, str]  # {"code": "UNSET" | "OK" | "ERROR", "message": ...}
    resource: dict[str, Any]
    scope: str
    scope_version: str


class MetricDict(TypedDict):
    name: str
    unit: str
    description: str
    type: str  # sum, gauge, histogram, exponential_histogram, summary
    points: list[dict[str, Any]]  # each: attributes plus value, or count/sum/bucket_counts
    resource: dict[str, Any]
    scope: str


class LogDict(TypedDict):
    trace_id: str  # "" when the log record names no trace
    span_id: str
    event_name: str
    severity_number: int
    severity_text: str
    body: Any
    attributes: dict[str, Any]
    resource: dict[str, Any]
    scope: str
    scope_version: str


@dataclass(frozen=True)
class RawRequest:
    """One export request as received: `wire` is the body as sent, `body` after decompression."""

    path: str
    headers: tuple[tuple[str, str], ...]
    wire: bytes
    body: bytes


# ----------------------------------------------------------------------------------------------
# Decoding.


def any_value(value: AnyValue) -> Any:
    """An OTLP AnyValue as a Python value (arrays as lists, kvlists as dicts)."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return attributes(value.kvlist_value.values)
    return getattr(value, which)


def attributes(kvs: Iterable[KeyValue]) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in kvs}


def _kind(kind: int) -> str:
    name: str = PbSpan.SpanKind.Name(kind)  # type: ignore[arg-type]
    return name.removeprefix("SPAN_KIND_")


def _event(event: PbSpan.Event) -> EventDict:
    return EventDict(
        name=event.name, time_unix_nano=event.time_unix_nano, attributes=attributes(event.attributes)
    )


def _status(status: PbStatus) -> dict[str, str]:
    code = PbStatus.StatusCode.Name(status.code).removeprefix("STATUS_CODE_")
    return {"code": code, "message": status.message}


def _scoped(resources: Iterable[Any], scoped: str, items: str) -> Iterator[tuple[dict[str, Any], Any, Any]]:
    """(resource attributes, instrumentation scope, item) for each span or metric of a request."""
    for r in resources:
        resource = attributes(r.resource.attributes)
        for group in getattr(r, scoped):
            for item in getattr(group, items):
                yield resource, group.scope, item


def decode_traces(body: bytes) -> list[SpanDict]:
    """The spans of one serialized `ExportTraceServiceRequest`."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    return [
        SpanDict(
            trace_id=span.trace_id.hex(),
            span_id=span.span_id.hex(),
            parent_span_id=span.parent_span_id.hex(),
            name=span.name,
            kind=_kind(span.kind),
            start_time_unix_nano=span.start_time_unix_nano,
            end_time_unix_nano=span.end_time_unix_nano,
            attributes=attributes(span.attributes),
            events=[_event(e) for e in span.events],
            status=_status(span.status),
            resource=resource,
            scope=scope.name,
            scope_version=scope.version,
        )
        for resource, scope, span in _scoped(request.resource_spans, "scope_spans", "spans")
    ]


def decode_logs(body: bytes) -> list[LogDict]:
    """The log records of one serialized `ExportLogsServiceRequest`."""
    request = ExportLogsServiceRequest()
    request.ParseFromString(body)
    return [
        LogDict(
            trace_id=log.trace_id.hex(),
            span_id=log.span_id.hex(),
            event_name=getattr(log, "event_name", ""),  # the proto's field from its 1.5 on
            severity_number=log.severity_number,
            severity_text=log.severity_text,
            body=any_value(log.body),
            attributes=attributes(log.attributes),
            resource=resource,
            scope=scope.name,
            scope_version=scope.version,
        )
        for resource, scope, log in _scoped(request.resource_logs, "scope_logs", "log_records")
    ]


def _points(metric: Any, kind: str) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = []
    for p in getattr(metric, kind).data_points:
        point: dict[str, Any] = {"attributes": attributes(p.attributes)}
        if kind in ("sum", "gauge"):
            which = p.WhichOneof("value")
            point["value"] = getattr(p, which) if which else None
        else:
            point["count"] = p.count
            point["sum"] = p.sum
            if kind == "histogram":
                point["bucket_counts"] = list(p.bucket_counts)
                point["explicit_bounds"] = list(p.explicit_bounds)
        points.append(point)
    return points


def decode_metrics(body: bytes) -> list[MetricDict]:
    """The metrics of one serialized `ExportMetricsServiceRequest`."""
    request = ExportMetricsServiceRequest()
    request.ParseFromString(body)
    metrics: list[MetricDict] = []
    for resource, scope, m in _scoped(request.resource_metrics, "scope_metrics", "metrics"):
        kind = m.WhichOneof("data") or ""
        metrics.append(
            MetricDict(
                name=m.name,
                unit=m.unit,
                description=m.description,
                type=kind,
                points=_points(m, kind) if kind else [],
                resource=resource,
                scope=scope.name,
            )
        )
    return metrics


# ----------------------------------------------------------------------------------------------
# The receiver.


class OtlpReceiver:
    """OTLP/HTTP protobuf receiver on 127.0.0.1 (port 0: ephemeral), thread-safe.

    `endpoint` is the base URL for `OTEL_EXPORTER_OTLP_ENDPOINT`; `traces_endpoint` the full URL
    for `OTLPSpanExporter(endpoint=...)`. `set_mode("refuse")` answers 503 without storing;
    `set_mode("hang", seconds)` holds each request that long (or until stop) and then answers 503.
    """

    def __init__(self, port: int = 0) -> None:
        self._cond = threading.Condition()
        self._spans: list[SpanDict] = []
        self._metrics: list[MetricDict] = []
        self._raw: list[RawRequest] = []
        self._rejected = 0
        self._mode: Mode = "ok"
        self._hang_seconds = 30.0
        self._stopping = threading.Event()
        self._httpd = ThreadingHTTPServer((_HOST, port), self._handler_class())
        self._httpd.daemon_threads = True
        self.port: int = self._httpd.server_address[1]
        self._thread: threading.Thread | None = None

    # --- lifecycle ---

    def start(self) -> OtlpReceiver:
        if self._thread is not None:
            raise RuntimeError("the receiver is already started")
        # poll_interval bounds how long shutdown() waits for the serving loop to notice.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="otlp-receiver",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()  # wakes hanging handlers
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout)
        self._httpd.server_close()

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        return f"http://{_HOST}:{self.port}"

    @property
    def traces_endpoint(self) -> str:
        return f"{self.endpoint}/v1/traces"

    @property
    def metrics_endpoint(self) -> str:
        return f"{self.endpoint}/v1/metrics"

    # --- controls and views (any thread) ---

    def set_mode(self, mode: Mode, hang_seconds: float = 30.0) -> None:
        if mode not in ("ok", "refuse", "hang"):
            raise ValueError("mode must be ok, refuse or hang")
        with self._cond:
            self._mode = mode
            self._hang_seconds = hang_seconds

    def spans(self) -> list[SpanDict]:
        with self._cond:
            return list(self._spans)

    def metrics(self) -> list[MetricDict]:
        with self._cond:
            return list(self._metrics)

    def logs(self) -> list[LogDict]:
        """The log records received, decoded from the raw `/v1/logs` requests."""
        with self._cond:
            return self._logs()

    def _logs(self) -> list[LogDict]:
        return [log for raw in self._raw if raw.path == "/v1/logs" for log in decode_logs(raw.body)]

    def wait_for_logs(self, predicate: Callable[[list[LogDict]], bool], timeout: float = 10.0) -> bool:
        """Block until `predicate(logs)` holds or `timeout` passes; return whether it held."""
        return self._wait(lambda: predicate(self._logs()), timeout)

    def raw_requests(self) -> list[RawRequest]:
        with self._cond:
            return list(self._raw)

    def raw_bytes(self) -> bytes:
        """Every accepted request's decompressed body, concatenated (to search for secrets)."""
        with self._cond:
            return b"".join(r.body for r in self._raw)

    @property
    def rejected(self) -> int:
        """Requests answered 503 (refuse or hang mode)."""
        with self._cond:
            return self._rejected

    def clear(self) -> None:
        with self._cond:
            self._spans.clear()
            self._metrics.clear()
            self._raw.clear()
            self._rejected = 0

    def wait_for(self, predicate: Callable[[list[SpanDict]], bool], timeout: float = 10.0) -> bool:
        """Block until `predicate(spans)` holds or `timeout` passes; return whether it held."""
        return self._wait(lambda: predicate(list(self._spans)), timeout)

    def _wait(self, holds: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not holds():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    # --- the server's side ---

    def _accept(self, path: str, headers: tuple[tuple[str, str], ...], wire: bytes) -> tuple[int, bytes]:
        """Store and decode one request; the HTTP status and protobuf body to answer with."""
        with self._cond:
            mode, hang = self._mode, self._hang_seconds
        if mode != "ok":
            if mode == "hang":
                self._stopping.wait(hang)
            with self._cond:
                self._rejected += 1
            return 503, b""
        encoding = dict(headers).get("content-encoding", "").lower()
        try:
            body = _decompress(wire, encoding)
        except (OSError, EOFError, zlib.error):
            return 400, b""
        spans: list[SpanDict] = []
        metrics: list[MetricDict] = []
        answer = b""
        try:
            if path == "/v1/traces":
                spans = decode_traces(body)
                answer = ExportTraceServiceResponse().SerializeToString()
            elif path == "/v1/metrics":
                metrics = decode_metrics(body)
                answer = ExportMetricsServiceResponse().SerializeToString()
            decoded = True
        except Exception:  # a malformed protobuf: kept raw, answered 400
            decoded = False
        with self._cond:
            self._raw.append(RawRequest(path, headers, wire, body))
            self._spans.extend(spans)
            self._metrics.extend(metrics)
            self._cond.notify_all()
        return (200, answer) if decoded else (400, b"")

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                path = self.path.split("?", 1)[0]
                length = int(self.headers.get("content-length") or 0)
                if path not in ("/v1/traces", "/v1/metrics", "/v1/logs") or not 0 <= length <= _MAX_BODY:
                    self._answer(404 if length <= _MAX_BODY else 413, b"")
                    return
                wire = self.rfile.read(length)
                headers = tuple((k.lower(), v) for k, v in self.headers.items())
                status, answer = receiver._accept(path, headers, wire)
                self._answer(status, answer)

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep test and demo output clean

        return _Handler


def _decompress(wire: bytes, encoding: str) -> bytes:
    if encoding == "gzip":
        return gzip.decompress(wire)
    if encoding == "deflate":
        return zlib.decompress(wire)
    return wire


# ----------------------------------------------------------------------------------------------
# Rendering.


def _is_attempt(span: SpanDict) -> bool:
    return t.ATTEMPT in span["attributes"]


def _word(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _attempt_line(attrs: Mapping[str, Any]) -> str:
    parts = [f"attempt {attrs.get(t.ATTEMPT, '?')}"]
    status = next((attrs[k] for k in _HTTP_STATUS_KEYS if k in attrs), None)
    parts.append(f"HTTP {status}" if status is not None else "no response")
    if t.FAILURE in attrs:
        parts.append(f"failed: {attrs[t.FAILURE]}")
    if t.PERMISSION_BY in attrs:
        permit = f"repeat allowed by {attrs[t.PERMISSION_BY]}"
        if t.PERMISSION_ON in attrs:
            permit += f" on {attrs[t.PERMISSION_ON]}"
        if t.PERMISSION_ASSUMES in attrs:
            permit += f", assuming {attrs[t.PERMISSION_ASSUMES]}"
        parts.append(permit)
    if t.EFFECT in attrs:
        parts.append(f"effect {attrs[t.EFFECT]}")
    if t.WAIT_MS in attrs:
        parts.append(f"then waited {attrs[t.WAIT_MS]} ms")
    if t.DECLINED in attrs:
        parts.append(f"no repeat: {attrs[t.DECLINED]}")
    return " · ".join(parts)


def _record_lines(attrs: Mapping[str, Any]) -> list[str]:
    head = [
        f"verdict {_word(attrs.get(t.VERDICT, '?'))}",
        f"effect {_word(attrs.get(t.EFFECT, '?'))}",
        f"sent {_word(attrs.get(t.SENT, '?'))}",
        f"may have run: {_word(attrs.get(t.MAY_HAVE_RUN, '?'))}",
    ]
    if t.POLICY in attrs:
        head.append(f"policy {attrs[t.POLICY]}")
    if t.ENDPOINT in attrs:
        head.append(f"endpoint {attrs[t.ENDPOINT]}")
    if attrs.get(t.OMITTED):
        head.append(f"{attrs[t.OMITTED]} attempts omitted")
    lines = ["call: " + " · ".join(head)]
    columns: Sequence[Any] = [
        attrs.get(t.ATTEMPTS_STATUS) or [],
        attrs.get(t.ATTEMPTS_FAILURE) or [],
        attrs.get(t.ATTEMPTS_EFFECT) or [],
        attrs.get(t.ATTEMPTS_PERMISSION) or [],
        attrs.get(t.ATTEMPTS_WAIT_MS) or [],
    ]
    rows = max((len(c) for c in columns), default=0)
    for i in range(rows):
        status, failure, effect, permission, wait = (c[i] if i < len(c) else "" for c in columns)
        row = f"  #{i + 1} {permission or '?'}: " + (f"HTTP {status}" if status else "no response")
        row += f", {failure}" if failure else ", answered"
        row += f", effect {effect}" if effect else ""
        row += f", waited {wait} ms" if wait else ""
        lines.append(row)
    return lines


_HTTP_STATUS_KEYS = (t.HTTP_STATUS_CODE, "http.status_code")  # stable and old HTTP conventions
_EXCEPTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*(?=: )")


def _outcome(span: SpanDict) -> str:
    """What a span ended with, for its head line: an HTTP client span's status (or that none
    came), else the `error.type` a failed span names (the call span: the exception's type)."""
    attrs = span["attributes"]
    error_type = attrs.get(t.ERROR_TYPE)
    if span["kind"] == "CLIENT" and ("http.request.method" in attrs or "http.method" in attrs):
        status = next((attrs[k] for k in _HTTP_STATUS_KEYS if k in attrs), None)
        if status is not None:
            return f" → HTTP {status}"
        if error_type is None:
            # The old HTTP conventions name no error.type; the status message starts with it.
            named = _EXCEPTION_NAME.match(span["status"]["message"])
            error_type = named.group(0) if named else None
        return f" → no response ({error_type})" if error_type else " → no response"
    if error_type is None or _is_attempt(span):
        return ""
    if str(error_type).lstrip("-").isdigit():  # the SDK's span names a JSON-RPC error by its code
        return f" → JSON-RPC error {error_type}"
    return f" → {error_type}"


def _span_lines(span: SpanDict) -> tuple[str, list[str]]:
    """The span's head line and its detail lines."""
    duration_ms = max(0, span["end_time_unix_nano"] - span["start_time_unix_nano"]) / 1e6
    attrs = span["attributes"]
    head = f"{span['name']}  [{span['kind'].lower()}, {duration_ms:.1f} ms"
    head += ", error]" if span["status"]["code"] == "ERROR" else "]"
    head += _outcome(span)
    details: list[str] = []
    if _is_attempt(span):
        details.append(_attempt_line(attrs))
    for event in span["events"]:
        if event["name"] == t.RECORD_EVENT:
            details.extend(_record_lines(event["attributes"]))
        elif event["name"] == t.RECORD_REFUSED_EVENT:
            details.append("record refused (it held a key outside the allow-list)")
    return head, details


def format_trace_tree(spans: Iterable[SpanDict]) -> str:
    """Spans as one indented tree per trace (children by start time), for people, not machines."""
    by_trace: dict[str, list[SpanDict]] = {}
    for span in spans:
        by_trace.setdefault(span["trace_id"], []).append(span)
    traces = sorted(by_trace.items(), key=lambda kv: min(s["start_time_unix_nano"] for s in kv[1]))
    return "\n\n".join(_trace_block(trace_id, members) for trace_id, members in traces)


def _by_start(span: SpanDict) -> int:
    return span["start_time_unix_nano"]


def _trace_block(trace_id: str, members: list[SpanDict]) -> str:
    ids = {s["span_id"] for s in members}
    children: dict[str, list[SpanDict]] = {}
    roots: list[SpanDict] = []
    for s in members:
        if s["parent_span_id"] and s["parent_span_id"] in ids:
            children.setdefault(s["parent_span_id"], []).append(s)
        else:
            roots.append(s)  # a true root, or a span whose parent was not received
    lines = [f"trace {trace_id}"]

    def walk(span: SpanDict, prefix: str, last: bool, depth: int) -> None:
        head, details = _span_lines(span)
        lines.append(prefix + ("└─ " if last else "├─ ") + head)
        inner = prefix + ("   " if last else "│  ")
        kids = sorted(children.get(span["span_id"], []), key=_by_start)
        lines.extend(inner + ("│    " if kids else "     ") + d for d in details)
        if depth < 64:  # a malformed parent chain cannot recurse without end
            for i, kid in enumerate(kids):
                walk(kid, inner, i == len(kids) - 1, depth + 1)

    roots.sort(key=_by_start)
    for i, root in enumerate(roots):
        walk(root, "", i == len(roots) - 1, 0)
    return "\n".join(lines)
