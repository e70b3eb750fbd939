"""Loop mode (the engine inside an event loop, on a DPDK port) without DPDK or a loop.

`LoopPair` is test_send_in_c's `Pair` (an engine and a Python peer over an in-memory link,
on one virtual clock) switched, after `to_loop`, to what `Engine.attach_loop` with a port
gives: `_loop_thread` set and no link. The engine then defers its output and its exports to
the next turn's `flush`, and does the mid-batch export after slow-path frames, as it does
on the engine loop. In its place:

- the port is a `FakePort` whose `tx_burst` puts Python's frames on the memory link (behind
  the frames C built, as `tx_flush` would have sent them first); `port_full` makes it take
  nothing (a full TX ring);
- RX: the link's frames are injected into C by hand before each poll (`hold` adds frames a
  test kept back, to reorder or batch them);
- C's frames (its ACKs, the data segments flow sends built) are captured without a port;
  `drain_c` moves them to the link.

Every frame the engine sends, in either mode, goes through `engine_link.tx_burst`: a test
that wraps it sees (or loses) them all.

Each `step` is one turn of the loop (`Engine.turn`): the flush if the last batch or the
application left output, then one poll and the batch it brings.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from tests.unit.engine.test_send_in_c import Pair


class FakePort:
    """The engine's `port` in loop mode: Python's TX bursts go to the memory link."""

    def __init__(self, pair: LoopPair) -> None:
        self.pair = pair
        self.full = False  # True: the TX ring takes nothing (Python's frames back up)

    def tx_burst(self, frames: Sequence[bytes]) -> int:
        self.pair.drain_c()  # C's queued frames left first (Engine._transmit's flush_tx)
        if self.full:
            return 0
        self.pair.engine_link.tx_burst(list(frames))
        return len(frames)


class LoopPair(Pair):
    """A `Pair` whose engine runs in loop mode after `to_loop` (link mode before it)."""

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.looping = False
        self.port: FakePort | None = None
        self.rx_log: list[bytes] = []  # every frame injected into C in loop mode
        self.hold: list[bytes] = []  # injected (after the link's) at the next step

    def to_loop(self) -> None:
        engine = self.engine
        engine.link = None
        self.port = FakePort(self)
        engine.port = self.port  # type: ignore[assignment]
        engine._loop_thread = threading.get_ident()
        self.looping = True

    def drain_c(self) -> None:
        """C's captured frames onto the link (what a poll's tx_flush sends on a port)."""
        frames = self.engine.fastpath.take_tx()
        if frames:
            self.engine_link.tx_burst(frames)

    def inject_rx(self) -> None:
        frames = self.engine_link.rx_burst(256) + self.hold
        self.hold = []
        self.rx_log.extend(frames)
        if frames:
            self.engine.fastpath.inject(frames)

    def step(self) -> None:
        if not self.looping:
            super().step()
            return
        self.peer.step()
        engine = self.engine
        engine.fastpath.set_time(self.clock())
        if engine._dirty:
            engine.flush()
            self.drain_c()
        self.inject_rx()
        engine.settle_if_quiet(engine.run_once(0.0))  # as Engine.turn does
        self.drain_c()

    def close(self) -> None:
        engine = self.engine
        if self.looping:
            engine._loop_thread = None
            engine.port = None
            engine.link = self.engine_link
            self.looping = False
        super().close()


def tcp_header(frame: bytes) -> tuple[int, int, bytes] | None:
    """(flags, ack, payload) of an IPv4 TCP frame without IP options, else None."""
    if frame[12:14] != b"\x08\x00" or frame[23] != 6:
        return None
    ip_total = int.from_bytes(frame[16:18], "big")
    tcp = 14 + 20
    tcp_len = (frame[tcp + 12] >> 4) * 4
    ack = int.from_bytes(frame[tcp + 8 : tcp + 12], "big")
    return frame[tcp + 13], ack, frame[tcp + tcp_len : 14 + ip_total]


def is_pure_ack(frame: bytes) -> bool:
    """A TCP segment with only the ACK flag and no payload."""
    parsed = tcp_header(frame)
    return parsed is not None and parsed[0] == 0x10 and not parsed[2]
