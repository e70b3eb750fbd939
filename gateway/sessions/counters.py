"""Per-session counters, bumped on the session's loop and read from any thread.

Reads from other threads take `snapshot()`: plain ints and floats are read atomically under
the GIL, and the per-topic table is copied with `dict.copy` (one C call, no Python code in
between), so a reader never sees a table change size under it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any


@dataclass
class SessionCounters:
    messages: int = 0  # data messages handed to the sink
    bytes: int = 0  # payload bytes of every message received (data and control)
    control_messages: int = 0  # acks, errors, heartbeats, notices, unknown
    batches: int = 0  # read-loop turns (one classify_batch + one publish_batch each)
    gaps: int = 0  # gap events published
    reconnects: int = 0  # established connections lost and re-opened
    connects: int = 0  # successful opening handshakes
    connect_failures: int = 0  # attempts that did not open
    subscribe_requests: int = 0  # subscribe/unsubscribe messages sent
    subscribe_errors: int = 0  # refusals from the exchange
    acks: int = 0
    heartbeats: int = 0  # dialect heartbeats and keepalive answers received
    pings_sent: int = 0
    pongs: int = 0
    keepalives_sent: int = 0
    unparsable: int = 0  # messages that are not JSON (nor a known text control): dropped
    sink_refused: int = 0  # data messages the sink raised on (a bug): lost, told as a gap
    sequence_gaps: int = 0  # exchange sequence breaks (sequence_check)
    fed_messages: int = 0  # of `messages`, those the C feed path wrote (dataplane/feed.py)
    feed_stops: int = 0  # times the C feed path handed the stream back to the read loop
    last_rtt_s: float | None = None  # round trip of the last answered ping
    last_message_at: float | None = None  # time.time() of the last message
    topic_messages: Counter[str] = field(default_factory=Counter)
    #: Failed opens and lost connections by FailureKind (refused, reset, timeout, ...);
    #: a lost connection the exchange asked us to reopen is no failure.
    failures: Counter[str] = field(default_factory=Counter)

    def snapshot(self) -> dict[str, Any]:
        """A copy safe to read from another thread; the Counters as plain dicts."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = dict.copy(value) if isinstance(value, Counter) else value
        return out
