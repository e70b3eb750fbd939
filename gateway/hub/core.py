"""The fan-out hub: one per gateway, fed by the sessions' threads, read by every consumer.

    hub = Hub(ring=RingWriter.create(ring_name("gw1"), 64 << 20, replace=True), nats=sink)
    hub.publish_batch([(session_id, topic, payload, recv_ts_ns, upstream_seq), ...])
    hub.publish_gap(session_id, lost_or_None, "reconnect")          # engine thread too

    consumer = hub.subscribe(session_id, ["btcusdt@trade"], DeliveryOptions())  # on a loop
    events = await consumer.get()

The shared-memory ring is the one path: `publish_batch` writes each batch to it (one C
call) and never waits for anyone; C code may write records into it too (the engine's poll)
without the hub. Each consumer loop, and the NATS sink, follows the ring with a reader of
its own (`RingFollower`: the writer in this process, or for writers in other processes a C
thread asleep in the ring's futex wait, wakes the loop through an eventfd, no Python, no
GIL), and routes what it reads by (session, ring topic id) to the consumers that want it,
their queues and their policies, on that loop. A consumer whose reader waits and can take
writes now (/v1/stream's connection: `Consumer.direct_writer`) is written to by the router
at the end of that dispatch, so its frames leave on the follower's turn of the loop, not on
the next one (its task's wake-up). So the engine's cost does not depend on how
many consumers there are, how slow they are, or whether their loop is stalled: a loop that
falls behind the writer gets a gap with the count from the ring (or skips ahead past
`handoff_limit` messages and reports as much), never silent loss.

Sequence numbers are the ring's, the same for a ring reader, a /v1/stream consumer and
NATS; a gap record (`$gap` topic) takes a number too. A hub given no ring makes a private
one (an anonymous memfd): there is no other path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import orjson

from dataplane.ring import (
    Gap,
    MessageTooLargeError,
    RingClosedError,
    RingError,
    RingEvent,
    RingWriter,
    TopicError,
)
from gateway.hub.consumer import Consumer, ConsumerStats, DeliveryOptions
from gateway.hub.events import (
    RING_NO_TOPIC,
    RING_TOO_LARGE,
    Delivery,
    GapEvent,
    GapNotice,
    Message,
)
from gateway.hub.follower import READ_BATCH, RingFollower
from gateway.hub.names import RING_GAP_TOPIC, ring_topic
from gateway.hub.protocol import CLOSE_INTERNAL_ERROR, CLOSE_SESSION_DELETED
from gateway.hub.sink import SinkError, StreamSink, envelope_hold

log = logging.getLogger("wsgw.hub")

#: Messages a consumer loop may be behind the ring's writer before it skips ahead (a gap).
DEFAULT_HANDOFF_LIMIT = 262_144
#: Capacity of the private ring of a hub given none (bytes; memfd pages are only used
#: once written).
PRIVATE_RING_CAPACITY = 16 << 20
#: Upstream sequence numbers kept per generation (two generations) for the followers.
UPSTREAM_SEQ_HISTORY = 131_072
#: Ring reads (of READ_BATCH records) a consumer loop does per wake-up before it lets its
#: other tasks run.
DISPATCH_ROUNDS = 8
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
    """The consumers of one event loop and the ring follower that feeds them (loop thread)."""

    def __init__(self, hub: Hub, loop: asyncio.AbstractEventLoop, limit: int) -> None:
        self.hub = hub
        self.loop = loop
        assert hub.ring is not None
        self.follower = RingFollower(hub.ring, loop, self._dispatch, "stream", limit=limit)
        # session -> ring topic name -> (topic, consumers), and session -> consumers of every
        # topic. Lists are replaced, never changed in place, so a cut during routing is safe.
        self.by_name: dict[int, dict[str, tuple[str, list[Consumer]]]] = {}
        self.whole: dict[int, list[Consumer]] = {}
        self.consumers: list[Consumer] = []
        # (session, ring topic id) -> (topic, consumers): made on first use, dropped when a
        # consumer comes or goes.
        self._routes: dict[tuple[int, int], tuple[str, tuple[Consumer, ...]]] = {}
        # During a dispatch: the consumers to write to directly once it has routed all.
        self._to_flush: list[Consumer] | None = None

    def add(self, consumer: Consumer) -> None:
        consumer.defer_flush = self._defer_flush
        consumer.ring_next = self._next_seq
        consumer.wake_fd = self.follower.wake_fd
        consumer.unpark = self.follower.unpark
        self.follower.unpark()  # a new consumer is not armed: routed record by record
        self.consumers = [*self.consumers, consumer]
        self._routes = {}
        sid = consumer.session_id
        if consumer.topics is None:
            self.whole[sid] = [*self.whole.get(sid, []), consumer]
            return
        names = self.by_name.setdefault(sid, {})
        for topic in consumer.topics:
            name = ring_topic(sid, topic)
            _, before = names.get(name, (topic, []))
            names[name] = (topic, [*before, consumer])

    def remove(self, consumer: Consumer) -> None:
        if consumer not in self.consumers:
            return
        self.consumers = [c for c in self.consumers if c is not consumer]
        self._routes = {}
        sid = consumer.session_id
        if consumer.topics is None:
            rest = [c for c in self.whole.get(sid, []) if c is not consumer]
            if rest:
                self.whole[sid] = rest
            else:
                self.whole.pop(sid, None)
        else:
            names = self.by_name.get(sid, {})
            for topic in consumer.topics:
                name = ring_topic(sid, topic)
                entry = names.get(name)
                left = [c for c in entry[1] if c is not consumer] if entry else []
                if left:
                    names[name] = (topic, left)
                else:
                    names.pop(name, None)
            if not names:
                self.by_name.pop(sid, None)
        if not self.consumers:
            self.hub._drop_router(self)

    # ---- dispatch (loop thread) -------------------------------------------------------------
    def _dispatch(self) -> None:
        """Woken by the follower: read what the ring holds (a bounded amount, so the loop's
        other tasks get their turn; the follower wakes it again for the rest) and route it."""
        follower = self.follower
        to_flush = self._to_flush = []
        caught_up = False
        try:
            for _ in range(DISPATCH_ROUNDS):
                events = follower.read()
                caught_up = len(events) < READ_BATCH
                if not events:
                    break
                try:
                    self._route(events)
                except Exception:  # a bug must not stop the loop or the follower
                    log.exception("hub: routing %d ring records failed", len(events))
                    self._lost_in_routing(events)
                if len(events) < READ_BATCH:
                    break
        finally:
            self._to_flush = None
            for consumer in to_flush:
                try:
                    consumer.flush()
                except Exception:  # one broken connection must not stop the others
                    log.exception("hub: writing to %r failed", consumer)
                    consumer.cut(CLOSE_INTERNAL_ERROR, "internal error", "error")
            consumers = self.consumers
            if caught_up and consumers and all(c.sink_armed for c in consumers):
                follower.park()  # the sink sends all: woken when one stops (or PARK_S)
            else:
                follower.rearm()

    def _next_seq(self) -> int | None:
        """The ring sequence this router reads next: everything before it was routed."""
        return self.follower.next_seq

    def _defer_flush(self, consumer: Consumer) -> bool:
        """A consumer with a direct writer got something: written after this dispatch (in
        one write per consumer), on this turn of the loop. False outside a dispatch."""
        to_flush = self._to_flush
        if to_flush is None:
            return False
        to_flush.append(consumer)
        return True

    def _route(self, events: list[RingEvent]) -> None:
        hub = self.hub
        gap_tid = hub._gap_tid
        useq_new, useq_old = hub._useq_new, hub._useq_old
        useqs = bool(useq_new or useq_old)
        for event in events:
            if type(event) is Gap:
                self._overrun(event)
                continue
            seq, sid, name, ts, payload, tid = event  # type: ignore[misc]
            if tid == gap_tid:
                self._gap(seq, sid, payload)  # type: ignore[arg-type]
                continue
            route = self._routes.get((sid, tid))  # not kept: a cut consumer renews it
            if route is None:
                route = self._resolve(sid, tid, name)
            targets = route[1]
            if targets:
                useq = None
                if useqs:
                    useq = useq_new.get(seq)
                    if useq is None:
                        useq = useq_old.get(seq)
                item = Delivery(seq, sid, route[0], payload, ts, useq)  # type: ignore[arg-type]
                for consumer in targets:
                    consumer.push(item)

    def _resolve(self, sid: int, tid: int, name: str) -> tuple[str, tuple[Consumer, ...]]:
        """Who wants the records of this ring topic, and the topic's name as they know it."""
        whole = self.whole.get(sid, [])
        named = self.by_name.get(sid, {}).get(name)
        if named is not None:
            route = (named[0], (*named[1], *whole))
        else:
            route = (self.hub.topic_of(tid, name), tuple(whole))
        if name:  # an id whose name the reader knows: stable, keep it
            self._routes[(sid, tid)] = route
        return route

    def _session_consumers(self, sid: int) -> list[Consumer]:
        return [c for c in self.consumers if c.session_id == sid]

    def _gap(self, seq: int, sid: int, payload: bytes) -> None:
        """A `$gap` record: the session's upstream gap, or a message the ring could not hold."""
        consumers = self._session_consumers(sid)
        if not consumers:
            return
        lost, reason = _gap_fields(payload)
        notice = GapNotice(sid, lost, reason, seq, epoch=self.hub.epoch_hex)
        for consumer in consumers:
            if consumer.past_gap_seq != seq:  # else it got this one as a past gap
                consumer.push_gap(notice)

    def _overrun(self, gap: Gap) -> None:
        """This loop fell behind the ring's writer: `gap.lost` records (of any session and
        topic: the ring cannot say which) were overwritten or skipped before it read them.
        Every consumer of the loop may have lost some, so each learns of the whole count."""
        log.warning(
            "hub: a consumer loop fell %d records behind the ring (seq %d..%d): its %d "
            "consumers get a gap",
            gap.lost,
            gap.first_seq,
            gap.last_seq,
            len(self.consumers),
        )
        for consumer in list(self.consumers):
            consumer.overflowed(gap.lost)

    def _lost_in_routing(self, events: list[RingEvent]) -> None:
        """Routing a read failed part way (a bug): each consumer of a session in it may have
        missed some of that session's records, and learns it as of the loop's overrun (a
        gap of them all, or a cut for a consumer that takes no loss: it resumes)."""
        counts = Counter(event[1] for event in events if type(event) is not Gap)
        for consumer in list(self.consumers):
            lost = counts.get(consumer.session_id)
            if lost:
                try:
                    consumer.overflowed(lost)
                except Exception:
                    log.exception("hub: telling %r of a routing failure failed", consumer)

    def end_session(self, sid: int) -> None:
        """The session was deleted: its consumers end with 4410 (loop thread)."""
        for consumer in self._session_consumers(sid):
            consumer.cut(CLOSE_SESSION_DELETED, f"session {sid} was deleted", "deleted")

    def shutdown(self) -> None:
        for consumer in list(self.consumers):
            consumer.shutdown()
        self.follower.stop()


def _gap_fields(payload: bytes) -> tuple[int | None, str]:
    """lost and reason of a `$gap` record's JSON (GapEvent.json)."""
    try:
        body = orjson.loads(payload)
        lost = body.get("lost")
        reason = body.get("reason")
    except (orjson.JSONDecodeError, AttributeError):
        return None, "unknown"
    return (lost if isinstance(lost, int) else None), (
        reason if isinstance(reason, str) else "unknown"
    )


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
        if handoff_limit < 1:
            raise ValueError(f"hand-off limit must be at least 1 message, not {handoff_limit}")
        #: Whether the hub made its ring (a private memfd one: no ring was given).
        self.private_ring = ring is None
        if ring is None:
            ring = RingWriter.create(None, PRIVATE_RING_CAPACITY)
        self.ring: RingWriter | None = ring
        self.nats = nats
        self.handoff_limit = handoff_limit
        self.counters = HubCounters()
        self._tids: dict[tuple[int, str], int] = {}
        # ring topic id -> the topic as published (its ring name may be shortened)
        self._topic_of: dict[int, str] = {}
        # ring seq -> upstream seq of the messages published with one, in two generations
        # of at most UPSTREAM_SEQ_HISTORY (the ring has no field for it)
        self._useq_new: dict[int, int | None] = {}
        self._useq_old: dict[int, int | None] = {}
        #: This run's identifier: the ring's epoch (its header's). The ring's sequence
        #: numbers start again at 1 on every start: with the epoch, a consumer tells a
        #: restart from a replay (the /v1/stream hello and gap frames carry it as 16 hex
        #: digits, `epoch_hex`).
        self.epoch: int = ring.epoch
        self.epoch_hex = f"{self.epoch:016x}"
        self._gap_tid = ring.register_topic(RING_GAP_TOPIC)
        self._next_seq = ring.last_seq + 1
        self._lock = threading.Lock()  # router set changes; never taken by publish_*
        # publish_*: one publisher at a time (sessions run on the runtime's loop and on the
        # engines' loops): sequence numbers and the ring's writer assume a single
        # writer. Uncontended, as it nearly always is, it costs ~0.1 us.
        self._publish_lock = threading.Lock()
        self._routers: dict[asyncio.AbstractEventLoop, _Router] = {}
        self._stats: dict[str, ConsumerStats] = {}
        # session -> its last upstream gap, for consumers that subscribe afterwards
        self._last_gaps: dict[int, GapEvent] = {}
        # session -> where its gaps are written past publish_gap (a C feed group), asked
        self._gap_sources: dict[int, Callable[[], GapEvent | None]] = {}
        # deleted session ids, oldest first (a dict as an ordered set; under _lock)
        self._deleted: dict[int, None] = {}
        self._stream_sink: StreamSink | None = None  # made on first use (stream_sink)
        self._closed = False
        if nats is not None:
            try:
                nats.follow(ring, self.topic_of, self._gap_tid, handoff_limit, self.epoch_hex)
            except BaseException:
                if self.private_ring:
                    ring.close()
                raise

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
            sessions, topics, payloads, stamps, useqs = zip(*msgs, strict=True)
        except ValueError:
            raise TypeError(
                "publish_batch takes (session_id, topic, payload, recv_ts_ns, upstream_seq) tuples"
            ) from None
        if self.ring is None:  # the ring failed for good: nothing reaches anyone
            return first
        # The ring copies the payloads: views into a reused buffer are fine.
        with_useqs = useqs.count(None) != n
        if with_useqs:  # the sink's envelope sockets leave these to the router (EXTRA)
            envelope_hold(True)
            try:
                first = self._write_ring(sessions, topics, payloads, stamps)
            finally:
                envelope_hold(False)
        else:
            first = self._write_ring(sessions, topics, payloads, stamps)
        self._next_seq = first + n
        if with_useqs:
            new = self._useq_new
            new.update(zip(range(first, first + n), useqs, strict=True))
            if len(new) > UPSTREAM_SEQ_HISTORY:
                self._useq_old = new
                self._useq_new = {}
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
        ring = self.ring
        if self._closed or ring is None:
            return seq
        with contextlib.suppress(RingError):  # records written by others (C) count too
            seq = ring.last_seq + 1
        event = GapEvent(seq, session_id, lost, reason, time.time_ns(), self.epoch_hex)
        # Remembered before it is written: a consumer subscribing meanwhile (its router
        # following the ring before it reads this) gets it at least once, and the router
        # skips the live copy of a gap a consumer already got as past (same seq).
        self._last_gaps[session_id] = event
        try:
            written = ring.write(session_id, self._gap_tid, event.json(), event.ts_ns)
        except RingError as exc:
            self._ring_failed(exc)
            return seq
        self.counters.ring_written += 1
        if written != event.seq:  # another writer got in between: the ring's number wins
            event = event._replace(seq=written)
            self._last_gaps[session_id] = event
        self._next_seq = written + 1
        self.counters.gaps += 1
        return written

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
        self._topic_of[tid] = key[1]
        self._tids[key] = tid
        return tid

    @property
    def published_total(self) -> int:
        """Messages published: through publish_batch, and the records other writers put in
        the ring (the engines' C feeds: their messages never pass through the hub)."""
        own = self.counters.published
        ring = self.ring
        if ring is None:
            return own
        try:
            written = ring.stats()["messages"]
        except RingError:  # closed: nothing more comes
            return own
        return own + max(0, written - self.counters.ring_written)

    def ring_topic_id(self, session_id: int, topic: str) -> int:
        """The ring topic id of a session's topic, registered on first use (0: the topic
        table is full). For a writer that puts records in the ring itself (C, in the
        engine's poll): what it writes under this id reaches /v1/stream and NATS as
        `topic`, whatever the ring name (a long one is shortened) says."""
        with self._publish_lock:
            return self._tids.get((session_id, topic)) or self._register((session_id, topic))

    def topic_of(self, topic_id: int, ring_name: str) -> str:
        """The topic of a ring topic id, as published (any thread): what the hub registered,
        else the ring name without its `<session_id>:` prefix."""
        topic = self._topic_of.get(topic_id)
        if topic is None:
            topic = ring_name.partition(":")[2]
        return topic

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
        last = self.last_gap(session_id)  # read after the router follows the ring
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
            if router is None or router.follower.dead:
                if self.ring is None:
                    raise HubClosedError("the hub's ring failed: nothing to follow")
                router = _Router(self, loop, self.handoff_limit)
                self._routers[loop] = router
            return router

    def _drop_router(self, router: _Router) -> None:
        """Called on the router's loop when its last consumer left: stop feeding it."""
        with self._lock:
            if self._routers.get(router.loop) is router:
                del self._routers[router.loop]
            dropped = router.follower.dropped
            if dropped:
                totals = self.counters.handoff_dropped
                totals["stream"] = totals.get("stream", 0) + dropped
        router.follower.stop()

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

    # ---- the stream sink (gateway.hub.sink) ----------------------------------------------
    def stream_sink(self) -> StreamSink | None:
        """The ring writer's C sink for /v1/stream sockets, made on first use; None when the
        hub is closed or has no ring."""
        with self._lock:
            if self._stream_sink is None and not self._closed and self.ring is not None:
                try:
                    self._stream_sink = StreamSink(self.ring.handle, self._gap_tid)
                except (SinkError, RingError) as exc:
                    log.error("stream sink: %s", exc)
            return self._stream_sink

    def session_topic_ids(self, session_id: int) -> list[tuple[str, int]]:
        """(topic, ring topic id) of every topic of the session the hub registered (as
        known_topic_id)."""
        return [(key[1], tid) for key, tid in list(self._tids.items()) if key[0] == session_id]

    def topic_count(self) -> int:
        """How many (session, topic) ids the hub registered: a change says there may be new
        ones (session_topic_ids)."""
        return len(self._tids)

    def known_topic_id(self, session_id: int, topic: str) -> int | None:
        """The ring topic id of a session's topic if the hub registered it (publish_batch,
        ring_topic_id: every writer of this hub's ring); registers nothing, so a client's
        topic names cannot fill the ring's topic table."""
        return self._tids.get((session_id, topic))

    # ---- reading (any thread) ------------------------------------------------------------
    def last_gap(self, session_id: int) -> GapEvent | None:
        """The session's last upstream gap (None: none since this hub started): the newer of
        the one published here and its gap source's."""
        last = self._last_gaps.get(session_id)
        source = self._gap_sources.get(session_id)
        other = source() if source is not None else None
        if other is not None and (last is None or other.seq > last.seq):
            return other
        return last

    def gap_source(self, session_id: int, source: Callable[[], GapEvent | None] | None) -> None:
        """The session's `$gap` records are written past publish_gap (a feed group arbitrated
        in C writes its own): `source` tells its last one, which must change together with the
        ring record (the router skips the live copy of a past gap by its seq). None: no longer
        (its last gap is kept as this hub's own)."""
        if source is not None:
            self._gap_sources[session_id] = source
            return
        last = self.last_gap(session_id)
        self._gap_sources.pop(session_id, None)
        if last is not None:
            self._last_gaps[session_id] = last

    def consumers(self) -> list[Consumer]:
        """The live consumers of every loop (a snapshot)."""
        return [c for router in list(self._routers.values()) for c in router.consumers]

    def caught_up(self) -> bool:
        """Whether every consumer loop has read (and routed) all the ring held when asked,
        or fell behind it (tests and tools: wait for this rather than for a time)."""
        ring = self.ring
        if ring is None or ring.closed:
            return True
        last = ring.last_seq
        for follower in self.followers():
            upto = follower.next_seq
            if upto is not None and not follower.dead and upto <= last:
                return False
        return True

    def consumer_stats(self) -> list[ConsumerStats]:
        return list(self._stats.values())

    def followers(self) -> list[RingFollower]:
        """The ring followers of the consumer loops (the NATS sink has its own)."""
        return [router.follower for router in list(self._routers.values())]

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
        with self._lock:
            sink, self._stream_sink = self._stream_sink, None
        if sink is not None:
            sink.close()  # before the ring: its writer's hook must not find it then
        if self.ring is not None:
            with self._publish_lock:  # not under a publisher still writing (its last batch)
                self.ring.close(unlink=unlink_ring)
        # The followers of loops that are gone (no shutdown ran there) end here.
        for router in routers:
            if router.loop.is_closed():
                router.follower.stop()

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

    def follow(
        self,
        ring: RingWriter,
        topic_of: Callable[[int, str], str],
        gap_topic_id: int,
        limit: int,
        epoch_hex: str,
    ) -> None: ...

    def stop(self, timeout: float = 10.0) -> None: ...
