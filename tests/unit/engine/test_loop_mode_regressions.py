"""Regressions of the engine in loop mode (inside an event loop, on a port), where the output
and the flows' export to C wait for the next turn's flush, and of the C send path.

Each test names what went wrong before its fix. The loop-mode runs use `LoopPair`
(tests/unit/engine/loop_harness.py): the engine of test_send_in_c's `Pair` in loop mode
over the same in-memory link, on a virtual clock. Where a run can be compared with link
mode (the engine's own thread: output and export at the end of every batch), it is, and the
two must agree.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import pytest

from dataplane.stack.socket import TcpSocket
from dataplane.stack.tcp import TcpConfig
from dataplane.wire.arp import OP_REQUEST, ArpRepr
from dataplane.wire.ethernet import EthernetRepr
from tests.unit.engine.engine_peer import ENGINE_IP, PEER_IP
from tests.unit.engine.loop_harness import LoopPair, is_pure_ack
from tests.unit.engine.test_send_in_c import PAYLOAD_LIMIT, PORT, Pair, reader

THIRD_MAC, THIRD_IP = bytes.fromhex("020000000a03"), ENGINE_IP + 2


@pytest.fixture
def loop_pair() -> Iterator[LoopPair]:
    p = LoopPair()
    yield p
    p.close()


def lose_first(pair: Pair, predicate: Callable[[bytes], bool]) -> list[bytes]:
    """Drop the first engine -> peer frame that matches (either mode); returns the drops."""
    dropped: list[bytes] = []
    send = pair.engine_link.tx_burst

    def tx_burst(frames: list[bytes]) -> int:
        kept = []
        for frame in frames:
            if not dropped and predicate(frame):
                dropped.append(frame)
            else:
                kept.append(frame)
        send(kept)
        return len(frames)

    pair.engine_link.tx_burst = tx_burst  # type: ignore[method-assign,assignment]
    return dropped


def arp_request_from_a_third_host() -> bytes:
    """Slow path, and the ARP cache learns a host: the next export covers every flow."""
    arp = ArpRepr(OP_REQUEST, THIRD_MAC, THIRD_IP, bytes(6), ENGINE_IP).emit()
    return EthernetRepr(b"\xff" * 6, THIRD_MAC, 0x0806).emit(arp)


# ---- 1. an ACK Python owes at once, handed to C mid-batch, then cancelled by the flush -----
#
# The mid-batch export after slow-path frames handed C the ACK Python owed (`_ack_now`); the
# flush's export then saw `last_ack_sent == rcv_nxt` with C's ACK pending and took it for
# one Python's own segment had carried: `flow_give_ack(slot, 0, 0, 0)` cancelled it before
# C ever polled, and the ACK never left. Now FastPath.export cancels only when Python did
# send an ACK-carrying segment since the last export (`acking_segments_sent`).


def _handshake(loop: bool) -> tuple[bool, int, int]:
    p = LoopPair()
    try:
        if loop:
            p.to_loop()
        p.iface.connect(PEER_IP, PORT, p.clock())
        accepted = None
        while accepted is None and p.clock() < 0.15:  # before the peer's SYN-ACK RTO (0.2 s)
            p.step()
            accepted = p.listener.accept()
            p.advance()
        stats = p.engine_link.stats
        return accepted is not None, stats.tx_frames, stats.rx_frames
    finally:
        p.close()


def test_the_handshake_ack_leaves_when_the_client_stays_silent() -> None:
    """The client connects and sends nothing. Before, in loop mode, the handshake's final ACK
    was handed to C and cancelled: only the SYN left, the peer stayed in SYN-RECEIVED and
    retransmitted its SYN-ACK, whose ACKs were lost the same way, until it gave up."""
    # accepted, frames the engine sent (SYN, ACK), frames it got (one SYN-ACK)
    assert _handshake(loop=True) == _handshake(loop=False) == (True, 2, 1)


def _lost_ack(loop: bool) -> tuple[bytes, bool, int, bool]:
    peer_tcp = TcpConfig(time_wait=0.05, rto_min=0.05, rto_initial=0.2, delayed_ack=0)
    p = LoopPair(peer_tcp=peer_tcp)
    try:
        sock, server = p.open()
        if loop:
            p.to_loop()
        dropped = lose_first(p, is_pure_ack)
        server.send(b"quote 1")
        peer = server.connection
        got = bytearray()
        end = p.clock() + 2.0
        while p.clock() < end:
            p.step()
            got.extend(sock.recv(100))
            if dropped and peer._snd_una == peer._snd_max:
                break
            p.advance()
        return bytes(got), bool(dropped), peer.stats.retransmits, peer._snd_una == peer._snd_max
    finally:
        p.close()


def test_a_lost_ack_is_sent_again_for_the_peers_retransmission() -> None:
    """The ACK of the peer's data is lost; the peer retransmits. Before, in loop mode, the
    engine's duplicate ACK (RFC 9293 3.10.7.4: <ACK=RCV.NXT> for an unacceptable segment)
    was handed to C and cancelled at every retransmission, until the peer gave up."""
    # the bytes, an ACK was lost, one retransmission, and it is acknowledged
    assert _lost_ack(loop=True) == _lost_ack(loop=False) == (b"quote 1", True, 1, True)


def _keepalive(loop: bool) -> tuple[int, str, BaseException | None, str]:
    peer_tcp = TcpConfig(
        time_wait=0.05,
        rto_min=0.05,
        rto_initial=0.2,
        keepalive=1.0,
        keepalive_interval=0.5,
        keepalive_probes=3,
    )
    p = LoopPair(peer_tcp=peer_tcp)
    try:
        sock, server = p.open()
        if loop:
            p.to_loop()
        peer = server.connection
        end = p.clock() + 4.0  # unanswered, the probes give up after 1 + 3 * 0.5 s
        while p.clock() < end and peer.error is None:
            p.step()
            p.advance()
        return peer.stats.keepalives_sent, peer.state.name, peer.error, sock.state.name
    finally:
        p.close()


def test_the_peers_keepalive_probes_are_answered() -> None:
    """An idle connection whose peer sends keep-alive probes (SEG.SEQ = SND.NXT - 1: each
    draws an ACK). Before, in loop mode, every answer was cancelled in C and the peer reset
    the connection ("keep-alive probes went unanswered")."""
    loop, link = _keepalive(loop=True), _keepalive(loop=False)
    assert loop == link
    sent, state, error, engine_side = loop
    assert sent >= 3 and state == "ESTABLISHED" and error is None
    assert engine_side == "ESTABLISHED"


# ---- 2. the mid-batch export wrote a stale SND.UNA into C ---------------------------------
#
# The export right after the slow path ran before `settle_acks`: for a flow whose ACKs C
# took in that very poll (their processing deferred), it wrote Python's older snd_una and
# window back into C. An ARP change (an export of every flow) made it hit a quiet flow that
# the flush then did not export again. Now Engine._handle_poll settles the ACKs first.


class _Sent:
    """A loop-mode connection with three 100-byte segments sent by C, and the peer's ACK of
    each (delayed_ack=0), taken off the link so the test delivers them as it likes."""

    def __init__(self) -> None:
        peer_tcp = TcpConfig(time_wait=0.05, rto_min=0.05, rto_initial=0.2, delayed_ack=0)
        p = self.pair = LoopPair(peer_tcp=peer_tcp)
        sock, self.server = p.open()
        p.to_loop()
        for _ in range(5):  # what the handshake's turns left
            p.step()
            p.advance()
        self.conn = conn = sock.connection
        self.flow = p.engine.fastpath.flow(p.engine.fastpath._slots[id(conn)])
        assert conn.fast_sender is not None
        self.base = conn._snd_una
        before = p.c_segments()
        for data in (b"a" * 100, b"b" * 100, b"c" * 100):
            sock.send(data)
            p.drain_c()
            p.clock.advance(0.0006)
            p.engine.fastpath.set_time(p.clock())
            p.peer.step()  # each segment its own ACK
        assert p.c_segments() == before + 3
        p.clock.advance(0.002)
        self.acks = p.engine_link.rx_burst(256)
        assert len(self.acks) == 3

    def turns(self, *frames: bytes) -> None:
        """The frames in one poll, then the next turn (the flush and an empty poll)."""
        self.pair.hold = list(frames)
        self.pair.step()
        self.pair.step()

    def acked(self) -> tuple[int, int]:
        """(Python's, C's) SND.UNA, relative to the first segment."""
        return self.conn._snd_una - self.base, (self.flow.snd_una - self.base) & 0xFFFFFFFF


@pytest.fixture
def sent() -> Iterator[_Sent]:
    s = _Sent()
    yield s
    s.pair.close()


def test_a_reordered_old_ack_after_an_arp_export_is_dropped(sent: _Sent) -> None:
    """The second ACK and an ARP request arrive in one poll, the first ACK after them.
    Before, C was left at the old SND.UNA, took the late first ACK as advancing, and the
    flush raised TcpStateError ("fast path out of step") from _absorb_acks."""
    ack1, ack2, ack3 = sent.acks
    sent.turns(ack2, arp_request_from_a_third_host())
    assert sent.acked() == (200, 200)  # C is in step with Python
    sent.turns(ack1)  # an old ACK: the slow path drops it
    assert sent.acked() == (200, 200)
    assert sent.conn.error is None
    sent.turns(ack3)
    assert sent.acked() == (300, 300)
    assert sent.conn._snd_una == sent.conn._snd_max


def test_a_dup_ack_after_an_arp_export_is_counted_by_python(sent: _Sent) -> None:
    """As above, then the second ACK again: a duplicate ACK (RFC 5681), with data still in
    flight. C must leave it to Python, which counts it (fast retransmit depends on it).
    Before, C's stale SND.UNA made it look advancing: C took it and no one counted it."""
    _, ack2, ack3 = sent.acks
    sent.turns(ack2, arp_request_from_a_third_host())
    dup_acks = sent.conn.stats.dup_acks
    sent.turns(ack2)
    assert sent.conn.stats.dup_acks == dup_acks + 1
    assert sent.acked() == (200, 200)
    sent.turns(ack3)
    assert sent.acked() == (300, 300)


# ---- 3. a flush from inside the batch -------------------------------------------------------
#
# A protocol that writes from data_received with EngineTransport.flush_on_write calls
# Engine.flush() in the middle of FastPath.absorb's loop over the batch's flows: the flush
# exported flows whose bytes C held but Python had not absorbed yet, and the next absorb
# raised TcpStateError ("RCV.NXT moved 0 for 10 bytes"). Now a flush inside the batch only
# marks the engine dirty; the output leaves at the batch's end (or the next turn).


def _bump_dirty(pair: Pair, sb: TcpSocket) -> None:
    # B is in the interface's dirty set (an export handed it a delayed ACK, say)
    sb.connection._changed()


def _bump_arp(pair: Pair, sb: TcpSocket) -> None:
    # the ARP cache changed (a refresh, a gratuitous ARP): the next export is every flow
    pair.iface._arp_version -= 1


@pytest.mark.parametrize("bump", [_bump_dirty, _bump_arp])
def test_a_pong_from_data_received_with_flush_on_write(
    bump: Callable[[Pair, TcpSocket], None],
) -> None:
    """Two connections get data in one poll, A's first; A's reader answers and flushes (what
    EngineTransport.write does with flush_on_write=True). The flush must not export B, whose
    bytes are still in C, before they are absorbed."""
    pair = Pair()
    try:
        sa, server_a = pair.open()
        sb, server_b = pair.open()
        engine = pair.engine
        # a batch before: B's Python state differs from what was last written to C
        server_b.send(b"earlier")
        pair.peer.step()
        pair.clock.advance(0.001)
        engine.run_once(0.0)
        assert sb.recv(100) == b"earlier"
        answered: list[bytes] = []

        def data_received(data: bytes) -> None:
            answered.append(data)
            sa.send(b"pong")
            engine.flush()

        sa.connection.direct_reader = data_received
        bump(pair, sb)
        server_a.send(b"ping")
        server_b.send(b"data for b")
        pair.peer.step()
        pair.clock.advance(0.001)
        engine.run_once(0.0)  # raised TcpStateError before
        assert answered == [b"ping"]
        assert sb.recv(100) == b"data for b"
        got = bytearray()
        pair.run(reader(server_a, got, lambda: bytes(got) == b"pong"))
        assert sa.error is None and sb.error is None
    finally:
        pair.close()


def test_a_pong_from_data_received_with_flush_on_write_in_loop_mode(
    loop_pair: LoopPair,
) -> None:
    """The same in loop mode, where the flush exports only when the interface has work: B's
    quiet batch in the last turn was not exported, and in this batch an ARP entry reaches
    its refresh margin while A's callback runs (2 ms), so the flush A's write triggered
    exported every flow, B's stale state with them, before B's bytes were absorbed."""
    pair = loop_pair
    sa, server_a = pair.open()
    sb, server_b = pair.open()
    pair.to_loop()
    pair.steps(3)
    engine = pair.engine
    # a third host's ARP entry, whose refresh margin is reached 0.5 s from now
    arp = pair.iface.arp
    refresh_at = pair.clock() + 0.5
    arp.learn(
        THIRD_IP, THIRD_MAC, refresh_at - arp.config.reachable_time + arp.config.refresh_margin
    )
    engine.mark_dirty()
    pair.steps(3)  # the export of every flow the learning brings
    server_b.send(b"earlier")
    pair.run(lambda: sb.recv(100) == b"earlier")  # B: a quiet fast-path batch
    end = pair.clock() + 0.1
    while pair.clock() < end:  # C's delayed ACK of it leaves; nothing else happens
        pair.step()
        pair.advance()
    assert pair.clock() < refresh_at - 0.01
    pair.clock.advance_to(refresh_at - 0.002)
    answered: list[bytes] = []

    def data_received(data: bytes) -> None:
        answered.append(data)
        pair.clock.advance(0.002)  # the application takes 2 ms
        sa.send(b"pong")
        engine.flush()  # EngineTransport._wrote with flush_on_write

    sa.connection.direct_reader = data_received
    server_a.send(b"ping")
    server_b.send(b"data for b")
    pair.peer.step()
    pair.clock.advance(0.001)
    pair.step()  # raised TcpStateError before
    assert answered == [b"ping"]
    pong, for_b = bytearray(), bytearray()

    def both() -> bool:
        pong.extend(server_a.recv(100))
        for_b.extend(sb.recv(100))
        return bytes(pong) == b"pong" and bytes(for_b) == b"data for b"

    pair.run(both)
    assert sa.error is None and sb.error is None


# ---- 4. the RTO restarted from the poll's clock after a slow callback -----------------------
#
# In loop mode the ACKs C took are processed at the next flush with the poll's time. A
# segment the application sent in between (timed with the later clock) had its RTO
# restarted by _on_new_ack from that older time: when the callbacks took longer than
# RTO - RTT, the RTO fired at the flush for a segment just sent. Now fastpath_acked uses the
# later of the poll's time and the connection's own clock.


def _slow_callback(fast: bool, app_time: float) -> tuple[int, int, float, float]:
    tcp = TcpConfig(time_wait=0.05, rto_min=0.05, rto_initial=0.2, delayed_ack=0)
    p = LoopPair(peer_tcp=tcp, fast_path=fast)
    try:
        sock, server = p.open()
        p.to_loop()
        conn = sock.connection
        for i in range(20):  # the RTT estimator settles (the RTO at rto_min)
            sock.send(b"r%d;" % i)
            end = p.clock() + 0.01
            while p.clock() < end:
                p.step()
                server.recv(100)
                p.advance()
        assert conn._snd_una == conn._snd_max
        rto = conn._rtt.rto
        sock.send(b"request 1")
        while True:  # until the peer's ACK of it was polled (and, in C, left for the flush)
            p.step()
            server.recv(100)
            if p.engine.fastpath._acks_due or conn._snd_una == conn._snd_max:
                break
            p.advance()
        assert bool(p.engine.fastpath._acks_due) is fast
        timeouts, retransmits = conn.stats.timeouts, conn.stats.retransmits
        # the loop's callbacks of this turn: the application works, then answers
        p.clock.advance(app_time)
        p.engine.fastpath.set_time(p.clock())
        sock.send(b"request 2")
        sent_at = p.clock()
        p.step()  # the next turn: the flush (settle_acks), then a poll
        deadline = conn._rto_deadline
        assert deadline is not None
        got = bytearray()
        p.run(reader(server, got, lambda: got.endswith(b"request 2")))
        return (
            conn.stats.timeouts - timeouts,
            conn.stats.retransmits - retransmits,
            deadline - sent_at,
            rto,
        )
    finally:
        p.close()


@pytest.mark.parametrize("app_time", [0.03, 0.06])
def test_no_spurious_rto_after_a_slow_callback(app_time: float) -> None:
    """The peer's ACK of request 1 is taken by C; the application's callbacks then take
    `app_time` (against an RTO of 50 ms) and send request 2. Before, its RTO deadline was
    the poll's time + RTO: 30 ms of callbacks left it 20 ms, 60 ms fired it at the flush
    (a timeout and a retransmission of a segment sent microseconds before)."""
    fast_timeouts, fast_rtx, fast_left, rto = _slow_callback(True, app_time)
    slow_timeouts, slow_rtx, slow_left, _ = _slow_callback(False, app_time)
    assert rto == pytest.approx(0.05)  # rto_min: the callbacks are most of it, or more
    assert (fast_timeouts, fast_rtx) == (slow_timeouts, slow_rtx) == (0, 0)
    # a whole RTO from the send on, as on the Python path
    assert fast_left >= rto - 1e-9
    assert slow_left >= rto - 1e-9


# ---- the C send path held behind Python's TX backlog ---------------------------------------
#
# Frames Python could not put on the port wait in the engine's backlog; a segment C built
# meanwhile would leave before them (out of order). Engine._transmit now holds C's sends
# (FastPath.hold_tx; flow_send returns -EAGAIN) while the backlog is not empty, and the
# sends fall back to Python, queued behind it.


def test_a_held_fast_path_sends_through_python_in_order() -> None:
    pair = Pair()
    try:
        sock, server = pair.open()
        before = pair.c_segments()
        pair.engine.fastpath.hold_tx(True)
        assert sock.send(b"first;") == 6
        assert pair.c_segments() == before  # C refused: Python sends it
        pair.step()
        assert sock.send(b"second;") == 7
        assert pair.c_segments() == before
        pair.engine.fastpath.hold_tx(False)
        assert sock.send(b"third;") == 6
        assert pair.deliver(sock, server, b"first;second;third;") == b"first;second;third;"
        assert server.connection.stats.ooo_segments == 0
        assert sock.send(b"fourth") == 6
        assert pair.c_segments() == before + 1  # C builds them again
        assert pair.deliver(sock, server, b"fourth") == b"fourth"
    finally:
        pair.close()


def test_a_send_waits_behind_the_ports_backlog(loop_pair: LoopPair) -> None:
    """Loop mode: the port's TX ring is full when Python transmits two full segments, so
    they wait in the engine's backlog; a small send then must not go through C (which would
    put it on the wire ahead of them) and the peer gets every byte in order."""
    pair = loop_pair
    sock, server = pair.open()
    pair.to_loop()
    pair.steps(3)
    engine = pair.engine
    port = pair.port
    assert port is not None
    before = pair.c_segments()
    data = random.Random(1).randbytes(2 * PAYLOAD_LIMIT)
    port.full = True
    assert sock.send(data) == len(data)
    engine.mark_dirty()  # what EngineTransport.write does
    pair.step()
    assert len(engine._tx_backlog) == 2 and engine._tx_held
    assert sock.send(b"small") == 5
    engine.mark_dirty()
    assert pair.c_segments() == before  # held: Python queues it behind the backlog
    pair.step()
    assert len(engine._tx_backlog) == 3
    port.full = False
    engine.mark_dirty()  # the next write or event retries the backlog
    assert pair.deliver(sock, server, data + b"small") == data + b"small"
    assert not engine._tx_held
    assert server.connection.stats.ooo_segments == 0
    assert sock.connection.stats.retransmits == 0
    assert sock.send(b"again") == 5
    engine.mark_dirty()
    assert pair.c_segments() == before + 1  # the hold is lifted
    assert pair.deliver(sock, server, b"again") == b"again"
