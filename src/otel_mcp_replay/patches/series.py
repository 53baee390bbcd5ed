"""The series of the HTTP seam: a tool call's attempts, a task's poll's (tasks.py), and a protocol
request's, each one loop.

The rule: a request is sent again only as its policy's decision says, each attempt classified once
(wire.py) and charged to its endpoint's bucket; the loop tells a tool call's attempt (or a poll's)
its steps one at a time (attempt.py: `open_attempt`, `send`, `close` with the decision) and owns
nothing of it; what the SDK is handed at the end is said by one function (`_handed`). The request
and what the seam was bound with travel as one value each.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlsplit

import anyio

from otel_mcp_replay.attempt import AttemptsOwner, open_attempt
from otel_mcp_replay.call import ToolCall
from otel_mcp_replay.call_span import Route, route_of
from otel_mcp_replay.declaration import Declaration
from otel_mcp_replay.errors import RefusedError, RepeatRefusedError, ReplayUnavailableError
from otel_mcp_replay.guard import CallGuard
from otel_mcp_replay.law import (
    Decision,
    Target,
    permit_on_network,
    target_of,
)
from otel_mcp_replay.patches.carrier import Carriage
from otel_mcp_replay.patches.libraries import HttpLibrary, synthetic_error
from otel_mcp_replay.patches.sse import SseConnections, SseStream
from otel_mcp_replay.patches.wire import Exchange, outcome_of
from otel_mcp_replay.policy import ReplayPolicy, Wait
from otel_mcp_replay.runtime import Runtime
from otel_mcp_replay.tasks import TaskPoll


class HttpSeam(NamedTuple):
    """What instrument() bound into the HTTP seam, once."""

    runtime: Runtime
    http: HttpLibrary
    carriage: Carriage | None  # mcp 1.x's carrier (patches/carrier.py); None on 2.x
    connections: SseConnections  # the legacy-SSE connections watched (patches/sse.py)
    streamable_sessions: set[int]  # ids of the sessions seen speaking streamable HTTP (patches/session)


class SeamRequest(NamedTuple):
    """One MCP POST as the seam read it, once: what each of its attempts shares."""

    request: Any  # the one the SDK handed the client
    url: str
    body: dict[str, Any]  # its JSON-RPC message
    declaration: Declaration
    target: Target  # what the law reads of it
    exchange_once: Callable[[], Awaitable[Any]]  # one exchange of it: the client's send as called
    sse: SseStream | None  # the legacy-SSE connection it is a message POST of
    streamable: bool  # the streamable-HTTP transport's
    # The law's word on a repeat after a network failure (law.permit_on_network), asked once as it
    # was read: the wire reads it (a stream read ahead), the policy too (a network failure repeated).
    on_network: Decision

    def read_as(self, declaration: Declaration, target: Target, fail_closed: bool) -> SeamRequest:
        """The same request read under `declaration` as `target`, its decision asked again with them."""
        on_network = permit_on_network(declaration, target, fail_closed)
        return self._replace(declaration=declaration, target=target, on_network=on_network)


async def protocol_series(seam: HttpSeam, req: SeamRequest) -> Any:
    """A request that runs no tool (or a tools/call outside call_tool, under the law, unrecorded):
    a 429 and the adapter's own refusal are asked again; a transport error is the SDK's, as it
    always was."""
    runtime = seam.runtime
    origin = runtime.origin(req.url)  # whose bucket its attempts are charged to
    policy: ReplayPolicy | None = None  # made at the first failure, as a tool series' is
    latest: Any = None
    while True:
        if latest is not None:
            await latest.aclose()  # released before the next attempt is sent
        latest = await req.exchange_once()
        outcome, _, _ = await outcome_of(seam.http, req.declaration, latest)
        runtime.budgets.charge(origin, outcome)  # the endpoint's bucket, charged apart from the policy
        if outcome.failure is None:
            return latest  # nothing to decide
        if policy is None:
            policy = runtime.budgets.policy(
                origin, req.declaration, req.target, runtime.settings, runtime.fail_closed, req.on_network
            )
        decision, policy = policy.after(outcome, runtime.rng)
        if not isinstance(decision, Wait):
            return latest
        await anyio.sleep(decision.ms / 1000)


# -- a tool call's series --


async def tool_series(seam: HttpSeam, call: ToolCall, req: SeamRequest) -> Any:
    """A tool call's request: bound to its call (refused there, unsent, when it must be), its
    attempts, then what the SDK is handed."""
    runtime = seam.runtime
    if req.sse is None and not req.streamable:  # answers not matched: its origin's strictest word holds
        declaration = runtime.servers.strictest_on_origin(req.url)
        # its key, as that declaration names it
        req = req.read_as(declaration, target_of(req.body, declaration, from_json=True), runtime.fail_closed)
    # The endpoint's, when undeclared: whose bucket the attempts are charged to.
    origin = runtime.origin(req.url)
    # Its first request (a redirect's next hop comes back here too); one refused is never sent.
    if call.declaration is None and await _first_request(seam, call, req, origin):
        return await _handed(seam.http, call, req, None)
    sse = req.sse
    if sse is not None:  # its answer is awaited on the connection's stream
        sse.waiting[req.body["id"]] = call
        call.when_ended(functools.partial(sse.waiting.pop, req.body["id"], None))
    try:
        got = await _attempts(seam, call, req, origin)
    except BaseException:
        if sse is not None:
            sse.waiting.pop(req.body["id"], None)
        raise
    return await _handed(seam.http, call, req, got)


async def _first_request(seam: HttpSeam, call: ToolCall, req: SeamRequest, origin: str) -> bool:
    """The call's request seen leaving: the call is bound to it. True: it must not be sent at all,
    and the call is stopped with why."""
    runtime, sse, declaration = seam.runtime, req.sse, req.declaration
    call.bind(req.body["id"], declaration, _route(runtime, call, req, origin))
    if (
        req.streamable
        and sse is None
        and call.scope is not None
        and call.session is not None
        and seam.http.resolves_lost_answers
    ):
        _seen_streamable(seam.streamable_sessions, call.session)  # its next calls need no scope
    matched, target = sse is not None or req.streamable, req.target
    if (declaration.policy == "app-authorized" and not matched) or (
        runtime.guard is not None  # (asked first: the tool's entry is read only where a guard is)
        and target.tool
        and not target.key_carried
        and (entry := declaration.tools.get(target.tool)) is not None
        and entry.changes
    ):
        why = await _why_not_sent(runtime, call, req.url, target, matched)
        if why is not None:
            repeat = isinstance(why, RepeatRefusedError)
            call.stop(why, declined="repeat-of-unknown" if repeat else None)
            return True
    return False


async def poll_series(seam: HttpSeam, poll: TaskPoll, req: SeamRequest) -> Any:
    """A task's poll (`tasks/get`) of a task-backed call (tasks.py): its attempts under the call's
    span, repeated as the law says of a pure read (`req.target` is TASK_POLL); a poll that got no
    response at all is failed alone, never its session (the SDK would tear the transport down)."""
    poll.request_id = req.body["id"]
    got = await _attempts(seam, poll, req, seam.runtime.origin(req.url))
    if got.outcome.status == 0 and got.error is not None and got.outcome.effect != "none":
        return synthetic_error(seam.http, req.request, req.body["id"], "no response")
    if got.response is None:
        assert got.error is not None  # an attempt without a response raised
        raise got.error
    return got.response


async def _attempts(seam: HttpSeam, owner: AttemptsOwner, req: SeamRequest, origin: str) -> Exchange:
    """One loop, read at once: open the attempt (its span; a repeat once its wait is over, unless
    its request ended first), send it (its exchange, classified), charge the endpoint's bucket, ask
    the policy, and close the attempt with the policy's decision. The policy is made at the first
    failure: an answer decides nothing. Returns the final attempt's exchange: its response, else its
    transport error."""
    runtime = seam.runtime
    budgets = runtime.budgets
    policy: ReplayPolicy | None = None
    repeat: Wait | None = None  # the policy's decision to repeat the latest attempt (the first: none)
    got: Exchange | None = None
    response: Any = None  # the latest attempt's, closed when another is sent: it will not be delivered
    while True:
        attempt = await open_attempt(owner, repeat)  # a repeat: once its wait is over
        if attempt is None:  # its request ended during the wait: nothing more is sent
            assert got is not None
            return got
        if response is not None:
            await response.aclose()
        attempt, got = await attempt.send(seam.http, req)  # a client's re-send: the attempt it ended in
        if got.outcome.failure is None:  # an answer decides nothing
            if origin in budgets.drawn:  # it refills a bucket below full (a full one stays so)
                budgets.charge(origin, got.outcome)
            attempt.close(None)
            return got
        budgets.charge(origin, got.outcome)
        if policy is None:
            policy = budgets.policy(
                origin, req.declaration, req.target, runtime.settings, runtime.fail_closed, req.on_network
            )
        decision, policy = policy.after(got.outcome, runtime.rng)
        if not isinstance(decision, Wait):
            attempt.close(decision)
            return got
        repeat, response = decision, got.response  # the next attempt waits it out, then closes this one


async def _handed(
    http: HttpLibrary,
    call: ToolCall,
    req: SeamRequest,
    got: Exchange | None,  # None: the request was refused, never sent (the call is stopped with why)
) -> Any:
    """What the SDK is handed once the series is over: the final attempt's response, its error, or
    in their place what ends this one call and never the session."""
    sse, request = req.sse, req.request
    if got is None:
        if req.streamable and http.resolves_lost_answers:  # the SDK resolves this one request with it;
            return synthetic_error(http, request, req.body["id"], "not sent")  # the call seam raises why
        # Nothing sent: the call's scope ends it (mcp 1.x would still be writing a synthetic
        # answer into a session the caller may be closing already).
        return http.module.Response(202, request=request)
    final, response, error = got.outcome, got.response, got.error
    if (
        call.abandoned
        and req.streamable
        and sse is None
        and response is not None
        and response.status_code >= 300
    ):
        # The caller gave up (in a wait, or mid-exchange): no one waits for an answer. A refusal handed
        # to the SDK would tear mcp 1.x's whole session down under its other calls; a 202 ends it.
        await response.aclose()
        return http.module.Response(202, request=request)
    if error is not None and final.effect != "none" and req.declaration.policy == "app-authorized":
        # No response, or one whose body was cut: fail this call, not the session (the SDK would
        # tear the whole transport down).
        if sse is not None:  # the SDK would wait for an answer on the GET stream forever: end the call now
            sse.waiting.pop(req.body["id"], None)
            call.stop(error)
            return http.module.Response(202, request=request)
        return synthetic_error(http, request, req.body["id"], "no response")
    if sse is not None and response is not None and not 200 <= response.status_code < 300:
        # The SDK's SSE writer would die on it, taking the session along, and the call would wait out
        # its timeout: end this call now with the server's refusal, as streamable HTTP does.
        sse.waiting.pop(req.body["id"], None)
        await response.aclose()
        call.stop(RefusedError(response.status_code))
        return http.module.Response(202, request=request)
    if response is None:
        assert error is not None  # an attempt without a response raised
        raise error
    if response.status_code >= 400:
        call.refused_with(response)  # its body, once the SDK read it, may be the server's JSON-RPC error
    return response


def _route(runtime: Runtime, call: ToolCall, req: SeamRequest, origin: str) -> Route:
    """Where the call's request goes, for its spans: read once per session and URL (the protocol
    version and the session id do not change once its calls begin), its endpoint too (the SSE
    connection's, else the declared label, else `origin`), and with it what the session's calls are
    declared under (a call given up before it is sent files its record so: `ToolCall._where`)."""
    session, url = call.session, req.url
    known = runtime.session_routes.get(session) if session is not None else None
    if known is not None and known[0] == url:
        found: Route = known[1]
        return found
    sse = req.sse
    endpoint = sse.endpoint if sse is not None else req.declaration.label or origin
    route = _read_route(runtime, session, req.request, url, sse, endpoint)
    if session is not None:
        runtime.session_routes[session] = (url, route)
        runtime.session_endpoints[session] = (req.declaration, route.record_endpoint)
    return route


def _read_route(
    runtime: Runtime, session: object, request: Any, url: str, sse: SseStream | None, endpoint: str
) -> Route:
    """The endpoint, the protocol version the session negotiated (2.x says; else the header the
    transport sends it in), the legacy-era session id."""
    version = getattr(session, "protocol_version", None)
    session_id: str | None = None
    for name, value in request.headers.raw:
        lowered = name.lower()
        if lowered == b"mcp-session-id":
            session_id = value.decode("latin-1")
        elif lowered == b"mcp-protocol-version" and type(version) is not str:
            version = value.decode("latin-1")
    if sse is not None and session_id is None:  # the legacy SSE transport's: in its message endpoint
        session_id = next(iter(parse_qs(urlsplit(url).query).get("session_id", ())), None)
    if version == "2026-07-28":
        session_id = None  # the conventions: no session id for 2026-07-28 calls
    version = version if type(version) is str else None
    return route_of(
        runtime.session_key,
        runtime.instruments.http,
        runtime.span_endpoint(url),
        version,
        session_id,
        endpoint,
    )


async def _why_not_sent(
    runtime: Runtime, call: ToolCall, url: str, target: Target, matched: bool
) -> Exception | None:
    """Why this call, of a changing tool without its key or on a connection whose answers cannot be
    matched, must not be sent at all, if it must not."""
    if not matched:
        return ReplayUnavailableError(call.tool)  # its answers could not be matched to it
    assert runtime.guard is not None
    guarded = call.guarded
    if guarded is None:
        guarded = call.guarded = CallGuard(confirmed=False)
    fingerprint = guarded.fingerprint = runtime.guard.fingerprint(
        url.partition("?")[0], call.tool, target.arguments()
    )
    if fingerprint is not None and await runtime.guard.refuses_shared(
        fingerprint, repeat_confirmed=guarded.confirmed
    ):
        return RepeatRefusedError(call.tool)
    return None


def _seen_streamable(streamable_sessions: set[int], session: object) -> None:
    """`session` speaks streamable HTTP: remembered while it lives (the call seam's, bound in by
    instrument(): its calls need no scope to end them)."""
    key = id(session)
    if key not in streamable_sessions:
        streamable_sessions.add(key)
        weakref.finalize(session, streamable_sessions.discard, key)
