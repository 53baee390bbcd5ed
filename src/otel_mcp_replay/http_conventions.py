"""The HTTP conventions an attempt's POST is told in: the ones `OTEL_SEMCONV_STABILITY_OPT_IN` selects.

The rule: an attempt span stands in for the HTTP client instrumentation's span of its POST, so it
says it in that instrumentation's vocabulary, and the duration recorded in its place is that
instrumentation's histogram: the old names and `http.client.duration` (ms) by default, the stable
names and `http.client.request.duration` (s) with `http`, both with `http/dup`. The selection and
every name come from opentelemetry-instrumentation's own semconv helpers, read once per process as
the contrib HTTP instrumentations read them (its `_semconv` module: the same helpers from 0.60b0 on),
and each fact is written where the contrib httpx instrumentation writes it, so one trace and one HTTP
dashboard never mix the two.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from opentelemetry.instrumentation._semconv import (
    HTTP_DURATION_HISTOGRAM_BUCKETS_NEW,
    HTTP_DURATION_HISTOGRAM_BUCKETS_OLD,
    _client_duration_attrs_new,
    _client_duration_attrs_old,
    _filter_semconv_duration_attrs,
    _OpenTelemetrySemanticConventionStability,
    _OpenTelemetryStabilitySignalType,
    _report_new,
    _report_old,
    _set_http_host_client,
    _set_http_method,
    _set_http_net_peer_name_client,
    _set_http_network_protocol_version,
    _set_http_peer_port_client,
    _set_http_scheme,
    _set_http_status_code,
    _set_http_url,
    _set_status,
    _StabilityMode,
)
from opentelemetry.metrics import Histogram, Meter
from opentelemetry.trace import INVALID_SPAN
from opentelemetry.util.types import AttributeValue

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.endpoints import SpanEndpoint

Attributes = dict[str, AttributeValue]

# How many distinct responses and duration points each cache below holds before it starts again.
_CACHED = 256

# A point of a histogram: the request attributes it was made from, then its attributes for the old
# histogram and the stable one (None: that histogram is not in force).
_Point = tuple[Attributes, Attributes | None, Attributes | None]


class _Response(NamedTuple):
    """What a response says, made once: its span's attributes, and its duration points' by the id
    of the request attributes each was made from."""

    attributes: Attributes
    points: dict[int, _Point]


def http_mode() -> _StabilityMode:
    """The HTTP conventions `OTEL_SEMCONV_STABILITY_OPT_IN` selects, as the contrib HTTP
    instrumentations read it: once per process, by their own helper."""
    _OpenTelemetrySemanticConventionStability._initialize()  # type: ignore[no-untyped-call]
    return _OpenTelemetrySemanticConventionStability._get_opentelemetry_stability_opt_in_mode(
        _OpenTelemetryStabilitySignalType.HTTP
    )


@dataclass(frozen=True)
class HttpConventions:
    """The vocabulary in force (`mode`) and the HTTP client duration histograms it names."""

    mode: _StabilityMode
    old: bool  # the old names are written
    new: bool  # the stable names are written
    duration_old: Histogram | None  # http.client.duration, ms
    duration_new: Histogram | None  # http.client.request.duration, s
    # The contrib helpers that write these cost a few hundred opcodes a POST: what a response says
    # is made once per (status, HTTP version, error.type) and shared, read-only (an attempt copies
    # it into its span's one write), with its duration points' attributes, made once per request's
    # attributes (a route's, never changed once made), kept with the very request dict they were
    # made from (its id is trusted only while the cache holds that dict).
    _responses: dict[tuple[int, str | None, str | None], _Response] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @property
    def resend_count(self) -> str | None:
        """The attribute a repeat's resend count is written in: the stable conventions' (the old
        ones have none)."""
        return t.HTTP_RESEND_COUNT if self.new else None

    @classmethod
    def on(cls, meter: Meter, mode: _StabilityMode | None = None) -> HttpConventions:
        mode = http_mode() if mode is None else mode
        old, new = _report_old(mode), _report_new(mode)
        duration_old = duration_new = None
        if old:
            duration_old = meter.create_histogram(
                t.METRIC_HTTP_DURATION_OLD,
                unit="ms",
                description="measures the duration of the outbound HTTP request",
                explicit_bucket_boundaries_advisory=list(HTTP_DURATION_HISTOGRAM_BUCKETS_OLD),
            )
        if new:
            duration_new = meter.create_histogram(
                t.METRIC_HTTP_DURATION,
                unit="s",
                description="Duration of HTTP client requests.",
                explicit_bucket_boundaries_advisory=list(HTTP_DURATION_HISTOGRAM_BUCKETS_NEW),
            )
        return cls(mode, old, new, duration_old, duration_new)

    def request(self, endpoint: SpanEndpoint) -> tuple[Attributes, Attributes]:
        """A POST to `endpoint`, as its span and its duration's point say it before any response
        (read once per session's route): where the httpx instrumentation writes each fact."""
        mode = self.mode
        span: Attributes = {}
        metric: Attributes = {}
        _set_http_method(span, "POST", "POST", mode)
        _set_http_url(span, endpoint.url_full, mode)
        _set_http_method(metric, "POST", "POST", mode)
        if self.old:
            _set_http_scheme(metric, endpoint.scheme, mode)
        if self.new:  # the instrumentation says where a request went in the stable names only
            _set_http_host_client(span, endpoint.address, mode)
            _set_http_host_client(metric, endpoint.address, mode)
            _set_http_net_peer_name_client(metric, endpoint.address, mode)
            span[t.NETWORK_PEER_ADDRESS] = endpoint.address
            _set_http_peer_port_client(span, endpoint.port, mode)
            span[t.NETWORK_PEER_PORT] = endpoint.port
            _set_http_peer_port_client(metric, endpoint.port, mode)
        return span, metric

    def exchanged(
        self,
        status: int,
        http_version: str | None,
        error: BaseException | None,
        span: Any,
        ended_ns: int,
        timed: Attributes | None,
    ) -> Attributes:
        """A POST's exchange ended, with `status` (0: no response) or `error` (its body cut, or no
        response at all): its span's response attributes, returned, and, where it is `timed` (the
        attributes of `request()`'s metric), its point of the HTTP client duration, from its span's
        start to `ended_ns`. The conventions' error.type: the status from 400, else the type of the
        error that left it without a response."""
        error_type = str(status) if status >= 400 else None
        if error is not None and not status:
            kind = type(error)
            error_type = (
                kind.__qualname__
                if kind.__module__ == "builtins"
                else f"{kind.__module__}.{kind.__qualname__}"
            )
        said = self._responses
        key = (status, http_version, error_type)
        response = said.get(key)
        if response is None:
            attributes: Attributes = {}
            self.response(attributes, status, http_version, error_type)
            if len(said) >= _CACHED:
                said.clear()
            response = said[key] = _Response(attributes, {})
        started = getattr(span, "start_time", None)  # the SDK's span: the POST began there
        if timed is not None and started:
            # Its point of the HTTP client duration in force, with the instrumentation's attributes
            # of each histogram (`timed`: those of `request()`).
            seconds = max(ended_ns - started, 0) / 1e9
            points = response.points
            point = points.get(id(timed))
            if point is None or point[0] is not timed:
                if len(points) >= _CACHED:
                    points.clear()
                point = points[id(timed)] = self._point(timed, status, http_version, error_type)
            if self.duration_old is not None:
                self.duration_old.record(max(round(seconds * 1000), 0), point[1])
            if self.duration_new is not None:
                self.duration_new.record(seconds, point[2])
        return response.attributes

    def response(
        self, attributes: Attributes, status: int, http_version: str | None, error_type: str | None
    ) -> None:
        """How the POST ended, on its span: its status (0: none came), the response's HTTP version,
        the conventions' error.type (the stable names only, as the instrumentation writes them)."""
        if status:
            _set_http_status_code(attributes, status, self.mode)
        if self.new:
            if http_version is not None:
                _set_http_network_protocol_version(attributes, http_version, self.mode)
            if error_type is not None:
                attributes[t.ERROR_TYPE] = error_type

    def _point(
        self, request: Attributes, status: int, http_version: str | None, error_type: str | None
    ) -> _Point:
        """A duration point's attributes for each histogram in force, with `request`, whence they came."""
        mode = self.mode
        metric = dict(request)
        if status:  # the span is not the helper's to write here: INVALID_SPAN records nothing
            _set_status(
                INVALID_SPAN, metric, status, str(status), server_span=False, sem_conv_opt_in_mode=mode
            )
        if self.new:
            if http_version is not None:
                _set_http_network_protocol_version(metric, http_version, mode)
            if error_type is not None:
                metric[t.ERROR_TYPE] = error_type
        old = new = None
        if self.duration_old is not None:
            old = _filter_semconv_duration_attrs(
                metric, _client_duration_attrs_old, _client_duration_attrs_new, _StabilityMode.DEFAULT
            )
        if self.duration_new is not None:
            new = _filter_semconv_duration_attrs(
                metric, _client_duration_attrs_old, _client_duration_attrs_new, _StabilityMode.HTTP
            )
        return request, old, new
