"""The consumer client: a gateway's messages over any of its three transports, with the
same events and the same API whichever it is: `RingMessage`, `Gap` and `Restart`.

    with Client.connect("shm://gw1/messages", topics=["3:*"]) as client:   # this host
        for event in client:                         # blocks; ends when the gateway closes
            if isinstance(event, Gap):
                log.warning("lost %d messages", event.lost)
            elif isinstance(event, Restart):
                log.warning("the gateway restarted: what it missed meanwhile is lost")
            else:
                handle(event.topic, event.payload)   # memoryview, valid until the next read

    async with Client.connect("ws://gw1:8080/v1/stream?session=3", token=secret) as client:
        async for event in client:                   # another host: the downstream WebSocket
            ...

    client = Client.connect("nats://bus:4222", session=3, jetstream="WSGW", start_seq=n)

Transports (`MessageSource`s): `shm://<gateway>/<ring>` reads the gateway's shared-memory ring
(`gateway.client.ring`: local, zero-copy, no gateway involvement per message, the lowest
latency); `ws://` / `wss://` its /v1/stream (`gateway.client.stream`); `nats://` its NATS
sink, core NATS or JetStream (`gateway.client.nats`). Topics are ring names
(`<session>:<topic>`, shell patterns allowed) for the ring and upstream topics of `session` for
the other two; every transport reports message topics as ring names. `read` gives batches
(a list of events per call), so a consumer pays per batch, not per message.

Each run of a gateway has an epoch (a random 64-bit identifier): after a restart, sequence
numbers start again at 1, and what was published while the gateway was down is not there.
A consumer that keeps the epoch it last saw (`client.epoch`) and passes it back
(`epoch=saved`) gets a `Restart` event first when the run is another; with `follow=True` a
client whose gateway went away (its ring closed, its stream dropped) waits for the next run,
reports `Restart` (or, back on the same run, a `Gap` for what went by) and goes on reading.
Only JetStream can resume without loss: `client.position` is the stream sequence of the last
message delivered; pass position + 1 as `start_seq`.

How a ring consumer waits for messages (`wait=`, see dataplane.ring.WaitPolicy): "futex"
(sleep, no CPU while idle), "spin:<us>" (poll that long, then sleep), "busy" (poll: a whole
core, the lowest latency), or "auto" (the default): as the gateway recommends in the ring's
header, which follows its `latency_profile` (economical: futex, low-latency: busy), futex
when it recommends nothing. A policy given here wins over the gateway's. `client.wait_policy`
is the policy in use and `client.wait_origin` where it came from ("given", "gateway",
"default"). The polling runs in C with the GIL released; under asyncio it runs on the loop's
own thread (in slices of at most BUSY_SLICE, yielding to the other tasks between them),
because handing the wait to another thread and back would cost the very wake-up the policy
avoids; with futex the client's thread waits and reads, and hands the loop the batch. The
network transports wait on their sockets, in poll (as futex) or polling first without
sleeping (spin, adaptive as spin, busy), as `wait=` says, else as the gateway recommends in
the /v1/stream's `subscribed` frame (`reader_wait`, what the ring's header says); core NATS
carries no recommendation (futex unless given), nats-py's path (JetStream, TLS) always
sleeps. The socket polling runs in Python (poll(0), which drops the GIL for the call).
With `slice_ns` (READER_SLICE_NS, 100 us) the thread that waits on a ring (and an asyncio
loop's) asks the scheduler for that slice until the client closes, so its wake-up preempts a
busy neighbour instead of queueing.

Normalized subscriptions (format "normalized") come as topics `<session>:norm:<topic>`
(JSON) or `<session>:normbin:<topic>` (MessagePack), one gateway.normalize event each.
`normalized=True` makes the client yield them as `NormalizedMessage`s, the payload decoded
into its typed event (Trade, BookSnapshot, BookDelta, BookReset, ...); other messages come
as they are. `decode_normalized(message)` does the same for one message.

The package imports nothing of the server (no FastAPI, SQLAlchemy or the hub's runtime).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from concurrent.futures import CancelledError as FutureCancelledError
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Literal, NamedTuple, Protocol, cast
from urllib.parse import urlsplit

from dataplane.ring import (
    WAIT_AUTO,
    Gap,
    RingError,
    RingMessage,
    RingNotFoundError,
    RingReader,
    WaitOrigin,
    WaitPolicy,
    ring_name,
)
from gateway.client.ring import ReaderCpu, RingSource, pin_reader
from gateway.normalize.schema import Event, decode, encoding_of


class Restart(NamedTuple):
    """The stream is another run of the gateway than the one this consumer saw last (its
    epoch differs): sequence numbers began again, and what the gateway would have published
    in between is missing. previous_epoch: the epoch the consumer knew (None: none)."""

    previous_epoch: int | None
    epoch: int


class NormalizedMessage(NamedTuple):
    """A message of a normalized topic with its payload decoded (gateway.normalize.schema):
    `event` is a Trade, BookSnapshot, BookDelta, TopOfBook, Ticker, Funding or BookReset.
    The first six fields are RingMessage's (topic is the ring name, `3:norm:btcusdt@trade`);
    upstream_topic is the topic the event was made from."""

    seq: int
    session_id: int
    topic: str
    ts_ns: int
    payload: memoryview | bytes
    topic_id: int
    event: Event
    upstream_topic: str
    encoding: str


def decode_normalized(message: RingMessage) -> NormalizedMessage | None:
    """The typed event of a normalized message; None for a message of an upstream topic.
    msgspec.DecodeError / ValidationError when the payload is not a normalized event."""
    _, _, topic = message.topic.partition(":")
    found = encoding_of(topic)
    if found is None:
        return None
    encoding, upstream = found
    event = decode(message.payload, encoding)
    return NormalizedMessage(*message, event, upstream, encoding)


#: What a Client yields: a message, a gap (messages lost) or a restart (a new run); with
#: normalized=True, messages of normalized topics as NormalizedMessage.
ClientEvent = RingMessage | NormalizedMessage | Gap | Restart

OnGap = Literal["event", "raise"]
Start = Literal["latest", "oldest"]
#: How often a following client looks for the gateway's next ring while it is not there.
FOLLOW_POLL = 0.05
#: Longest spin of an asyncio consumer on its loop before the other tasks get a turn.
BUSY_SLICE = 0.001
#: The network sources' policy: they sleep on their socket until a frame comes.
_SOCKET_WAIT = WaitPolicy()


def _decoded(event: ClientEvent) -> ClientEvent:
    if type(event) is RingMessage:
        return decode_normalized(event) or event
    return event


def _overwritten(reader: RingReader) -> list[Gap]:
    """A new run's ring read from its oldest message: one that wrote more than its ring
    holds before the reader attached overwrote its first ones (sequences begin at 1), a Gap
    of them ([] when nothing was)."""
    oldest = reader.next_seq
    return [Gap(oldest - 1, 1)] if oldest > 1 else []


class MessagesLostError(RingError):
    """Raised instead of yielding a Gap when the client was opened with on_gap="raise".
    The client has already resynchronised: catch it and keep reading if that is acceptable."""

    def __init__(self, gap: Gap) -> None:
        super().__init__(
            f"lost {gap.lost} messages (seq {gap.first_seq}..{gap.last_seq}): "
            "the consumer fell a whole ring behind"
        )
        self.gap = gap


class SourceUnavailableError(ConnectionError):
    """The transport is not there (yet): no ring at the name, nothing answers at the URL.
    A following client keeps trying; opening one raises it."""


class StreamClosedError(ConnectionError):
    """The gateway ended a network stream for good (a bad token, a deleted session, ...):
    connecting again would not help. code and reason are the close frame's."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"stream closed with {code}: {reason or 'no reason given'}")
        self.code = code
        self.reason = reason


class MessageSource(Protocol):
    """What a Client reads from. read never blocks longer than timeout (0: not at all,
    None: until there is something or the source ended); wait may be called from another
    thread than the one that created the source, and interrupt from any thread."""

    def read(self, max: int | None = None, timeout: float | None = 0.0) -> list[ClientEvent]: ...

    @property
    def epoch(self) -> int:
        """The run identifier of what this source reads (one per gateway start)."""
        ...

    def wait(self, timeout: float | None, spin: float | None = None) -> bool:
        """spin: seconds to poll before sleeping (None: the source's own policy)."""
        ...

    @property
    def wait_policy(self) -> WaitPolicy: ...

    @property
    def wait_origin(self) -> WaitOrigin:
        """Whether wait_policy was given, the gateway's recommendation, or the default."""
        ...

    def interrupt(self) -> None: ...

    @property
    def continues(self) -> bool:
        """Whether this source, opened by a follow after the last one ended, goes on with
        the same run when its epoch is the same (a network stream reconnected), rather than
        being that run's ring, still there after its writer went (not new)."""
        ...

    @property
    def ended(self) -> bool:
        """Nothing more will come (the gateway closed the stream, or is gone)."""
        ...

    def close(self) -> None: ...


class NetworkSource:
    """What the network sources (/v1/stream, NATS) share: they wait on their socket, asleep
    in poll (the default, as "futex") or polling it first, spin_us for "spin" and "adaptive",
    until data for "busy" (`wait=`, or the gateway's recommendation where the stream carries
    one); and one reconnected goes on with the same run."""

    _wait_policy: WaitPolicy = _SOCKET_WAIT
    _wait_origin: WaitOrigin = "default"
    _policy_spin_s = 0.0  # how long a wait polls before it sleeps, by the policy

    @property
    def wait_policy(self) -> WaitPolicy:
        return self._wait_policy

    @property
    def wait_origin(self) -> WaitOrigin:
        return self._wait_origin

    def _choose_wait(self, given: WaitPolicy | None, recommended: object = None) -> None:
        """The policy given (parse_wait), else the gateway's (a policy's text), else the
        default; an unknown recommendation (a later gateway's) leaves the default."""
        policy, origin = given, "given"
        if policy is None and isinstance(recommended, str) and recommended != WAIT_AUTO:
            try:
                policy, origin = WaitPolicy.parse(recommended), "gateway"
            except ValueError:
                policy = None
        if policy is None:
            policy, origin = _SOCKET_WAIT, "default"
        self._wait_policy, self._wait_origin = policy, cast(WaitOrigin, origin)
        self._policy_spin_s = (
            math.inf
            if policy.mode == "busy"
            else 0.0
            if policy.mode == "futex"
            else policy.spin_us / 1e6
        )

    def _spin_s(self, spin: float | None) -> float:
        """How long a wait polls its socket before it sleeps: `spin` when the caller says
        (an asyncio read's slice), else the policy's."""
        return self._policy_spin_s if spin is None else spin

    @property
    def continues(self) -> bool:
        return True


def parse_wait(wait: WaitPolicy | str | None) -> WaitPolicy | None:
    """A network source's `wait=`: None for "auto" (the gateway's word, else the default);
    ValueError for what is not a policy, before anything connects."""
    return None if wait is None or wait == WAIT_AUTO else WaitPolicy.parse(wait)


class Client:
    """A consumer of one gateway stream: sync and asyncio iteration over messages and gaps."""

    #: Longest single blocking wait: how often an idle consumer checks the gateway is alive.
    LIVENESS_INTERVAL = 1.0

    def __init__(
        self,
        source: MessageSource,
        *,
        on_gap: OnGap = "event",
        epoch: int | None = None,
        reopen: Callable[[], MessageSource] | None = None,
        normalized: bool = False,
    ) -> None:
        """epoch: the one this consumer saw last (a Restart comes first when the source's
        is another). reopen: how to open the source again once it ended (follow).
        normalized: yield messages of normalized topics decoded (NormalizedMessage)."""
        self.normalized = normalized
        if on_gap not in ("event", "raise"):
            raise ValueError(f"on_gap must be 'event' or 'raise', not {on_gap!r}")
        self.source = source
        self.on_gap = on_gap
        self._reopen = reopen
        self._pending: list[ClientEvent] = []
        if epoch is not None and source.epoch and epoch != source.epoch:
            self._pending.append(Restart(epoch, source.epoch))
        self._executor: ThreadPoolExecutor | None = None
        #: aread's read in the waiting thread when aread was cancelled: what it read (the
        #: reader's position moved past it) comes before anything read later.
        self._inflight: Future[list[ClientEvent]] | None = None
        self._closed = False

    @property
    def epoch(self) -> int:
        """The run identifier of the gateway this client reads now: keep it, and pass it to
        the next attach to learn whether the gateway restarted meanwhile."""
        return self.source.epoch

    @property
    def wait_policy(self) -> WaitPolicy:
        """How this client waits for messages (after a restart followed: the new ring's)."""
        return self.source.wait_policy

    @property
    def wait_origin(self) -> WaitOrigin:
        """Where wait_policy came from: "given" (the caller's), "gateway" (its latency
        profile's recommendation, wait "auto") or "default" (futex: auto, and the gateway
        recommends nothing)."""
        return self.source.wait_origin

    def describe_wait(self) -> str:
        """wait_policy and its origin, for a startup line: "busy (the gateway's)"."""
        origin = {"given": "given", "gateway": "the gateway's", "default": "default"}
        return f"{self.wait_policy} ({origin[self.wait_origin]})"

    # ---- opening ------------------------------------------------------------------------
    @classmethod
    def attach(
        cls,
        ring: str,
        *,
        gateway: str | None = None,
        topics: Iterable[str] | None = None,
        copy: bool = False,
        start: Start = "latest",
        on_gap: OnGap = "event",
        max_batch: int = 1024,
        wait: WaitPolicy | str | None = WAIT_AUTO,
        epoch: int | None = None,
        follow: bool = False,
        normalized: bool = False,
        name: str | None = None,
        cpu: ReaderCpu = None,
        slice_ns: int | None = None,
    ) -> Client:
        """Attach to a ring on this host: by gateway and ring name (wsgw-<gateway>-<ring> in
        /dev/shm), or by ring name or path alone. topics: names or shell patterns, None for
        all. copy: payloads as bytes rather than views valid until the next read. wait:
        "auto" (default: the gateway's recommendation), "futex", "spin[:us]" or "busy", or a
        WaitPolicy (module doc). epoch: the one the consumer saw last (a Restart first if
        the ring is another run). follow: when the gateway goes, wait for its next ring and
        read it from its oldest message, after a Restart, instead of ending. normalized:
        decode normalized messages (module doc). name: how the gateway lists this reader in
        /v1/consumers and the dashboard (default: the process's name). cpu: pin the calling
        thread to this CPU, or "engine": to the CPU of the gateway's engine (gateway.client.
        ring.pin_reader; a wake-up on the writer's CPU costs less than one across CPUs).
        slice_ns: the scheduler slice of the thread that waits, from its first wait until the
        client closes (RingReader.slice_ns: its wake-up preempts a busy neighbour instead of
        queueing; gateway.client.ring.READER_SLICE_NS; None, the default: its own)."""
        path = ring_name(gateway, ring) if gateway else ring
        reader = RingReader.attach(
            path,
            topics,
            copy=copy,
            start=start,
            max_batch=max_batch,
            wait=wait,
            reader_name=name,
            slice_ns=slice_ns,
        )
        pin_reader(reader, cpu)

        def reopen() -> MessageSource:
            return RingSource(
                RingReader.attach(
                    path,
                    topics,
                    copy=copy,
                    start="oldest",
                    max_batch=max_batch,
                    wait=wait,
                    reader_name=name,
                    slice_ns=slice_ns,
                )
            )

        client = cls(
            RingSource(reader),
            on_gap=on_gap,
            epoch=epoch,
            reopen=reopen if follow else None,
            normalized=normalized,
        )
        if start == "oldest" and client._pending:  # another run than the consumer's
            client._pending.extend(_overwritten(reader))
        return client

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        topics: Iterable[str] | None = None,
        session: int | None = None,
        token: str | None = None,
        copy: bool = False,
        start: Start = "latest",
        on_gap: OnGap = "event",
        wait: WaitPolicy | str | None = WAIT_AUTO,
        epoch: int | None = None,
        follow: bool = False,
        prefix: str = "wsgw",
        jetstream: str | None = None,
        start_seq: int | None = None,
        durable: str | None = None,
        normalized: bool = False,
        slice_ns: int | None = None,
    ) -> Client:
        """Open a stream by URL (module doc): shm://<gateway>/<ring> (this host; copy, start
        and slice_ns apply), ws(s)://host:port[/v1/stream][?subscription=N | ?session=N]
        (token: a consume token, sent as a bearer header), or nats://host:port (prefix: the sink's
        subject prefix; jetstream and start_seq: resume from the stream; durable: a durable
        consumer that acks and resumes by itself, gateway.client.nats). session: the
        session whose topics `topics` names (ws and nats). normalized: decode normalized
        messages (module doc). SourceUnavailableError when nothing is there to read from."""
        parts = urlsplit(url)
        if parts.scheme == "shm":
            ring = parts.path.strip("/") or "messages"
            return cls.attach(
                ring,
                gateway=parts.netloc,
                topics=topics,
                copy=copy,
                start=start,
                on_gap=on_gap,
                wait=wait,
                epoch=epoch,
                follow=follow,
                normalized=normalized,
                slice_ns=slice_ns,
            )
        if parts.scheme in ("ws", "wss"):
            from gateway.client.stream import StreamSource, stream_url

            target = stream_url(url, topics, session)
            source = StreamSource(target, token=token, wait=wait)

            def reconnect() -> MessageSource:
                previous = client.source
                assert isinstance(previous, StreamSource)
                return StreamSource(target, token=token, previous=previous, wait=wait)

            client = cls(
                source,
                on_gap=on_gap,
                epoch=epoch,
                reopen=reconnect if follow else None,
                normalized=normalized,
            )
            return client
        if parts.scheme == "nats":
            from gateway.client.nats import NatsSource

            def subscribe(start_at: int | None, known: int | None) -> NatsSource:
                return NatsSource(
                    url,
                    prefix=prefix,
                    session=session,
                    topics=topics,
                    jetstream=jetstream,
                    start_seq=start_at,
                    epoch=known,
                    token=token,
                    durable=durable,
                    wait=wait,
                )

            nats_source = subscribe(start_seq, epoch)

            def resubscribe() -> MessageSource:
                previous = client.source
                assert isinstance(previous, NatsSource)
                after = None if durable is not None else previous.position  # it knows
                return subscribe(None if after is None else after + 1, previous.epoch)

            client = cls(
                nats_source,
                on_gap=on_gap,
                reopen=resubscribe if follow else None,
                normalized=normalized,
            )
            return client
        raise ValueError(
            f"unsupported stream URL {url!r}: use shm://gateway/ring, ws(s)://host:port or "
            "nats://host:port"
        )

    @property
    def position(self) -> int | None:
        """Where a new client would resume without loss (JetStream: the stream sequence of
        the last message delivered); None where the transport cannot resume."""
        position = getattr(self.source, "position", None)
        return position if isinstance(position, int) else None

    # ---- sync -----------------------------------------------------------------------------
    def read(self, max: int | None = None, timeout: float | None = 0.0) -> list[ClientEvent]:
        """Up to max events; timeout as in RingReader.read_batch. With on_gap="raise", the
        messages that came with the gap are returned by the next read. Following, a source
        that ended is replaced by the next run's as soon as there is one: [Restart]."""
        if self._pending:
            return self._deliver(self._take_pending())
        if self._inflight is not None:
            cancelled = self._collect_inflight(self._inflight.result)
            if cancelled:
                return cancelled
        events = self.source.read(max, timeout)
        if self.normalized or self.on_gap == "raise":
            events = self._deliver(events)
        if not events and self._reopen is not None and self.source.ended:
            switched = self._follow()
            if not switched and timeout != 0:  # not there yet: wait a little, not spin
                time.sleep(FOLLOW_POLL if timeout is None else min(timeout, FOLLOW_POLL))
            return switched
        return events

    def _follow(self) -> list[ClientEvent]:
        """The next run's source, if its ring is there yet (else [] and the old one stays):
        the file at the name is still the old run's until a new gateway replaces it."""
        assert self._reopen is not None
        try:
            source = self._reopen()
        except (RingNotFoundError, SourceUnavailableError):
            return []
        if source.epoch == self.source.epoch and not source.continues:
            source.close()
            return []
        previous, self.source = self.source, source
        previous.close()
        if source.epoch == previous.epoch:
            return []  # the same run again: what it missed comes as the new source's Gap
        if isinstance(source, RingSource):  # the next read's (on_gap="raise": it raises)
            self._pending.extend(_overwritten(source.reader))
        return [Restart(previous.epoch, source.epoch)]

    @property
    def following(self) -> bool:
        """Whether the client goes on with the gateway's next run when this one ends."""
        return self._reopen is not None

    def _deliver(self, events: list[ClientEvent]) -> list[ClientEvent]:
        """events as the consumer asked: normalized decoded; with on_gap="raise" a Gap is
        raised, what came before it returned first (a Restart), what came after it kept
        for the next read."""
        if self.normalized:
            events = [_decoded(e) for e in events]
        if self.on_gap == "raise" and events:
            if type(events[0]) is Gap:
                gap = events[0]
                self._pending = events[1:] + self._pending
                raise MessagesLostError(gap)
            at = next((i for i, e in enumerate(events) if type(e) is Gap), 0)
            if at:
                self._pending = events[at:] + self._pending
                return events[:at]
        return events

    def _take_pending(self) -> list[ClientEvent]:
        pending, self._pending = self._pending, []
        return pending

    def __iter__(self) -> Iterator[ClientEvent]:
        """Every event, blocking; ends when the stream ends or the client is closed."""
        return self.messages()

    def messages(self, idle_timeout: float | None = None) -> Iterator[ClientEvent]:
        """Every event, blocking; also ends after idle_timeout seconds without any (and,
        unless following, when the gateway is gone)."""
        last = time.monotonic()
        while not self._closed:
            wait = self.LIVENESS_INTERVAL
            if idle_timeout is not None:
                wait = max(0.0, min(wait, last + idle_timeout - time.monotonic()))
            try:
                events = self.read(timeout=wait)
            except RingError:
                if self._closed:
                    return
                raise
            if events:
                last = time.monotonic()
                yield from events
                continue
            if self._closed or (self.source.ended and not self.following):
                return
            if idle_timeout is not None and time.monotonic() - last >= idle_timeout:
                return

    # ---- asyncio --------------------------------------------------------------------------
    #: aread waits and reads in one call in its waiting thread when the source is a ring
    #: (RingReader.read_batch: wsgw_ring_read_wait), so the loop gets the batch, not a
    #: wake-up to read it itself. False: wait there, read on the loop (before session 13).
    fused_aread = True

    def _collect_inflight(self, result: Callable[[], list[ClientEvent]]) -> list[ClientEvent]:
        """The events of a cancelled aread's read (result: its future's, once done)."""
        self._inflight = None
        try:
            return self._deliver(result())
        except FutureCancelledError:
            return []  # it never started: nothing was read

    async def _await_inflight(self) -> list[ClientEvent]:
        """The events of a cancelled aread's read ([]: none), without blocking the loop."""
        inflight = self._inflight
        if inflight is None:
            return []
        await asyncio.wait([asyncio.wrap_future(inflight)])  # interrupted: returns soon
        return self._collect_inflight(inflight.result)

    async def aread(
        self, max: int | None = None, timeout: float | None = None
    ) -> list[ClientEvent]:
        """Up to max events without blocking the event loop: the futex wait runs in this
        client's own thread (it releases the GIL), which reads the batch too (a ring,
        fused_aread), and is interrupted on cancellation (a batch it read meanwhile is the
        next aread's or read's). With
        the spin policy the loop first polls for spin_us itself, with adaptive as long as
        the recent wait says (a slow feed: not at all); with busy it polls in slices of
        BUSY_SLICE, letting the other tasks run between them."""
        earlier = (
            self._deliver(self._take_pending()) if self._pending else await self._await_inflight()
        )
        if earlier:
            return earlier
        deadline = None if timeout is None else time.monotonic() + timeout
        policy = self.source.wait_policy
        while True:
            events = self.read(max, 0.0)
            if events or self._closed or timeout == 0:
                return events
            if self.source.ended:
                if not self.following:
                    return events
                await asyncio.sleep(FOLLOW_POLL)
                if deadline is not None and time.monotonic() >= deadline:
                    return []
                continue
            left = self.LIVENESS_INTERVAL
            if deadline is not None:
                left = min(left, deadline - time.monotonic())
                if left <= 0:
                    return []
            events = await self._await_source(max, left, policy)
            if events:
                return events

    async def _await_source(
        self, max: int | None, left: float, policy: WaitPolicy
    ) -> list[ClientEvent]:
        """Wait up to `left` s for the source as `policy` says (aread's docstring); what
        the waiting thread read meanwhile (fused_aread), else [] (the caller reads)."""
        if policy.mode == "adaptive" and isinstance(self.source, RingSource):
            # The loop spins as long as the recent wait says (a slow feed: not at all, so
            # the loop idles), then the waiting thread sleeps.
            if self.source.reader.spin_adaptive():
                return []
        elif policy.mode != "futex":
            spin = min(left, BUSY_SLICE if policy.mode == "busy" else policy.spin_us / 1e6)
            if self.source.wait(spin, spin):
                return []
            if policy.mode == "busy":
                await asyncio.sleep(0)  # the other tasks' turn, then poll again
                return []
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="wsgw-client-wait")
        source = self.source
        if self.fused_aread and isinstance(source, RingSource):
            # The loop's thread is woken per batch too (by the waiting thread): its slice.
            source.reader.hold_slice()
            inflight = self._executor.submit(source.read, max, left)
            try:
                return self._deliver(await asyncio.wrap_future(inflight))
            except asyncio.CancelledError:
                source.interrupt()
                self._inflight = inflight  # what it reads still comes first
                raise
        future = asyncio.get_running_loop().run_in_executor(
            self._executor, self.source.wait, left, 0.0
        )
        try:
            await future
        except asyncio.CancelledError:
            self.source.interrupt()
            raise
        return []

    def __aiter__(self) -> AsyncIterator[ClientEvent]:
        return self._aiter()

    async def _aiter(self) -> AsyncIterator[ClientEvent]:
        while not self._closed:
            events = await self.aread()
            if events:
                for event in events:
                    yield event
            elif self._closed or (self.source.ended and not self.following):
                return

    # ---- lifetime --------------------------------------------------------------------------
    def close(self) -> None:
        """Detach (a wait blocked in another thread returns first)."""
        if self._closed:
            return
        self._closed = True
        self.source.close()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    async def aclose(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
