"""The stream sink: /v1/stream frames sent by the ring's writer itself (dataplane/shim/sink.c).

Without it a record reaches a /v1/stream client through two wake-ups in series after the
ring write: the API loop's (its router, woken by the writer) and the client's. With it the
thread that writes the record (the engine's C feed or group, or the hub's publisher for
kernel sessions) sends the record's frame to each *armed* socket right after the write, in
C, and the loop's wake-up leaves the path; the router still follows the ring, to learn what
was sent and to take over exactly where the sink stopped.

The hand-over (gateway.hub.consumer.Consumer keeps the Python side of it): a consumer's
socket is armed at ring sequence S only when the consumer has written everything before S
and its transport holds nothing (and the ring holds nothing from S on yet: C checks). The
sink disarms on EAGAIN, a partial send (it keeps the frame's rest for Python), any error
or a gap record of the session; Python disarms before it writes anything itself (a pong, a
close). Python then resumes at the first record the sink did not send, the rest of a
partial frame first. Envelope streams (`add_envelope`) get from C the bytes
`Delivery.envelope_wire` makes, for the topics Python told the envelope's middle of; C stops
on a record of another topic, a payload that is not UTF-8 (`payload_b64`) and one published
with an upstream seq (`envelope_hold`, around Hub.publish_batch's ring write): Python sends
those. Conflating streams and TLS stay on Python. WSGW_STREAM_SINK=0 (or
app.state.stream_sink = False) turns it off.

The writer pays each armed stream's send on every record (about 12 us on loopback, the
receiver's wake-up included), so the sink serves at most `api.stream_sink_max` streams per
ring (MAX_STREAMS_DEFAULT), first armed first served; the others stay on the router and try
to arm again only once a place is free (StreamSink.room, read without the writer's mutex).

While the sink sends all a router's streams get, the router's loop parks (it is not woken
per record, gateway.hub.follower): the sink writes the follower's eventfd when it stops by
itself (`SinkSocket.wake_on_stop`). `StreamSink.lags` samples, per send, the time from the
record's ring stamp to the send (the feed bench's split).
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from typing import Any

import orjson

from dataplane.shim import stream_sink as c

#: Whether /v1/stream uses the sink (api.routes.stream reads it into app.state.stream_sink).
SINK_DEFAULT = os.environ.get("WSGW_STREAM_SINK", "1") != "0"

#: Streams the sink serves per ring unless api.stream_sink_max says otherwise; the most.
MAX_STREAMS_DEFAULT = 8
MAX_STREAMS_LIMIT = c.MAX_SOCKETS

#: The state's fields (wsgw_sink.h)
ST_ARMED = c.ST_ARMED
ST_NEXT_SEQ = c.ST_NEXT_SEQ
ST_REST_LEN = c.ST_REST_LEN
ST_REASON = c.ST_REASON
ST_MESSAGES = c.ST_MESSAGES
ST_SENDS = c.ST_SENDS
REASONS = c.REASONS
#: Why the sink stopped (its state's ST_REASON)
PYTHON, AGAIN, PARTIAL, ERROR, GAP, TOPIC, BUSY, UTF8, EXTRA = (
    c.PYTHON,
    c.AGAIN,
    c.PARTIAL,
    c.ERROR,
    c.GAP,
    c.TOPIC,
    c.BUSY,
    c.UTF8,
    c.EXTRA,
)

#: While on, the records this thread writes carry what only Python puts in an envelope (an
#: upstream_seq): the envelope sockets that want one stop there (EXTRA) and Python sends it.
envelope_hold = c.envelope_hold


def envelope_middle(session_id: int, topic: str) -> bytes:
    """An envelope's bytes between its seq and its recv_ts_ns for a topic of a session, as
    gateway.hub.events.Delivery.envelope spells them (orjson)."""
    return b',"session":%d,"topic":%s,"recv_ts_ns":' % (session_id, orjson.dumps(topic))


class SinkError(OSError):
    """The sink refused a socket (its table is full, the fd is gone)."""


class StreamSink:
    """The C sink of one ring writer (the hub's): a table of stream sockets."""

    def __init__(self, writer_handle: int, gap_topic_id: int) -> None:
        rc, self._handle = c.open_sink(writer_handle, gap_topic_id)
        if rc < 0:
            raise SinkError(-rc, f"stream sink: {os.strerror(-rc)}")
        self._lock = threading.Lock()  # close against the calls of other threads
        self.closed = False
        self.max_streams = MAX_STREAMS_LIMIT
        self.limit_streams(MAX_STREAMS_DEFAULT)

    def limit_streams(self, limit: int) -> None:
        """Arm at most limit stream sockets at once (NATS slots are not counted); lowering it
        disarms nobody, later arms wait until fewer are armed."""
        if limit == self.max_streams:
            return
        if not 0 <= limit <= MAX_STREAMS_LIMIT:
            raise ValueError(f"stream sink: max streams {limit} not in 0..{MAX_STREAMS_LIMIT}")
        with self._lock:
            if not self.closed:
                c.max_streams(self._handle, limit)
            self.max_streams = limit

    def room(self) -> int:
        """How many more stream sockets may be armed now (a hint: no mutex taken)."""
        with self._lock:
            return 0 if self.closed else c.stream_room(self._handle)

    def add(self, fd: int, session_id: int, topic_ids: list[int]) -> SinkSocket:
        """A socket of session_id's topic ids ([]: all of the session), not armed."""
        return self._add(c.add, fd, session_id, topic_ids)

    def add_envelope(self, fd: int, session_id: int, topic_ids: list[int]) -> SinkSocket:
        """An envelope stream's socket (as add's), not armed: it sends the records of the
        topics it was told the middle of (SinkSocket.envelope_topic) as JSON envelopes and
        stops at the others, at payloads that are not UTF-8 and at records written under
        envelope_hold."""
        return self._add(c.add_envelope, fd, session_id, topic_ids)

    def add_nats(self, fd: int, busy_sends: int = 0) -> SinkSocket:
        """A NATS connection (every session, PUB records: gateway.hub.nats_c), not armed;
        more than busy_sends sends in a millisecond disarm it (0: never)."""
        return self._add(c.add_nats, fd, busy_sends)

    def _add(self, add: Callable[..., int], *args: Any) -> SinkSocket:
        """A slot made by the C call add(handle, *args): its SinkSocket, or SinkError."""
        with self._lock:
            if self.closed:
                raise SinkError(errno.EBADF, "stream sink closed")
            slot = add(self._handle, *args)
        if slot < 0:
            raise SinkError(-slot, f"stream sink: {os.strerror(-slot)}")
        return SinkSocket(self, slot)

    def lags(self) -> tuple[int, list[int]]:
        """(sends ever sampled, the newest samples oldest first): per send, ns from its
        oldest record's ring stamp (the session's read) to the send; the split of a
        consumer's latency (wsgw bench feed). (0, []) once closed."""
        with self._lock:
            return (0, []) if self.closed else c.lags(self._handle)

    def close(self) -> None:
        """Stop sending (the writer never touches the sink again) and free it."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            c.close_sink(self._handle)


class SinkSocket:
    """One socket's entry in the sink (the consumer's loop thread)."""

    def __init__(self, sink: StreamSink, slot: int) -> None:
        self.sink = sink
        self.slot = slot
        self.removed = False

    def arm(self, seq: int) -> bool:
        """Arm at seq: False when the ring already holds seq (route it first), when the sink
        serves its most streams already (the caller stays on the router) or when gone."""
        with self.sink._lock:
            if self.removed or self.sink.closed:
                return False
            return c.arm(self.sink._handle, self.slot, seq) == 0

    def state(self) -> tuple[int, ...]:
        """What the sink did (ST_* fields); once gone: disarmed, nothing sent."""
        with self.sink._lock:
            if self.removed or self.sink.closed:
                return _GONE
            return c.state(self.sink._handle, self.slot)

    def disarm(self) -> tuple[int, ...]:
        """Disarm (the caller writes next); the state as `state`."""
        with self.sink._lock:
            if self.removed or self.sink.closed:
                return _GONE
            return c.disarm(self.sink._handle, self.slot)

    def take_rest(self, state: tuple[int, ...]) -> bytes:
        """The rest of a frame the sink sent in part, now the caller's to write first."""
        if not state[ST_REST_LEN]:
            return b""
        with self.sink._lock:
            if self.removed or self.sink.closed:
                return b""
            return c.take_rest(self.sink._handle, self.slot, state[ST_REST_LEN])

    def subject(self, topic_id: int, subject: bytes) -> bool:
        """A NATS slot: topic_id's records go to subject (False: refused or gone)."""
        with self.sink._lock:
            if self.removed or self.sink.closed:
                return False
            return c.nats_subject(self.sink._handle, self.slot, topic_id, subject) == 0

    def envelope_topic(self, topic_id: int, middle: bytes) -> bool:
        """An envelope slot: topic_id's envelopes carry middle (envelope_middle); False when
        refused or gone."""
        with self.sink._lock:
            if self.removed or self.sink.closed:
                return False
            return c.envelope_topic(self.sink._handle, self.slot, topic_id, middle) == 0

    def wake_on_stop(self, fd: int) -> bool:
        """The sink writes 1 to the eventfd fd (a dup of it) when it stops sending by itself
        (EAGAIN, a gap, ...; not a disarm of Python's): the follower of the ring may then
        stay parked while the sink sends (gateway.hub.follower). False when refused."""
        with self.sink._lock:
            if self.removed or self.sink.closed:
                return False
            return c.wake_fd(self.sink._handle, self.slot, fd) == 0

    def remove(self) -> None:
        """Forget the socket (its dup is closed; idempotent)."""
        with self.sink._lock:
            if not (self.removed or self.sink.closed):
                c.remove(self.sink._handle, self.slot)
            self.removed = True


#: The state of a socket whose sink is gone (the hub closed): not armed, resume anywhere.
_GONE = (0, 0, 0, c.PYTHON, 0, 0, 0, 0, 0)
