"""The wire of the HTTP seam: what one attempt's exchange sent and got, told in the law's words.

The rule: what an exchange came to is read in one place (`outcome_of`: the adapter's refusal, a
2xx's answer, a refusal's Retry-After), for a tool call's attempt and a protocol request alike;
whether an attempt's request reached the connection is written at the one door past the client's
auth flow and event hooks (`reached_connection`, a `Door` the attempt reads); what an event stream
says is read from the events the SDK's own reader yields (answers.events_read), over the body as the
client decoded it, never from its bytes, into a watch its attempt listens to. A leaf: it knows no
attempt and no call, asks no law (whether a stream is read ahead, so that a cut of it can be
repeated, is the request's decision, handed in), and tells only what it is handed. The code serves
httpx2 (mcp 2.x) and httpx (mcp 1.x) alike: what differs is the `HttpLibrary` bound in with the
runtime, and lines.Line.
"""

from __future__ import annotations

import contextvars
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Final, NamedTuple, Protocol

import anyio

from otel_mcp_replay.adapters import recognises_session_busy
from otel_mcp_replay.answers import EventWatch, ReadAhead, RequestWatch, Tee, answers_request, message_of
from otel_mcp_replay.declaration import Declaration
from otel_mcp_replay.evidence import Outcome, Reply, classify
from otel_mcp_replay.law import Decision, Repeat, Target
from otel_mcp_replay.lines import LINE

__all__ = ["answers_request"]  # the rule a request's own stream is read by, re-exported for the seams

_MAX_REFUSAL_BODY = 64 * 1024  # a refusal's body is read for its error code, never further
# The HTTP versions the client libraries report, as network.protocol.version says them.
_VERSIONS: Final = {b"HTTP/1.1": "1.1", b"HTTP/2": "2", b"HTTP/1.0": "1.0"}


@dataclass(frozen=True)
class HttpLibrary:
    """The names this seam uses of one HTTP client library (httpx2 and httpx share its API)."""

    module: ModuleType
    read_ahead: type[ReadAhead]  # ReadAhead as that library's own async byte stream
    tee: type[Tee]  # Tee, the same
    # Never sent: the connection was not made, so the server cannot have run anything.
    not_sent: tuple[type[BaseException], ...]

    synthetic_status: int = 599  # the status of a synthetic JSON-RPC error answer (lines.Line)
    resolves_lost_answers: bool = True  # lines.Line: else a streamable session's calls keep their scope
    # The responses whose event streams are watched, each read by its watch as the SDK's reader
    # yields its events (answers.events_read); a response is let go once its reader begins.
    watched: weakref.WeakKeyDictionary[Any, EventWatch] = field(default_factory=weakref.WeakKeyDictionary)

    @classmethod
    def of(
        cls, module: ModuleType, synthetic_status: int = 599, resolves_lost_answers: bool = True
    ) -> HttpLibrary:
        read_ahead = type("ReadAhead", (ReadAhead, module.AsyncByteStream), {})
        tee = type("Tee", (Tee, module.AsyncByteStream), {})
        not_sent = (
            module.ConnectError,
            module.ConnectTimeout,
            module.PoolTimeout,
            module.UnsupportedProtocol,
        )
        return cls(module, read_ahead, tee, not_sent, synthetic_status, resolves_lost_answers)

    def watch(self, response: Any, watch: EventWatch) -> None:
        """Read `response`'s events, as the SDK's reader yields them, into `watch`."""
        self.watched[response] = watch


async def outcome_of(
    http: HttpLibrary,
    declaration: Declaration,
    response: Any,
    reading: Exchanging | None = None,
) -> tuple[Outcome, Reply | None, RequestWatch | None]:
    """What a response came to, classified as any attempt's is, its reply and the watch of its
    event stream: the adapter's refusal read from its body, a refusal's Retry-After against the
    clock of now, and, for a tool call's attempt whose 2xx is watched here (`reading`), what its
    body says of the answer (None: the body is not read, as a protocol request's is not). A body
    cut while read raises the client's TransportError."""
    status = int(response.status_code)  # an IntEnum (HTTPStatus) is not a record's int
    if status == 429 or (
        declaration.adapter is not None and await _session_busy(declaration.adapter, response)
    ):  # a refusal: its Retry-After is read, against the clock of now
        retry_after = response.headers.get("retry-after")
        busy = status != 429
        return (
            classify(status, None, session_busy=busy, retry_after=retry_after, now_epoch_s=time.time()),
            None,
            None,
        )
    if reading is None or not 200 <= status < 300:
        return classify(status, None), None, None
    # A 2xx: a JSON answer is read now (so a cut body is a failure this series can still repeat),
    # an event stream watched for it as the SDK reads it (its attempt reads the watch).
    content_type = response.headers.get("content-type", "").lower()  # the SDK reads it too
    if status == 202:
        reply: Reply = "accepted"
    elif content_type.startswith("application/json"):
        content = await response.aread()  # as the client decoded it; a cut raises its TransportError
        found = message_of(content)  # (id, kind), else no answer
        reply = found[1] if type(found) is tuple and found[0] == reading.body["id"] else "other"
    elif content_type.startswith("text/event-stream"):
        watch = await _watched(http, response, reading)  # (its answer is what the SDK's reader yields)
        return classify(status, "later"), "later", watch
    else:
        reply = "other"
    return classify(status, reply), reply, None


def http_version(response: Any) -> str | None:
    """network.protocol.version of a response: `HTTP/1.1` -> `1.1`, `HTTP/2` -> `2`."""
    version = response.extensions.get("http_version")
    if version is None:
        return "1.1"  # what the client library itself reports without one
    if type(version) is bytes and version in _VERSIONS:  # (one lookup for the versions the client speaks)
        return _VERSIONS[version]
    text = version.decode("ascii", "replace") if isinstance(version, bytes) else str(version)
    return text.removeprefix("HTTP/")


def followed(response: Any, request: Any) -> bool:
    """A redirect the client follows with the same request (307/308): the next hop is this attempt."""
    next_request = getattr(response, "next_request", None)
    return next_request is not None and next_request.method == request.method


class Exchanging(Protocol):
    """What the wire reads of the request an attempt exchanges: the request as the seam read it
    once (series.SeamRequest), read-only."""

    @property
    def request(self) -> Any: ...  # the one the SDK handed the client

    @property
    def body(self) -> dict[str, Any]: ...  # its JSON-RPC message: its id is its answer's

    @property
    def declaration(self) -> Declaration: ...

    @property
    def target(self) -> Target: ...  # what the law reads of it

    @property
    def exchange_once(self) -> Callable[[], Awaitable[Any]]: ...  # the client's send as called

    @property
    def sse(self) -> object: ...  # the legacy-SSE connection it is a message POST of (None: none)

    @property
    def streamable(self) -> bool: ...  # the streamable-HTTP transport's

    @property
    def on_network(self) -> Decision: ...  # the request's decision on a repeat after a network failure


class Exchange(NamedTuple):
    """What one attempt's exchange came to."""

    outcome: Outcome
    response: Any  # the response it got (None: none)
    error: BaseException | None  # the error it raised
    version: str | None = None  # its response's network.protocol.version (None: no response came)
    watch: RequestWatch | None = None  # its event stream's watch, which sees the SDK read it


class Door:
    """One attempt's request at the door, `reached_connection`: how often it went to the
    connection, and each time the HTTP client sent it again of itself (after a response that was no
    redirect: an auth flow's re-send), with that response's status and when. Written here, read by
    the attempt: the wire tells no one."""

    # Each starts as a class attribute (one store fewer per attempt each; no __init__ to call).
    request: Any = None  # the attempt's request now at the door (a redirect's next hop: its own)
    hops = 0
    last_status = 0  # of the latest response to it here (0: none yet)
    resends: tuple[tuple[int, int], ...] = ()  # (status, time_ns) of each re-send


async def exchange(http: HttpLibrary, sending: Exchanging, door: Door) -> Exchange:
    """One attempt's exchange: sent, its response read as far as the law needs, classified."""
    exchanging = _EXCHANGING.set(door)
    try:
        response = await sending.exchange_once()
    except Exception as exc:
        # Never sent: raised before the request reached the connection (its auth flow, an event hook,
        # building it: `reached_connection` never saw it), or the connection was never made.
        sent = door.hops > 1 or (door.hops == 1 and not isinstance(exc, http.not_sent))
        return Exchange(classify(0, None, sent=sent), None, exc)
    finally:
        _EXCHANGING.reset(exchanging)
    version = http_version(response)
    declaration = sending.declaration
    # A 2xx's answer is watched for here, else on the legacy SSE stream.
    reading = sending if sending.streamable and sending.sse is None else None
    try:
        outcome, reply, watch = await outcome_of(http, declaration, response, reading)
    except http.module.TransportError as exc:  # the body was cut: a response, without its answer
        await response.aclose()
        return Exchange(classify(int(response.status_code), "cut"), response, exc, version)
    if reply == "other" and http.resolves_lost_answers and declaration.policy == "app-authorized":
        # A whole JSON body without this id's answer: mcp 2.x would route it elsewhere and leave the
        # call waiting for its caller's timeout, where 1.x ends it at once (ToolCall.handled); the
        # call lacked its answer, so it ends now, as on 1.x: the SDK resolves it with this error,
        # which the call seam turns into UnknownEffectError.
        await response.aclose()
        response = synthetic_error(http, sending.request, sending.body["id"], "no answer to the request")
    return Exchange(outcome, response, None, version, watch)


# The door of the request being exchanged in this context, for `reached_connection` (the SDK's
# call to the client's send runs in this very task).
_EXCHANGING: contextvars.ContextVar[Door | None] = contextvars.ContextVar(
    "otel_mcp_replay_exchanging", default=None
)


def reached_connection(
    wrapped: Callable[..., Awaitable[Any]], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Awaitable[Any]:
    """`AsyncClient._send_single_request`: the one door from the client to its transport, past the
    auth flow and the event hooks, once per request that goes out (a redirect's hop, an auth flow's
    re-send). An attempt's request that passes here reached the connection, or tried to: a connection
    never made is told by its error (`HttpLibrary.not_sent`). Any other request passes straight on."""
    door = _EXCHANGING.get()
    if door is None:
        return wrapped(*args, **kwargs)
    going = args[0] if args else kwargs.get("request")
    if going is not door.request and not _same_message(going, door.request):
        return wrapped(*args, **kwargs)  # e.g. an OAuth flow's own request to its token endpoint
    return _hop(door, wrapped, args, kwargs)


async def _hop(
    door: Door, wrapped: Callable[..., Awaitable[Any]], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """One hop of the attempt's request to the connection: counted, and after a response that was
    no redirect, a re-send of the client's own; its status kept for the next."""
    previous = door.last_status
    if previous and not 300 <= previous < 400:  # not a redirect's next hop: a re-send
        door.resends += ((previous, time.time_ns()),)
    door.hops += 1
    response = await wrapped(*args, **kwargs)
    door.last_status = int(response.status_code)
    return response


def _same_message(going: Any, request: Any) -> bool:
    """An auth flow may send a copy of the request: the same method, URL and body is the same."""
    try:
        return bool(
            going.method == request.method and going.url == request.url and going.content == request.content
        )
    except Exception:  # a streaming body not read: not this attempt's request
        return False


async def _watched(http: HttpLibrary, response: Any, sending: Exchanging) -> RequestWatch:
    """A 2xx's event stream, watched for its answer as the SDK's reader yields its events; where the
    request's decision repeats a network failure, it is read here until the answer (until_answer),
    so a cut of it can be repeated."""
    watch = RequestWatch(sending.body["id"], http.module.TransportError)
    http.watched[response] = watch  # (read here, not by a call: the stream is the watch's now)
    read_ahead = isinstance(sending.on_network, Repeat)  # the request's decision: a cut is repeated
    if read_ahead and isinstance(response.stream, http.module.AsyncByteStream):
        await until_answer(http, response)
    return watch  # what the stream says is what the SDK's reader yields


async def until_answer(http: HttpLibrary, response: Any) -> None:
    """Read an event stream here, ahead of the SDK, until an answer is whole, the stream ends, or
    an event asks the client something (the server waits for its answer: the SDK must see it now),
    then hand the SDK every byte read, unchanged, and the rest. The events are read by the SDK's own
    reader (lines.Line.events) over a stand-in response with this one's headers and the bytes as
    they come (`Tee`), decoded as the client decodes them. A cut before any of them raises the
    client's TransportError here, before the SDK saw a byte: the attempt is `cut`, which the series
    repeats as the law permits, as it repeats a cut JSON body; once the SDK reads the stream,
    nothing can. What the answer was, the SDK's reading tells (the response's watch): this reading
    only decides where the bytes stop being read here."""
    read: list[bytes] = []
    stream = response.stream
    rest = stream.__aiter__()
    ahead = http.module.Response(
        response.status_code, headers=response.headers, stream=http.tee(read, rest), request=response.request
    )
    # Where the SDK stops reading a request's stream: at the first answer, whatever its id (1.x then
    # routes it by its id, 2.x takes it for the request's).
    whole: list[object] = []
    watch = EventWatch(lambda answer_id, kind: whole.append(answer_id))
    events = LINE.events(ahead)
    try:
        async for event in events:
            watch.event(event)
            if whole or watch.asked:
                break
    except http.module.TransportError as exc:
        if not isinstance(exc, LINE.event_refused()):  # a cut: the response will not be delivered
            with anyio.CancelScope(shield=True):
                await response.aclose()
            raise
    except Exception:  # what the SDK's own reading will meet too (an undecodable body): its to raise
        pass
    except BaseException:  # the caller gave up: the response will not be delivered
        with anyio.CancelScope(shield=True):
            await response.aclose()
        raise
    await events.aclose()  # the reader stopped here; the stand-in's stream closes nothing of the SDK's
    response.stream = http.read_ahead(read, rest, stream)


async def _session_busy(adapter: str, response: Any) -> bool:
    async def body() -> bytes:
        length = response.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > _MAX_REFUSAL_BODY:
            return b""
        try:
            content: bytes = await response.aread()
            return content
        except Exception:  # the client's TransportError: no body is no refusal
            return b""

    return await recognises_session_busy(adapter, response.status_code, response.headers, body)


def synthetic_error(http: HttpLibrary, request: Any, request_id: object, why: str) -> Any:
    """A JSON-RPC error the SDK resolves this one request with, instead of tearing down the session.

    Never a server's word. Under app-authorized the call seam turns the call's failure into
    `ReplayUnavailableError` or, when an attempt lacked an answer, `UnknownEffectError`.
    """
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": -32000, "message": f"otel-mcp-replay: {why}"},
    }
    headers = {"content-type": "application/json"}
    return http.module.Response(http.synthetic_status, json=body, headers=headers, request=request)
