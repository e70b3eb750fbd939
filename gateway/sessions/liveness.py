"""When to ping, when to send the dialect's keepalive, and when a connection is dead.

Sans-IO with the time passed in (monotonic seconds), like the planner: `due(now)` says what
to do, `next_deadline(now)` when to look again. The session's housekeeping task sleeps
until then; tests step a fake clock.

Two different deaths, because they have different causes:
- ping timeout: our WebSocket ping got no pong and nothing else arrived either, for
  ping_timeout_s: the path or the peer is gone (websockets, picows and browsers do this).
  Any message after the ping restarts the wait, as a pong may queue behind a burst.
- no data: no message at all for dead_feed_timeout_s while topics are subscribed. A server
  can answer pings from its network thread while its feed is stuck; for market data that
  connection is dead. Application keepalive answers (OKX "pong") are messages and count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from gateway.sessions.config import HeartbeatConfig

#: RFC 6455 section 7.4.1 says 1011 is the server's; the IANA registry (and websockets'
#: keepalive) use it for an endpoint ending a connection on an unexpected condition.
CLOSE_DEAD = 1011


class Due(Enum):
    PING = "ping"
    KEEPALIVE = "keepalive"


@dataclass(frozen=True)
class Dead:
    """The connection is to be closed: why, and the close code to send."""

    reason: str
    code: int = CLOSE_DEAD


class Liveness:
    """One connection's heartbeat schedule and verdicts."""

    def __init__(
        self, heartbeat: HeartbeatConfig, keepalive_interval: float | None, now: float
    ) -> None:
        self.ping_interval = heartbeat.ping_interval_s
        self.ping_timeout = heartbeat.ping_timeout_s
        self.dead_after = heartbeat.dead_feed_timeout_s
        self.keepalive_interval = keepalive_interval
        self.last_message = now
        self.ping_sent_at: float | None = None  # the ping awaiting its pong
        self.next_ping = now + self.ping_interval if self.ping_interval else math.inf
        self.next_keepalive = now + keepalive_interval if keepalive_interval else math.inf
        self.expecting_since: float | None = None  # topics subscribed since then
        self.last_rtt: float | None = None

    # ---- inputs ----------------------------------------------------------------------------
    def on_message(self, now: float) -> None:
        self.last_message = now

    def on_pong(self, now: float, rtt: float) -> None:
        self.ping_sent_at = None
        self.last_rtt = rtt

    def on_ping_sent(self, now: float) -> None:
        self.ping_sent_at = now
        self.next_ping = now + (self.ping_interval or math.inf)

    def on_keepalive_sent(self, now: float) -> None:
        self.next_keepalive = now + (self.keepalive_interval or math.inf)

    def expect_data(self, now: float, expecting: bool = True) -> None:
        """Topics are (or are no longer) subscribed: arm or disarm the dead-feed check."""
        if not expecting:
            self.expecting_since = None
        elif self.expecting_since is None:
            self.expecting_since = now

    # ---- verdicts --------------------------------------------------------------------------
    def dead(self, now: float) -> Dead | None:
        if self.ping_sent_at is not None:
            quiet = now - max(self.ping_sent_at, self.last_message)
            if quiet >= self.ping_timeout:
                return Dead(f"ping timeout: no pong and no message for {quiet:.1f} s")
        if self.dead_after is not None and self.expecting_since is not None:
            quiet = now - max(self.last_message, self.expecting_since)
            if quiet >= self.dead_after:
                return Dead(f"no data for {quiet:.1f} s (dead-feed timeout {self.dead_after} s)")
        return None

    def due(self, now: float) -> list[Due]:
        out: list[Due] = []
        if self.ping_sent_at is None and now >= self.next_ping:
            out.append(Due.PING)
        if now >= self.next_keepalive:
            out.append(Due.KEEPALIVE)
        return out

    def next_deadline(self, now: float) -> float:
        """The earliest time at which `dead` or `due` may answer differently."""
        times = [self.next_keepalive]
        if self.ping_sent_at is None:
            times.append(self.next_ping)
        else:
            times.append(max(self.ping_sent_at, self.last_message) + self.ping_timeout)
        if self.dead_after is not None and self.expecting_since is not None:
            times.append(max(self.last_message, self.expecting_since) + self.dead_after)
        return min(times)
