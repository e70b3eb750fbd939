"""/v1/stream: the downstream WebSocket a consumer reads messages from (scope `consume`).

The protocol (query parameters, frames, envelope, close codes) is documented in
gateway.hub.protocol. This module checks the token and the parameters, subscribes a
consumer to the app's hub (`app_hub`: the one given to create_app, else the runtime's) and
runs two tasks per connection: one sends what the consumer's queue holds, the other reads
the client's frames, only to see it go. The hub cuts a consumer that is too slow; the
connection then closes with the code and reason the cut carries. Without a hub the stream
closes with 1013 (try again later).

Sending: under uvicorn (either of its WebSocket implementations) a stream writes its
frames to the connection's transport itself, all that its queue holds in one write, each
frame serialised once for every stream that sends it (`Delivery.raw_wire`), under the
server's own flow control; about 4x the messages per second of one ASGI send per frame.
While its task waits for messages and the connection is writable, the hub's router writes
them itself at the end of its dispatch (`_WireWriter`): one turn of the loop less per batch
(p50 2-50 us in `wsgw_bench.follower_wake --hub --router-writes`); a backlog, a paused
connection and the end go through the task. `app.state.stream_direct = False` turns it off.
With another server, or `app.state.stream_wire = False`, it sends through ASGI.

Stream sink (gateway.hub.sink): a wire stream (plain or envelope=1; not conflating, not TLS)
also puts its socket in the ring writer's C sink, armed whenever it waits with nothing
unwritten: the thread that writes a ring record sends the frame itself, without the loop's
wake-up. The WebSocket library's own writes (pongs, close frames) go through a guard that
takes the stream back from the sink first. `app.state.stream_sink = False` (or
WSGW_STREAM_SINK=0) turns it off. The sink serves at most `app.state.stream_sink_max`
streams of a ring (api.stream_sink_max): each costs the writer a send per record; the
others stay on the router until a place frees.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from fastapi import APIRouter, WebSocket
from starlette.concurrency import run_in_threadpool
from starlette.websockets import WebSocketDisconnect

from api.auth import AuthFailed, Principal, bearer_secret, identify, may_use_subscription
from api.revocation import OpenStreams
from api.schemas.common import ID_MAX
from api.schemas.subscriptions import check_consumer
from gateway.control import ControlPlane
from gateway.control.subscriptions import delivered_topics, dialect_topics
from gateway.groups.feed import group_hub_id
from gateway.hub.consumer import (
    DEFAULT_QUEUE_SIZE,
    Consumer,
    ConsumerClosed,
    DeliveryOptions,
    OverflowPolicy,
)
from gateway.hub.core import Hub, HubClosedError, SessionDeletedError
from gateway.hub.events import OP_TEXT, Delivery, GapNotice, StreamEvent, ws_frame
from gateway.hub.protocol import (
    CLOSE_BAD_REQUEST,
    CLOSE_FORBIDDEN,
    CLOSE_INTERNAL_ERROR,
    CLOSE_NOT_FOUND,
    CLOSE_SESSION_DELETED,
    CLOSE_TOO_MANY_FAILURES,
    CLOSE_TRY_AGAIN_LATER,
    CLOSE_UNAUTHORIZED,
    close_reason,
)
from gateway.hub.sink import (
    MAX_STREAMS_DEFAULT,
    SINK_DEFAULT,
    SinkError,
    SinkSocket,
    StreamSink,
    envelope_middle,
)
from gateway.store.errors import InvalidError, NotFoundError
from gateway.store.models import SessionRow
from gateway.store.validate import check_topic

router = APIRouter(tags=["stream"])
log = logging.getLogger("wsgw.api.stream")
TRY_AGAIN_LATER = CLOSE_TRY_AGAIN_LATER
#: How long a closing handshake may wait for a consumer that does not read.
CLOSE_TIMEOUT_S = 5.0
#: Events sent per wake-up of a stream before it lets the others run.
SEND_BATCH = 256
KNOWN_PARAMS = frozenset(
    {
        "token",
        "subscription",
        "session",
        "group",
        "topics",
        "envelope",
        "queue_size",
        "overflow",
        "conflation_ms",
        "consumer",
    }
)
SESSION_ONLY = ("queue_size", "overflow", "conflation_ms", "consumer")


class BadStreamRequest(ValueError):
    """A query parameter is missing, unknown or invalid (close code 4400)."""


@dataclass(frozen=True)
class StreamRequest:
    subscription: int | None
    session: int | None
    topics: tuple[str, ...] | None
    envelope: bool
    options: DeliveryOptions
    consumer: str | None
    group: int | None = None  # a feed group's one stream (gateway.groups.feed)


def _int(params: Any, name: str, low: int, high: int) -> int | None:
    raw = params.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise BadStreamRequest(f"{name} must be an integer, not {raw!r}") from None
    if not low <= value <= high:
        raise BadStreamRequest(f"{name} must be {low}..{high}, not {value}")
    return value


def parse_request(params: Any) -> StreamRequest:
    """The stream's query parameters (a starlette QueryParams or any multi-dict)."""
    unknown = sorted(set(params.keys()) - KNOWN_PARAMS)
    if unknown:
        raise BadStreamRequest(
            f"unknown parameter {unknown[0]!r}; known: {', '.join(sorted(KNOWN_PARAMS))}"
        )
    subscription = _int(params, "subscription", 1, ID_MAX)
    session = _int(params, "session", 1, ID_MAX)
    group = _int(params, "group", 1, ID_MAX)
    if group is not None and (subscription, session) != (None, None):
        raise BadStreamRequest("group=ID streams the group: leave subscription and session out")
    if group is None and (subscription is None) == (session is None):
        raise BadStreamRequest("give either subscription=ID or session=ID (with topics=a,b)")
    topics = _topics(params, subscription)
    envelope_raw = params.get("envelope", "0")
    if envelope_raw not in ("0", "1", "true", "false"):
        raise BadStreamRequest(f"envelope must be 0 or 1, not {envelope_raw!r}")
    if subscription is not None:
        given = [p for p in SESSION_ONLY if p in params]
        if given:
            raise BadStreamRequest(
                f"{given[0]} comes from subscription {subscription}: change it there "
                f"(PATCH /v1/subscriptions/{subscription})"
            )
    consumer = params.get("consumer")
    if consumer is not None:
        try:
            check_consumer(consumer)
        except ValueError as exc:
            raise BadStreamRequest(str(exc)) from None
    envelope = envelope_raw in ("1", "true")
    options = _options(params)
    return StreamRequest(subscription, session, topics, envelope, options, consumer, group)


def _topics(params: Any, subscription: int | None) -> tuple[str, ...] | None:
    """topics=a,b (repeatable), checked and without repeats; None: every topic."""
    raw_topics = params.getlist("topics")
    if not raw_topics:
        return None
    if subscription is not None:
        raise BadStreamRequest("topics come from the subscription: leave topics out")
    listed = [t for value in raw_topics for t in value.split(",") if t]
    if not listed:
        raise BadStreamRequest("topics is empty: leave it out for every topic")
    for topic in listed:
        try:
            check_topic(topic)
        except ValueError as exc:
            raise BadStreamRequest(str(exc)) from None
    return tuple(dict.fromkeys(listed))


def _options(params: Any) -> DeliveryOptions:
    """A session-mode stream's delivery options (a subscription brings its own)."""
    overflow = params.get("overflow", "disconnect")
    if overflow not in ("disconnect", "drop_oldest"):
        raise BadStreamRequest(f"overflow must be disconnect or drop_oldest, not {overflow!r}")
    return DeliveryOptions(
        queue_size=_int(params, "queue_size", 1, 1_000_000) or DEFAULT_QUEUE_SIZE,
        overflow=_overflow(overflow),
        conflation_ms=_int(params, "conflation_ms", 0, 60_000) or 0,
    )


def _overflow(value: str) -> OverflowPolicy:
    return "drop_oldest" if value == "drop_oldest" else "disconnect"


#: The stream's close code for each refusal of api.auth.identify.
_AUTH_CLOSE = {401: CLOSE_UNAUTHORIZED, 403: CLOSE_FORBIDDEN, 429: CLOSE_TOO_MANY_FAILURES}


async def _authenticate(websocket: WebSocket) -> Principal | None:
    """The caller, or None after closing the stream with 4401/4403/4429."""
    secret = bearer_secret(websocket.headers.get("authorization"))
    secret = secret or websocket.query_params.get("token")
    client = websocket.client.host if websocket.client else ""
    try:
        found = await run_in_threadpool(identify, websocket.app.state, client, secret)
    except AuthFailed as exc:
        if exc.status_code == 401:
            reason = "missing, invalid or revoked token"
        elif exc.status_code == 403:
            reason = "auth is off: loopback clients only"
        else:
            reason = close_reason(str(exc.detail))
        await websocket.close(_AUTH_CLOSE.get(exc.status_code, CLOSE_FORBIDDEN), reason)
        return None
    if "consume" not in found.scopes:
        await websocket.close(CLOSE_FORBIDDEN, "the stream needs the 'consume' scope")
        return None
    return found


def app_hub(app: Any) -> Hub | None:
    """The app's hub: the one create_app was given, else its runtime's `hub` attribute (an
    engine-backed runtime owns one), else None."""
    hub = getattr(app.state, "hub", None)
    if hub is None:
        control = getattr(app.state, "control", None)
        hub = getattr(getattr(control, "runtime", None), "hub", None)
    return hub if isinstance(hub, Hub) else None


class StreamRefused(Exception):
    """The stream cannot be served: closed with this code and reason."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


@dataclass(frozen=True)
class StreamTarget:
    """What a stream carries: the session, its topics (None: all) and how it is delivered."""

    session_id: int
    topics: tuple[str, ...] | None
    options: DeliveryOptions
    name: str


async def _target(
    control: ControlPlane, principal: Principal, request: StreamRequest
) -> StreamTarget:
    """The subscription's (if the caller may use it) or the session's topics."""
    try:
        if request.subscription is not None:
            sub = await run_in_threadpool(control.subscriptions.get, request.subscription)
            if not may_use_subscription(principal, sub.owner_token_id):
                raise StreamRefused(
                    CLOSE_FORBIDDEN,
                    f"subscription {request.subscription} belongs to another token: "
                    "stream your own, or use an admin token",
                )
            options = DeliveryOptions(sub.queue_size, _overflow(sub.overflow), sub.conflation_ms)
            return StreamTarget(sub.session_id, tuple(delivered_topics(sub)), options, sub.consumer)
        session_id, row = await _session_of(control, request)
        topics = request.topics
        if topics is not None:
            # As the session subscribes and publishes them (binance: btcusdt@trade): a
            # topic spelled otherwise would be accepted and never match.
            topics = tuple(dialect_topics(row.dialect, list(topics)))
    except NotFoundError as exc:
        raise StreamRefused(CLOSE_NOT_FOUND, str(exc)) from None
    except InvalidError as exc:
        raise StreamRefused(CLOSE_BAD_REQUEST, str(exc)) from None
    caller = "local" if principal.token_id is None else principal.name
    return StreamTarget(session_id, topics, request.options, request.consumer or caller)


async def _session_of(control: ControlPlane, request: StreamRequest) -> tuple[int, SessionRow]:
    """The hub session id a session-mode stream reads, and the session whose dialect names
    its topics: a group reads its own stream, named as its first leg's."""
    if request.group is None:
        assert request.session is not None
        return request.session, await run_in_threadpool(control.sessions.get, request.session)
    group = await run_in_threadpool(control.groups.get, request.group)
    leg = await run_in_threadpool(control.sessions.get, group.legs[0].session_id)
    return group_hub_id(group.id), leg


def _subscribe(hub: Hub | None, target: StreamTarget) -> Consumer:
    if hub is None:
        raise StreamRefused(
            CLOSE_TRY_AGAIN_LATER, "no fan-out hub is attached to this control plane yet"
        )
    try:
        return hub.subscribe(target.session_id, target.topics, target.options, name=target.name)
    except HubClosedError:
        raise StreamRefused(CLOSE_TRY_AGAIN_LATER, "the gateway is shutting down") from None
    except SessionDeletedError as exc:  # deleted since its row was read
        raise StreamRefused(CLOSE_SESSION_DELETED, str(exc)) from None


def _hello(websocket: WebSocket, hub: Hub, request: StreamRequest, target: StreamTarget) -> str:
    """The envelope stream's first frame: what it carries (gateway.hub.protocol)."""
    options = target.options
    settings = websocket.app.state.settings
    return orjson.dumps(
        {
            "type": "subscribed",
            "subscription": request.subscription,
            "session": target.session_id,
            "topics": None if target.topics is None else list(target.topics),
            "queue_size": options.queue_size,
            "overflow": options.overflow,
            "conflation_ms": options.conflation_ms,
            "next_seq": hub.next_seq,
            "epoch": hub.epoch_hex,
            "latency_profile": settings.latency_profile,
            # How a consumer should wait for frames: what the ring's header recommends.
            "reader_wait": settings.hub.reader_wait or "futex",
        }
    ).decode()


@router.websocket("/v1/stream")
async def stream(websocket: WebSocket) -> None:
    """Messages of a subscription (or of a session's topics) as they are published."""
    control: ControlPlane = websocket.app.state.control
    hub = app_hub(websocket.app)
    await websocket.accept()
    principal = await _authenticate(websocket)
    if principal is None:
        return
    try:
        try:
            request = parse_request(websocket.query_params)
        except (BadStreamRequest, ValueError) as exc:
            raise StreamRefused(CLOSE_BAD_REQUEST, str(exc)) from None
        target = await _target(control, principal, request)
        consumer = _subscribe(hub, target)
    except StreamRefused as refused:
        await websocket.close(refused.code, close_reason(refused.reason))
        return
    assert hub is not None
    if request.envelope:
        await websocket.send_text(_hello(websocket, hub, request, target))
    if principal.token_id is None:  # auth off: no token to revoke
        await _serve(websocket, consumer, request.envelope)
        return
    streams: OpenStreams = websocket.app.state.open_streams
    streams.add(principal.token_id, consumer)
    try:
        await _serve(websocket, consumer, request.envelope)
    finally:
        streams.discard(principal.token_id, consumer)


async def _serve(websocket: WebSocket, consumer: Consumer, envelope: bool) -> None:
    """Run the stream until the client goes, or the hub cuts the consumer off."""
    state = websocket.app.state
    wire = _wire_of(websocket) if getattr(state, "stream_wire", True) else None
    paths: dict[str, int] | None = getattr(state, "stream_paths", None)
    if paths is None:
        paths = state.stream_paths = {"wire": 0, "asgi": 0}
    paths["wire" if wire else "asgi"] += 1  # which path streams took (tests check it)
    direct = getattr(state, "stream_direct", True)
    if wire and getattr(state, "stream_sink", SINK_DEFAULT):
        limit = getattr(state, "stream_sink_max", MAX_STREAMS_DEFAULT)
        _attach_sink(wire, consumer, app_hub(websocket.app), limit, envelope)
    sender = (
        _pump_wire(wire, consumer, envelope, direct)
        if wire
        else _pump(websocket, consumer, envelope)
    )
    pump = asyncio.create_task(sender)
    listen = asyncio.create_task(_listen(websocket))
    waits: set[asyncio.Future[Any]] = {pump, listen, consumer.ended}
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (pump, listen):
            task.cancel()
        await asyncio.gather(pump, listen, return_exceptions=True)
    if not consumer.ended.done():
        failure = None if listen.done() or pump.cancelled() else pump.exception()
        if failure is None or isinstance(failure, (WebSocketDisconnect, OSError)):
            consumer.close()  # the client went away
            return
        log.error("stream of %s failed", consumer.name, exc_info=failure)
        consumer.cut(CLOSE_INTERNAL_ERROR, "internal error", "error")
    closed: ConsumerClosed = consumer.ended.result()
    if closed.kind == "client":
        return
    # A consumer too slow to read may not read the close frame either: bounded wait.
    with contextlib.suppress(Exception):
        await asyncio.wait_for(
            websocket.close(closed.code, close_reason(closed.reason)), CLOSE_TIMEOUT_S
        )


async def _pump(websocket: WebSocket, consumer: Consumer, envelope: bool) -> None:
    """Send what the consumer's queue holds, one ASGI message per frame (the portable
    path); the messages are made once per message and shared by every stream."""
    send = websocket.send
    get = consumer.get
    while True:
        events = await get(SEND_BATCH)
        for event in events:
            if type(event) is Delivery:
                await send(event.envelope_frame() if envelope else event.raw_frame())
            else:
                assert type(event) is GapNotice
                await send({"type": "websocket.send", "text": event.json()})
        if len(events) == SEND_BATCH:
            await asyncio.sleep(0)  # a long backlog: let the other streams run too


class _Wire(Protocol):
    """What the fast path needs of the server's WebSocket connection (uvicorn's protocols
    for websockets and wsproto both have it)."""

    transport: asyncio.Transport
    writable: asyncio.Event
    disconnected: bool
    close_sent: bool


def _wire_of(websocket: WebSocket) -> _Wire | None:
    """The server connection under this WebSocket, found through the ASGI send callable
    (a bound method of uvicorn's protocol, wrapped in Starlette's closures); None with any
    other server, and the stream then sends through ASGI."""
    stack: list[Any] = [websocket._send]
    seen: set[int] = set()
    while stack:
        fn = stack.pop()
        if id(fn) in seen or len(seen) > 32:
            continue
        seen.add(id(fn))
        owner = getattr(fn, "__self__", None)
        if (
            owner is not None
            and type(owner).__module__.startswith("uvicorn.protocols.websockets.")
            and isinstance(getattr(owner, "writable", None), asyncio.Event)
            and callable(getattr(getattr(owner, "transport", None), "write", None))
            and hasattr(owner, "disconnected")
            and hasattr(owner, "close_sent")
        ):
            wire: _Wire = owner
            return wire
        for cell in getattr(fn, "__closure__", None) or ():
            with contextlib.suppress(ValueError):  # an empty cell
                if callable(cell.cell_contents):
                    stack.append(cell.cell_contents)
    return None


class _WireWriter:
    """The router's way to write a stream's frames on its own turn of the loop while the
    stream's task waits (gateway.hub.consumer.DirectWriter): one loop turn less per batch."""

    def __init__(self, wire: _Wire, envelope: bool) -> None:
        self.wire = wire
        self.envelope = envelope

    def ready(self) -> bool:
        wire = self.wire
        return (
            wire.writable.is_set()
            and not (wire.disconnected or wire.close_sent)
            and not wire.transport.is_closing()
        )

    def write(self, events: list[StreamEvent]) -> None:
        _raw_transport(self.wire).write(_frames(events, self.envelope))


def _frames(events: list[StreamEvent], envelope: bool) -> bytes:
    """The events' WebSocket frames, each message's serialised once for every stream."""
    return b"".join(
        [
            (e.envelope_wire() if envelope else e.raw_wire())
            if type(e) is Delivery
            else ws_frame(OP_TEXT, e.json().encode())  # type: ignore[union-attr]
            for e in events
        ]
    )


async def _pump_wire(wire: _Wire, consumer: Consumer, envelope: bool, direct: bool) -> None:
    """The fast path: each message's frame is serialised once for every stream (server
    frames are not masked), and a stream writes what its queue holds in one write, under
    the server's own flow control (its `writable` event). With `direct` the hub's router
    writes while this task waits and the connection is writable; the task takes over for
    a backlog, a paused connection and the end."""
    get = consumer.get
    transport = _raw_transport(wire)
    writable = wire.writable
    if direct:
        consumer.direct_writer = _WireWriter(wire, envelope)
    try:
        while True:
            events = await get(SEND_BATCH)
            data = _frames(events, envelope)
            if not writable.is_set():
                await writable.wait()
            if wire.disconnected or wire.close_sent or transport.is_closing():
                raise WebSocketDisconnect(1006)
            transport.write(data)
            if len(events) == SEND_BATCH:
                await asyncio.sleep(0)  # a long backlog: let the other streams run too
    finally:
        consumer.direct_writer = None


class _SinkLink:
    """A stream's socket in the ring writer's sink (gateway.hub.consumer.SinkLink), entered
    at the first arm whose topics all have ring ids (until then the router alone knows
    which records a topic name gets)."""

    def __init__(
        self,
        sink: StreamSink,
        hub: Hub,
        consumer: Consumer,
        wire: _Wire,
        transport: Any,
        envelope: bool = False,
    ) -> None:
        self.sink = sink
        self.envelope = envelope
        self._told: set[int] = set()  # envelope: the topic ids whose middle the sink has
        self._topic_count = -1  # envelope, every topic: the hub's count when last told
        self.hub = hub
        self.consumer = consumer
        self.session_id = consumer.session_id
        self.topics = consumer.topics
        self.wire = wire
        self.transport: asyncio.Transport = transport  # the real one (the protocol's is guarded)
        self.entry: SinkSocket | None = None
        self.failed = False

    def ready(self) -> bool:
        wire = self.wire
        transport = self.transport
        return (
            transport.get_write_buffer_size() == 0
            and wire.writable.is_set()
            and not (wire.disconnected or wire.close_sent)
            and not transport.is_closing()
        )

    def _enter(self) -> SinkSocket | None:
        if self.failed:
            return None
        if self.topics is None:
            ids: list[int] = []
        else:
            known = [self.hub.known_topic_id(self.session_id, t) for t in self.topics]
            if any(tid is None for tid in known):
                return None
            ids = [tid for tid in known if tid is not None]
        sock = self.transport.get_extra_info("socket")
        add = self.sink.add_envelope if self.envelope else self.sink.add
        try:
            self.entry = add(sock.fileno(), self.session_id, ids)
            if self.envelope and self.topics is not None:
                self._tell([(t, tid) for t, tid in zip(self.topics, ids, strict=True)])
            if self.consumer.wake_fd >= 0:  # its stops wake the router (which may park)
                self.entry.wake_on_stop(self.consumer.wake_fd)
        except (SinkError, OSError) as exc:
            log.warning("a stream stays on Python: %s", exc)
            self.failed = True
        return self.entry

    def _tell(self, topics: list[tuple[str, int]]) -> None:
        """Envelope: the middles of these topics' envelopes, for the sink (the topic as the
        router names it to the consumer: its own topic, or the one published)."""
        assert self.entry is not None
        for topic, tid in topics:
            if tid not in self._told and self.entry.envelope_topic(
                tid, envelope_middle(self.session_id, topic)
            ):
                self._told.add(tid)

    def arm(self, seq: int) -> bool:
        if self.sink.room() == 0:  # full: no mutex the writer holds while it sends
            return False
        entry = self.entry or self._enter()
        if entry is None:
            return False
        if self.envelope and self.topics is None:  # every topic: new ones since?
            count = self.hub.topic_count()
            if count != self._topic_count:
                self._topic_count = count
                self._tell(self.hub.session_topic_ids(self.session_id))
        return entry.arm(seq)

    def state(self) -> tuple[int, ...]:
        assert self.entry is not None
        return self.entry.state()

    def disarm(self) -> tuple[int, ...]:
        assert self.entry is not None
        return self.entry.disarm()

    def write_rest(self, state: tuple[int, ...]) -> None:
        assert self.entry is not None
        rest = self.entry.take_rest(state)
        if rest and not self.transport.is_closing():
            self.transport.write(rest)

    def detach(self) -> None:
        self.failed = True
        if self.entry is not None:
            self.entry.remove()


class _GuardedTransport:
    """The transport as the WebSocket library sees it while the sink may send: its own
    writes (pongs, close frames) and its close take the stream back from the sink first, so
    frames never interleave and the sink never writes to a closed socket."""

    def __init__(self, transport: asyncio.Transport, consumer: Consumer) -> None:
        self.raw = transport
        self._consumer = consumer

    def write(self, data: Any) -> None:
        if self._consumer.sink_armed:
            self._consumer.take_back()
        self.raw.write(data)

    def writelines(self, data: Any) -> None:
        self.write(b"".join(data))

    def close(self) -> None:
        self._consumer.detach_sink()
        self.raw.close()

    def abort(self) -> None:
        self._consumer.detach_sink()
        self.raw.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


def _raw_transport(wire: _Wire) -> asyncio.Transport:
    transport = wire.transport
    return transport.raw if isinstance(transport, _GuardedTransport) else transport


def _attach_sink(
    wire: _Wire, consumer: Consumer, hub: Hub | None, limit: int, envelope: bool = False
) -> None:
    """Give a stream the sink, plain or envelope (TLS and conflation stay on Python)."""
    transport = _raw_transport(wire)
    if (
        hub is None
        or transport.get_extra_info("socket") is None
        or transport.get_extra_info("sslcontext") is not None
        or consumer.options.conflation_ms
    ):
        return
    sink = hub.stream_sink()
    if sink is None:
        return
    sink.limit_streams(limit)
    consumer.sink = _SinkLink(sink, hub, consumer, wire, transport, envelope)
    wire.transport = _GuardedTransport(transport, consumer)  # type: ignore[assignment]


async def _listen(websocket: WebSocket) -> None:
    """Read (and ignore) what the client sends, until it closes or disconnects."""
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
