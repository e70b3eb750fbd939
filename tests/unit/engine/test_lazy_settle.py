"""Loop mode: the ACK processing of the ACKs C took (`FastPath.settle_acks`) is lazy.

`Engine.flush` settles only when the interface has work (output, a timer due, a dirty
connection, ARP), when a poll that brought nothing asked for it (`settle_if_quiet`), or once
`SETTLE_EVERY` polls' entries wait; the slow path settles before it handles a frame; a
connection with timestamps gets one `fastpath_acked` call for several entries. The runs use
`LoopPair` (tests/unit/engine/loop_harness.py) on a virtual clock; `_Stream` keeps a poll
bringing data (with an advancing ACK, which C takes) at every turn.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

import dataplane.engine as engine_module
from dataplane.engine import SETTLE_EVERY
from dataplane.stack.tcp import TcpConfig, TcpConnection, TcpState
from tests.unit.engine.loop_harness import LoopPair
from tests.unit.engine.test_send_in_c import TCP, settled

NO_TS = TcpConfig(time_wait=0.05, rto_min=0.05, rto_initial=0.2, timestamps=False)
TURN = 0.001  # virtual time per turn: more than the link's latency (0.5 ms)


def request(i: int) -> bytes:
    return b"req %04d;" % i


class _Stream:
    """A loop-mode connection whose application sends a request before every turn and whose
    peer echoes each at once: from the third turn on, every poll brings an echo, whose ACK
    (of a request) C takes and whose processing waits for a settle."""

    def __init__(self, tcp: TcpConfig = TCP) -> None:
        p = self.pair = LoopPair(engine_tcp=tcp, peer_tcp=tcp)
        self.sock, self.server = p.open()
        p.to_loop()
        for _ in range(5):  # what the handshake's turns left
            p.step()
            p.advance()
        self.engine = p.engine
        self.fastpath = fastpath = p.engine.fastpath
        self.conn = conn = self.sock.connection
        self.flow = fastpath.flow(fastpath._slots[id(conn)])
        assert conn.fast_sender is not None
        assert fastpath.acks_due() == 0
        self.sent = bytearray()  # what the application sent
        self.got = bytearray()  # what it read back
        self.echoed = bytearray()  # what the peer read (and echoed)
        self.close_after_echo = False  # the peer closes right after its next echo
        self.received: list[int] = []  # per turn, what the poll brought (run_once)
        self.due: list[int] = []  # per turn, the entries waiting after it
        self.settles: list[tuple[int, int, int]] = []  # (entries, Python's, C's SND.UNA)
        p.peer.services.append(self._echo)
        run_once = self.engine.run_once

        def counting_run_once(budget: float = 0.0, until: float | None = None) -> int:
            received = run_once(budget, until)
            self.received.append(received)
            return received

        self.engine.run_once = counting_run_once  # type: ignore[method-assign]
        settle = fastpath.settle_acks

        def recording_settle() -> None:
            entries = fastpath.acks_due()
            settle()
            if entries:
                self.settles.append((entries, self.snd_una(), self.c_snd_una()))

        fastpath.settle_acks = recording_settle  # type: ignore[method-assign]

    def _echo(self, _now: float) -> None:
        server = self.server
        if server.state is not TcpState.ESTABLISHED:
            return
        data = server.recv(1 << 16)
        self.echoed.extend(data)
        if data:
            server.send(data)
        if self.close_after_echo:
            server.close()

    def snd_una(self) -> int:
        """Python's SND.UNA, 32-bit."""
        return self.conn._snd_una & 0xFFFFFFFF

    def c_snd_una(self) -> int:
        return int(self.flow.snd_una)

    def turn(self, data: bytes | None = None, gap: float = TURN) -> None:
        """The application's callbacks (send `data`, as EngineTransport.write does), then a
        turn of the loop (the flush, a poll, its batch), then `gap` of virtual time."""
        p = self.pair
        if data:
            assert self.sock.send(data) == len(data)
            self.sent.extend(data)
            self.engine.mark_dirty()
        p.step()
        self.got.extend(self.sock.recv(1 << 16))
        self.due.append(self.fastpath.acks_due())
        p.clock.advance(gap)
        p.engine.fastpath.set_time(p.clock())

    def stream(self, count: int, first: int = 0, gap: float = TURN) -> None:
        for i in range(first, first + count):
            self.turn(request(i), gap)

    def drain(self, limit: int = 200) -> None:
        """Turns without a request until every echo is in and every byte acknowledged."""
        for _ in range(limit):
            if self.got == self.sent and settled(self.conn):
                return
            self.turn()
        raise AssertionError(f"not drained: {len(self.got)}/{len(self.sent)} {self.conn!r}")

    def close(self) -> None:
        self.pair.close()


@pytest.fixture
def stream() -> Iterator[_Stream]:
    s = _Stream()
    yield s
    s.close()


def assert_clean(conn: TcpConnection) -> None:
    stats = conn.stats
    assert conn.error is None
    assert (stats.timeouts, stats.retransmits, stats.fast_retransmits) == (0, 0, 0)


# ---- 1. every poll brings data: the entries wait, up to SETTLE_EVERY -------------------------


@pytest.mark.parametrize("tcp", [TCP, NO_TS], ids=["timestamps", "no-timestamps"])
def test_entries_wait_up_to_settle_every_while_every_poll_brings_data(tcp: TcpConfig) -> None:
    s = _Stream(tcp)
    try:
        assert s.conn.timestamps_enabled is tcp.timestamps
        s.stream(6 * SETTLE_EVERY)
        assert all(s.received[-5 * SETTLE_EVERY :])  # every poll brought an echo
        # the entries accumulated (lazy), never beyond SETTLE_EVERY
        assert max(s.due) == SETTLE_EVERY
        assert all(due <= SETTLE_EVERY for due in s.due)
        lazy = [entries for entries, _, _ in s.settles]
        assert lazy and max(lazy) == SETTLE_EVERY
        assert len(lazy) < len(s.due) // 2  # not a settle per turn
        # each settle left Python where C is
        assert all(python == c for _, python, c in s.settles), s.settles
        assert s.got == s.sent[: len(s.got)] and len(s.got) >= len(s.sent) - 3 * len(request(0))
        s.drain()
        assert s.got == s.sent == s.echoed
        assert s.snd_una() == s.c_snd_una()
        assert_clean(s.conn)
    finally:
        s.close()


# ---- 2. a poll that brings nothing settles at once ------------------------------------------


def test_a_poll_that_brings_nothing_settles_at_once(stream: _Stream) -> None:
    s = stream
    calls: list[tuple[int, int, int]] = []  # (received, entries before, entries after)
    settle_if_quiet = s.engine.settle_if_quiet

    def recording(received: int) -> None:
        before = s.fastpath.acks_due()
        settle_if_quiet(received)
        calls.append((received, before, s.fastpath.acks_due()))

    s.engine.settle_if_quiet = recording  # type: ignore[method-assign]
    s.stream(SETTLE_EVERY // 2 + 2)  # some entries wait, fewer than SETTLE_EVERY
    assert 0 < s.fastpath.acks_due() < SETTLE_EVERY
    assert s.conn._snd_una < s.conn._snd_max  # in Python's view, not all acknowledged
    calls.clear()
    # no more requests: the echoes still in flight come in, then a poll brings nothing
    for _ in range(10):
        s.turn()
        if calls[-1][0] == 0:
            break
    received, before, after = calls[-1]
    assert received == 0 and before > 0 and after == 0  # settled by this very poll
    assert all(r > 0 for r, _, _ in calls[:-1])  # the polls with data left them waiting
    assert s.fastpath.acks_due() == 0
    assert s.conn._snd_una == s.conn._snd_max == s.conn._snd_nxt
    assert s.snd_una() == s.c_snd_una()
    assert s.got == s.sent
    assert_clean(s.conn)


def test_settle_if_quiet_leaves_the_entries_of_a_poll_with_data(stream: _Stream) -> None:
    s = stream
    s.stream(4)
    due = s.fastpath.acks_due()
    assert due > 0
    assert not s.engine.interface.has_work(s.pair.clock())
    s.engine.settle_if_quiet(1)
    assert s.fastpath.acks_due() == due
    s.engine.flush()  # no work, no request, fewer than SETTLE_EVERY: still lazy
    assert s.fastpath.acks_due() == due
    s.engine.settle_if_quiet(0)
    assert s.fastpath.acks_due() == 0
    assert s.snd_una() == s.c_snd_una()


def test_engine_turn_settles_after_a_quiet_poll(stream: _Stream) -> None:
    """Engine.turn itself (not only the harness's step) asks for the settle."""
    s = stream
    s.stream(4)
    for _ in range(2):  # the echoes in flight: polls with data
        s.turn()
    assert s.got == s.sent
    assert s.fastpath.acks_due() > 0
    p = s.pair
    p.peer.step()
    p.inject_rx()  # nothing
    s.engine.turn(0.0)  # the flush (lazy), an empty poll, then the settle
    p.drain_c()
    assert s.received[-1] == 0
    assert s.fastpath.acks_due() == 0
    assert s.conn._snd_una == s.conn._snd_max
    assert s.snd_una() == s.c_snd_una()


def test_flush_settles_when_the_interface_has_work(stream: _Stream) -> None:
    s = stream
    s.stream(4)
    assert s.fastpath.acks_due() > 0
    s.conn._changed()  # a dirty connection: the flush exports it (it reads the send side)
    assert s.engine.interface.has_work(s.pair.clock())
    s.engine.flush()
    assert s.fastpath.acks_due() == 0
    assert s.snd_una() == s.c_snd_una()


# ---- 3. a FIN or an RST on the slow path after polls whose ACKs wait --------------------------


def _slow_path_probe(s: _Stream) -> list[tuple[int, int, int, str]]:
    """Wrap the interface's receive (the slow path): (entries waiting, Python's SND.UNA,
    C's, the connection's state) each time it is handed frames."""
    seen: list[tuple[int, int, int, str]] = []
    iface = s.engine.interface
    receive = iface.receive

    def probe(frames: Any, now: float) -> None:
        seen.append((s.fastpath.acks_due(), s.snd_una(), s.c_snd_una(), s.conn.state.name))
        receive(frames, now)

    iface.receive = probe  # type: ignore[method-assign]
    return seen


@pytest.mark.parametrize("tcp", [TCP, NO_TS], ids=["timestamps", "no-timestamps"])
def test_the_peers_fin_finds_the_acks_of_earlier_polls_processed(tcp: TcpConfig) -> None:
    """The peer echoes the last request and closes (its FIN acknowledges that request): the
    FIN goes to the slow path a poll after echoes whose ACKs C took. Processed before
    them, its ACK moved SND.UNA past theirs (TcpStateError, "fast path out of step")."""
    s = _Stream(tcp)
    try:
        s.stream(5)
        seen = _slow_path_probe(s)
        s.close_after_echo = True
        for _ in range(10):
            s.turn()
            if s.sock.at_eof:
                break
        assert seen, "the FIN never reached the slow path"
        due, python, c, state = seen[0]
        assert due == 0  # the ACKs C took were processed first
        assert python == c and state == "ESTABLISHED"
        assert s.sock.state is TcpState.CLOSE_WAIT and s.sock.at_eof
        assert s.got == s.sent == s.echoed
        assert s.conn._snd_una == s.conn._snd_max
        assert s.fastpath.acks_due() == 0
        assert_clean(s.conn)
        s.sock.close()  # LAST-ACK, then CLOSED once the peer acknowledges our FIN
        for _ in range(20):
            s.turn()
            if s.conn.state is TcpState.CLOSED:
                break
        assert s.conn.state is TcpState.CLOSED and s.conn.error is None
    finally:
        s.close()


def _peer_ends(s: _Stream, how: str) -> None:
    """The peer closes (a FIN on its own: it has echoed everything) or aborts (an RST);
    the segment leaves now, at the peer's step."""
    if how == "fin":
        s.server.close()
    else:
        s.server.abort()
    s.pair.peer.step()


def _check_ended(s: _Stream, how: str, seen: list[tuple[int, int, int, str]]) -> None:
    assert seen, "nothing reached the slow path"
    due, python, c, state = seen[0]
    assert due == 0  # the ACKs C took were processed first
    assert python == c == s.snd_una() and state == "ESTABLISHED"
    assert s.got == s.sent == s.echoed
    assert s.fastpath.acks_due() == 0
    stats = s.conn.stats
    assert (stats.timeouts, stats.retransmits) == (0, 0)
    if how == "fin":
        assert s.sock.state is TcpState.CLOSE_WAIT and s.sock.at_eof
        assert s.conn.error is None
        assert s.conn._snd_una == s.conn._snd_max
    else:
        assert s.sock.state is TcpState.CLOSED
        assert s.conn.error is not None and s.conn.error.errno == errno.ECONNRESET


def _ended_after(s: _Stream) -> None:
    for _ in range(5):
        s.turn()
        if s.sock.state is not TcpState.ESTABLISHED:
            return


@pytest.mark.parametrize("tcp", [TCP, NO_TS], ids=["timestamps", "no-timestamps"])
@pytest.mark.parametrize("how", ["fin", "rst"])
def test_a_fin_or_rst_in_the_poll_after_polls_with_data(how: str, tcp: TcpConfig) -> None:
    """The peer's FIN (or RST) arrives alone, in the poll after one that brought its last
    echo: the ACKs of that poll and the ones before it still wait when the slow path gets
    the segment. Processed after it, they would find SND.UNA moved (a FIN's ACK) or the
    connection gone (an RST: they were dropped, Python's SND.UNA left behind C's)."""
    s = _Stream(tcp)
    try:
        s.stream(5)
        s.turn()  # the peer echoes the last request now; an echo comes in
        _peer_ends(s, how)  # a turn's time after the echo: it arrives a poll later
        s.turn()  # the last echo: a poll with data
        assert s.received[-1] == 1 and s.got == s.sent
        assert s.fastpath.acks_due() > 1  # this poll's entry and earlier ones wait
        assert s.snd_una() != s.c_snd_una()
        seen = _slow_path_probe(s)
        _ended_after(s)
        _check_ended(s, how, seen)
    finally:
        s.close()


@pytest.mark.parametrize("tcp", [TCP, NO_TS], ids=["timestamps", "no-timestamps"])
@pytest.mark.parametrize("how", ["fin", "rst"])
def test_a_fin_or_rst_in_the_same_poll_as_the_flows_data(how: str, tcp: TcpConfig) -> None:
    """The last echo (C takes its ACK) and the FIN (or RST) after it come in one poll: the
    flow's absorb (slow_pending) processes the entries of earlier polls, then this poll's,
    in order, before the slow path handles the segment."""
    s = _Stream(tcp)
    try:
        s.stream(5)
        s.turn()  # the peer echoes the last request now; an echo comes in
        assert s.fastpath.acks_due() > 1
        _peer_ends(s, how)
        s.pair.clock.advance(0.0006)  # the FIN (RST) is in too at the next poll
        seen = _slow_path_probe(s)
        _ended_after(s)
        assert s.received[-1] == 2  # the echo and the FIN (RST), in one poll
        _check_ended(s, how, seen)
    finally:
        s.close()


# ---- 4. lazy versus settling at every flush ---------------------------------------------------


@dataclass
class Outcome:
    snd_una: int
    snd_max: int
    snd_wnd: int
    tx_len: int
    cwnd: int
    peer_got: bytes
    engine_got: bytes
    settles: int
    timeouts: int
    retransmits: int


def _exchange(tcp: TcpConfig) -> Outcome:
    s = _Stream(tcp)
    try:
        base = s.conn._snd_una
        s.stream(40)
        for i in range(40, 60):  # two requests a turn, then one every other turn
            s.turn(request(i) + request(1000 + i))
        for i in range(60, 80):
            s.turn(request(i) if i % 2 else None)
        s.drain()
        conn = s.conn
        stats = conn.stats
        return Outcome(
            conn._snd_una - base,
            conn._snd_max - base,
            conn._snd_wnd,
            len(conn._tx),
            stats.cwnd,
            bytes(s.echoed),
            bytes(s.got),
            len(s.settles),
            stats.timeouts,
            stats.retransmits,
        )
    finally:
        s.close()


@pytest.mark.parametrize("tcp", [TCP, NO_TS], ids=["timestamps", "no-timestamps"])
def test_lazy_settling_ends_as_settling_at_every_flush(
    tcp: TcpConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    lazy = _exchange(tcp)
    monkeypatch.setattr(engine_module, "SETTLE_EVERY", 1)
    eager = _exchange(tcp)
    assert lazy.settles < eager.settles  # the lazy run did settle less often
    for run in (lazy, eager):
        assert run.snd_una == run.snd_max  # everything acknowledged
        assert run.tx_len == 0
        assert run.peer_got == run.engine_got  # in order, every byte, both ways
        assert (run.timeouts, run.retransmits) == (0, 0)
    assert lazy.peer_got == eager.peer_got
    assert (lazy.snd_una, lazy.snd_wnd, lazy.tx_len) == (eager.snd_una, eager.snd_wnd, 0)
    # Small segments, far from any window: the congestion window grows by the bytes
    # acknowledged either way (slow start: min(acked, acks * SMSS), acks summed on a merge).
    assert lazy.cwnd == eager.cwnd


# ---- 5. no spurious RTO while ACKs wait -----------------------------------------------------


def test_a_stale_rto_deadline_passed_with_acks_waiting_does_not_fire(stream: _Stream) -> None:
    """The request's ACK is taken by C and waits; the application then stays silent past the
    RTO deadline Python still has for it. The turn that finds the timer due settles first:
    no timeout, no retransmission."""
    s = stream
    conn = s.conn
    assert conn._rtt.rto == pytest.approx(0.05)  # rto_min
    s.stream(3)
    for _ in range(2):  # the last echoes: their ACKs wait too
        s.turn()
    assert s.got == s.sent
    assert s.fastpath.acks_due() > 0
    deadline = conn._rto_deadline
    assert deadline is not None  # stale: everything was acknowledged, in C
    s.pair.clock.advance_to(deadline + 0.01)
    s.pair.engine.fastpath.set_time(s.pair.clock())
    assert s.engine.interface.has_work(s.pair.clock())  # the RTO is due, in Python's view
    s.turn()
    assert s.fastpath.acks_due() == 0
    assert conn._rto_deadline is None
    assert_clean(conn)
    s.turn(b"after")  # and the connection goes on
    s.drain()
    assert_clean(conn)


def test_a_stale_rto_deadline_passed_while_every_poll_brings_data(stream: _Stream) -> None:
    """Turns 10 ms apart, each poll with an echo: fewer than SETTLE_EVERY polls would span
    the RTO (50 ms) Python started for the oldest request it thinks unacknowledged. The
    flush that finds it due settles before the timers run."""
    s = stream
    s.stream(3 * SETTLE_EVERY, gap=0.01)
    assert all(s.received[-2 * SETTLE_EVERY :])
    assert_clean(s.conn)
    assert max(s.due) < SETTLE_EVERY  # the timer, not the count, made them settle
    assert s.settles
    s.drain()
    assert s.got == s.sent
    assert_clean(s.conn)


# ---- 6. settle_acks merges a timestamped connection's entries ------------------------------


class _Calls:
    """Wraps a connection's fastpath_acked on the instance: records each call's arguments."""

    def __init__(self, conn: TcpConnection) -> None:
        self.calls: list[tuple[Any, ...]] = []
        original = conn.fastpath_acked

        def record(*args: Any) -> None:
            self.calls.append(args)
            original(*args)

        conn.fastpath_acked = record  # type: ignore[method-assign,assignment]


@pytest.mark.parametrize("tcp", [TCP, NO_TS], ids=["timestamps", "no-timestamps"])
def test_two_polls_entries_make_one_call_with_timestamps(tcp: TcpConfig) -> None:
    s = _Stream(tcp)
    try:
        s.stream(2)  # the first echo is in the next poll
        s.fastpath.settle_acks()
        s.turn(request(2))
        s.turn(request(3))
        due = list(s.fastpath._acks_due)
        assert len(due) == 2 and all(entry[0] is s.conn for entry in due)
        (_, acks1, una1, *_), (_, acks2, una2, win2, wl12, tsecr2, now2) = due
        assert una1 != una2
        calls = _Calls(s.conn)
        s.fastpath.settle_acks()
        assert s.fastpath.acks_due() == 0
        if tcp.timestamps:
            # one call: the acks summed, the latest entry's values
            assert calls.calls == [(acks1 + acks2, una2, win2, wl12, tsecr2, now2)]
        else:
            # each entry in order (its own RTT timing)
            assert calls.calls == [tuple(due[0][1:]), tuple(due[1][1:])]
        assert s.snd_una() == una2 == s.c_snd_una()
        s.drain()
        assert_clean(s.conn)
    finally:
        s.close()


class _FakeConn:
    """What settle_acks reads of a connection."""

    def __init__(self, name: str, timestamps: bool, log: list[tuple[Any, ...]]) -> None:
        self.name = name
        self.timestamps_enabled = timestamps
        self.log = log

    def fastpath_acked(self, *args: Any) -> None:
        self.log.append((self.name, *args))


def test_settle_acks_merges_per_connection_and_keeps_order_without_timestamps(
    stream: _Stream,
) -> None:
    """Interleaved entries of a timestamped connection (A) and one without (B)."""
    fastpath = stream.fastpath
    fastpath.settle_acks()
    log: list[tuple[Any, ...]] = []
    a = _FakeConn("A", True, log)
    b = _FakeConn("B", False, log)
    fastpath._acks_due.extend(
        [
            (a, 1, 100, 10, 1000, 7, 1.0),  # type: ignore[list-item]
            (b, 2, 500, 20, 2000, 0, 1.0),  # type: ignore[list-item]
            (a, 3, 200, 11, 1001, 8, 2.0),  # type: ignore[list-item]
            (b, 1, 600, 21, 2001, 0, 2.0),  # type: ignore[list-item]
            (a, 2, 300, 12, 1002, 9, 3.0),  # type: ignore[list-item]
            (b, 1, 700, 22, 2002, 0, 3.0),  # type: ignore[list-item]
        ]
    )
    assert fastpath.acks_due() == 6
    fastpath.settle_acks()
    assert fastpath.acks_due() == 0
    assert [entry for entry in log if entry[0] == "A"] == [("A", 6, 300, 12, 1002, 9, 3.0)]
    assert [entry for entry in log if entry[0] == "B"] == [
        ("B", 2, 500, 20, 2000, 0, 1.0),
        ("B", 1, 600, 21, 2001, 0, 2.0),
        ("B", 1, 700, 22, 2002, 0, 3.0),
    ]
    log.clear()
    fastpath._acks_due.append((a, 1, 400, 13, 1003, 10, 4.0))  # type: ignore[arg-type]
    fastpath.settle_acks()  # a single entry: as it is
    assert log == [("A", 1, 400, 13, 1003, 10, 4.0)]


# ---- a sender waiting for what the ACKs free is not held back --------------------------------
#
# A send larger than the congestion window: the bytes beyond it wait in the send buffer. The
# peer's ACK of the first flight is a pure ACK, which C takes, so its processing waits. The
# first version of the lazy flush then neither settled nor sent (no interface work, fewer
# than SETTLE_EVERY entries): the waiting data left only after a poll came back empty, on the
# engine loop up to a poll budget (2 ms) per flight. Found by this file's first version (an
# xfail); now `FastPath.settle_wanted` settles when a connection's sender is blocked
# (`TcpConnection.send_blocked`: data beyond a window, or a full send buffer).


def _flush_after_the_first_flights_ack(s: _Stream) -> int:
    """Bytes the flush of the turn after the ACK of the first flight came in sends."""
    s.pair.peer.services.clear()  # the peer reads, does not echo
    conn = s.conn
    data = bytes(100_000)
    assert s.sock.send(data) == len(data)
    s.engine.mark_dirty()
    for _ in range(20):
        s.turn()
        s.server.recv(1 << 20)
        waiting = conn._tx.start + len(conn._tx) - conn._snd_max
        if s.received[-1]:
            break
    else:
        raise AssertionError("the ACK of the first flight never came")
    assert waiting > 0  # data waits for the congestion window
    assert s.fastpath.acks_due() > 0  # the ACK that opens it waits too
    assert s.c_snd_una() == conn._snd_max & 0xFFFFFFFF  # the whole flight is acknowledged (C)
    snd_max = conn._snd_max
    s.engine.flush()  # the next turn's flush, before its poll
    return conn._snd_max - snd_max


@pytest.mark.parametrize(
    "settle_every", [pytest.param(SETTLE_EVERY, id="lazy"), pytest.param(1, id="eager")]
)
def test_data_waiting_for_the_window_leaves_at_the_next_flush(
    settle_every: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine_module, "SETTLE_EVERY", settle_every)
    s = _Stream()
    try:
        assert _flush_after_the_first_flights_ack(s) > 0
    finally:
        s.close()
