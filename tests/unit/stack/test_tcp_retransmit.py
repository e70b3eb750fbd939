"""Loss recovery: RTO with backoff and Karn's rule (RFC 6298), fast retransmit and NewReno
(RFC 5681, RFC 6582), SACK-driven recovery (RFC 2018, RFC 6675)."""

from __future__ import annotations

import pytest
from tcp_helpers import *

from dataplane.stack.tcp import TcpConfig, TcpConnection, TcpState, TcpTimeoutError
from dataplane.wire.tcp import TcpOptions

MSS = 1000


def seg_start(i: int) -> int:
    """Sequence number of our i-th 1000-byte segment."""
    return DATA + MSS * i


def small_mss(**overrides: object) -> TcpConfig:
    return config(mss=MSS, **overrides)


def sack_conn(**overrides: object) -> TcpConnection:
    return conn_established(
        small_mss(sack=True, **overrides),
        synack_options=TcpOptions(mss=1460, sack_permitted=True),
    )


def dup_ack(conn: TcpConnection, ack: int, blocks: tuple[tuple[int, int], ...] = ()) -> None:
    send(conn, seg(PEER, ack, options=TcpOptions(sack_blocks=blocks)))


def established_with_rtt(rtt: float) -> TcpConnection:
    conn = conn_syn_sent()
    send(conn, seg(REMOTE_SEQ, LOCAL_SEQ + 1, SYN | ACK, options=TcpOptions(mss=1460)), rtt)
    recv(conn, rtt)
    return conn


# ---------------------------------------------------------------------- RTO


def next_deadline(conn: TcpConnection) -> float:
    at = conn.poll_at()
    assert at is not None
    return at


def test_retransmission_timeout_with_exponential_backoff() -> None:
    conn = conn_established()
    assert conn.stats.rto == pytest.approx(0.2)  # RTT 0 clamps to RTO.min
    conn.send(b"x" * 100)
    check(recv_one(conn, 0.0), seq=DATA, payload=b"x" * 100)
    assert next_deadline(conn) == pytest.approx(0.2)
    recv_nothing(conn, 0.19)
    check(recv_one(conn, 0.2), seq=DATA, flags=ACK | PSH, payload=b"x" * 100)
    assert next_deadline(conn) == pytest.approx(0.2 + 0.4)
    check(recv_one(conn, next_deadline(conn)), seq=DATA, payload=b"x" * 100)
    assert next_deadline(conn) == pytest.approx(0.6 + 0.8)
    stats = conn.stats
    assert stats.timeouts == 2
    assert stats.retransmits == 2
    assert stats.cwnd == 1460
    assert stats.ssthresh == 2 * 1460


def test_rto_is_capped_at_rto_max() -> None:
    conn = conn_established(config(rto_initial=0.5, rto_max=0.5, data_retries=10))
    conn.send(b"x")
    recv(conn, 0.0)
    intervals = []
    now = 0.0
    for _ in range(5):
        at = next_deadline(conn)
        intervals.append(at - now)
        now = at
        assert len(recv(conn, now)) == 1
    assert intervals == pytest.approx([0.2, 0.4, 0.5, 0.5, 0.5])


def test_retries_exhausted_times_out() -> None:
    conn = conn_established(config(data_retries=3))
    conn.send(b"x")
    recv(conn, 0.0)
    for _ in range(3):
        assert len(recv(conn, next_deadline(conn))) == 1
    assert next_deadline(conn) == pytest.approx(0.2 + 0.4 + 0.8 + 1.6)
    recv_nothing(conn, next_deadline(conn))
    assert conn.state is TcpState.CLOSED
    assert isinstance(conn.error, TcpTimeoutError)
    assert conn.readable


def test_progress_resets_the_retry_count_but_not_the_backoff() -> None:
    conn = conn_established(config(data_retries=2))
    conn.send(bytes(2000))
    recv(conn, 0.0)
    check(recv_one(conn, 0.2), seq=DATA, payload=bytes(1460))  # first timeout
    send(conn, seg(PEER, DATA + 1460), now=0.3)  # progress, but no valid RTT sample
    check(recv_one(conn, 0.3), seq=DATA + 1460, payload=bytes(540))
    assert next_deadline(conn) == pytest.approx(0.3 + 0.4)  # Karn: backed-off RTO kept
    assert len(recv(conn, next_deadline(conn))) == 1
    assert len(recv(conn, next_deadline(conn))) == 1
    assert conn.state is TcpState.ESTABLISHED  # two retries since the progress
    recv_nothing(conn, next_deadline(conn))
    assert isinstance(conn.error, TcpTimeoutError)


def test_karn_no_rtt_sample_from_a_retransmitted_segment() -> None:
    conn = established_with_rtt(0.1)
    assert conn.stats.rtt_srtt == pytest.approx(0.1)
    assert conn.stats.rto == pytest.approx(0.3)
    conn.send(b"a")
    recv(conn, 1.0)
    recv_one(conn, 1.3)  # timeout, retransmitted
    send(conn, seg(PEER, DATA + 1), now=1.35)  # ambiguous: which copy is acknowledged?
    assert conn.stats.rtt_srtt == pytest.approx(0.1)  # no sample taken
    assert conn.stats.rto == pytest.approx(0.6)  # backed-off RTO kept
    conn.send(b"b")
    recv(conn, 2.0)
    send(conn, seg(PEER, DATA + 2), now=2.05)  # a fresh segment: valid sample
    assert conn.stats.rtt_srtt == pytest.approx(0.875 * 0.1 + 0.125 * 0.05)
    assert conn.stats.rtt_var == pytest.approx(0.75 * 0.05 + 0.25 * 0.05)
    assert conn.stats.rto == pytest.approx(0.09375 + 4 * 0.05)


def test_go_back_n_after_timeout_resends_from_the_oldest_byte() -> None:
    conn = conn_established(small_mss())
    conn.send(bytes(4 * MSS))
    assert len(recv(conn, 0.0)) == 4
    [again] = recv(conn, 0.2)  # cwnd = 1 segment after a timeout
    check(again, seq=seg_start(0), payload=bytes(MSS))
    send(conn, seg(PEER, seg_start(1)), now=0.25)
    assert [s.seq for s in recv(conn, 0.25)] == [seg_start(1), seg_start(2)]


# ---------------------------------------------------------------------- fast retransmit, NewReno


def test_fast_retransmit_on_the_third_duplicate_ack() -> None:
    conn = conn_established(small_mss())
    conn.send(bytes(8 * MSS))
    assert len(recv(conn)) == 8
    send(conn, seg(PEER, seg_start(1)))  # segment 1 is lost
    dup_ack(conn, seg_start(1))
    dup_ack(conn, seg_start(1))
    recv_nothing(conn)
    dup_ack(conn, seg_start(1))
    check(recv_one(conn), seq=seg_start(1), payload=bytes(MSS))
    stats = conn.stats
    assert stats.fast_retransmits == 1
    assert stats.dup_acks == 3
    assert stats.ssthresh == 7 * MSS // 2
    assert stats.cwnd == 7 * MSS // 2 + 3 * MSS
    assert stats.timeouts == 0


def test_window_change_is_not_a_duplicate_ack() -> None:
    conn = conn_established(small_mss())
    conn.send(bytes(4 * MSS))
    recv(conn)
    for window in (60000, 50000, 40000):
        send(conn, seg(PEER, DATA, window=window))
    recv_nothing(conn)
    assert conn.stats.dup_acks == 0


def test_newreno_partial_ack_retransmits_the_next_hole_and_full_ack_ends_recovery() -> None:
    conn = conn_established(small_mss())
    conn.send(bytes(10 * MSS))
    assert len(recv(conn)) == 10
    # Segments 0 and 4 are lost.
    for _ in range(3):
        dup_ack(conn, seg_start(0))
    check(recv_one(conn), seq=seg_start(0))
    ssthresh = conn.stats.ssthresh
    assert ssthresh == 5 * MSS
    # More duplicates inflate cwnd (13 -> 16 segments) and let new data out.
    conn.send(bytes(2 * MSS))
    for _ in range(5):
        dup_ack(conn, seg_start(0))
    assert [s.seq for s in recv(conn)] == [seg_start(10), seg_start(11)]
    # The retransmission arrives: a partial ACK up to the second hole.
    send(conn, seg(PEER, seg_start(4)))
    check(recv_one(conn), seq=seg_start(4), payload=bytes(MSS))
    assert conn.stats.retransmits == 2
    # Everything up to "recover" is acknowledged: recovery ends, cwnd deflates.
    send(conn, seg(PEER, seg_start(10)))
    assert conn.stats.cwnd <= ssthresh
    assert conn.stats.fast_retransmits == 1


def test_duplicates_after_a_timeout_do_not_trigger_fast_retransmit() -> None:
    # RFC 6582 section 3.2 step 2: ACKs below "recover" are not a new loss event.
    conn = conn_established(small_mss())
    conn.send(bytes(6 * MSS))
    recv(conn, 0.0)
    recv(conn, 0.2)  # timeout: recover = highest sent
    send(conn, seg(PEER, seg_start(2)), now=0.21)
    recv(conn, 0.21)
    for _ in range(4):
        dup_ack(conn, seg_start(2))
    assert conn.stats.fast_retransmits == 0


# ---------------------------------------------------------------------- SACK


def test_sack_recovery_skips_sacked_segments() -> None:
    conn = sack_conn()
    conn.send(bytes(6 * MSS))
    assert len(recv(conn)) == 6
    # Segment 0 arrives, 1 is lost, 2-3 arrive, 4 is lost, 5 arrives.
    send(conn, seg(PEER, seg_start(1)))
    dup_ack(conn, seg_start(1), ((seg_start(2), seg_start(3)),))
    dup_ack(conn, seg_start(1), ((seg_start(2), seg_start(4)),))
    recv_nothing(conn)
    dup_ack(conn, seg_start(1), ((seg_start(5), seg_start(6)), (seg_start(2), seg_start(4))))
    assert [s.seq for s in recv(conn)] == [seg_start(1)]
    assert conn.stats.sack_blocks_received == 4
    # The retransmission fills the first hole: partial ACK, segment 4 goes next.
    send(
        conn,
        seg(PEER, seg_start(4), options=TcpOptions(sack_blocks=((seg_start(5), seg_start(6)),))),
    )
    assert [s.seq for s in recv(conn)] == [seg_start(4)]
    send(conn, seg(PEER, seg_start(6)))
    recv_nothing(conn, 0.1)
    assert conn.stats.retransmits == 2  # neither 2, 3 nor 5 went twice


def test_sack_recovery_retransmits_every_lost_hole_without_waiting() -> None:
    conn = sack_conn()
    conn.send(bytes(12 * MSS))
    assert len(recv(conn)) == 10  # initial window
    # 0 and 2 lost, everything else of the flight arrives.
    blocks = ((seg_start(3), seg_start(10)), (seg_start(1), seg_start(2)))
    for _ in range(3):
        dup_ack(conn, seg_start(0), blocks)
    sent = [s.seq for s in recv(conn)]
    assert sent[:2] == [seg_start(0), seg_start(2)]
    assert seg_start(1) not in sent
    assert all(s >= seg_start(10) for s in sent[2:])


def test_timeout_resend_skips_sacked_data() -> None:
    conn = sack_conn()
    conn.send(bytes(4 * MSS))
    recv(conn, 0.0)
    # Only segment 2 arrived: one duplicate ACK with its SACK block, no fast retransmit.
    dup_ack(conn, seg_start(0), ((seg_start(2), seg_start(3)),))
    check(recv_one(conn, 0.2), seq=seg_start(0))  # timeout
    send(
        conn,
        seg(PEER, seg_start(1), options=TcpOptions(sack_blocks=((seg_start(2), seg_start(3)),))),
        now=0.25,
    )
    assert [s.seq for s in recv(conn, 0.25)] == [seg_start(1), seg_start(3)]


def test_sack_blocks_outside_the_flight_are_ignored() -> None:
    conn = sack_conn()
    conn.send(bytes(3 * MSS))
    recv(conn)
    bogus = ((seg_start(5), seg_start(9)), (DATA - 500, DATA))
    for _ in range(3):
        dup_ack(conn, DATA, bogus)
    # Plain duplicates: fast retransmit of the first segment, nothing else.
    assert [s.seq for s in recv(conn)] == [DATA]


def test_cwnd_restarts_after_an_idle_period() -> None:
    # RFC 5681 section 4.1: after more than an RTO without sending, back to the IW.
    conn = conn_established(small_mss())
    conn.send(bytes(10 * MSS))
    recv(conn, 0.0)
    send(conn, seg(PEER, seg_start(10)), now=0.01)
    assert conn.stats.cwnd == 11 * MSS
    conn.send(bytes(20 * MSS))
    assert len(recv(conn, 5.0)) == 10
    assert conn.stats.cwnd == 10 * MSS
