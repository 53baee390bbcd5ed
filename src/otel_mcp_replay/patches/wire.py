"""The wire of the HTTP seam: what one attempt's exchange sent and got, and what it says of the
JSON-RPC answer to its request, told in the law's words.

The rule: what an exchange came to is read in one place (`outcome_of`: the adapter's refusal, a
2xx's answer, a refusal's Retry-After); whether its request reached the connection is written at the
one door past the client's auth flow and event hooks (`reached_connection`, a `Door`). The answer is
read as the SDK reads it: a body as the client decoded it, read as the SDK's models read a message
(`message_of`); an event stream from the events the SDK's own reader yields (`events_read`, into a
watch that keeps what it saw for its attempt). No byte is changed, and no size turns the reading
off. A leaf: it knows no attempt and no call, asks no law (whether a stream is read ahead is the
request's decision, handed in), and tells only what it is handed.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any, Final, NamedTuple, Protocol

import anyio

from otel_mcp_replay.adapters import session_busy
from otel_mcp_replay.declaration import Declaration
from otel_mcp_replay.evidence import Answer, Outcome, Reply, classify
from otel_mcp_replay.law import Decision, Repeat, Target
from otel_mcp_replay.lines import LINE
from otel_mcp_replay.patches.libraries import (
    HttpLibrary,
    StreamWatch,
    fast_json,
    stdlib_message,
    synthetic_error,
)

# The HTTP versions the client libraries report, as network.protocol.version says them.
_VERSIONS: Final = {b"HTTP/1.1": "1.1", b"HTTP/2": "2", b"HTTP/1.0": "1.0"}


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
        declaration.adapter is not None and await session_busy(declaration.adapter, response)
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


# -- what a response says of the answer to a request id, read as the SDK reads it --

# Called with the request id as the server sent it and what it carried.
OnAnswer = Callable[[object, Answer], None]
# Called with the data of a legacy-SSE stream's `endpoint` event: the message endpoint it announces.
OnEndpoint = Callable[[str], None]
# Called once when the stream ends: None on a clean end, the exception on a cut.
OnEnd = Callable[[BaseException | None], None]


def answer_of(payload: bytes | bytearray | str) -> tuple[object, Answer] | None:
    """The (id, kind) of a JSON-RPC response in `payload`, or None for anything else: what the
    SDK reads as a response, from the whole text (a response begun and then garbled, or two
    messages in one, the SDK refuses: so does this)."""
    found = message_of(payload)
    return None if found is ASKS else found  # type: ignore[return-value]


ASKS: Final = True  # message_of: a request of the server's (it asks the client something)


def message_of(payload: bytes | bytearray | str) -> tuple[object, Answer] | bool | None:
    """answer_of, or ASKS for a request the server sends the client. A message is read as the SDK's
    models (mcp_types' JSONRPCResponse, JSONRPCError, JSONRPCRequest; 1.x's alike) take one: the
    envelope `"jsonrpc": "2.0"`; an id that is an integer (never a bool or a float) or a string,
    which only an error may leave null; a result that is an object; an error that is an object with
    an integer code and a string message; a request's string method. Its JSON is parsed whole by the
    SDK's parser, pydantic's (the SDK's own validation of the same message costs twenty times more)."""
    try:  # json_message, inline: it is read once per answer
        message = fast_json(payload, cache_strings="keys")  # type: ignore[misc]
    except (ValueError, TypeError):  # (TypeError too when pydantic is absent: None is no parser)
        message = stdlib_message(payload)
    if type(message) is not dict:
        return None
    get = message.get
    if get("jsonrpc") != "2.0":
        return None
    request_id = get("id", _ABSENT)
    if type(request_id) not in _ID_TYPES:  # an integer or a string: a response's, or a request's
        if request_id is None and "error" in message:  # an error that could not name the request
            return _error_of(message, None)
        return None
    result = get("result", _ABSENT)
    if result is not _ABSENT:
        return (request_id, "result") if type(result) is dict else None
    if "error" in message:
        return _error_of(message, request_id)
    return ASKS if type(get("method")) is str else None


_ABSENT: Final = object()  # a key the message does not have
_ID_TYPES: Final = (int, str)  # exactly these: a bool or a float is no id to the SDK's models


def _error_of(message: dict[str, Any], request_id: object) -> tuple[object, Answer] | None:
    error = message["error"]
    if type(error) is dict and type(error.get("code")) is int and type(error.get("message")) is str:
        return request_id, "error"
    return None


def _no_answer(answer_id: object, kind: Answer) -> None:
    """What a watch tells of an answer once its stream ended: nothing."""


class EventWatch:
    """One response's event stream, told event by event as the SDK's own reader yields it (the
    HTTP library's `EventSource`, over the body as the client decoded it: `events_read`): the
    answers it carries, whether it asked the client something, the message endpoint it announces,
    and its end. It reads what the SDK reads, and nothing else: an event
    the SDK's reader refuses (its size cap) is never seen here either.

    As the SDK's transports read an event: a `message` event (the default) with empty data is a
    priming event or a keep-alive, and says nothing; its data is one JSON-RPC message. Only an
    `endpoint` event announces a message endpoint (the legacy SSE transport's first).
    """

    __slots__ = ("_on_answer", "_on_end", "_on_endpoint", "asked", "ended")

    def __init__(
        self, on_answer: OnAnswer, on_end: OnEnd | None = None, on_endpoint: OnEndpoint | None = None
    ) -> None:
        self._on_answer, self._on_end, self._on_endpoint = on_answer, on_end, on_endpoint
        self.asked = False  # an event of the stream asked the client something (a server request)
        # Its reading was seen to its end: only then is an answer's absence known (the plugin turned
        # off or on again meanwhile, the SDK reads the stream unseen).
        self.ended = False

    def event(self, event: Any) -> None:
        """One event (a `ServerSentEvent` of the line's reader), before the SDK reads it."""
        name, data = event.event, event.data
        if name == "message":
            if data:
                found = message_of(data)
                if found is ASKS:
                    self.asked = True
                elif found is not None:
                    self._on_answer(*found)  # type: ignore[misc]
        elif name == "endpoint" and self._on_endpoint is not None:
            self._on_endpoint(data)

    async def read(self, events: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """`events`, the SDK's reader's, passed on one by one, each told first; then its end: None
        when it ended or its reader stopped reading, else what it raised (a cut, a cancel)."""
        try:
            async for event in events:
                self.event(event)
                yield event
        except GeneratorExit:  # the SDK stopped reading (it had what it read for)
            self._end(None)
            raise
        except BaseException as exc:
            self._end(exc)
            raise
        self._end(None)

    def _end(self, error: BaseException | None) -> None:
        self.ended = True
        self._on_answer = _no_answer  # no answer counts past the end; its listener is let go
        on_end, self._on_end = self._on_end, None
        if on_end is not None:
            on_end(error)


def events_read(
    watched: MutableMapping[Any, StreamWatch],
    wrapped: Callable[..., Any],
    instance: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """The SDK's reader of an event stream (lines.Line.event_reader), as it begins: a watched
    response's events (`watched`, the HTTP library's) are told to its watch one by one,
    each before the SDK reads it, from what the SDK's own parser yields; any other reader passes
    straight on."""
    events = wrapped(*args, **kwargs)
    if not watched:
        return events
    watch = watched.pop(instance.response, None)
    return events if watch is None else watch.read(events)


def answers_request(answer_id: object, request_id: object) -> bool:
    """An answer on a request's own event stream is that request's: by its id on mcp 1.x, whatever
    its id on 2.x, whose transport writes the request's id into it (lines.Line)."""
    return LINE.stream_answers_its_request or answer_id == request_id


class RequestWatch(EventWatch):
    """A request's own event stream (`_watched`): the first answer it carried to the request
    (`answer`) and, when it ended without one, whether it was cut (`cut`, the client's error: its
    TransportError says so; the SDK's reader refusing the stream, its size cap,
    lines.Line.event_refused, is no cut). It tells no one: its attempt reads it as it is settled,
    so that the stream's news never calls into the attempt while the SDK reads."""

    __slots__ = ("_cuts", "_request_id", "answer", "cut")

    def __init__(self, request_id: object, cuts: type[BaseException]) -> None:
        super().__init__(self._answered, self._stream_ended)
        self._request_id, self._cuts = request_id, cuts
        self.answer: Answer | None = None
        self.cut: BaseException | None = None

    def _answered(self, answer_id: object, kind: Answer) -> None:
        if self.answer is None and answers_request(answer_id, self._request_id):
            self.answer = kind

    def _stream_ended(self, error: BaseException | None) -> None:
        if isinstance(error, self._cuts) and not isinstance(error, LINE.event_refused()):
            self.cut = error
