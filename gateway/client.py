"""The consumer client: a gateway's messages, for a process on the same host or (later) a
remote one, with the same events either way: `RingMessage` and `Gap`.

    with Client.attach("md", gateway="gw1", topics=["binance:*"]) as client:
        for event in client:                         # blocks; ends when the gateway closes
            if isinstance(event, Gap):
                log.warning("lost %d messages", event.lost)
            else:
                handle(event.topic, event.payload)   # memoryview, valid until the next read

    async with Client.attach("md", gateway="gw1", copy=True) as client:
        async for event in client:
            ...

Each ring creation has an epoch (a random 64-bit run identifier in the ring's header): after
a gateway restart the ring is a new one, its sequence numbers start again at 1, and what was
published while the gateway was down is not in it. A consumer that keeps the epoch it last
saw (`client.epoch`) and passes it back (`Client.attach(..., epoch=saved)`) gets a `Restart`
event first when the ring is another; with `follow=True` a client whose gateway went away
waits for the next ring at the same name, reports `Restart` and goes on reading it.

How a consumer waits for messages (`wait=`, see dataplane.ring.WaitPolicy): "futex" (sleep,
no CPU while idle), "spin:<us>" (poll that long, then sleep), "busy" (poll: a whole core, the
lowest latency), or "auto" (the default): as the gateway recommends in the ring's header,
which follows its `latency_profile` (economical: futex, low-latency: busy), futex when it
recommends nothing. A policy given here wins over the gateway's. `client.wait_policy` is the
policy in use and `client.wait_origin` where it came from ("given", "gateway", "default").
The polling runs in C with the GIL released; under asyncio it runs on the loop's own thread
(in slices of at most BUSY_SLICE, yielding to the other tasks between them), because handing
the wait to another thread and back would cost the very wake-up the policy avoids.

Where messages come from is a `MessageSource`. `RingSource` reads the gateway's shared-memory
ring (local, zero-copy, no gateway involvement per message). The downstream WebSocket source
(/v1/stream, for consumers on other hosts) is the second implementation to come: it plugs in
at `Client.connect` ("ws://" / "wss://" URLs) and needs nothing else changed here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
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

__all__ = [
    "Client",
    "ClientEvent",
    "Gap",
    "MessageSource",
    "MessagesLostError",
    "Restart",
    "RingMessage",
    "RingSource",
    "WaitOrigin",
    "WaitPolicy",
]


class Restart(NamedTuple):
    """The stream is another run of the gateway than the one this consumer saw last (its
    epoch differs): sequence numbers began again, and what the gateway would have published
    in between is missing. previous_epoch: the epoch the consumer knew (None: none)."""

    previous_epoch: int | None
    epoch: int


#: What a Client yields: a message, a gap (messages lost) or a restart (a new run).
ClientEvent = RingMessage | Gap | Restart

OnGap = Literal["event", "raise"]
Start = Literal["latest", "oldest"]
#: How often a following client looks for the gateway's next ring while it is not there.
FOLLOW_POLL = 0.05
#: Longest spin of an asyncio consumer on its loop before the other tasks get a turn.
BUSY_SLICE = 0.001


class MessagesLostError(RingError):
    """Raised instead of yielding a Gap when the client was opened with on_gap="raise".
    The client has already resynchronised: catch it and keep reading if that is acceptable."""

    def __init__(self, gap: Gap) -> None:
        super().__init__(
            f"lost {gap.lost} messages (seq {gap.first_seq}..{gap.last_seq}): "
            "the consumer fell a whole ring behind"
        )
        self.gap = gap


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
    def ended(self) -> bool:
        """Nothing more will come (the gateway closed the stream, or is gone)."""
        ...

    def close(self) -> None: ...


class RingSource:
    """Messages from a gateway's shared-memory ring (this host only)."""

    def __init__(self, reader: RingReader) -> None:
        self.reader = reader
        self._ended = False

    def read(self, max: int | None = None, timeout: float | None = 0.0) -> list[ClientEvent]:
        # A list of RingMessage | Gap is a list of ClientEvent (lists are invariant).
        return cast("list[ClientEvent]", self.reader.read_batch(max, timeout))

    @property
    def epoch(self) -> int:
        return self.reader.epoch

    def wait(self, timeout: float | None, spin: float | None = None) -> bool:
        return self.reader.wait(timeout, spin)

    @property
    def wait_policy(self) -> WaitPolicy:
        return self.reader.wait_policy

    @property
    def wait_origin(self) -> WaitOrigin:
        return self.reader.wait_origin

    def interrupt(self) -> None:
        self.reader.interrupt()

    @property
    def ended(self) -> bool:
        if not self._ended:
            # Closed and drained, or the writer died without closing (its flock is gone)
            # and there is nothing left to read.
            reader = self.reader
            self._ended = reader.closed or (not reader.writer_alive() and reader.lag == 0)
        return self._ended

    def close(self) -> None:
        self.reader.close()


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
    ) -> None:
        """epoch: the one this consumer saw last (a Restart comes first when the source's
        is another). reopen: how to open the source again once it ended (follow)."""
        if on_gap not in ("event", "raise"):
            raise ValueError(f"on_gap must be 'event' or 'raise', not {on_gap!r}")
        self.source = source
        self.on_gap = on_gap
        self._reopen = reopen
        self._pending: list[ClientEvent] = []
        if epoch is not None and epoch != source.epoch:
            self._pending.append(Restart(epoch, source.epoch))
        self._executor: ThreadPoolExecutor | None = None
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
    ) -> Client:
        """Attach to a ring on this host: by gateway and ring name (wsgw-<gateway>-<ring> in
        /dev/shm), or by ring name or path alone. topics: names or shell patterns, None for
        all. copy: payloads as bytes rather than views valid until the next read. wait:
        "auto" (default: the gateway's recommendation), "futex", "spin[:us]" or "busy", or a
        WaitPolicy (module doc). epoch: the
        one the consumer saw last (a Restart first if the ring is another run). follow:
        when the gateway goes, wait for its next ring and read it from its oldest message,
        after a Restart, instead of ending."""
        name = ring_name(gateway, ring) if gateway else ring
        reader = RingReader.attach(
            name, topics, copy=copy, start=start, max_batch=max_batch, wait=wait
        )

        def reopen() -> MessageSource:
            return RingSource(
                RingReader.attach(
                    name, topics, copy=copy, start="oldest", max_batch=max_batch, wait=wait
                )
            )

        return cls(
            RingSource(reader), on_gap=on_gap, epoch=epoch, reopen=reopen if follow else None
        )

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        topics: Iterable[str] | None = None,
        copy: bool = False,
        start: Start = "latest",
        on_gap: OnGap = "event",
        wait: WaitPolicy | str | None = WAIT_AUTO,
        epoch: int | None = None,
        follow: bool = False,
    ) -> Client:
        """Open a stream by URL: shm://<gateway>/<ring> (this host's shared memory), or a
        ws(s)://host:port/v1/stream downstream WebSocket (remote consumers)."""
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
            )
        if parts.scheme in ("ws", "wss"):
            # The downstream WebSocket source plugs in here: a MessageSource that reads
            # /v1/stream frames into RingMessage/Gap events.
            raise NotImplementedError("the downstream WebSocket client is not implemented yet")
        raise ValueError(f"unsupported stream URL {url!r}: use shm://gateway/ring or ws(s)://")

    # ---- sync -----------------------------------------------------------------------------
    def read(self, max: int | None = None, timeout: float | None = 0.0) -> list[ClientEvent]:
        """Up to max events; timeout as in RingReader.read_batch. With on_gap="raise", the
        messages that came with the gap are returned by the next read. Following, a source
        that ended is replaced by the next run's as soon as there is one: [Restart]."""
        if self._pending:
            return self._take_pending()
        events = self._deliver(self.source.read(max, timeout))
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
        except RingNotFoundError:
            return []
        if source.epoch == self.source.epoch:
            source.close()
            return []
        previous, self.source = self.source, source
        previous.close()
        return [Restart(previous.epoch, source.epoch)]

    @property
    def following(self) -> bool:
        """Whether the client goes on with the gateway's next run when this one ends."""
        return self._reopen is not None

    def _deliver(self, events: list[ClientEvent]) -> list[ClientEvent]:
        if self.on_gap == "raise" and events and type(events[0]) is Gap:
            gap = events[0]
            self._pending = events[1:]
            raise MessagesLostError(gap)
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
    async def aread(
        self, max: int | None = None, timeout: float | None = None
    ) -> list[ClientEvent]:
        """Up to max events without blocking the event loop: the futex wait runs in this
        client's own thread (it releases the GIL) and is interrupted on cancellation. With
        the spin policy the loop first polls for spin_us itself; with busy it polls in
        slices of BUSY_SLICE, letting the other tasks run between them."""
        if self._pending:
            return self._take_pending()
        deadline = None if timeout is None else time.monotonic() + timeout
        loop = asyncio.get_running_loop()
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
            if policy.mode != "futex":
                spin = min(left, BUSY_SLICE if policy.mode == "busy" else policy.spin_us / 1e6)
                if self.source.wait(spin, spin):
                    continue
                if policy.mode == "busy":
                    await asyncio.sleep(0)  # the other tasks' turn, then poll again
                    continue
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="wsgw-client-wait")
            future = loop.run_in_executor(self._executor, self.source.wait, left, 0.0)
            try:
                await future
            except asyncio.CancelledError:
                self.source.interrupt()
                raise

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
