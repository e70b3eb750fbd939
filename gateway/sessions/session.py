"""UpstreamSession: one exchange feed held open, on asyncio, whatever happens to it.

    session = UpstreamSession(7, SessionConfig(url, "okx"), hub, on_event=log_event)
    session.subscribe(["trades:BTC-USDT"])
    session.start()                       # on the loop; returns at once
    ...
    await session.stop()                  # close frame 1000, brief wait for the handshake

Topics are placed on connections by the dialect's `SubscriptionPlanner` (a new connection
opens when one reaches the exchange's per-connection cap); each connection ("link") runs
its own loop:

    connecting (resolve, TCP, TLS, upgrade) -> subscribing (paced requests) -> streaming
        -> on loss: gap to the sink -> backoff (jittered, capped) -> connecting ...

The read loop takes bursts from the connection and makes one `classify_batch` call (the C
topic scan, no JSON parse for data) and one `publish_batch` call per burst. Everything else
(acks, errors, heartbeats, reconnect notices) is rare and handled one by one. Every state
change is an event with a reason, for the control plane's event log.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import math
import random
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from types import TracebackType
from typing import Any

from dataplane.engine import Engine
from dataplane.errors import (
    DataplaneError,
    FailureKind,
    ResolveError,
    TransportError,
    transport_error,
)
from dataplane.feed import CFeed
from dataplane.ring import RingWriter
from dataplane.samples import LatencySamples
from dataplane.shim import build_topic_spec
from dataplane.transports.base import WebSocketConnection, parse_ws_url
from dataplane.transports.connection import ConnectOptions, WsClientConnection
from dataplane.transports.dpdk import EngineTransport
from dataplane.ws.errors import (
    ConnectionClosed,
    HandshakeRejected,
    LocalProtocolError,
    TlsCertificateError,
    WsError,
    failure_kind,
)
from gateway.dialects import (
    RECONNECT,
    UNPARSABLE,
    Ack,
    Data,
    Dialect,
    DialectError,
    Error,
    Heartbeat,
    Other,
    RequestQueue,
    SubscriptionPlanner,
    make_dialect,
)
from gateway.dialects.base import Classified
from gateway.hub.names import ring_topic
from gateway.sessions.backoff import Backoff
from gateway.sessions.config import UNPARSABLE_QUIET_S, SessionConfig, SessionConfigError
from gateway.sessions.connect import (
    Connector,
    Resolver,
    address_family,
    connector_for,
    is_ip_literal,
    recv_batch,
    system_resolve,
    tls_context,
    transport_options,
)
from gateway.sessions.counters import SessionCounters
from gateway.sessions.liveness import Due, Liveness
from gateway.sessions.sequence import SequenceChecker, sequence_checker
from gateway.sessions.sink import MessageSink, Published
from gateway.sessions.state import (
    ERROR,
    GAP,
    NOTICE,
    PROGRESS,
    STATE,
    SUBSCRIBE_ERROR,
    UNPARSABLE_FRAMES,
    EventCallback,
    SessionEvent,
    State,
    StateMachine,
)

log = logging.getLogger("wsgw.sessions")

CLOSE_NORMAL = 1000
_ENDINGS = frozenset({State.STOPPING, State.STOPPED, State.FAILED})
_MAX_CLOSE_REASON = 123  # RFC 6455 section 5.5: 125-byte control payload less the code


@dataclass(frozen=True)
class _Lost:
    """How a connection ended."""

    reason: str
    code: int
    immediate: bool  # reconnect without waiting (the exchange asked for it)
    had_topics: bool  # subscriptions were out: messages may have been missed
    lived: float  # seconds it was open
    kind: FailureKind  # what ended it


#: While the C feed path carries a connection, housekeeping reads its counters at least this
#: often (seconds): metrics read `counters` from other threads without asking the loop.
FEED_PULL_S = 0.5
#: The gap reason of a batch the sink (the hub) raised on: lost, and its consumers told.
SINK_REFUSED = "sink_refused"


class _Link:
    """One connection of a session: the topics placed on it and, while open, its dialect
    object, request queue and liveness schedule."""

    def __init__(self, index: int, backoff: Backoff) -> None:
        self.index = index
        self.machine = StateMachine()
        self.backoff = backoff
        self.topics: dict[str, None] = {}  # placed here by the planner (an ordered set)
        self.task: asyncio.Task[None] | None = None
        self.wake = asyncio.Event()
        self.retired = False  # its topics all went: it closes and is not reopened
        # -- per open connection --
        self.conn: WebSocketConnection | None = None
        self.dialect: Dialect | None = None
        self.queue: RequestQueue | None = None
        self.liveness: Liveness | None = None
        self.keepalive: str | bytes | None = None
        self.sent: set[str] = set()  # subscribed on this connection (requests queued or out)
        self.streaming_reason = ""  # the reason last reported for streaming (topic count)
        self.confirmed: set[str] = set()  # acked
        self.refused = 0  # topics the exchange refused on this connection
        self.address: str | None = None
        self.ack_deadline = math.inf
        self.close_reason: str | None = None  # set when we end the connection ourselves
        self.reconnect_now = False
        self.closing: asyncio.Task[None] | None = None
        self.seq: SequenceChecker | None = None
        self.feed: CFeed | None = None  # the C feed path of the open connection
        self.feed_transport: EngineTransport | None = None
        self.spent_feed: CFeed | None = None  # the last connection's, for its final counts

    def opened(self, conn: WebSocketConnection, dialect: Dialect, address: str) -> None:
        self.conn, self.dialect, self.address = conn, dialect, address
        self.sent = set()
        self.streaming_reason = ""
        self.confirmed = set()
        self.refused = 0
        self.close_reason = None
        self.reconnect_now = False
        self.closing = None

    def closed(self) -> None:
        self.conn = None
        self.queue = None
        self.liveness = None
        # The engine may write through the feed until its detach lands on the engine's
        # thread: its last counts are taken once more later (UpstreamSession._pull_spent).
        self.spent_feed = self.feed
        self.feed = None
        self.feed_transport = None


class UpstreamSession:
    """One upstream feed: its wanted topics, connections, counters and events.

    Methods other than `stop` are synchronous and must be called on the session's event
    loop (LiveRuntime hops there for the API). `subscribe`/`unsubscribe` keep the set of
    active topics and send the dialect's requests on whichever connection holds them;
    ref-counting consumers is the control plane's job.
    """

    def __init__(
        self,
        session_id: int,
        config: SessionConfig,
        sink: MessageSink,
        *,
        on_event: EventCallback | None = None,
        engine: Engine | None = None,
        topics: Iterable[str] = (),
        connector: Connector | None = None,
        resolver: Resolver | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        resume_gap: str | None = None,
        feed_path: str | None = None,
    ) -> None:
        """resume_gap: a gap reason to publish when the first connection opens with topics
        (a session restored after the gateway was down: what was published meanwhile is
        lost, though this session object never had a connection to lose). feed_path: "c"
        or "python" (see `EngineConfig.feed_path`); None: the engine's setting."""
        self.id = session_id
        self.config = config.validate()
        self._sink = sink
        self.on_event = on_event
        self._engine = engine
        self._feed_path = feed_path
        self._connector = connector
        self._resolver: Resolver = resolver or system_resolve
        self._rng = rng if rng is not None else random.Random()
        self._clock = clock
        self._target = parse_ws_url(config.url)
        try:
            # Normalises topics and knows the limits; each connection gets its own dialect.
            self._proto = self._new_dialect()
        except (TypeError, ValueError) as exc:
            raise SessionConfigError(f"dialect {config.dialect!r}: {exc}") from None
        self.planner = SubscriptionPlanner(self._proto.limits.max_topics_per_connection)
        self.counters = SessionCounters()
        #: Per burst: receive stamp to hand-off to the hub (ns), the newest 4096.
        # receive stamp -> published, per batch; allocated once (a soak reads growth)
        self.latency_ns = LatencySamples(4096)
        self.failed_topics: dict[str, str] = {}  # topic -> the exchange's (or dialect's) reason
        self._wanted: dict[str, None] = {}
        self._links: dict[int, _Link] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._options = ConnectOptions()
        self._started = False
        self._resume_gap = resume_gap
        self._unparsable_at: float | None = None  # self._clock() of the last unparsable frame
        #: receiving_unparsable clears after this long without an unparsable frame.
        self.unparsable_quiet_s = UNPARSABLE_QUIET_S
        self._final: State | None = None  # STOPPING, STOPPED or FAILED once the end began
        self._stop_requested = asyncio.Event()
        self._done = asyncio.Event()
        self.reason = "created"
        self.since = time.time()
        self._link(0)
        self.subscribe(topics)

    # ---- public API -------------------------------------------------------------------------
    @property
    def state(self) -> State:
        """The session's state: the end state once stopping/failed, else the least advanced
        state of its connections (streaming only when every connection streams)."""
        if self._final is not None:
            return self._final
        states = [link.machine.state for link in self._links.values()]
        return min(states, key=PROGRESS.__getitem__) if states else State.NEW

    @property
    def owed_gap(self) -> str | None:
        """The resume gap's reason while no connection has published it yet (this object
        never connected): whoever starts the session next owes it to consumers."""
        return self._resume_gap

    @property
    def engine(self) -> Engine | None:
        """The DPDK engine a dpdk session's connections go through (None: the kernel's)."""
        return self._engine

    @property
    def topics(self) -> tuple[str, ...]:
        """Active topics (normalised), in the order they were subscribed."""
        return tuple(self._wanted)

    def connections(self) -> list[dict[str, Any]]:
        """Per connection: index, state, reason, address, topics (a status view)."""
        return [
            {
                "index": link.index,
                "state": str(link.machine.state),
                "reason": link.machine.reason,
                "address": link.address,
                "topics": len(link.topics),
                "confirmed": len(link.confirmed),
                "last_rtt_s": link.liveness.last_rtt if link.liveness else None,
            }
            for link in sorted(self._links.values(), key=lambda k: k.index)
        ]

    def snapshot(self) -> dict[str, Any]:
        for link in self._links.values():
            self._pull_feed(link)
        return {
            "session_id": self.id,
            "state": str(self.state),
            "reason": self.reason,
            "since": self.since,
            "topics": list(self._wanted),
            "failed_topics": dict(self.failed_topics),
            "connections": self.connections(),
            "counters": self.counters.snapshot(),
            "receiving_unparsable": self.receiving_unparsable,
        }

    def start(self) -> None:
        """Open the connections (call on the loop; returns at once)."""
        if self._started or self._final is not None:
            return
        self._started = True
        try:
            if self._connector is None:
                self._connector = connector_for(self.config, self._engine)
            self._options = transport_options(self.config, tls_context(self.config))
        except SessionConfigError as exc:
            self._fail(str(exc), self._links[0])
            return
        for link in list(self._links.values()):
            self._launch(link)

    async def stop(self, reason: str = "stop requested") -> None:
        """Close every connection with 1000 and wait (up to close_timeout_s) for the
        closing handshakes (RFC 6455 section 7.1.2); then the session is stopped."""
        if self._final is State.STOPPING or self._final is State.FAILED:
            await self._done.wait()
            return
        if self._final is State.STOPPED:
            return
        self._final = State.STOPPING
        self._stop_requested.set()
        links = list(self._links.values())
        for link in links:
            self._move(link, State.STOPPING, reason)
        await asyncio.gather(*(self._stop_link(link, reason) for link in links))
        await self._drain_tasks()
        for link in links:
            self._pull_spent(link)
        self._final = State.STOPPED
        for link in links:
            self._move(link, State.STOPPED, reason)
        self._done.set()

    async def wait_closed(self) -> None:
        """Until the session is stopped or failed."""
        await self._done.wait()

    async def __aenter__(self) -> UpstreamSession:
        self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def subscribe(self, topics: Iterable[str]) -> list[str]:
        """Add topics (normalised by the dialect); returns those accepted. A topic the
        dialect cannot spell is refused with a subscribe_error event; one that failed
        before is tried again."""
        accepted: dict[str, None] = {}
        for topic in topics:
            try:
                name = self._proto.normalize(topic)
            except DialectError as exc:
                self._refused([topic], str(exc), None)
                continue
            self.failed_topics.pop(name, None)
            if name not in self._wanted:
                accepted[name] = None
        if not accepted or self._final is not None:
            return list(accepted)
        self._wanted.update(accepted)
        for index, group in self.planner.add(accepted).items():
            link = self._link(index)
            link.topics.update(dict.fromkeys(group))
            self._request(link, "subscribe", group)
            if self._started and link.task is None:
                self._launch(link)
        return list(accepted)

    def unsubscribe(self, topics: Iterable[str]) -> list[str]:
        """Drop topics; returns those that were active. A connection other than the first
        that is left with no topics is closed."""
        names: list[str] = []
        for topic in topics:
            try:
                name = self._proto.normalize(topic)
            except DialectError:
                continue
            self.failed_topics.pop(name, None)
            if name in self._wanted:
                del self._wanted[name]
                names.append(name)
        for index, group in self.planner.remove(names).items():
            link = self._links.get(index)
            if link is None:
                continue
            for topic in group:
                link.topics.pop(topic, None)
            self._request(link, "unsubscribe", group)
            if index != 0 and not link.topics:
                self._retire(link)
        return names

    # ---- links ------------------------------------------------------------------------------
    def _new_dialect(self) -> Dialect:
        return make_dialect(self.config.dialect, **dict(self.config.dialect_options))

    def _link(self, index: int) -> _Link:
        link = self._links.get(index)
        if link is None:
            link = self._links[index] = _Link(index, Backoff(self.config.reconnect, self._rng))
        return link

    def _launch(self, link: _Link) -> None:
        link.task = asyncio.get_running_loop().create_task(
            self._run_link(link), name=f"wsgw-session-{self.id}-{link.index}"
        )

    def _retire(self, link: _Link) -> None:
        """A connection with no topics left: closed, forgotten (the planner may put new
        topics at its index later; they get a fresh connection)."""
        link.retired = True
        del self._links[link.index]
        self._spawn(self._stop_link(link, "no topics left on this connection", move=True))

    async def _stop_link(self, link: _Link, reason: str, *, move: bool = False) -> None:
        if move:
            self._move(link, State.STOPPING, reason)
        conn = link.conn
        if conn is not None:
            link.close_reason = reason
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.config.close_timeout_s + 1.0):
                    await conn.close(CLOSE_NORMAL, _close_text(reason))
        task = link.task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if move:
            self._move(link, State.STOPPED, reason)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _drain_tasks(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _run_link(self, link: _Link) -> None:
        """Connect, serve, and after every loss back off and connect again."""
        reason = "starting"
        try:
            while not self._ending(link):
                self._move(link, State.CONNECTING, reason)
                try:
                    conn, dialect, address = await self._open(link)
                except TransportError as exc:  # every transport's every failure to open
                    self.counters.connect_failures += 1
                    self.counters.failures[exc.kind] += 1
                    why, retry_after, details = describe_failure(exc)
                    if not await self._backoff(
                        link, f"connect failed: {why}", retry_after, details
                    ):
                        return
                    reason = f"retrying after: {why}"
                    continue
                except (SessionConfigError, LocalProtocolError) as exc:
                    # The same request fails the same way every time: only these end it.
                    self._fail(f"configuration error: {exc}", link)
                    return
                self.counters.connects += 1
                resume, self._resume_gap = self._resume_gap, None
                if resume is not None and self._wanted:
                    self._gap(link, resume)  # before the first message of the new feed
                lost = await self._serve(link, conn, dialect, address)
                if self._ending(link):
                    return
                self.counters.reconnects += 1
                if lost.had_topics:
                    self._gap(link, f"reconnect: {lost.reason}")
                if lost.lived >= self.config.reconnect.stable_after_s:
                    link.backoff.reset()
                if lost.immediate:
                    reason = f"reconnecting: {lost.reason}"
                    continue
                self.counters.failures[lost.kind] += 1
                details = {"close_code": lost.code, "kind": str(lost.kind)}
                if not await self._backoff(link, f"connection lost: {lost.reason}", None, details):
                    return
                reason = f"reconnecting after: {lost.reason}"
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: say so, instead of a silent dead feed
            log.exception("session %d connection %d crashed", self.id, link.index)
            self._fail(f"internal error: {type(exc).__name__}: {exc}", link)

    def _ending(self, link: _Link) -> bool:
        return self._final is not None or link.retired

    async def _backoff(
        self,
        link: _Link,
        reason: str,
        retry_after: float | None,
        details: Mapping[str, Any],
    ) -> bool:
        """Wait before the next attempt; False when the session should end instead."""
        delay = link.backoff.next_delay(retry_after)
        if delay is None:
            attempts = link.backoff.attempt
            self._fail(f"gave up after {attempts} failed attempts; last: {reason}", link)
            return False
        info = {**details, "delay_s": round(delay, 3), "attempt": link.backoff.attempt}
        self._move(link, State.BACKOFF, reason, info)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await self._stop_requested.wait()
        return not self._ending(link)

    async def _open(self, link: _Link) -> tuple[WebSocketConnection, Dialect, str]:
        """Resolve (system resolver), then connect to each address in turn until one opens;
        the starting address rotates with the attempt, so one dead address of a
        load-balanced name does not hold every retry."""
        host, port = self._target.host, self._target.port
        if is_ip_literal(host):
            addresses = [host]
        else:
            addresses = await self._resolve(host, port)
        start = link.backoff.attempt % len(addresses)
        ordered = addresses[start:] + addresses[:start]
        connector = self._connector
        assert connector is not None
        last: TransportError | None = None
        for address in ordered:
            try:
                conn = await connector(
                    self.config.url, connect_host=address, connect_port=port, **self._options
                )
            except TransportError as exc:
                last = exc
            except OSError as exc:  # a connector of its own (tests) raising the builtins
                last = transport_error(exc, f"{address}:{port}")
            else:
                return conn, self._new_dialect(), address
            if last.kind not in _NEXT_ADDRESS:
                raise last  # the server answered: another address of it answers the same
        assert last is not None
        raise last

    async def _resolve(self, host: str, port: int) -> list[str]:
        """The host's addresses, or ResolveError (a DNS failure is retried like the rest)."""
        timeout = self.config.open_timeout_s
        try:
            async with asyncio.timeout(timeout):
                addresses = await self._resolver(host, port, address_family(self.config))
        except TimeoutError:
            raise ResolveError(f"resolving {host} took over {timeout} s") from None
        except OSError as exc:  # socket.gaierror and friends
            if isinstance(exc, TransportError):
                raise
            detail = exc.strerror or str(exc)
            raise ResolveError(f"cannot resolve {host}: {detail}", exc.errno or 0) from exc
        if not addresses:
            raise ResolveError(f"{host} resolved to no address")
        return addresses

    # ---- one open connection ----------------------------------------------------------------
    async def _serve(
        self, link: _Link, conn: WebSocketConnection, dialect: Dialect, address: str
    ) -> _Lost:
        cfg = self.config
        now = self._clock()
        opened_at = now
        link.opened(conn, dialect, address)
        link.queue = RequestQueue(dialect.limits, now)
        keepalive = dialect.keepalive() if cfg.heartbeat.keepalive else None
        interval = None
        if keepalive is not None:
            interval = cfg.heartbeat.keepalive_interval_s or keepalive[0]
            link.keepalive = keepalive[1]
        link.liveness = Liveness(cfg.heartbeat, interval, now)
        previous = link.seq
        link.seq = sequence_checker(cfg.dialect) if cfg.sequence_check else None
        if link.seq is not None and previous is not None:
            link.seq.resume_from(previous)  # a jump across the reconnect is counted too
        topics = list(link.topics)
        self._attach_feed(link, conn, dialect)
        self._tell_input(conn)
        self._move(
            link,
            State.SUBSCRIBING,
            f"connected to {address}:{self._target.port}; subscribing {len(topics)} topics",
            {"address": address, "subprotocol": conn.subprotocol},
        )
        self._request(link, "subscribe", topics)
        link.ack_deadline = now + cfg.ack_timeout_s
        self._check_streaming(link, now)
        keeper = asyncio.get_running_loop().create_task(self._housekeep(link, conn))
        try:
            code, why, kind = await self._read(link, conn, dialect)
        except Exception:  # a bug below: never leave the connection open behind us
            self._end_connection(link, 1011, "internal error")
            raise
        finally:
            keeper.cancel()
            try:
                await asyncio.gather(keeper, return_exceptions=True)
                closing = link.closing
                if closing is not None:
                    await asyncio.gather(closing, return_exceptions=True)
            finally:
                # Also when stop cancels this task during the waits above (a closing
                # handshake the peer never answers, a loaded loop): the C feed's last
                # counts and the group's input would be lost with the connection.
                had_topics = bool(link.sent)
                self._tell_input(None)
                self._pull_feed(link)
                link.closed()
        detail = f"close code {code}" + (f" ({why})" if why else "")
        reason = f"{link.close_reason}; {detail}" if link.close_reason else detail
        if link.close_reason and not link.reconnect_now:
            kind = FailureKind.TIMEOUT  # we closed it: the feed or its pongs went silent
        lived = self._clock() - opened_at
        return _Lost(reason, code, link.reconnect_now, had_topics, lived, kind)

    async def _read(
        self, link: _Link, conn: WebSocketConnection, dialect: Dialect
    ) -> tuple[int, str, FailureKind]:
        """The read loop: a burst from the connection, one classification, one publish.

        A connection with `recv_frames()` (the kernel and DPDK transports) hands over each
        run of frames of a read as one `MessageBatch`: its payloads go to the dialect
        without a `Message` per message, max_batch at a time."""
        max_batch = self.config.max_batch
        frames = getattr(conn, "recv_frames", None)
        while True:
            try:
                if frames is not None:
                    run = await frames()
                    ts = time.time_ns()  # one receive stamp per burst, before any work on it
                    payloads = run.payloads()
                else:
                    batch = await recv_batch(conn, max_batch)
                    ts = time.time_ns()
                    payloads = [m.data for m in batch]
            except ConnectionClosed as exc:
                return exc.code, exc.reason, failure_kind(exc)
            except (WsError, OSError) as exc:
                return 1006, str(exc), failure_kind(exc)
            if len(payloads) <= max_batch:
                self._on_batch(link, dialect, payloads, dialect.classify_batch(payloads), ts)
                continue
            for at in range(0, len(payloads), max_batch):
                part = payloads[at : at + max_batch]
                self._on_batch(link, dialect, part, dialect.classify_batch(part), ts)

    def _on_batch(
        self,
        link: _Link,
        dialect: Dialect,
        payloads: list[bytes],
        kinds: list[Classified],
        ts: int,
    ) -> None:
        """The hot path: data goes out in one publish_batch; control messages after it."""
        sid = self.id
        out: list[Published] = []
        topics: list[str] = []
        control: list[Classified] | None = None
        for raw, kind in zip(payloads, kinds, strict=True):
            if type(kind) is Data:
                topic = kind.topic
                out.append((sid, topic, raw, ts, None))
                topics.append(topic)
            elif control is None:
                control = [kind]
            else:
                control.append(kind)
        counters = self.counters
        counters.batches += 1
        counters.bytes += sum(map(len, payloads))
        counters.last_message_at = ts / 1e9
        liveness = link.liveness
        if liveness is not None:
            liveness.on_message(self._clock())
        if out:
            counters.messages += len(out)
            counters.topic_messages.update(topics)
            if link.seq is not None:
                out = self._check_sequence(link, out)
            self._publish(out)
        if control is not None:
            for kind in control:
                self._on_control(link, dialect, kind)
            # After the whole burst: classify_batch settled every ack and error in it.
            self._check_streaming(link, None)

    def _check_sequence(self, link: _Link, out: list[Published]) -> list[Published]:
        """Exchange sequence numbers into the tuples; a break is a gap before its message."""
        checker = link.seq
        assert checker is not None
        seqs, breaks = checker.check([m[2] for m in out], [m[1] for m in out])
        stamped = [(m[0], m[1], m[2], m[3], s) for m, s in zip(out, seqs, strict=True)]
        if not breaks:
            return stamped
        # Publish in order: the messages before each break, the gap, then the rest.
        start = 0
        for index, reason, lost in breaks:
            if index > start:
                self._publish(stamped[start:index])
            self.counters.sequence_gaps += 1
            self._gap(link, reason, lost)
            start = index
        return stamped[start:]

    def _publish(self, out: list[Published]) -> None:
        try:
            self._sink.publish_batch(out)
        except Exception:  # the hub's bug must not take the feed down with it
            log.exception("session %d: the sink refused a batch of %d", self.id, len(out))
            # Its consumers are told, as of a reconnect's loss (if the sink takes a gap).
            self.counters.sink_refused += len(out)
            self._publish_gap(len(out), SINK_REFUSED)
        if out:
            # In-gateway latency of the burst: read from the connection to handed to the hub.
            self.latency_ns.append(time.time_ns() - out[0][3])

    def _on_control(self, link: _Link, dialect: Dialect, kind: Classified) -> None:
        counters = self.counters
        counters.control_messages += 1
        if isinstance(kind, Heartbeat):
            counters.heartbeats += 1
        elif isinstance(kind, Ack):
            counters.acks += 1
            if kind.op == "subscribe":
                link.confirmed.update(t for t in kind.topics if t in link.sent)
        elif isinstance(kind, Error):
            wanted = [t for t in kind.topics if t in link.topics and t not in link.confirmed]
            if wanted:
                self._refused(wanted, kind.reason, link, kind.code)
            else:
                self._emit(ERROR, f"exchange error: {kind.reason}", link, {"code": kind.code})
        elif isinstance(kind, Other):
            if kind.kind == RECONNECT:
                reason = f"exchange requested reconnect ({kind.detail})"
                self._emit(NOTICE, reason, link, {"detail": kind.detail})
                link.reconnect_now = True
                self._end_connection(link, CLOSE_NORMAL, reason)
            elif kind.kind == UNPARSABLE:
                self._unparsable(link, kind.detail)

    @property
    def receiving_unparsable(self) -> bool:
        """True while the upstream sends frames the dialect cannot parse (the last one less
        than unparsable_quiet_s ago): they are dropped, so the session may look healthy
        while it delivers nothing. Safe to read from any thread."""
        last = self._unparsable_at
        return last is not None and self._clock() - last < self.unparsable_quiet_s

    def _unparsable(self, link: _Link, sample: str) -> None:
        """Count a frame the dialect cannot parse; the first of a spell (the first ever, or
        the first after unparsable_quiet_s without one) is an event with a sample of it."""
        first = not self.receiving_unparsable
        self.counters.unparsable += 1
        self._unparsable_at = self._clock()
        if first:
            self._emit(
                UNPARSABLE_FRAMES,
                f"the upstream sends frames the {self.config.dialect} dialect cannot parse: "
                "they are dropped and counted (unparsable)",
                link,
                {"sample": sample, "count": self.counters.unparsable},
            )
        else:
            log.debug("session %d: unparsable message %r", self.id, sample)

    def _refused(
        self, topics: list[str], reason: str, link: _Link | None, code: int | str | None = None
    ) -> None:
        """Topics the exchange (or the dialect) refused: out of the active set, marked
        failed with the reason, until subscribed again."""
        for topic in topics:
            self.failed_topics[topic] = reason
            self._wanted.pop(topic, None)
        if link is not None:
            for topic in topics:
                link.topics.pop(topic, None)
                link.sent.discard(topic)
            link.refused += len(topics)
            self.planner.remove(topics)
            if link.liveness is not None and not link.sent:
                link.liveness.expect_data(self._clock(), False)  # nothing left to wait for
        self.counters.subscribe_errors += 1
        shown = ", ".join(topics[:5]) + (f" and {len(topics) - 5} more" if len(topics) > 5 else "")
        self._emit(
            SUBSCRIBE_ERROR,
            f"subscribe refused for {shown}: {reason}",
            link,
            {"topics": list(topics), "code": code, "exchange_reason": reason},
        )

    def _request(self, link: _Link, op: str, topics: list[str]) -> None:
        """Queue the dialect's (un)subscribe messages on an open connection; a closed one
        subscribes its topics when it opens."""
        dialect, queue, liveness = link.dialect, link.queue, link.liveness
        if link.conn is None or dialect is None or queue is None or liveness is None:
            return
        now = self._clock()
        if op == "subscribe":
            new = [t for t in topics if t not in link.sent]
            if not new:
                return
            messages = dialect.subscribe_messages(new)
            link.sent.update(new)
            liveness.expect_data(now)
            self._feed_topics(link, new, True)
        else:
            gone = [t for t in topics if t in link.sent]
            if not gone:
                return
            self._feed_topics(link, gone, False)
            messages = dialect.unsubscribe_messages(gone)
            link.sent.difference_update(gone)
            link.confirmed.difference_update(gone)
            liveness.expect_data(now, bool(link.sent))
        queue.push(messages)
        link.wake.set()

    # ---- the C feed path ----------------------------------------------------------------------
    def _tell_input(self, conn: WebSocketConnection | None) -> None:
        """A feed group's leg tells its group the kernel socket it reads (None: it is
        done): while that socket holds unread bytes, or its connection holds messages read
        from it and not yet offered, the group's holes wait for this leg, whose read loop
        runs late under load (GroupRouter.leg_input and leg_queued; issue #19)."""
        tell = getattr(self._sink, "leg_input", None)
        if not callable(tell):
            return
        extra = getattr(conn, "get_extra_info", None)  # None: no connection (it is done)
        sock = extra("socket") if callable(extra) else None
        fileno = getattr(sock, "fileno", None)
        tell(self.id, fileno() if callable(fileno) else -1)
        queued = getattr(self._sink, "leg_queued", None)
        if callable(queued):
            if isinstance(conn, WsClientConnection):
                conn.on_queued = partial(queued, self.id)
            else:
                queued(self.id, False)  # done: nothing of it is held any more

    def _attach_feed(self, link: _Link, conn: WebSocketConnection, dialect: Dialect) -> None:
        """Give the connection a C feed when the engine asks for one and nothing here needs
        Python per message: a plain ws:// DPDK connection without compression, a dialect
        whose data messages the C topic scan classifies alone (`Dialect.c_feed`), no
        sequence check, a sink with a ring. Otherwise the read loop carries every frame."""
        self._pull_spent(link)  # the previous connection's feed: its last counts first
        cfg = self.config
        wanted = self._feed_path
        if wanted is None:
            wanted = getattr(getattr(self._engine, "config", None), "feed_path", "python")
        if wanted != "c" or link.seq is not None:
            return
        ring = getattr(self._sink, "ring", None)
        transport = getattr(conn, "transport", None)
        if (
            not isinstance(ring, RingWriter)
            or ring.closed
            or not isinstance(transport, EngineTransport)
            or not dialect.c_feed
            or getattr(conn, "tls", None) is not None
            or getattr(conn, "deflate", None) is not None
            or not isinstance(conn, WsClientConnection)
        ):
            return
        paths = dialect.topic_paths
        join = getattr(self._sink, "feed_group", None)  # a feed group's leg (GroupRouter)
        group = join(self.id) if callable(join) else None
        try:
            spec = build_topic_spec(paths.paths, presence=paths.presence, strict=paths.strict)
            feed = CFeed(ring, self.id, spec, min(cfg.max_message_size, cfg.max_frame_size))
            if group is not None:
                feed.join_group(*group)  # its frames go through the group's C arbiter
        except (DataplaneError, OSError) as exc:
            log.warning("session %d: no C feed path (%s): the read loop carries it", self.id, exc)
            return
        link.feed = feed
        link.feed_transport = transport
        transport.attach_feed(feed)
        conn.on_idle = transport.arm_feed

    def _feed_topics(self, link: _Link, topics: list[str], on: bool) -> None:
        """Subscribed topics' data frames go through the feed; unsubscribed ones no more."""
        transport, feed = link.feed_transport, link.feed
        if transport is None or feed is None:
            return
        # Through the hub when it has one: it then knows the topic behind the id (a long
        # name is shortened in the ring) for /v1/stream and NATS, which follow the ring.
        register = getattr(self._sink, "ring_topic_id", None)
        for topic in topics:
            topic_id = None
            if on:
                try:
                    if callable(register):
                        topic_id = int(register(self.id, topic)) or None
                    else:
                        topic_id = feed.ring.register_topic(ring_topic(self.id, topic))
                except DataplaneError:
                    topic_id = None
                if topic_id is None:
                    continue  # the ring's topic table is full: the read loop carries it
            transport.feed_topic(topic, topic_id)

    def _pull_spent(self, link: _Link) -> None:
        """The last counts of a closed connection's feed (written after its final look)."""
        spent = link.spent_feed
        if spent is not None:
            link.spent_feed = None
            self._pull_feed(link, spent)

    def _pull_feed(self, link: _Link, feed: CFeed | None = None) -> None:
        """What the C feed wrote since the last look, into the counters and the liveness
        check (a message the feed carried proves the connection as one the loop read)."""
        feed = feed or link.feed
        if feed is None:
            return
        delta = feed.take()
        counters = self.counters
        counters.feed_stops += delta.stops
        if not delta.messages:
            return
        counters.messages += delta.messages
        counters.fed_messages += delta.messages
        counters.bytes += delta.bytes
        counters.batches += delta.writes
        counters.topic_messages.update(delta.topic_messages)
        if delta.last_message_ns:
            wall = delta.last_message_ns / 1e9
            if counters.last_message_at is None or wall > counters.last_message_at:
                counters.last_message_at = wall
            liveness = link.liveness
            if liveness is not None:  # (never back: the read loop may have seen a later one)
                seen = self._clock() - max(0.0, time.time() - wall)
                liveness.on_message(max(liveness.last_message, seen))
        for sample in delta.latency_ns:
            self.latency_ns.append(sample)

    def _check_streaming(self, link: _Link, now: float | None) -> None:
        """subscribing -> streaming once every request went out and was answered, or once
        the acks are ack_timeout_s late (data flows meanwhile; the delay is reported)."""
        state = link.machine.state
        if state not in (State.SUBSCRIBING, State.STREAMING) or link.queue is None:
            return
        dialect = link.dialect
        assert dialect is not None
        if len(link.queue):
            return
        pending = dialect.pending_requests
        refused = link.refused
        if pending == 0:
            text = f"subscribed {len(link.sent)} topics" + (
                f", {refused} refused" if refused else ""
            )
            if state is State.SUBSCRIBING:
                self._move(link, State.STREAMING, text, {"topics": len(link.sent)})
            elif text != link.streaming_reason and not link.retired and self._final is None:
                # Topics changed while streaming, all answered: the status says so (it said
                # "subscribed 0 topics" with three live). Same state, a new reason.
                info = {"state": str(state), "previous": str(state), "topics": len(link.sent)}
                self._emit(STATE, text, link, info)
            link.streaming_reason = text
        elif state is State.STREAMING:
            return
        elif now is not None and now >= link.ack_deadline:
            text = (
                f"streaming with {pending} subscribe requests unanswered after "
                f"{self.config.ack_timeout_s} s"
            )
            self._emit(NOTICE, text, link, {"pending": pending})
            self._move(link, State.STREAMING, text, {"topics": len(link.sent)})

    async def _housekeep(self, link: _Link, conn: WebSocketConnection) -> None:
        """Paced requests, pings, keepalives, liveness verdicts: one timer per connection."""
        queue, liveness = link.queue, link.liveness
        assert queue is not None
        assert liveness is not None
        counters = self.counters
        ack_timeout = self.config.ack_timeout_s
        try:
            while True:
                link.wake.clear()
                self._pull_feed(link)
                now = self._clock()
                for message in queue.pop_due(now):
                    await conn.send(message)
                    counters.subscribe_requests += 1
                    link.ack_deadline = self._clock() + ack_timeout
                dead = liveness.dead(now)
                if dead is not None:
                    self._end_connection(link, dead.code, dead.reason)
                    return
                for due in liveness.due(now):
                    if due is Due.PING:
                        if not self._ping(conn, liveness, queue, now):
                            self._end_connection(link, 1011, "ping failed")
                            return
                    elif link.keepalive is not None:
                        await conn.send(link.keepalive)
                        queue.note_other(now)
                        liveness.on_keepalive_sent(now)
                        counters.keepalives_sent += 1
                self._check_streaming(link, now)
                deadline = liveness.next_deadline(now)
                poll = queue.poll_at(now)
                if poll is not None:
                    deadline = min(deadline, poll)
                if link.machine.state is State.SUBSCRIBING and link.ack_deadline > now:
                    deadline = min(deadline, link.ack_deadline)
                if link.feed is not None:  # its counters reach `counters` (metrics) this often
                    deadline = min(deadline, now + FEED_PULL_S)
                delay = None if math.isinf(deadline) else max(0.0, deadline - self._clock())
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await link.wake.wait()
        except (ConnectionClosed, OSError):
            return  # closed under us: the read loop sees it and reports it with its cause
        except WsError as exc:
            # A local error (LocalProtocolError) with the connection still open: without
            # housekeeping no liveness check would end a silent feed, so end the connection
            # here, and the link loop reconnects.
            self._end_connection(link, 1011, f"housekeeping failed: {exc}")
            return

    def _ping(
        self, conn: WebSocketConnection, liveness: Liveness, queue: RequestQueue, now: float
    ) -> bool:
        """Send a ping; False when the connection is already closed."""
        try:
            pong = conn.ping()
        except WsError:
            return False
        liveness.on_ping_sent(now)
        queue.note_other(now)  # Binance counts pings against its 5 messages/s
        self.counters.pings_sent += 1
        pong.add_done_callback(partial(self._on_pong, liveness))
        return True

    def _on_pong(self, liveness: Liveness, pong: asyncio.Future[float]) -> None:
        if pong.cancelled() or pong.exception() is not None:
            return  # the connection ended first; the read loop reports that
        rtt = pong.result()
        liveness.on_pong(self._clock(), rtt)
        self.counters.pongs += 1
        self.counters.last_rtt_s = rtt

    def _end_connection(self, link: _Link, code: int, reason: str) -> None:
        """Close this connection ourselves (dead feed, reconnect request); the read loop
        ends when the closing handshake does, and the link loop reconnects."""
        if link.close_reason is None:
            link.close_reason = reason
        conn = link.conn
        if conn is not None and link.closing is None:
            link.closing = asyncio.get_running_loop().create_task(
                _close_quietly(conn, code, reason)
            )

    def _gap(self, link: _Link, reason: str, lost: int | None = None) -> None:
        self._publish_gap(lost, reason)
        self._emit(GAP, reason, link, {"lost": lost})

    def _publish_gap(self, lost: int | None, reason: str) -> None:
        self.counters.gaps += 1
        try:
            self._sink.publish_gap(self.id, lost, reason)
        except Exception:
            log.exception("session %d: the sink refused a gap", self.id)

    # ---- states and events ------------------------------------------------------------------
    def _move(
        self, link: _Link, target: State, reason: str, details: Mapping[str, Any] | None = None
    ) -> None:
        machine = link.machine
        if machine.state is target or machine.terminal:
            return
        if (self._final is not None or link.retired) and target not in _ENDINGS:
            return  # ending: no more progress reports from this connection
        if not machine.can_move(target):
            log.error("session %d: no transition %s -> %s", self.id, machine.state, target)
            return
        previous = machine.move(target, reason)
        info = {"state": str(target), "previous": str(previous), **(details or {})}
        self._emit(STATE, reason, link, info)

    def _emit(self, kind: str, reason: str, link: _Link | None, details: Mapping[str, Any]) -> None:
        self.reason = reason
        self.since = time.time()
        event = SessionEvent(
            self.id,
            kind,
            reason,
            self.state,
            None if link is None else link.index,
            dict(details),
            self.since,
        )
        log.info(
            "session %d%s %s: %s",
            self.id,
            "" if link is None else f"/{link.index}",
            event.state if kind == STATE else kind,
            reason,
        )
        callback = self.on_event
        if callback is not None:
            try:
                callback(event)
            except Exception:
                log.exception("session %d: the event callback failed", self.id)

    def _fail(self, reason: str, link: _Link) -> None:
        """Give up: this connection failed, the others are closed, the session is failed."""
        if self._final is not None:
            return
        self._final = State.FAILED
        self._stop_requested.set()
        self._move(link, State.FAILED, reason)
        others = [other for other in self._links.values() if other is not link]
        for other in others:
            self._move(other, State.FAILED, f"session failed: {reason}")

        async def close_others() -> None:
            await asyncio.gather(*(self._stop_link(o, f"session failed: {reason}") for o in others))
            self._done.set()

        self._spawn(close_others())


#: Failures of one address that another address of the same name may not share.
_NEXT_ADDRESS = frozenset(
    {FailureKind.REFUSED, FailureKind.RESET, FailureKind.TIMEOUT, FailureKind.UNREACHABLE}
)


def _close_text(reason: str) -> str:
    """A close reason that fits a close frame (123 bytes of UTF-8)."""
    return reason.encode()[:_MAX_CLOSE_REASON].decode("utf-8", "ignore")


async def _close_quietly(conn: WebSocketConnection, code: int, reason: str) -> None:
    with contextlib.suppress(ConnectionClosed, WsError, OSError):
        await conn.close(code, _close_text(reason))


def describe_failure(exc: BaseException) -> tuple[str, float | None, dict[str, Any]]:  # noqa: PLR0911 (one return per failure kind, the table of the retry path)
    """(reason for the event log, Retry-After seconds or None, details) of a failed open.

    details always has "kind" (a FailureKind: what alerts and counters key on), and
    http_status, errno or tls where they apply."""
    kind = failure_kind(exc)
    details: dict[str, Any] = {"kind": str(kind)}
    if isinstance(exc, HandshakeRejected):
        details["http_status"] = exc.status
        if exc.status in (101, 0):  # a 101 that broke section 4.1, or no HTTP at all
            return f"handshake rejected: {exc.reason}", None, details
        body = exc.body[:120].decode("utf-8", "replace").strip()
        headers = {k.lower(): v for k, v in exc.headers}
        retry_after = _retry_after(headers.get(b"retry-after"))
        text = f"handshake rejected with HTTP {exc.status}" + (f": {body}" if body else "")
        return text, retry_after, details
    if isinstance(exc, TlsCertificateError):
        return f"TLS certificate rejected: {exc}", None, {**details, "tls": "certificate"}
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the host: {exc.strerror or exc}", None, details
    errno = getattr(exc, "errno", None)
    if errno:
        details["errno"] = errno
    if isinstance(exc, TimeoutError) and not isinstance(exc, TransportError):
        return f"timed out: {exc}" if str(exc) else "timed out", None, details
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror, None, details
    return str(exc) or type(exc).__name__, None, details


def _retry_after(value: bytes | None) -> float | None:
    """Retry-After as seconds: delay-seconds or an HTTP-date (RFC 9110 section 10.2.3)."""
    if not value:
        return None
    text = value.decode("latin-1").strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
