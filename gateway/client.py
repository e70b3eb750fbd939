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

Latency-critical consumers choose how to wait (`wait=`, see dataplane.ring.WaitPolicy):
"futex" (the default: sleep, no CPU while idle), "spin:<us>" (poll that long, then sleep),
"busy" (poll: a whole core, the lowest latency). The polling runs in C with the GIL released;
under asyncio it runs on the loop's own thread (in slices of at most BUSY_SLICE, yielding to
the other tasks between them), because handing the wait to another thread and back would
cost the very wake-up the policy avoids.

Where messages come from is a `MessageSource`. `RingSource` reads the gateway's shared-memory
ring (local, zero-copy, no gateway involvement per message). The downstream WebSocket source
(/v1/stream, for consumers on other hosts) is the second implementation to come: it plugs in
at `Client.connect` ("ws://" / "wss://" URLs) and needs nothing else changed here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Literal, Protocol
from urllib.parse import urlsplit

from dataplane.ring import (
    Gap,
    RingError,
    RingEvent,
    RingMessage,
    RingReader,
    WaitPolicy,
    ring_name,
)

__all__ = [
    "Client",
    "Gap",
    "MessageSource",
    "MessagesLostError",
    "RingMessage",
    "RingSource",
    "WaitPolicy",
]

OnGap = Literal["event", "raise"]
Start = Literal["latest", "oldest"]
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

    def read(self, max: int | None = None, timeout: float | None = 0.0) -> list[RingEvent]: ...

    def wait(self, timeout: float | None, spin: float | None = None) -> bool:
        """spin: seconds to poll before sleeping (None: the source's own policy)."""
        ...

    @property
    def wait_policy(self) -> WaitPolicy: ...

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

    def read(self, max: int | None = None, timeout: float | None = 0.0) -> list[RingEvent]:
        return self.reader.read_batch(max, timeout)

    def wait(self, timeout: float | None, spin: float | None = None) -> bool:
        return self.reader.wait(timeout, spin)

    @property
    def wait_policy(self) -> WaitPolicy:
        return self.reader.wait_policy

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

    def __init__(self, source: MessageSource, *, on_gap: OnGap = "event") -> None:
        if on_gap not in ("event", "raise"):
            raise ValueError(f"on_gap must be 'event' or 'raise', not {on_gap!r}")
        self.source = source
        self.on_gap = on_gap
        self._pending: list[RingEvent] = []
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False

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
        wait: WaitPolicy | str | None = None,
    ) -> Client:
        """Attach to a ring on this host: by gateway and ring name (wsgw-<gateway>-<ring> in
        /dev/shm), or by ring name or path alone. topics: names or shell patterns, None for
        all. copy: payloads as bytes rather than views valid until the next read. wait:
        "futex" (default), "spin[:us]" or "busy", or a WaitPolicy (module doc)."""
        name = ring_name(gateway, ring) if gateway else ring
        reader = RingReader.attach(
            name, topics, copy=copy, start=start, max_batch=max_batch, wait=wait
        )
        return cls(RingSource(reader), on_gap=on_gap)

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        topics: Iterable[str] | None = None,
        copy: bool = False,
        start: Start = "latest",
        on_gap: OnGap = "event",
        wait: WaitPolicy | str | None = None,
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
            )
        if parts.scheme in ("ws", "wss"):
            # The downstream WebSocket source plugs in here: a MessageSource that reads
            # /v1/stream frames into RingMessage/Gap events.
            raise NotImplementedError("the downstream WebSocket client is not implemented yet")
        raise ValueError(f"unsupported stream URL {url!r}: use shm://gateway/ring or ws(s)://")

    # ---- sync -----------------------------------------------------------------------------
    def read(self, max: int | None = None, timeout: float | None = 0.0) -> list[RingEvent]:
        """Up to max events; timeout as in RingReader.read_batch. With on_gap="raise", the
        messages that came with the gap are returned by the next read."""
        if self._pending:
            return self._take_pending()
        return self._deliver(self.source.read(max, timeout))

    def _deliver(self, events: list[RingEvent]) -> list[RingEvent]:
        if self.on_gap == "raise" and events and type(events[0]) is Gap:
            gap = events[0]
            self._pending = events[1:]
            raise MessagesLostError(gap)
        return events

    def _take_pending(self) -> list[RingEvent]:
        pending, self._pending = self._pending, []
        return pending

    def __iter__(self) -> Iterator[RingEvent]:
        """Every event, blocking; ends when the stream ends or the client is closed."""
        return self.messages()

    def messages(self, idle_timeout: float | None = None) -> Iterator[RingEvent]:
        """Every event, blocking; also ends after idle_timeout seconds without any."""
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
            if self._closed or self.source.ended:
                return
            if idle_timeout is not None and time.monotonic() - last >= idle_timeout:
                return

    # ---- asyncio --------------------------------------------------------------------------
    async def aread(self, max: int | None = None, timeout: float | None = None) -> list[RingEvent]:
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
            if events or self._closed or timeout == 0 or self.source.ended:
                return events
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

    def __aiter__(self) -> AsyncIterator[RingEvent]:
        return self._aiter()

    async def _aiter(self) -> AsyncIterator[RingEvent]:
        while not self._closed:
            events = await self.aread()
            if events:
                for event in events:
                    yield event
            elif self._closed or self.source.ended:
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
