"""The fan-out hub: one per gateway, fed by the sessions' threads, read by every consumer.

    hub = Hub(ring=RingWriter.create(ring_name("gw1"), 64 << 20, replace=True), nats=sink)
    hub.publish_batch([(session_id, topic, payload, recv_ts_ns, upstream_seq), ...])
    hub.publish_gap(session_id, lost_or_None, "reconnect")          # engine thread too

    consumer = hub.subscribe(session_id, ["btcusdt@trade"], DeliveryOptions())  # on a loop
    events = await consumer.get()

`publish_batch` is called once per engine batch and never waits for anyone: it writes the
batch to the shared-memory ring (one C call; local consumers read it there, zero-copy) and
hands the same batch, by reference, to each consumer loop and to the NATS sink through a
`Handoff` (a deque append, plus a `call_soon_threadsafe` when that loop has no wake-up
pending). Routing a message to the consumers that want it, their queues and their policies
all run on the consumers' loop, so the engine's cost does not depend on how many consumers
there are, how slow they are, or whether their loop is stalled.

Sequence numbers are the ring's: message k of a batch written at first_seq is first_seq + k,
and a gap record takes a number too, so a ring reader, a WebSocket consumer and the hub
agree on every message's number. Without a ring the hub counts the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from dataplane.ring import (
    MessageTooLargeError,
    RingClosedError,
    RingError,
    RingWriter,
    TopicError,
)
from gateway.hub.consumer import Consumer, ConsumerStats, DeliveryOptions
from gateway.hub.events import (
    RING_NO_TOPIC,
    RING_TOO_LARGE,
    Batch,
    Delivery,
    GapEvent,
    GapNotice,
    Message,
    Overflow,
)
from gateway.hub.handoff import Handoff
from gateway.hub.names import RING_GAP_TOPIC, ring_topic
from gateway.hub.protocol import CLOSE_SESSION_DELETED

log = logging.getLogger("wsgw.hub")

#: Messages a consumer loop may be behind before the engine stops handing it batches.
DEFAULT_HANDOFF_LIMIT = 262_144
#: Consumer names the metrics keep apart; streams beyond share the label "_other".
MAX_CONSUMER_NAMES = 1000
#: Deleted session ids the hub remembers (refused by subscribe). Ids are never reused, so
#: the set only matters in the short window between a stream reading the row and
#: subscribing; the oldest are dropped beyond this many (an id deleted that long ago has no
#: row for a stream to read).
MAX_DELETED_SESSIONS = 65_536


class HubClosedError(RuntimeError):
    """The hub was closed: no more consumers."""


class SessionDeletedError(LookupError):
    """subscribe was asked for a session that forget_session was told of (close 4410)."""

    def __init__(self, session_id: int) -> None:
        super().__init__(f"session {session_id} was deleted")
        self.session_id = session_id


class _Router:
    """The consumers of one event loop and the hand-off that feeds them (loop thread)."""

    def __init__(self, hub: Hub, loop: asyncio.AbstractEventLoop, limit: int) -> None:
        self.hub = hub
        self.loop = loop
        self.handoff = Handoff(loop, self._dispatch, limit, "stream")
        # session -> topic -> consumers, and session -> consumers of every topic. Lists are
        # replaced, never changed in place, so a cut during routing is safe.
        self.by_topic: dict[int, dict[str, list[Consumer]]] = {}
        self.whole: dict[int, list[Consumer]] = {}
        self.consumers: list[Consumer] = []

    def add(self, consumer: Consumer) -> None:
        self.consumers = [*self.consumers, consumer]
        sid = consumer.session_id
        if consumer.topics is None:
            self.whole[sid] = [*self.whole.get(sid, []), consumer]
            return
        topics = self.by_topic.setdefault(sid, {})
        for topic in consumer.topics:
            topics[topic] = [*topics.get(topic, []), consumer]

    def remove(self, consumer: Consumer) -> None:
        if consumer not in self.consumers:
            return
        self.consumers = [c for c in self.consumers if c is not consumer]
        sid = consumer.session_id
        if consumer.topics is None:
            rest = [c for c in self.whole.get(sid, []) if c is not consumer]
            if rest:
                self.whole[sid] = rest
            else:
                self.whole.pop(sid, None)
        else:
            topics = self.by_topic.get(sid, {})
            for topic in consumer.topics:
                left = [c for c in topics.get(topic, []) if c is not consumer]
                if left:
                    topics[topic] = left
                else:
                    topics.pop(topic, None)
            if not topics:
                self.by_topic.pop(sid, None)
        if not self.consumers:
            self.hub._drop_router(self)

    # ---- dispatch (loop thread) -------------------------------------------------------------
    def _dispatch(self) -> None:
        for entry in self.handoff.take():
            try:
                if type(entry) is Batch:
                    self._route(entry)
                elif type(entry) is GapEvent:
                    self._gap(entry)
                else:
                    self._overflow(entry)  # type: ignore[arg-type]
            except Exception:  # a bug must not stop the other entries or the loop
                log.exception("hub: routing %s failed", type(entry).__name__)

    def _route(self, batch: Batch) -> None:
        by_topic = self.by_topic
        whole = self.whole
        seq = batch.first_seq
        if not whole:
            for sid, topic, payload, ts, useq in batch.messages:
                topics = by_topic.get(sid)
                if topics is not None:
                    targets = topics.get(topic)
                    if targets is not None:
                        item = Delivery(seq, sid, topic, payload, ts, useq)
                        for consumer in targets:
                            consumer.push(item)
                seq += 1
            return
        for sid, topic, payload, ts, useq in batch.messages:
            topics = by_topic.get(sid)
            targets = topics.get(topic) if topics is not None else None
            every = whole.get(sid)
            if targets is not None or every is not None:
                item = Delivery(seq, sid, topic, payload, ts, useq)
                for consumer in targets or ():
                    consumer.push(item)
                for consumer in every or ():
                    consumer.push(item)
            seq += 1

    def _session_consumers(self, sid: int) -> list[Consumer]:
        return [c for c in self.consumers if c.session_id == sid]

    def _gap(self, event: GapEvent) -> None:
        notice = GapNotice(
            event.session_id, event.lost, event.reason, event.seq, epoch=self.hub.epoch_hex
        )
        for consumer in self._session_consumers(event.session_id):
            if consumer.past_gap_seq != event.seq:  # else it got this one as a past gap
                consumer.push_gap(notice)

    def _overflow(self, overflow: Overflow) -> None:
        counts = overflow.counts
        for consumer in list(self.consumers):
            sid = consumer.session_id
            if consumer.topics is None:
                lost = sum(n for (s, _), n in counts.items() if s == sid)
            else:
                lost = sum(counts.get((sid, t), 0) for t in consumer.topics)
            if lost:
                consumer.overflowed(lost)

    def end_session(self, sid: int) -> None:
        """The session was deleted: its consumers end with 4410 (loop thread)."""
        for consumer in self._session_consumers(sid):
            consumer.cut(CLOSE_SESSION_DELETED, f"session {sid} was deleted", "deleted")

    def shutdown(self) -> None:
        for consumer in list(self.consumers):
            consumer.shutdown()


@dataclass
class HubCounters:
    """Hub totals (engine thread writes, anyone reads)."""

    published: int = 0  # messages accepted by publish_batch
    batches: int = 0
    gaps: int = 0  # publish_gap calls
    ring_written: int = 0  # records written to the ring (messages, gaps, placeholders)
    ring_replaced: int = 0  # messages written to the ring as a gap record instead
    ring_errors: int = 0
    publish_ns: int = 0  # time spent in publish_batch (engine thread)
    handoff_dropped: dict[str, int] = field(default_factory=dict)


class Hub:
    """One per gateway: see the module docstring. publish_* from one thread (the engine's);
    subscribe from a running event loop; close from anywhere, after the engine stopped."""

    def __init__(
        self,
        *,
        ring: RingWriter | None = None,
        nats: NatsSinkLike | None = None,
        handoff_limit: int = DEFAULT_HANDOFF_LIMIT,
    ) -> None:
        self.ring = ring
        self.nats = nats
        self.handoff_limit = handoff_limit
        self.counters = HubCounters()
        self._tids: dict[tuple[int, str], int] = {}
        self._gap_tid = 0
        self._next_seq = 1
        #: This run's identifier: the ring's epoch (its header's), else a random one. The
        #: ring's sequence numbers start again at 1 on every start: with the epoch, a
        #: consumer tells a restart from a replay (the /v1/stream hello and gap frames
        #: carry it as 16 hex digits, `epoch_hex`).
        self.epoch: int = ring.epoch if ring is not None else secrets.randbits(64)
        self.epoch_hex = f"{self.epoch:016x}"
        if ring is not None:
            self._gap_tid = ring.register_topic(RING_GAP_TOPIC)
            self._next_seq = ring.last_seq + 1
        self._lock = threading.Lock()  # router set changes; never taken by publish_*
        # publish_*: one publisher at a time (sessions run on the runtime's loop and on the
        # engines' loops): sequence numbers, the ring's writer and each hand-off's counters
        # assume a single writer. Uncontended, as it nearly always is, it costs ~0.1 us.
        self._publish_lock = threading.Lock()
        self._routers: dict[asyncio.AbstractEventLoop, _Router] = {}
        self._sinks: tuple[Handoff, ...] = ()
        self._stats: dict[str, ConsumerStats] = {}
        # session -> its last upstream gap, for consumers that subscribe afterwards
        self._last_gaps: dict[int, GapEvent] = {}
        # deleted session ids, oldest first (a dict as an ordered set; under _lock)
        self._deleted: dict[int, None] = {}
        self._closed = False
        if nats is not None:
            self._sinks = (nats.handoff,)

    # ---- engine thread ----------------------------------------------------------------------
    @property
    def next_seq(self) -> int:
        """The sequence number the next message will get."""
        return self._next_seq

    def publish_batch(self, messages: Sequence[Message]) -> int:
        """Publish (session_id, topic, payload, recv_ts_ns, upstream_seq) messages; returns
        the first one's sequence number. Never waits for a consumer (only, briefly, for
        another publisher). recv_ts_ns 0: unknown (the ring stamps the write time)."""
        with self._publish_lock:
            return self._publish_batch(messages)

    def _publish_batch(self, messages: Sequence[Message]) -> int:
        start = time.perf_counter_ns()
        msgs = messages if type(messages) is tuple else tuple(messages)
        n = len(msgs)
        first = self._next_seq
        if n == 0 or self._closed:
            return first
        try:
            sessions, topics, payloads, stamps, _ = zip(*msgs, strict=True)
        except ValueError:
            raise TypeError(
                "publish_batch takes (session_id, topic, payload, recv_ts_ns, upstream_seq) tuples"
            ) from None
        if len(set(map(type, payloads))) != 1 or type(payloads[0]) is not bytes:
            # A view into a reused buffer would change under the consumers: copy once.
            msgs = tuple((m[0], m[1], bytes(m[2]), m[3], m[4]) for m in msgs)
            payloads = tuple(m[2] for m in msgs)
        if self.ring is not None:
            first = self._write_ring(sessions, topics, payloads, stamps)
        self._next_seq = first + n
        batch = Batch(first, msgs)
        for sink in self._sinks:
            sink.offer(batch)
        counters = self.counters
        counters.published += n
        counters.batches += 1
        counters.publish_ns += time.perf_counter_ns() - start
        return first

    def publish(
        self,
        session_id: int,
        topic: str,
        payload: bytes,
        recv_ts_ns: int = 0,
        upstream_seq: int | None = None,
    ) -> int:
        """One message (prefer publish_batch: one call per engine batch)."""
        return self.publish_batch(((session_id, topic, payload, recv_ts_ns, upstream_seq),))

    def publish_gap(self, session_id: int, lost: int | None, reason: str) -> int:
        """A session reconnected: `lost` messages (None: unknown) may have been missed.
        Every consumer of the session gets a gap event; the ring gets a `$gap` record. The
        hub remembers it as the session's last gap: a consumer that subscribes later gets
        it first, marked as past (see `subscribe`)."""
        with self._publish_lock:
            return self._publish_gap(session_id, lost, reason)

    def _publish_gap(self, session_id: int, lost: int | None, reason: str) -> int:
        seq = self._next_seq
        if self._closed:
            return seq
        event = GapEvent(seq, session_id, lost, reason, time.time_ns(), self.epoch_hex)
        ring = self.ring
        if ring is not None:
            try:
                seq = ring.write(session_id, self._gap_tid, event.json(), event.ts_ns)
                self.counters.ring_written += 1
                if seq != event.seq:
                    event = event._replace(seq=seq)
            except RingError as exc:
                self._ring_failed(exc)
        self._next_seq = seq + 1
        # Remembered before it is offered: a consumer subscribing meanwhile (its hand-off
        # registered before it reads this) gets it at least once, and `_gap` skips the
        # live copy of a gap a consumer already got as past.
        self._last_gaps[session_id] = event
        for sink in self._sinks:
            sink.offer_event(event)
        self.counters.gaps += 1
        return seq

    def _write_ring(
        self,
        sessions: Sequence[int],
        topics: Sequence[str],
        payloads: Sequence[bytes],
        stamps: Sequence[int],
    ) -> int:
        ring = self.ring
        assert ring is not None
        tids = self._tids
        try:
            ids = [tids[key] for key in zip(sessions, topics, strict=True)]
        except KeyError:
            ids = [
                tids.get(key) or self._register(key) for key in zip(sessions, topics, strict=True)
            ]
        try:
            first = ring.write_columns(sessions, ids, payloads, stamps)
        except (MessageTooLargeError, TopicError):
            return self._write_ring_one_by_one(sessions, ids, payloads, stamps)
        except RingError as exc:
            self._ring_failed(exc)
            return self._next_seq
        self.counters.ring_written += len(ids)
        return first

    def _register(self, key: tuple[int, str]) -> int:
        """The ring topic id of (session, topic); 0 when the ring's topic table is full."""
        ring = self.ring
        assert ring is not None
        try:
            tid = ring.register_topic(ring_topic(*key))
        except TopicError as exc:
            log.error("ring topic %s:%s not registered: %s", key[0], key[1], exc)
            return 0
        self._tids[key] = tid
        return tid

    def _write_ring_one_by_one(
        self,
        sessions: Sequence[int],
        ids: list[int],
        payloads: Sequence[bytes],
        stamps: Sequence[int],
    ) -> int:
        """A message the ring cannot hold (too large, no topic id) is written as a `$gap`
        record instead, so ring readers learn of it and sequence numbers stay aligned."""
        ring = self.ring
        assert ring is not None
        limit = ring.max_payload
        gap_tid = self._gap_tid
        new_ids: list[int] = []
        new_payloads: list[bytes] = []
        seq = self._next_seq
        for sid, tid, payload, ts in zip(sessions, ids, payloads, stamps, strict=True):
            if tid and len(payload) <= limit:
                new_ids.append(tid)
                new_payloads.append(payload)
            else:
                reason = RING_TOO_LARGE if tid else RING_NO_TOPIC
                new_ids.append(gap_tid)
                new_payloads.append(GapEvent(seq, sid, 1, reason, ts).json())
                self.counters.ring_replaced += 1
            seq += 1
        try:
            first = ring.write_columns(sessions, new_ids, new_payloads, stamps)
        except RingError as exc:
            self._ring_failed(exc)
            return self._next_seq
        self.counters.ring_written += len(new_ids)
        return first

    def _ring_failed(self, exc: RingError) -> None:
        """The ring is unusable (closed under us, or broken): go on without it."""
        self.counters.ring_errors += 1
        if isinstance(exc, RingClosedError):
            log.error("the ring was closed: publishing without it")
            self.ring = None
        else:
            log.error("ring write failed: %s", exc)

    # ---- consumer loops -----------------------------------------------------------------
    def subscribe(
        self,
        session_id: int,
        topics: Iterable[str] | None = None,
        options: DeliveryOptions | None = None,
        *,
        name: str = "anonymous",
    ) -> Consumer:
        """A consumer of these topics of a session (None: every topic) on the running loop.
        It gets every message published after this call returns. When the session had an
        upstream gap before (a reconnect, a restart), the consumer's first event is that
        gap, once, marked past with its time (GapNotice.past, ts_ns): what was published
        before it subscribed may be missing, and a late consumer learns so too.
        SessionDeletedError for a session forget_session was told of: a stream that read the
        row just before the delete would otherwise wait for good on a session nobody
        publishes or cuts."""
        loop = asyncio.get_running_loop()
        if self._closed:
            raise HubClosedError("the hub is closed")
        # Checked under the lock forget_session takes to list the routers: either this sees
        # the id, or forget_session sees this router and cuts the consumer added below (its
        # end_session runs on this loop after this call returns).
        router = self._router_for(loop, refuse=session_id)
        consumer = Consumer(
            loop,
            name,
            session_id,
            None if topics is None else frozenset(topics),
            options or DeliveryOptions(),
            self._stats_for(name),
            router.remove,
        )
        router.add(consumer)
        last = self._last_gaps.get(session_id)  # read after the hand-off is registered
        if last is not None:
            consumer.past_gap_seq = last.seq
            consumer.push_gap(
                GapNotice(
                    session_id,
                    last.lost,
                    last.reason,
                    last.seq,
                    last.ts_ns,
                    past=True,
                    epoch=self.epoch_hex,
                )
            )
        return consumer

    def _router_for(self, loop: asyncio.AbstractEventLoop, refuse: int | None = None) -> _Router:
        with self._lock:
            if refuse is not None and refuse in self._deleted:
                raise SessionDeletedError(refuse)
            router = self._routers.get(loop)
            if router is None or router.handoff.dead:
                router = _Router(self, loop, self.handoff_limit)
                self._routers[loop] = router
                self._sinks = (*(s for s in self._sinks if not s.dead), router.handoff)
            return router

    def _drop_router(self, router: _Router) -> None:
        """Called on the router's loop when its last consumer left: stop feeding it."""
        with self._lock:
            if self._routers.get(router.loop) is router:
                del self._routers[router.loop]
            self._sinks = tuple(s for s in self._sinks if s is not router.handoff)
            dropped = router.handoff.dropped
            if dropped:
                totals = self.counters.handoff_dropped
                totals["stream"] = totals.get("stream", 0) + dropped

    def _stats_for(self, name: str) -> ConsumerStats:
        stats = self._stats.get(name)
        if stats is None:
            if len(self._stats) >= MAX_CONSUMER_NAMES:
                name = "_other"
                stats = self._stats.get(name)
            if stats is None:
                stats = self._stats[name] = ConsumerStats(name)
        return stats

    def forget_session(self, session_id: int) -> None:
        """A deleted session: its consumers end (close 4410, on their loops), and its last
        gap and ring topic ids are forgotten, so nothing of it reaches a later consumer,
        and subscribe refuses it from now on (SessionDeletedError). Call after the session
        stopped publishing (LiveRuntime.remove_session does)."""
        with self._publish_lock:
            self._last_gaps.pop(session_id, None)
            self._tids = {key: tid for key, tid in self._tids.items() if key[0] != session_id}
        with self._lock:
            self._deleted[session_id] = None
            while len(self._deleted) > MAX_DELETED_SESSIONS:
                del self._deleted[next(iter(self._deleted))]
            routers = list(self._routers.values())
        for router in routers:
            with contextlib.suppress(RuntimeError):  # that loop is closed: no consumers left
                router.loop.call_soon_threadsafe(router.end_session, session_id)

    def revive_session(self, session_id: int) -> None:
        """A session forget_session was told of is started again (its row outlived a
        failed delete): subscribe serves it again."""
        with self._lock:
            self._deleted.pop(session_id, None)

    # ---- reading (any thread) ------------------------------------------------------------
    def last_gap(self, session_id: int) -> GapEvent | None:
        """The session's last upstream gap (None: none since this hub started)."""
        return self._last_gaps.get(session_id)

    def consumers(self) -> list[Consumer]:
        """The live consumers of every loop (a snapshot)."""
        return [c for router in list(self._routers.values()) for c in router.consumers]

    def consumer_stats(self) -> list[ConsumerStats]:
        return list(self._stats.values())

    def handoffs(self) -> list[Handoff]:
        return list(self._sinks)

    @property
    def closed(self) -> bool:
        return self._closed

    # ---- end ------------------------------------------------------------------------------
    def close(self, *, unlink_ring: bool = True, timeout: float = 10.0) -> None:
        """Tell every consumer the gateway is going away (close code 1001), stop the NATS
        sink (flushing what it holds), close the ring (its readers drain it and stop)."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            routers = list(self._routers.values())
        for router in routers:
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is router.loop:
                router.shutdown()
            else:
                with contextlib.suppress(RuntimeError):  # RuntimeError: that loop is closed
                    router.loop.call_soon_threadsafe(router.shutdown)
        if self.nats is not None:
            self.nats.stop(timeout)
        if self.ring is not None:
            with self._publish_lock:  # not under a publisher still writing (its last batch)
                self.ring.close(unlink=unlink_ring)

    def __enter__(self) -> Hub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"<Hub next_seq={self._next_seq} consumers={len(self.consumers())} "
            f"ring={self.ring!r} nats={self.nats is not None}>"
        )


class NatsSinkLike(Protocol):
    """What the hub needs of a bus sink (gateway.hub.nats.NatsSink)."""

    @property
    def handoff(self) -> Handoff: ...

    def stop(self, timeout: float = 10.0) -> None: ...
