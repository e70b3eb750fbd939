"""The receive side's ACK rules, one test per rule, against the engine (C fast path and
Python slow path together) from a scripted peer, the smoltcp way: the peer is segment
helpers on the other end of an in-memory link, on a virtual clock.

What must hold whatever the ACK policy saves (RFC 1122 section 4.2.3.2, RFC 5681 section
4.2, RFC 9293 section 3.8.6.2.2):
- in-order data is acknowledged at least every second full-sized segment, and a burst of
  them that arrives together gets one cumulative ACK (a stretch ACK, as Linux's GRO gives);
- an out-of-order segment gets an immediate duplicate ACK;
- a segment that fills a hole gets an immediate ACK;
- a lone segment is acknowledged within the delayed-ACK timer, not before;
- a window that opens a lot after the application read is announced at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from dataplane.engine import Engine, EngineConfig
from dataplane.fastpath import FastPathConfig
from dataplane.links.clock import VirtualClock
from dataplane.links.memory import MemoryLink, memory_link_pair
from dataplane.stack.socket import TcpSocket
from dataplane.stack.tcp import TcpConfig
from dataplane.wire.ethernet import EthernetRepr
from dataplane.wire.ipv4 import PROTO_TCP, Ipv4Repr
from dataplane.wire.tcp import TcpFlags, TcpOptions, TcpRepr
from tests.unit.engine.engine_peer import ENGINE_IP, ENGINE_MAC, PEER_IP, PEER_MAC, iface_pair

PORT = 7000
MSS = 1460
DELAYED_ACK = 0.040
PEER_ISS = 900_000


@dataclass
class ScriptedPeer:
    """The peer's end of the link: it sends the segments a test scripts and collects what
    the engine sends back. seq is its next sequence number."""

    link: MemoryLink
    engine: Engine
    clock: VirtualClock
    local_port: int = PORT
    remote_port: int = 0
    seq: int = PEER_ISS
    ack: int = 0  # the engine's next sequence number, as the peer acknowledges it
    received: list[TcpRepr] = field(default_factory=list)

    def frame(
        self, seq: int, payload: bytes = b"", flags: TcpFlags = TcpFlags.ACK, mss: int | None = None
    ) -> bytes:
        options = TcpOptions(mss=mss)
        tcp = TcpRepr(
            self.local_port, self.remote_port, seq, self.ack, flags, 65535, options, payload
        ).emit(PEER_IP, ENGINE_IP)
        ip = Ipv4Repr(src=PEER_IP, dst=ENGINE_IP, protocol=PROTO_TCP, payload_len=len(tcp))
        return EthernetRepr(ENGINE_MAC, PEER_MAC, 0x0800).emit(ip.emit(tcp))

    def send(self, *frames: bytes) -> None:
        """The frames arrive together (one RX burst), then the engine runs."""
        assert self.link.tx_burst(list(frames)) == len(frames)
        self.run()

    def run(self) -> None:
        for _ in range(3):
            self.engine.run_once(0.0)
        self.collect()

    def collect(self) -> None:
        for raw in self.link.rx_burst(1024):
            _, payload = EthernetRepr.parse(raw)
            ip, tcp = Ipv4Repr.parse(payload)
            self.received.append(TcpRepr.parse(tcp, ip.src, ip.dst))

    def take(self) -> list[TcpRepr]:
        out, self.received = self.received, []
        return out

    def data(self, offset: int, size: int, *, psh: bool = False) -> bytes:
        """A segment of size bytes at offset bytes past the first data byte."""
        flags = TcpFlags.ACK | TcpFlags.PSH if psh else TcpFlags.ACK
        return self.frame(PEER_ISS + 1 + offset, bytes(size), flags)

    def advance(self, seconds: float) -> None:
        self.clock.advance_to(self.clock() + seconds)
        self.run()


@dataclass
class Setup:
    peer: ScriptedPeer
    sock: TcpSocket
    engine: Engine


def established(recv_buffer: int = 256 << 10) -> Iterator[Setup]:
    """An engine whose connection to the scripted peer is ESTABLISHED and exported to the
    C fast path (no timestamps, no window scaling: the plainest header C predicts)."""
    clock = VirtualClock()
    a, b = memory_link_pair(clock=clock, latency=0.0, mac_a=ENGINE_MAC, mac_b=PEER_MAC)
    tcp = TcpConfig(delayed_ack=DELAYED_ACK, recv_buffer=recv_buffer)
    engine_iface, _ = iface_pair(tcp, seed=1)
    config = FastPathConfig(ack_policy="delayed", delayed_ack=DELAYED_ACK)
    engine = Engine(engine_iface, link=a, clock=clock, config=EngineConfig(fastpath=config))  # type: ignore[arg-type]
    peer = ScriptedPeer(b, engine, clock)
    try:
        sock = engine_iface.connect(PEER_IP, PORT, clock())
        peer.run()
        (syn,) = peer.take()
        assert syn.flags & TcpFlags.SYN
        peer.remote_port = syn.src_port
        peer.ack = syn.seq + 1
        peer.send(peer.frame(PEER_ISS, b"", TcpFlags.SYN | TcpFlags.ACK, mss=MSS))
        (third,) = peer.take()
        assert third.ack == PEER_ISS + 1 and sock.state.name == "ESTABLISHED"
        peer.run()
        assert engine.fastpath.stats()["fast_segments"] == 0
        yield Setup(peer, sock, engine)
    finally:
        engine.close()


@pytest.fixture
def setup() -> Iterator[Setup]:
    yield from established()


def test_an_in_order_burst_gets_one_cumulative_ack(setup: Setup) -> None:
    peer = setup.peer
    peer.send(*(peer.data(i * MSS, MSS) for i in range(20)))
    (ack,) = peer.take()
    assert ack.ack == PEER_ISS + 1 + 20 * MSS
    stats = setup.engine.fastpath.stats()
    assert stats["fast_segments"] == 20 and stats["acks_sent"] == 1  # C took and acked them


def test_every_second_full_sized_segment_is_acked_at_once(setup: Setup) -> None:
    peer = setup.peer
    peer.send(peer.data(0, MSS))
    (first,) = peer.take()  # at once: the peer's MSS is taken to be 536 until seen
    assert first.ack == PEER_ISS + 1 + MSS
    peer.send(peer.data(MSS, MSS))
    assert peer.take() == []  # one full-sized segment (as learnt from the first): it waits
    peer.send(peer.data(2 * MSS, MSS))
    (ack,) = peer.take()
    assert ack.ack == PEER_ISS + 1 + 3 * MSS
    assert setup.engine.fastpath.stats()["fast_segments"] == 3


def test_a_lone_segment_is_acked_when_the_delayed_ack_timer_fires(setup: Setup) -> None:
    peer = setup.peer
    peer.send(peer.data(0, 100))
    assert peer.take() == []
    peer.advance(DELAYED_ACK / 2)
    assert peer.take() == []
    peer.advance(DELAYED_ACK / 2 + 0.001)
    (ack,) = peer.take()
    assert ack.ack == PEER_ISS + 1 + 100


def test_an_out_of_order_segment_gets_an_immediate_duplicate_ack(setup: Setup) -> None:
    peer = setup.peer
    peer.send(peer.data(0, MSS), peer.data(2 * MSS, MSS))  # the second MSS is missing
    acks = peer.take()
    assert acks and acks[-1].ack == PEER_ISS + 1 + MSS  # at once, not after the timer
    peer.send(peer.data(3 * MSS, MSS))
    (dup,) = peer.take()
    assert dup.ack == PEER_ISS + 1 + MSS and not dup.payload  # a duplicate ACK


def test_a_segment_that_fills_the_hole_gets_an_immediate_ack(setup: Setup) -> None:
    peer = setup.peer
    peer.send(peer.data(0, MSS), peer.data(2 * MSS, MSS))
    peer.take()
    peer.send(peer.data(MSS, 100))  # part of the hole: still a hole behind it
    (partial,) = peer.take()
    assert partial.ack == PEER_ISS + 1 + MSS + 100
    peer.send(peer.data(MSS + 100, MSS - 100))  # the rest: the hole is filled
    (filled,) = peer.take()
    assert filled.ack == PEER_ISS + 1 + 3 * MSS
    assert bytes(setup.sock.recv(1 << 20)) == bytes(3 * MSS)


def test_the_window_reopening_after_a_read_is_announced_at_once() -> None:
    for setup in established(recv_buffer=8 * MSS):
        peer = setup.peer
        peer.send(*(peer.data(i * MSS, MSS) for i in range(8)))  # the whole window
        (ack,) = peer.take()
        assert ack.ack == PEER_ISS + 1 + 8 * MSS and ack.window < MSS
        assert len(setup.sock.recv(1 << 20)) == 8 * MSS
        peer.run()
        (update,) = peer.take()  # RFC 1122 4.2.3.3: no waiting for more data
        assert update.ack == PEER_ISS + 1 + 8 * MSS and update.window >= 4 * MSS
