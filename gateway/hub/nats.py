"""The NATS sink: every message on subject `<prefix>.<session_id>.<topic token>` (see
gateway.hub.names for the mapping), for consumers on other machines.

nats-py runs on an asyncio loop of its own, in a thread of its own, so neither the engine
nor the API loop ever waits for the bus. The sink follows the hub's shared-memory ring
(`RingFollower`, set up by the hub: `follow`), whoever wrote the records, so NATS carries
the ring's sequence numbers; it publishes a whole read without yielding, so nats-py's
flusher writes it to the socket in one go (batched flushes). Messages are dropped and
counted: before the first connection (`not_connected`, owed as a `$gap` like a publish's
drop, below), when the sink falls more than `buffer_messages` behind the ring's writer or is
lapped by it (`buffer_full`), and during a reconnection once nats-py's own reconnect buffer
(`pending_bytes`) is full (`disconnected`). nats-py reconnects by itself. A skip past
`buffer_messages` is announced to subscribers as a `$gap` (reason `nats_sink_behind`) per
session the ring holds topics of; a message a publish dropped (`disconnected`, `error`) is
owed to its session's subscribers as a `$gap` (reason `nats_sink_dropped`: its first ring
sequence, how many), published before what comes next as soon as nats-py takes it. /metrics:
`wsgw_nats_published_total`, `wsgw_nats_dropped_total{reason}`, `wsgw_nats_connected`,
`wsgw_nats_reconnects_total`, `wsgw_nats_pending`, and `wsgw_nats_behind_gaps_total` (those
`$gap` announcements; gateway.hub.metrics). A read the sink fails to hand over (a bug, not
the bus) is logged and counted (`errors`, `last_error`), its records owed as a `$gap`, and
the sink goes on with the next read.

With `jetstream` set, the sink creates (or updates) a stream over `<prefix>.>` on every
connection and publishes with JetStream's acknowledgement, without waiting for each one: up
to `ack_window` messages are out unacknowledged (the sink stops reading the ring while the
window is full, so the follower's bound applies). It asks for an ack of every ACK_EVERY-th
message and of the last of each read only: the stream takes one connection's messages in
order, so an ack covers those sent before it on the same connection (nats-py's reconnect
count tells connections apart; one sent on an earlier connection waits for its own time-out).
A message refused (JetStream unavailable,
its store loading after a server restart) or unacknowledged after `ack_timeout_s` is sent
again, with the same message id, so the stream's duplicate check stores it once; after
`retry_for_s` it is counted as `unacked` (dropped) and owed to the stream's readers as a
`$gap` per session (reason `nats_sink_unacked`: its first ring sequence, how many), sent
with the next resends until JetStream stores it (a message whose ack alone was lost is
counted too: such a gap may be a loss that was not). `ack_window=0`: core NATS publishes, the
stream keeps what reaches it (nothing while it is away). Each message then carries a `Nats-Msg-Id`
(`message_id`) that names the upstream message, so the stream drops a second copy within
its duplicate window: the one a new fleet owner publishes again after a failover, or a
restarted gateway after its venue replayed. The id is the session and the exchange's own
id where the dialect has one (gateway.dialects.identity: a sequence or an exchange id per
topic), else the gateway's run (the ring's epoch) and the ring sequence, which tells only
one run's copies apart (a content hash would also drop two equal updates).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import orjson

from dataplane.ring import Gap, RingError, RingEvent, RingWriter
from gateway.dialects.identity import HASH, Identity, MessageIdentity
from gateway.hub.events import gap_json
from gateway.hub.follower import READ_BATCH, RingFollower
from gateway.hub.names import (
    check_subject_prefix,
    nats_gap_subject,
    nats_subject,
    ring_topic_session,
)
from gateway.hub.nats_c import BUSY_SENDS, C_PATH_DEFAULT, CNatsConnection, c_path_usable
from gateway.hub.sink import SinkError, StreamSink

log = logging.getLogger("wsgw.hub.nats")

#: How long the sink trusts a session's identity function before it asks again (a session
#: may be recreated with another dialect).
IDENTITY_TTL_S = 5.0
#: The acked sink asks for JetStream's ack of every ACK_EVERY-th message (and of a read's
#: last); an ack covers the messages sent before it on its connection.
ACK_EVERY = 32
#: How often the acked sink looks for messages to send again (at most).
RESEND_TICK_S = 0.1
#: How long stopping waits for JetStream's acks of what is out.
STOP_SETTLE_S = 5.0
#: JetStream's own bounds: a stream name has no dots, wildcards or spaces; at most 5 replicas.
STREAM_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_REPLICAS = 5


@dataclass(frozen=True)
class JetStreamConfig:
    """A JetStream stream the sink keeps over its subjects: retention, limits, and the
    duplicate window within which a message id seen before is dropped."""

    stream: str = "WSGW"
    max_bytes: int = -1  # -1: unlimited
    max_age_s: float = 0.0  # 0: unlimited
    max_msgs: int = -1
    storage: Literal["file", "memory"] = "file"
    replicas: int = 1
    #: Seconds the stream remembers message ids (JetStream's default: 120 s).
    duplicate_window_s: float = 120.0
    #: Nats-Msg-Id on every message (dedup); False: no ids, no dedup (a message sent
    #: again after a lost ack may then be stored twice).
    msg_ids: bool = True
    #: Messages out without JetStream's ack at most (0: no acks, core NATS publishes).
    ack_window: int = 4096
    #: An unacknowledged message is sent again after this long ...
    ack_timeout_s: float = 2.0
    #: ... until this long after its first send; then it is dropped and counted (`unacked`).
    retry_for_s: float = 60.0

    def __post_init__(self) -> None:
        """Refuse what nats-server would refuse later, at start, with the setting's name."""
        problems = self._stream_problems()
        if self.ack_window < 0:
            problems.append(f"ack_window {self.ack_window}: 0 (no acks) or more")
        if self.ack_timeout_s <= 0:
            problems.append(f"ack_timeout_s {self.ack_timeout_s}: more than 0")
        if self.retry_for_s < self.ack_timeout_s:
            problems.append(f"retry_for_s {self.retry_for_s}: at least ack_timeout_s")
        if problems:
            raise ValueError("JetStream: " + "; ".join(problems))

    def _stream_problems(self) -> list[str]:
        """What nats-server would find wrong with the stream's settings (empty: nothing)."""
        problems = []
        if not STREAM_NAME.fullmatch(self.stream):
            problems.append(f"stream {self.stream!r}: 1-64 letters, digits, '_' or '-'")
        for name, value in (("max_bytes", self.max_bytes), ("max_msgs", self.max_msgs)):
            if value == 0 or value < -1:
                problems.append(f"{name} {value}: -1 (unlimited) or a positive number")
        if self.max_age_s < 0:
            problems.append(f"max_age_s {self.max_age_s}: 0 (unlimited) or more")
        if self.storage not in ("file", "memory"):
            problems.append(f"storage {self.storage!r}: file or memory")
        if not 1 <= self.replicas <= MAX_REPLICAS:
            problems.append(f"replicas {self.replicas}: 1 to {MAX_REPLICAS}")
        if self.duplicate_window_s <= 0:
            problems.append(f"duplicate_window_s {self.duplicate_window_s}: more than 0")
        elif 0 < self.max_age_s < self.duplicate_window_s:
            problems.append(
                f"duplicate_window_s {self.duplicate_window_s} exceeds max_age_s {self.max_age_s} "
                "(the stream cannot remember ids longer than it keeps messages)"
            )
        return problems


def message_id(sid: int, identity: object, run: str, seq: int) -> str:
    """A message's Nats-Msg-Id: `<session>:<topic>:<exchange id>` when the dialect found an
    exchange sequence or id, else `<session>@<run>:<ring seq>` (one run's copies only)."""
    if type(identity) is Identity and identity.kind != HASH:
        return f"{sid}:{identity.topic}:{identity.id}"
    return f"{sid}@{run}:{seq}"


#: The `$gap` reason when the sink fell more than buffer_messages behind the ring's writer
#: and skipped records nobody had published.
SINK_BEHIND = "nats_sink_behind"
#: The `$gap` reason for messages JetStream did not acknowledge within retry_for_s.
SINK_UNACKED = "nats_sink_unacked"
#: ... and for messages a plain publish dropped (nats-py's reconnect buffer full, an error).
SINK_DROPPED = "nats_sink_dropped"


@dataclass(frozen=True)
class NatsConfig:
    servers: Sequence[str] = ("nats://127.0.0.1:4222",)
    subject_prefix: str = "wsgw"
    #: Messages the sink may be behind the ring's writer before it skips ahead (dropped).
    buffer_messages: int = 100_000
    #: nats-py's buffer while reconnecting (bytes); beyond it messages are dropped.
    pending_bytes: int = 16 << 20
    connect_timeout_s: float = 2.0
    reconnect_wait_s: float = 1.0
    name: str = "wsgw"
    #: Add Wsgw-Seq and Wsgw-Recv-Ts headers to every message (costs bytes and CPU).
    headers: bool = False
    #: With headers: a session's fleet lease generation (gateway.fleet), sent as Wsgw-Gen
    #: so consumers can drop a stale owner's messages; None: not in a fleet.
    generation: Callable[[int], int | None] | None = None
    jetstream: JetStreamConfig | None = None
    #: A session id -> its dialect's message identity (gateway.dialects.identity), for the
    #: JetStream message ids; None (or None for a session): ids from the run and ring seq.
    identity: Callable[[int], MessageIdentity | None] | None = None
    #: Plain publishing (no JetStream, no headers, nats://) from the ring's writer, in C
    #: (gateway.hub.nats_c); default WSGW_NATS_C=1 (off otherwise: nats-py publishes).
    c_path: bool = C_PATH_DEFAULT
    #: More C sends than this within a millisecond hand publishing back to the sink's thread
    #: for a while (it batches better at such rates); 0: never.
    c_busy_sends: int = BUSY_SENDS
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        check_subject_prefix(self.subject_prefix)
        if not self.servers:
            raise ValueError("NATS servers: give at least one URL (nats://host:4222)")
        if self.buffer_messages < 1:
            raise ValueError("buffer_messages must be at least 1")


@dataclass
class NatsStats:
    published: int = 0
    dropped_not_connected: int = 0
    dropped_disconnected: int = 0  # nats-py's reconnect buffer was full
    dropped_error: int = 0
    gaps: int = 0
    #: `$gap` messages of reason SINK_BEHIND published (one per session per skip): the
    #: sink's own drops as subscribers saw them announced (wsgw_nats_behind_gaps).
    behind_gaps: int = 0
    connects: int = 0
    reconnects: int = 0
    disconnects: int = 0
    errors: int = 0
    connected: bool = False
    last_error: str | None = None
    jetstream_ready: bool = False
    stored: int = 0  # JetStream acknowledged (duplicates and gap records included)
    duplicates: int = 0  # acknowledged as a copy of a message id stored before
    resent: int = 0  # sent again: refused or not acknowledged in time
    refused: int = 0  # JetStream answered with an error (or no one answered)
    dropped_unacked: int = 0  # not acknowledged within retry_for_s


@dataclass
class _Unacked:
    """A message out to JetStream, kept until it is acknowledged."""

    subject: str
    payload: bytes
    headers: dict[str, str] | None
    first_sent: float
    sent: float = 0.0
    connection: int = -1  # nats-py's reconnect count when sent
    sid: int = -1  # the ring record's session (-1: none)
    seq: int = 0  # ... and its ring sequence
    #: A `$gap` record: the count of messages it tells of (None: unknown); -1: a message.
    tells: int | None = -1
    owed: bool = False  # the sink's own `$gap` for what it gave up on (not counted dropped)


class NatsSink:
    """Publishes what the hub hands it to NATS, from its own thread and loop."""

    def __init__(self, config: NatsConfig) -> None:
        import nats  # noqa: F401  (fail here, with the package's name, when it is missing)

        self.config = config
        self.prefix = config.subject_prefix
        self.stats = NatsStats()
        self.loop = asyncio.new_event_loop()
        self._wake = asyncio.Event()
        self._follower: RingFollower | None = None
        self._topic_of: Callable[[int, str], str] = _ring_name_topic
        self._gap_tid = -1
        self._epoch_hex: str | None = None
        self._subjects: dict[tuple[int, int], str] = {}
        self._identities: dict[int, tuple[float, MessageIdentity | None]] = {}
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._ready = threading.Event()
        self.nc: object | None = None
        js = config.jetstream
        self._ack_window = 0 if js is None else js.ack_window
        # Acked publishing: by reply token, oldest send first (insertion order).
        self._unacked: OrderedDict[int, _Unacked] = OrderedDict()
        self._refused: list[_Unacked] = []  # sent again at the next resend tick
        #: Per session and reason, what the sink gave up on: (first ring seq, count (None:
        #: unknown)), a `$gap` owed to its subscribers and the stream's readers.
        self._owed: dict[tuple[int, str], tuple[int, int | None]] = {}
        self._next_token = 0
        self._ack_prefix = ""
        self._room = asyncio.Event()
        self._c_sink: StreamSink | None = None
        # Plain publishing: one connection of our own, written by C (gateway.hub.nats_c).
        self._c = (
            CNatsConnection(
                config,
                self.stats,
                lambda sid, tid, name: (
                    self._subjects.get((sid, tid)) or self._subject(sid, tid, name)
                ),
                self._gap_message,
                stopping=lambda: self._stopping,
                on_connected=self._c_connected,
                behind=self._behind_messages,
                dropped=self._dropped_message,
            )
            if c_path_usable(config)
            else None
        )

    def follow(
        self,
        ring: RingWriter,
        topic_of: Callable[[int, str], str],
        gap_topic_id: int,
        limit: int,
        epoch_hex: str,
    ) -> None:
        """Publish what is written to `ring` from now on (the hub calls this). topic_of:
        a ring topic id and name -> the topic; gap_topic_id: the `$gap` records' topic id.
        limit: ignored (the sink's own bound is buffer_messages)."""
        if self._follower is not None:
            raise RuntimeError("the NATS sink follows a ring already")
        self._topic_of = topic_of
        self._gap_tid = gap_topic_id
        self._epoch_hex = epoch_hex
        self._follower = RingFollower(
            ring, self.loop, self._wake.set, "nats", limit=self.config.buffer_messages
        )
        if self._c is not None:
            self._follow_in_c(ring)

    def _follow_in_c(self, ring: RingWriter) -> None:
        """Publish from the ring's writer in C (gateway.hub.nats_c)."""
        assert self._c is not None
        try:
            self._c_sink = StreamSink(ring.handle, self._gap_tid)
        except SinkError as exc:
            log.error("NATS sink in C unavailable (%s): the sink's thread publishes", exc)
            return
        assert self._follower is not None
        self._c.attach(self._c_sink, self._gap_tid, self._follower.wake_fd)

    def _c_connected(self) -> None:
        self._ready.set()
        self._wake.set()

    @property
    def c_path(self) -> bool:
        """Whether the ring's writer publishes (C), not nats-py."""
        return self._c is not None

    @property
    def c_disarms(self) -> dict[str, int]:
        """Why C handed the connection back to Python, by reason (sink.c's)."""
        return {} if self._c is None else dict(self._c.disarms)

    @property
    def pending(self) -> int:
        """Messages in the ring the sink has not published yet (0 while C is armed: the
        ring's writer published them as it wrote them, the parked follower reads them later)."""
        follower = self._follower
        if follower is None or (self._c is not None and self._c.armed):
            return 0
        return follower.pending

    @property
    def dropped(self) -> dict[str, int]:
        """Messages that did not reach NATS, by reason."""
        s = self.stats
        follower = self._follower
        skipped = 0 if follower is None else follower.dropped
        if self._c is not None:  # what the follower skipped and C had not sent
            skipped = self._c.skipped
        return {
            "buffer_full": skipped,
            "not_connected": s.dropped_not_connected,
            "disconnected": s.dropped_disconnected,
            "error": s.dropped_error,
            "unacked": s.dropped_unacked,
        }

    @property
    def unacked(self) -> int:
        """Messages sent to JetStream and not acknowledged yet (to be sent again)."""
        return len(self._unacked) + len(self._refused)

    def start(self, wait_connected: float | None = None) -> NatsSink:
        """Start the thread; with wait_connected, wait that long for a first connection
        (False: not connected yet; it keeps trying in the background)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._main, name="wsgw-nats", daemon=True)
            self._thread.start()
        if wait_connected:
            self._ready.wait(wait_connected)
        return self

    def wait_connected(self, timeout: float) -> bool:
        return self._ready.wait(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Publish what is handed over already, flush, close the connection, end the thread."""
        thread = self._thread
        if thread is None:
            if self._follower is not None:
                self._follower.stop()
            if not self.loop.is_closed():
                self.loop.close()
            return
        if self._follower is not None:
            self._follower.halt()  # the last drain reads without its thread waiting
        self._stopping = True
        with contextlib.suppress(RuntimeError):  # the loop ended already
            self.loop.call_soon_threadsafe(self._wake.set)
        thread.join(timeout)
        if thread.is_alive():
            log.error("NATS sink did not stop within %.1f s", timeout)
        self._thread = None
        if self._follower is not None:
            self._follower.stop()
        if self._c_sink is not None:
            self._c_sink.close()

    # ---- the sink's thread --------------------------------------------------------------
    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._run())
        except Exception:
            log.exception("NATS sink failed")
        finally:
            if self._follower is not None:
                self._follower.dead = True
            self.loop.close()

    async def _run(self) -> None:
        c = self._c
        connector = asyncio.create_task(c.connect() if c is not None else self._connect())
        resender = asyncio.create_task(self._resend_loop()) if self._ack_window else None
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                # Read before the drain: a stop during a drain that had read before the last
                # writes gets one more drain (they were lost at the stop otherwise).
                stopping = self._stopping
                await self._drain()
                if stopping:
                    break
            await self._settle(STOP_SETTLE_S)
        finally:
            connector.cancel()
            if resender is not None:
                resender.cancel()
            await asyncio.gather(
                connector, *([resender] if resender else []), return_exceptions=True
            )
            out = [*self._unacked.values(), *self._refused]
            self.stats.dropped_unacked += sum(1 for e in out if not e.owed)
            self._unacked.clear()
            self._refused.clear()
            await self._close()
            await _end_other_tasks()  # what nats-py left running (a closed reconnect)

    # ---- acknowledged publishing ----------------------------------------------------------
    async def _settle(self, timeout: float) -> None:
        """At stop: wait (resending) for JetStream's acks of what is out, up to timeout."""
        deadline = time.monotonic() + timeout
        while self.unacked and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    async def _subscribe_acks(self, nc: object) -> None:
        """The inbox JetStream acks into: `<inbox>.<token>`, one token per send."""
        from nats.aio.client import Client

        assert isinstance(nc, Client)
        self._ack_prefix = nc.new_inbox() + "."
        await nc.subscribe(self._ack_prefix + "*", cb=self._on_ack)

    async def _on_ack(self, msg: object) -> None:
        """JetStream's answer to one message: it covers the messages sent before it on the
        same connection without a reply of their own (the stream takes a connection's
        messages in order), refused or stored alike."""
        from nats.aio.msg import Msg

        assert isinstance(msg, Msg)
        token = int(msg.subject.rpartition(".")[2])
        unacked = self._unacked
        entry = unacked.get(token)
        if entry is None:
            return  # the ack of a send given up on (sent again already)
        connection = self._connection()
        covered = [token]
        if entry.connection == connection:
            for earlier, other in unacked.items():
                if earlier >= token:
                    break
                if other.connection == connection:
                    covered.append(earlier)
        data = msg.data
        stats = self.stats
        if b'"seq"' in data and b'"error"' not in data:
            for done in covered:
                del unacked[done]
            stats.stored += len(covered)
            if b'"duplicate"' in data:
                stats.duplicates += 1
        else:  # an API error, or a 503 status: no stream listens (yet): all again
            stats.refused += len(covered)
            if len(data) < 300:
                stats.last_error = f"JetStream refused: {data!r} {msg.headers or ''}"
            for done in sorted(covered):
                self._refused.append(unacked.pop(done))
        if self.unacked < self._ack_window:
            self._room.set()

    def _connection(self) -> int:
        """Which of nats-py's connections this is (its reconnect count)."""
        stats = getattr(self.nc, "stats", None)
        return int(stats["reconnects"]) if isinstance(stats, dict) else -1

    async def _send(self, entry: _Unacked, reply: bool = True) -> None:
        """Send (again); reply: ask for JetStream's ack (else a later message's covers it).
        A failure here is sent again on time-out."""
        nc = self.nc
        token = self._next_token = self._next_token + 1
        entry.sent = time.monotonic()
        entry.connection = self._connection()
        self._unacked[token] = entry
        publish = getattr(nc, "publish", None)
        if publish is None or not self._ack_prefix:
            return  # not connected yet: sent on time-out
        with contextlib.suppress(Exception):  # disconnected, buffer full: sent on time-out
            await publish(
                entry.subject,
                entry.payload,
                reply=f"{self._ack_prefix}{token}" if reply else "",
                headers=entry.headers,
            )

    async def _publish_acked(
        self,
        subject: str,
        payload: bytes,
        headers: dict[str, str] | None,
        last: bool = True,
        record: tuple[int, int, int | None] = (-1, 0, -1),
    ) -> bool:
        """Send once there is room in the ack window (the ring waits meanwhile), asking for
        an ack every ACK_EVERY messages and for the last one of a read. record: its
        (session, ring seq, _Unacked.tells), owed as a gap if it is given up on. False:
        dropped."""
        while self.unacked >= self._ack_window:
            if self._stopping:  # the bus is away and the sink stops: no waiting for it
                self.stats.dropped_unacked += 1
                return False
            self._room.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._room.wait(), 0.1)
        reply = last or self._next_token % ACK_EVERY == 0 or self.unacked + 1 >= self._ack_window
        sid, seq, tells = record
        entry = _Unacked(subject, payload, headers, time.monotonic(), sid=sid, seq=seq, tells=tells)
        await self._send(entry, reply)
        return True

    async def _resend_loop(self) -> None:
        js = self.config.jetstream
        assert js is not None
        tick = min(js.ack_timeout_s / 4, RESEND_TICK_S)
        while True:
            await asyncio.sleep(tick)
            await self._resend(js.ack_timeout_s, js.retry_for_s)

    async def _resend(self, ack_timeout: float, retry_for: float) -> None:
        """Send again what was refused and what is unacknowledged past ack_timeout, in the
        order first sent; drop (counted) what is out past retry_for."""
        now = time.monotonic()
        due, self._refused = self._refused, []
        expired = []
        for token, entry in self._unacked.items():
            if now - entry.sent < ack_timeout:
                break  # oldest first: the rest is younger
            expired.append(token)
        due += [self._unacked.pop(token) for token in expired]
        due.sort(key=lambda e: e.first_sent)
        for entry in due:
            if now - entry.first_sent > retry_for:
                if not entry.owed:
                    self.stats.dropped_unacked += 1
                if entry.sid >= 0:
                    count = 1 if entry.tells == -1 else entry.tells
                    self._owe(entry.sid, entry.seq, count, SINK_UNACKED)
                continue
            self.stats.resent += 1
            await self._send(entry)
        if self._owed:
            await self._send_owed()
        if self.unacked < self._ack_window:
            self._room.set()

    def _owe(self, sid: int, seq: int, count: int | None, reason: str) -> None:
        """Records of a session from ring seq `seq` on given up on (count None: how many
        messages is not known, a gap record's): its readers are owed a `$gap` for them,
        merged with what it is owed already for the same reason."""
        owed = self._owed.get((sid, reason))
        if owed is not None:
            first, before = owed
            count = None if before is None or count is None else before + count
            seq = min(first, seq)
        self._owed[sid, reason] = (seq, count)

    def _owed_gaps(
        self,
    ) -> list[tuple[int, int, int | None, str, str, bytes, dict[str, str] | None]]:
        """The `$gap` records owed, taken: (session, first, count, reason, subject, body,
        headers: a message id where the stream dedups, so that a resend is stored once)."""
        owed, self._owed = self._owed, {}
        js = self.config.jetstream
        run = self._epoch_hex or "0"
        now = time.time_ns()
        out = []
        for (sid, reason), (first, count) in sorted(owed.items()):
            subject, data = self._gap_record(sid, first, count, reason, now)
            fields = None
            if js is not None and js.msg_ids:
                fields = {"Nats-Msg-Id": f"{sid}@{run}:{first}:{reason}:{now}"}
            out.append((sid, first, count, reason, subject, data, fields))
        return out

    async def _send_owed(self) -> None:
        """The `$gap` records owed, acked as messages are (one given up on too is owed
        again, merged with what came since)."""
        for sid, first, count, _, subject, data, fields in self._owed_gaps():
            entry = _Unacked(
                subject, data, fields, time.monotonic(), sid=sid, seq=first, tells=count,
                owed=True,
            )  # fmt: skip
            await self._send(entry)
            self.stats.gaps += 1

    async def _publish_owed(self, publish: Callable[..., Awaitable[None]]) -> None:
        """The `$gap` records owed, published plainly before what comes next (still owed
        when nats-py refuses them: its buffer is full yet)."""
        for sid, first, count, reason, subject, data, fields in self._owed_gaps():
            try:
                await publish(subject, data, headers=fields)
                self.stats.gaps += 1
            except Exception:
                self._owe(sid, first, count, reason)

    async def _close(self) -> None:
        from nats.aio.client import Client

        if self._c is not None:
            await self._c.close()
            self._count_c()
            c = self._c
            log.info(
                "NATS sink in C: %d messages sent by C, %d by Python; handed back %s",
                c.c_published,
                c.python_messages,
                c.disarms or "never",
            )
        nc = self.nc
        if isinstance(nc, Client):
            if nc.is_connected:
                try:
                    await nc.flush(timeout=2)
                except Exception as exc:
                    log.warning("NATS flush at stop failed: %s", exc)
            if not nc.is_closed:
                try:
                    await nc.close()
                except Exception as exc:
                    log.warning("NATS close failed: %s", exc)
        self.stats.connected = False

    async def _connect(self) -> None:
        """Connect (retrying until stopped, with a fresh client each time); nats-py
        reconnects by itself afterwards."""
        from nats.aio.client import Client

        cfg = self.config
        stats = self.stats

        async def on_error(exc: Exception) -> None:
            stats.errors += 1
            stats.last_error = f"{type(exc).__name__}: {exc}"
            log.debug("NATS: %s", stats.last_error)

        async def on_disconnected() -> None:
            stats.disconnects += 1
            stats.connected = False
            if not self._stopping:
                log.warning("NATS disconnected (nats-py reconnects)")

        async def on_reconnected() -> None:
            stats.reconnects += 1
            stats.connected = True
            log.info("NATS reconnected")
            if isinstance(self.nc, Client):
                await self._ensure_stream(self.nc)

        async def on_closed() -> None:
            stats.connected = False

        failures = 0
        while not self._stopping:
            nc = Client()
            try:
                await nc.connect(
                    servers=list(cfg.servers),
                    name=cfg.name,
                    connect_timeout=cfg.connect_timeout_s,  # type: ignore[arg-type]
                    reconnect_time_wait=cfg.reconnect_wait_s,  # type: ignore[arg-type]
                    max_reconnect_attempts=-1,
                    allow_reconnect=True,
                    pending_size=cfg.pending_bytes,
                    error_cb=on_error,
                    disconnected_cb=on_disconnected,
                    reconnected_cb=on_reconnected,
                    closed_cb=on_closed,
                    user=cfg.user,
                    password=cfg.password,
                    token=cfg.token,
                    skip_subject_validation=True,  # we make the subjects (names.py)
                )
            except Exception as exc:
                stats.errors += 1
                stats.last_error = f"{type(exc).__name__}: {exc}"
                failures += 1
                log.log(
                    logging.WARNING
                    if failures in (1, 10) or failures % 100 == 0
                    else logging.DEBUG,
                    "NATS connect to %s failed (%s, %d times); retrying every %.1f s",
                    ", ".join(cfg.servers),
                    stats.last_error,
                    failures,
                    cfg.reconnect_wait_s,
                )
                await asyncio.sleep(cfg.reconnect_wait_s)
                continue
            stats.connects += 1
            stats.connected = True
            log.info("NATS connected to %s", _url(nc))
            if self._ack_window:
                await self._subscribe_acks(nc)
            await self._ensure_stream(nc)
            self.nc = nc
            self._ready.set()
            return

    async def _ensure_stream(self, nc: object) -> None:
        js_cfg = self.config.jetstream
        if js_cfg is None:
            return
        from nats.aio.client import Client
        from nats.js.api import StorageType, StreamConfig
        from nats.js.errors import BadRequestError

        assert isinstance(nc, Client)
        config = StreamConfig(
            name=js_cfg.stream,
            subjects=[f"{self.prefix}.>"],
            max_bytes=js_cfg.max_bytes,
            max_msgs=js_cfg.max_msgs,
            max_age=js_cfg.max_age_s,
            storage=StorageType.MEMORY if js_cfg.storage == "memory" else StorageType.FILE,
            num_replicas=js_cfg.replicas,
            duplicate_window=js_cfg.duplicate_window_s,
        )
        js = nc.jetstream()
        try:
            try:
                await js.add_stream(config)
            except BadRequestError:  # it exists with another configuration
                await js.update_stream(config)
            self.stats.jetstream_ready = True
        except Exception as exc:
            self.stats.errors += 1
            self.stats.last_error = f"JetStream stream {js_cfg.stream}: {exc}"
            log.error("NATS: %s", self.stats.last_error)

    async def _drain(self) -> None:
        """Publish what the ring holds for the sink, then wait for the follower again."""
        follower = self._follower
        if follower is None:
            return
        if self._c is not None:
            return await self._drain_c(follower, self._c)
        try:
            while True:
                events = follower.read()
                try:
                    await self._publish(self.nc, events)
                except Exception as exc:  # a bug: the sink goes on, and its readers are told
                    self._failed(exc)
                    self.stats.dropped_error += self._owe_records(events)
                if len(events) < READ_BATCH:
                    break
                await asyncio.sleep(0)  # nats-py's own tasks (the flusher) get a turn
        finally:
            follower.rearm()

    async def _drain_c(self, follower: RingFollower, c: CNatsConnection) -> None:
        """Hand what the ring holds over to the C connection until it is armed at the
        ring's end (or waits for a connection)."""
        try:
            while True:
                events = follower.read()
                try:
                    armed = await c.publish(events)
                except Exception as exc:  # a bug: the sink goes on (C's gaps go on reconnects)
                    self._failed(exc)
                    armed = True
                if armed and len(events) < READ_BATCH:
                    break
                if not events:  # the arm was refused with nothing read: look again soon
                    self.loop.call_later(0.001, self._wake.set)
                    break
                await asyncio.sleep(0)
        finally:
            self._count_c()
            if c.armed:  # C sends from here on: woken when it stops, not per record
                follower.park()
            else:
                follower.rearm()

    def _count_c(self) -> None:
        c = self._c
        if c is not None:
            self.stats.published = c.c_published + c.python_messages

    def _subject(self, sid: int, tid: int, name: str) -> str:
        topic = self._topic_of(tid, name)
        subject = self._subjects[(sid, tid)] = nats_subject(self.prefix, sid, topic)
        return subject

    async def _publish(self, nc: object, events: list[RingEvent]) -> None:
        from nats.aio.client import Client
        from nats.errors import ConnectionClosedError, OutboundBufferLimitError

        stats = self.stats
        if not events:
            return
        if not isinstance(nc, Client):  # not connected yet
            stats.dropped_not_connected += self._owe_records(events)
            return
        publish = nc.publish
        subjects = self._subjects
        headers = self.config.headers
        js = self.config.jetstream
        msg_ids = js is not None and js.msg_ids
        acked = self._ack_window > 0
        run = self._epoch_hex or "0"
        gap_tid = self._gap_tid
        last = len(events) - 1
        while last > 0 and type(events[last]) is Gap:
            last -= 1
        if self._owed and not acked:
            await self._publish_owed(publish)
        for at, event in enumerate(events):
            if type(event) is Gap:  # the sink fell behind (buffer_full): say so
                await self._publish_behind(publish, event)
                continue
            seq, sid, name, ts, view, tid = event  # type: ignore[misc]
            payload: bytes = view  # type: ignore[assignment]  # the follower copies: bytes
            if tid == gap_tid:
                await self._publish_gap(nc, seq, sid, payload)
                continue
            subject = subjects.get((sid, tid)) or self._subject(sid, tid, name)
            fields = self._fields(sid, payload, run, seq, ts) if headers or msg_ids else None
            if acked:
                record = (sid, seq, -1)
                if await self._publish_acked(subject, payload, fields, at == last, record):
                    stats.published += 1
                continue
            try:
                await publish(subject, payload, headers=fields)
                stats.published += 1
                continue
            except OutboundBufferLimitError:
                stats.dropped_disconnected += 1
            except ConnectionClosedError:
                stats.dropped_error += 1
            except Exception as exc:
                stats.dropped_error += 1
                stats.last_error = f"{type(exc).__name__}: {exc}"
            self._owe(sid, seq, 1, SINK_DROPPED)

    def _owe_records(self, events: list[RingEvent]) -> int:
        """Records read and not published (before the first connection, or a publish that
        failed): owed to their sessions' readers as a `$gap` (SINK_DROPPED), a skip to every
        session it may have held (SINK_BEHIND), told before what comes next. How many
        records were dropped."""
        dropped = 0
        for event in events:
            if type(event) is Gap:
                for sid in self._ring_sessions():
                    self._owe(sid, event.first_seq, event.lost, SINK_BEHIND)
                continue
            seq, sid, _, _, _, tid = event  # type: ignore[misc]
            dropped += 1
            # A gap record's own count is in its body: how many is not known here.
            self._owe(sid, seq, None if tid == self._gap_tid else 1, SINK_DROPPED)
        return dropped

    def _failed(self, exc: Exception) -> None:
        """A read the sink could not hand over (a bug, not the bus): logged and counted; the
        sink goes on with the next one rather than ending for good."""
        log.exception("NATS sink: publishing a read failed")
        self.stats.errors += 1
        self.stats.last_error = f"{type(exc).__name__}: {exc}"

    async def _publish_behind(self, publish: Callable[..., Awaitable[None]], gap: Gap) -> None:
        """The `$gap` records of a skip (_behind_messages); one refused is owed."""
        for sid, subject, data in self._behind_messages(gap, gap.lost):
            try:
                await publish(subject, data)
                self.stats.gaps += 1
                self.stats.behind_gaps += 1
            except Exception:  # owed: it tells what no message will
                self._owe(sid, gap.first_seq, gap.lost, SINK_BEHIND)

    def _fields(self, sid: int, payload: bytes, run: str, seq: int, ts: int) -> dict[str, str]:
        """A message's headers: its Nats-Msg-Id (msg_ids) and the Wsgw ones (headers)."""
        fields: dict[str, str] = {}
        js = self.config.jetstream
        if js is not None and js.msg_ids:
            fields["Nats-Msg-Id"] = self._message_id(sid, payload, run, seq)
        if self.config.headers:
            self._wsgw_headers(fields, sid, seq, ts)
        return fields

    def _wsgw_headers(self, fields: dict[str, str], sid: int, seq: int, ts: int) -> None:
        """Wsgw-Seq, Wsgw-Recv-Ts and, on a fleet node, the fenced Wsgw-Gen."""
        fields["Wsgw-Seq"] = str(seq)
        fields["Wsgw-Recv-Ts"] = str(ts)
        generation = self.config.generation
        if generation is not None and (gen := generation(sid)) is not None:
            fields["Wsgw-Gen"] = str(gen)

    def _message_id(self, sid: int, payload: bytes, run: str, seq: int) -> str:
        identify = self._identity(sid)
        return message_id(sid, None if identify is None else identify(payload), run, seq)

    def _identity(self, sid: int) -> MessageIdentity | None:
        """The session's identity function, asked again after IDENTITY_TTL_S."""
        resolve = self.config.identity
        if resolve is None:
            return None
        now = time.monotonic()
        cached = self._identities.get(sid)
        if cached is not None and now - cached[0] < IDENTITY_TTL_S:
            return cached[1]
        try:
            found = resolve(sid)
        except Exception as exc:  # a session going away: ids from the run meanwhile
            log.debug("NATS: identity of session %d: %s", sid, exc)
            found = None
        self._identities[sid] = (now, found)
        return found

    async def _publish_gap(self, nc: object, seq: int, sid: int, payload: bytes) -> None:
        """A `$gap` record, with the ring's sequence number and the hub's epoch."""
        from nats.aio.client import Client

        assert isinstance(nc, Client)
        try:
            subject, data = self._gap_message(sid, seq, payload)
            js = self.config.jetstream
            fields = (
                {"Nats-Msg-Id": message_id(sid, None, self._epoch_hex or "0", seq)}
                if js is not None and js.msg_ids
                else None
            )
            if not self._ack_window:
                await nc.publish(subject, data, headers=fields)
            elif not await self._publish_acked(subject, data, fields, record=(sid, seq, None)):
                return
            self.stats.gaps += 1
        except Exception as exc:
            self.stats.dropped_error += 1
            self.stats.last_error = f"gap event: {type(exc).__name__}: {exc}"
            self._owe(sid, seq, None, SINK_DROPPED)

    def _behind_messages(self, gap: Gap, lost: int) -> list[tuple[int, str, bytes]]:
        """`lost` records from gap.first_seq on that the sink skipped when it fell more than
        buffer_messages behind, and nobody published: (session, subject, body) of a `$gap`
        (reason SINK_BEHIND) for every session the sink has published, as the ring cannot
        say whose they were (as /v1/stream consumers learn of their loop's overrun).
        Without it a NATS subscriber could not tell the sink's drop from the exchange's
        (issue #16)."""
        now = time.time_ns()
        return [
            (sid, *self._gap_record(sid, gap.first_seq, lost, SINK_BEHIND, now))
            for sid in self._ring_sessions()
        ]

    def _ring_sessions(self) -> list[int]:
        """Every session a skipped record may have been of: those with a topic in the ring
        (a session whose records were all skipped, before the first connection too) and
        those the sink has published."""
        sessions = {sid for sid, _ in self._subjects}
        follower = self._follower
        if follower is not None:
            with contextlib.suppress(RingError):
                for name in follower.reader.topics.values():
                    sid = ring_topic_session(name)
                    if sid is not None:
                        sessions.add(sid)
        return sorted(sessions)

    def _dropped_message(self, sid: int, first: int, count: int) -> tuple[str, bytes]:
        """The `$gap` record (SINK_DROPPED) of `count` messages of a session the C path's
        backlog dropped while disconnected, from ring seq `first` on."""
        return self._gap_record(sid, first, count, SINK_DROPPED, time.time_ns())

    def _gap_record(
        self, sid: int, first: int, count: int | None, reason: str, now: int
    ) -> tuple[str, bytes]:
        """A `$gap` record of the sink's own (it skipped, dropped or gave up on `count`
        records of session `sid` from ring seq `first` on): its subject and body."""
        body = gap_json(first, sid, count, reason, self._epoch_hex, {"ts_ns": now})
        return nats_gap_subject(self.prefix, sid), body

    def _gap_message(self, sid: int, seq: int, payload: bytes) -> tuple[str, bytes]:
        """A `$gap` record's subject and body, with the ring's sequence and the hub's epoch."""
        body = orjson.loads(payload)
        body["seq"] = seq
        if self._epoch_hex is not None:
            body.setdefault("epoch", self._epoch_hex)
        return nats_gap_subject(self.prefix, sid), orjson.dumps(body)

    def __repr__(self) -> str:
        return f"<NatsSink {','.join(self.config.servers)} connected={self.stats.connected}>"


async def _end_other_tasks() -> None:
    """Cancel and await every other task of the running loop, before it closes."""
    current = asyncio.current_task()
    rest = [task for task in asyncio.all_tasks() if task is not current]
    for task in rest:
        task.cancel()
    await asyncio.gather(*rest, return_exceptions=True)


def _url(nc: object) -> str:
    url = getattr(nc, "connected_url", None)
    return str(url.geturl()) if url is not None and hasattr(url, "geturl") else "?"


def _ring_name_topic(topic_id: int, ring_name: str) -> str:
    """A ring topic name `<session_id>:<topic>` without its prefix."""
    return ring_name.partition(":")[2]
