"""Scripted faults: what the simulator does wrong on purpose, and the raw frames for it.

A fault is armed on a connection and fires after that connection has been sent `after`
more data messages (0: at once). Kinds:

    drop       abort the TCP connection, no close frame (client: closed, code 1006)
    close      a clean close with `code`/`reason` (client: ConnectionClosedOK/Error)
    stall      send nothing for `seconds`, then everything held back (client: a gap in time)
    malformed  one bad frame: `variant` rsv (reserved bits set), utf8 (invalid UTF-8 in a
               text frame), mask (a masked server frame) or control (a fragmented ping)
    oversized  one valid text message of `size` bytes (client: message too big, 1009)
    opcode     a frame with the unknown `opcode` (default 3) (client: protocol error)
    notice     the exchange's own "please reconnect" message (bts:request_reconnect, ...)
    reset      abort with a TCP RST (SO_LINGER 0): the peer reads ECONNRESET (client: 1006)
    skip       the connection misses data messages its group still sends to the others:
               the next `count`, each with probability `fraction` (from then on), or the one
               numbered `seq` on each of its topics
    delay      every message to the connection leaves `seconds` late from then on (a slower
               line; `seconds=0` ends it); order and content unchanged
    checksum   the next `count` book messages with a checksum (Kraken, OKX) carry a wrong one
    stale      the next REST book snapshot (any connection: REST has none) is the book as it
               was `behind` updates ago, with that update's sequence (Binance lastUpdateId,
               Bitstamp microtimestamp)
    unavailable  the next `count` REST book snapshots (any connection) answer 503: a
               snapshot endpoint down for a while
    nosnapshot the connection's next `count` subscribes to a book topic get no snapshot, only
               the updates (Kraken, OKX, Bybit, Coinbase send one on subscribe)
    reorder    the next data message leaves after the one that follows it (two swapped):
               a Bitstamp diff older than the one before it

A dropped book update is `skip` (the next one, `count=1`, or the one numbered `seq`).

`seconds` can also be given as `ms=` or `us=`. Faults target one connection of a feed group
(`leg:A`, a connection id) as well as all of them; see Simulator.inject.

Text form (CLI flags, stdin, in-band topics): `kind[:k=v,...]` or `kind,k=v,...`, e.g.
`drop:after=100`, `stall:after=10,seconds=3`, `malformed:variant=utf8`.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

KINDS = (
    "drop",
    "close",
    "stall",
    "malformed",
    "oversized",
    "opcode",
    "notice",
    "reset",
    "skip",
    "delay",
    "checksum",
    "stale",
    "unavailable",
    "nosnapshot",
    "reorder",
)
#: Faults of the simulator rather than of a connection.
SIMULATOR_KINDS = ("stale", "unavailable")
MALFORMED_VARIANTS = ("rsv", "utf8", "mask", "control")


class FaultError(ValueError):
    """A fault description that does not parse."""


@dataclass(frozen=True)
class Fault:
    kind: str
    after: int = 0
    seconds: float = 1.0
    size: int = 2 * 1024 * 1024
    variant: str = "rsv"
    opcode: int = 3
    code: int = 1001
    reason: str = "simulated close"
    count: int = 1  # skip, checksum, unavailable, nosnapshot: how many
    fraction: float = 0.0  # skip: the probability of each message (0: use count or seq)
    seq: int = 0  # skip: the message numbered seq (its sim_seq) on each topic
    behind: int = 50  # stale: how many updates the REST snapshot lags

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise FaultError(f"unknown fault {self.kind!r}; known: {', '.join(KINDS)}")
        if self.after < 0 or self.seconds < 0 or self.size < 1:
            raise FaultError("after, seconds and size must not be negative")
        if self.count < 0 or self.seq < 0 or self.behind < 0 or not 0.0 <= self.fraction <= 1.0:
            raise FaultError("count and seq must not be negative, fraction is in [0, 1]")
        if self.variant not in MALFORMED_VARIANTS:
            raise FaultError(f"unknown variant {self.variant!r}; known: {MALFORMED_VARIANTS}")
        if self.opcode in (0, 1, 2, 8, 9, 10) or not 0 <= self.opcode <= 15:
            raise FaultError(f"opcode {self.opcode} is not an unknown opcode")

    @classmethod
    def parse(cls, text: str) -> Fault:
        """`drop:after=10`, `stall,after=5,seconds=2` (case does not matter)."""
        text = text.strip()
        kind, _, rest = text.replace(":", ",", 1).partition(",")
        options: dict[str, str] = {}
        for item in filter(None, (p.strip() for p in rest.split(","))):
            key, sep, value = item.partition("=")
            if not sep:
                raise FaultError(f"fault option {item!r} is not key=value")
            options[key.strip().lower()] = value.strip()
        return cls.from_mapping({"kind": kind.strip().lower(), **options})

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> Fault:
        """From a command (JSON or query strings): values converted to the field types."""
        known = {f.name: f for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for unit, scale in (("ms", 1e-3), ("us", 1e-6)):
            if unit in values and "seconds" not in values:
                try:
                    kwargs["seconds"] = float(values[unit]) * scale
                except (TypeError, ValueError) as exc:
                    raise FaultError(f"fault option {unit}={values[unit]!r}: {exc}") from None
        for key, value in values.items():
            if key not in known:
                continue
            kind = known[key].type
            try:
                if kind in ("int", int):
                    kwargs[key] = int(value)
                elif kind in ("float", float):
                    kwargs[key] = float(value)
                else:
                    kwargs[key] = str(value).lower() if key in ("kind", "variant") else str(value)
            except (TypeError, ValueError) as exc:
                raise FaultError(f"fault option {key}={value!r}: {exc}") from None
        if "kind" not in kwargs:
            raise FaultError("a fault needs a kind")
        return cls(**kwargs)

    def describe(self) -> str:
        extra = {
            "stall": f",seconds={self.seconds}",
            "oversized": f",size={self.size}",
            "malformed": f",variant={self.variant}",
            "opcode": f",opcode={self.opcode}",
            "close": f",code={self.code}",
            "delay": f",seconds={self.seconds}",
            "checksum": f",count={self.count}",
            "unavailable": f",count={self.count}",
            "nosnapshot": f",count={self.count}",
            "stale": f",behind={self.behind}",
            "skip": (
                f",fraction={self.fraction}"
                if self.fraction
                else f",seq={self.seq}"
                if self.seq
                else f",count={self.count}"
            ),
        }.get(self.kind, "")
        return f"{self.kind}:after={self.after}{extra}"


def frame_header(opcode: int, length: int, *, fin: bool = True, rsv: int = 0) -> bytes:
    """A server (unmasked) frame header, RFC 6455 section 5.2."""
    first = (0x80 if fin else 0) | (rsv & 0x7) << 4 | opcode
    if length < 126:
        return bytes((first, length))
    if length < 1 << 16:
        return struct.pack("!BBH", first, 126, length)
    return struct.pack("!BBQ", first, 127, length)


def malformed_frame(variant: str) -> bytes:
    payload = b'{"sim":"malformed"}'
    if variant == "rsv":
        return frame_header(0x1, len(payload), rsv=0b100) + payload  # RSV1 without extension
    if variant == "utf8":
        bad = b'{"sim":"\xff\xfe"}'
        return frame_header(0x1, len(bad)) + bad
    if variant == "mask":
        header = frame_header(0x1, len(payload))
        key = b"\x01\x02\x03\x04"
        masked = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
        return bytes((header[0], header[1] | 0x80)) + key + masked
    # A ping without FIN: control frames must not be fragmented.
    return frame_header(0x9, 4, fin=False) + b"ping"


def unknown_opcode_frame(opcode: int) -> bytes:
    return frame_header(opcode, 0)


def oversized_message(size: int) -> bytes:
    """A valid JSON text message of exactly size bytes (at least 12)."""
    head, tail = b'{"pad":"', b'"}'
    return head + b"x" * max(0, size - len(head) - len(tail)) + tail
