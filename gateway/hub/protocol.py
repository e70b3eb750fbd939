"""The downstream stream protocol (/v1/stream): query parameters, frames, close codes.

Connect: `ws://HOST:PORT/v1/stream?subscription=ID` (the subscription's session, topics
and delivery options) or `?session=ID&topics=a,b` (`topics` may repeat; each value is split
on commas; leave it out for every topic of the session), with the token in
`Authorization: Bearer <token>` or `?token=` (scope `consume`). More parameters:

- `envelope=1`: every message as a JSON envelope (below) instead of the payload as is;
- session mode only (a subscription brings its own): `queue_size` (default 4096),
  `overflow` (`disconnect` | `drop_oldest`), `conflation_ms` (0: off), `consumer` (the name
  the metrics use; default: the token's name).

Frames, server to client:

- raw (default): each message is one frame holding the upstream payload unchanged, a text
  frame when it is UTF-8 (JSON feeds), else a binary frame;
- `envelope=1`: a text frame per message,
  `{"type":"msg","seq":N,"session":S,"topic":T,"recv_ts_ns":NS[,"upstream_seq":U],
  "payload":"<the payload as a string>"}` (`"payload_b64"` instead when it is not UTF-8),
  and first a `{"type":"subscribed",...,"next_seq":N,"epoch":E,"latency_profile":P,
  "reader_wait":W}` frame that says what the stream carries (P: the gateway's
  latency_profile, economical or low-latency; W: how it recommends a consumer wait for
  frames, the ring header's policy: futex (sleep in poll), spin:<us> or busy);
- gap events in both modes: a text frame
  `{"type":"gap","seq":N|null,"session":S,"lost":N|null,"reason":R[,"epoch":E]}`. reason is
  the session's (an upstream reconnect, with lost null when it cannot tell; a break in the
  exchange's own sequence numbers, with lost the count they skipped where they are
  contiguous, e.g. Binance depth update ids, also across a reconnect), `queue_full`
  (drop_oldest dropped that many of this stream's oldest messages) or `gateway_overload`
  (the stream's consumer loop in the gateway fell that many ring records behind the feed:
  of any stream, the ring cannot say whose). In raw mode a gap frame can only be told from an
  upstream payload by its shape: use envelope=1 when that matters;
- a past gap, first (after `subscribed`), when the session had an upstream gap (a
  reconnect, a gateway restart) before this stream subscribed: the session's last one,
  once, `{"type":"gap",...,"past":true,"ts_ns":NS}` with the time it happened. What was
  published before the stream subscribed may be missing; a stream that subscribes before
  the session reconnects gets that gap live instead (without `past`).

`epoch` (16 hex digits) identifies the gateway's run: the shared-memory ring's epoch, a new
random one on every start. `seq` starts again at 1 after a restart; a consumer that keeps
the epoch and finds another one on its next connection knows the gateway restarted and what
was published while it was down is missing. It is in the `subscribed` frame and the session's
gap frames (not in every message: one connection never spans two runs).

`seq` is the gateway's sequence number of the message: the same number the shared-memory
ring gives it, increasing along a stream (not contiguous: other topics take numbers too).
Messages arrive in publish order; conflation (`conflation_ms`) sends the first update of a
topic at once, then at most the latest one per topic per interval.

Close codes: 4400 bad query parameters · 4401 no, an invalid or a revoked token · 4403 the
token lacks `consume` (or auth is off and the client is not on loopback), or the
subscription is another token's · 4404 no such
subscription or session · 4410 the session was deleted (reason "session N was deleted":
nothing more will come from it) · 4429 too many failed authentications from this address
(try again later) · 1008 the token was revoked while the stream was open, or an operator
closed the stream (DELETE /v1/consumers/ID; reason "closed by operator 'NAME'") (RFC 6455
section 7.4.1, policy violation) · 4008 the consumer was too slow (overflow `disconnect`; reason
"consumer too slow: queue of N messages full") · 1013 no hub attached, or the gateway was
overloaded and dropped messages of a `disconnect` stream · 1001 the gateway is shutting
down · 1011 an internal error. The client sends nothing (what it sends is ignored).
"""

from __future__ import annotations

from typing import Final

CLOSE_NORMAL: Final = 1000
CLOSE_GOING_AWAY: Final = 1001
CLOSE_POLICY_VIOLATION: Final = 1008
CLOSE_INTERNAL_ERROR: Final = 1011
CLOSE_TRY_AGAIN_LATER: Final = 1013
CLOSE_SLOW_CONSUMER: Final = 4008
CLOSE_BAD_REQUEST: Final = 4400
CLOSE_UNAUTHORIZED: Final = 4401
CLOSE_FORBIDDEN: Final = 4403
CLOSE_NOT_FOUND: Final = 4404
CLOSE_TOO_MANY_FAILURES: Final = 4429
#: The session was deleted (HTTP 410 Gone's number, in the private range).
CLOSE_SESSION_DELETED: Final = 4410

#: A close reason holds at most 123 bytes (RFC 6455 5.5: 125-byte control payload).
MAX_REASON_BYTES: Final = 123


def close_reason(text: str) -> str:
    """text cut to what a close frame can carry, on a character boundary."""
    raw = text.encode()
    if len(raw) <= MAX_REASON_BYTES:
        return text
    return raw[: MAX_REASON_BYTES - 3].decode(errors="ignore") + "..."


def slow_consumer_reason(queue_size: int) -> str:
    return f"consumer too slow: queue of {queue_size} messages full"


def overload_reason(lost: int) -> str:
    return f"gateway overloaded: the stream fell {lost} messages behind the feed"
