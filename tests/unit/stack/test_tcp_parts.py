"""The connection's building blocks on their own: sequence arithmetic, buffers, the SACK
scoreboard, the RTO estimator and NewReno."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dataplane.stack.tcp import TcpConfig
from dataplane.stack.tcp_buffers import OutOfOrderQueue, SackScoreboard, SendBuffer
from dataplane.stack.tcp_congestion import NewReno
from dataplane.stack.tcp_rtt import RttEstimator
from dataplane.stack.tcp_seq import seq_add, seq_diff, seq_ge, seq_gt, seq_le, seq_lt, unwrap, wrap

# ---------------------------------------------------------------------- sequence numbers


def test_comparisons_wrap_around() -> None:
    assert seq_lt(0xFFFFFFF0, 0x10)
    assert seq_gt(0x10, 0xFFFFFFF0)
    assert seq_le(5, 5) and seq_ge(5, 5)
    assert not seq_lt(5, 5)
    assert seq_diff(0x10, 0xFFFFFFF0) == 0x20
    assert seq_diff(0xFFFFFFF0, 0x10) == -0x20
    assert seq_add(0xFFFFFFFF, 2) == 1


def test_unwrap_picks_the_nearest_value() -> None:
    assert unwrap(0x10, 0xFFFFFFF0) == 0x1_0000_0010
    assert unwrap(0xFFFFFFF0, 0x1_0000_0010) == 0xFFFFFFF0
    assert unwrap(100, 5 * 2**32 + 50) == 5 * 2**32 + 100
    assert wrap(5 * 2**32 + 100) == 100


@given(st.integers(0, 2**40), st.integers(-(2**31), 2**31 - 1))
def test_unwrap_inverts_wrap_near_the_reference(reference: int, delta: int) -> None:
    value = max(reference + delta, 0)
    if abs(value - reference) < 2**31:
        assert unwrap(wrap(value), reference) == value


# ---------------------------------------------------------------------- send buffer


def test_send_buffer_is_bounded_and_slices_by_sequence_number() -> None:
    buffer = SendBuffer(10, start=2**32 - 3)
    assert buffer.write(b"abcdefgh") == 8
    assert buffer.write(b"XYZ") == 2
    assert buffer.free == 0
    assert buffer.read(2**32 - 1, 3) == b"cde"
    assert buffer.ack_to(2**32) == 3
    assert buffer.start == 2**32
    assert buffer.read(2**32, 2) == b"de"
    assert buffer.free == 3
    assert buffer.ack_to(2**32 - 10) == 0  # old ACK: nothing happens
    assert buffer.ack_to(2**40) == 7  # beyond the end (a FIN): only what is there
    assert len(buffer) == 0


# ---------------------------------------------------------------------- out-of-order queue


def test_ooo_queue_merges_overlaps_and_adjacent_blocks() -> None:
    queue = OutOfOrderQueue(1000)
    assert queue.insert(10, b"cd")
    assert queue.insert(20, b"gh")
    assert queue.insert(12, b"ef")  # adjacent to the first block
    assert queue.blocks() == [(10, 14), (20, 22)]
    assert queue.insert(13, b"FGHIJKL")  # overlaps both, keeps existing bytes
    assert queue.blocks() == [(10, 22)]
    assert len(queue) == 12
    assert queue.pop_ready(8) == b""
    assert queue.pop_ready(10) == b"cdefGHIJKLgh"
    assert len(queue) == 0


def test_ooo_queue_pop_skips_what_was_already_received() -> None:
    queue = OutOfOrderQueue(1000)
    queue.insert(10, b"0123456789")
    assert queue.pop_ready(15) == b"56789"


def test_ooo_queue_refuses_beyond_its_limit_without_reneging() -> None:
    queue = OutOfOrderQueue(10)
    assert queue.insert(100, bytes(8))
    assert not queue.insert(200, bytes(3))
    assert queue.insert(104, bytes(6))  # mostly overlapping: only 2 new bytes
    assert queue.blocks() == [(100, 110)]


@given(st.data())
def test_ooo_queue_reassembles_any_arrival_order(data: st.DataObject) -> None:
    stream = bytes(range(256)) * 4
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(stream) - 1), max_size=20))))
    pieces = list(zip([0, *cuts], [*cuts, len(stream)], strict=True))
    order = data.draw(st.permutations(pieces))
    queue = OutOfOrderQueue(1 << 20)
    received = bytearray()
    base = 1000
    for start, end in order:
        if start == len(received):
            received += stream[start:end]
            received += queue.pop_ready(base + len(received))
        elif start > len(received):
            queue.insert(base + start, stream[start:end])
    assert bytes(received) == stream


def test_sack_blocks_report_recent_first() -> None:
    queue = OutOfOrderQueue(1000)
    for start in (100, 300, 500, 700, 900):
        queue.insert(start, bytes(10))
    queue.insert(305, bytes(10))
    assert queue.sack_blocks(4) == ((300, 315), (900, 910), (700, 710), (500, 510))


# ---------------------------------------------------------------------- SACK scoreboard


def test_scoreboard_merges_and_prunes() -> None:
    board = SackScoreboard()
    assert board.add(200, 300)
    assert not board.add(220, 280)  # nothing new
    assert board.add(300, 400)
    assert board.add(500, 600)
    assert board.blocks == [(200, 400), (500, 600)]
    assert board.highest == 600
    assert board.covering(250) == 400
    assert board.covering(450) is None
    assert board.next_sacked_after(100) == 200
    assert board.holes(100, 700) == [(100, 200), (400, 500), (600, 700)]
    assert board.sacked_bytes(150, 550) == 250
    board.prune(250)
    assert board.blocks == [(250, 400), (500, 600)]


def test_scoreboard_is_lost_and_pipe() -> None:
    board = SackScoreboard()
    smss = 100
    board.add(200, 500)  # three segments SACKed above 100..200
    assert board.is_lost(100, smss)  # more than 2 * SMSS SACKed above it
    assert not board.is_lost(500, smss)
    # Holes: 100..200 (lost), 500..700 (not lost, nothing SACKed above).
    assert board.pipe(100, 700, high_rxt=100, smss=smss) == 200
    assert board.pipe(100, 700, high_rxt=200, smss=smss) == 300  # plus the retransmission


# ---------------------------------------------------------------------- RTO estimator


def test_rto_estimator_follows_rfc_6298() -> None:
    rtt = RttEstimator(rto_initial=1.0, rto_min=0.2, rto_max=60.0)
    assert rtt.rto == 1.0
    rtt.sample(0.5)
    assert (rtt.srtt, rtt.rttvar, rtt.rto) == pytest.approx((0.5, 0.25, 1.5))
    rtt.sample(0.1)
    assert rtt.rttvar == pytest.approx(0.75 * 0.25 + 0.25 * 0.4)
    assert rtt.srtt == pytest.approx(0.875 * 0.5 + 0.125 * 0.1)
    base = rtt.rto
    rtt.back_off()
    rtt.back_off()
    assert rtt.rto == pytest.approx(4 * base)
    rtt.sample(0.001)
    assert rtt.backoff == 0


def test_rto_never_below_min_nor_above_max() -> None:
    rtt = RttEstimator(rto_initial=1.0, rto_min=0.2, rto_max=5.0)
    rtt.sample(0.0)
    assert rtt.rto == 0.2
    for _ in range(100):
        rtt.back_off()
    assert rtt.rto == 5.0


# ---------------------------------------------------------------------- NewReno


def test_slow_start_then_congestion_avoidance() -> None:
    cc = NewReno(smss=1000, initial_cwnd_segments=2)
    cc.ssthresh = 4000
    cc.on_new_ack(1000)
    cc.on_new_ack(5000)  # at most one SMSS per ACK in slow start
    assert cc.cwnd == 4000
    for _ in range(3):
        cc.on_new_ack(1000)
    assert cc.cwnd == 4000  # not yet a full window acknowledged
    cc.on_new_ack(1000)
    assert cc.cwnd == 5000


def test_recovery_window_arithmetic() -> None:
    cc = NewReno(smss=1000, initial_cwnd_segments=10)
    assert cc.can_enter_recovery(0)
    cc.enter_recovery(flight_size=10_000, high_data=50_000, sack=False)
    assert (cc.ssthresh, cc.cwnd) == (5000, 8000)
    cc.on_dup_ack_in_recovery(sack=False)
    assert cc.cwnd == 9000
    cc.on_partial_ack(3000, sack=False)
    assert cc.cwnd == 7000
    cc.on_full_ack(flight_size=1000)
    assert cc.cwnd == 2000
    assert not cc.in_recovery
    cc.on_timeout(flight_size=9000, high_data=60_000)
    assert (cc.cwnd, cc.ssthresh) == (1000, 4500)
    assert not cc.can_enter_recovery(59_000)
    assert cc.can_enter_recovery(60_000)


def test_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="mss"):
        TcpConfig(mss=10)
    with pytest.raises(ValueError, match="rto"):
        TcpConfig(rto_min=2.0, rto_initial=1.0)
    with pytest.raises(ValueError, match="recv_buffer"):
        TcpConfig(recv_buffer=2**31)
    assert TcpConfig(recv_buffer=random.Random(1).randrange(1, 1 << 20)).mss == 1460
