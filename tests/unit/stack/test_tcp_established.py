"""ESTABLISHED: sending, receiving, ACK generation, reassembly (RFC 9293 section 3.10.7.4)."""

from __future__ import annotations

import pytest
from tcp_helpers import *

from dataplane.stack.tcp import TcpState, TcpStateError
from dataplane.wire.tcp import TcpOptions

# ISNs right below 2**32, so that the transfer crosses the wrap.
WRAPPING = [(LOCAL_SEQ, REMOTE_SEQ), (0xFFFFFF00, 0xFFFFFFF0)]


# ---------------------------------------------------------------------- sending


@pytest.mark.parametrize(("isn", "remote_isn"), WRAPPING)
def test_send_and_acknowledge(isn: int, remote_isn: int) -> None:
    conn = conn_established(isn=isn, remote_isn=remote_isn)
    assert conn.send(b"abcdef") == 6
    check(recv_one(conn), seq=isn + 1, ack=remote_isn + 1, flags=ACK | PSH, payload=b"abcdef")
    recv_nothing(conn)
    assert conn.send_space == 65536 - 6
    send(conn, seg(remote_isn + 1, isn + 1 + 6))
    assert conn.send_space == 65536
    recv_nothing(conn)
    assert conn.poll_at() is None


def test_writes_are_coalesced_into_full_segments() -> None:
    conn = conn_established()
    for _ in range(3):
        conn.send(bytes(1000))
    segments = recv(conn)
    assert [len(s.payload) for s in segments] == [1460, 1460, 80]
    assert [s.flags for s in segments] == [ACK, ACK, ACK | PSH]
    assert [s.seq for s in segments] == [DATA, DATA + 1460, DATA + 2920]


@pytest.mark.parametrize(("isn", "remote_isn"), WRAPPING)
def test_payload_bytes_are_the_ones_sent(isn: int, remote_isn: int) -> None:
    conn = conn_established(isn=isn, remote_isn=remote_isn)
    data = bytes(range(256)) * 20
    conn.send(data)
    segments = recv(conn)
    assert b"".join(s.payload for s in segments) == data
    offsets = [(s.seq - (isn + 1)) % 2**32 for s in segments]
    assert offsets == [0, 1460, 2920, 4380]


def test_initial_window_is_ten_segments_then_slow_start() -> None:
    conn = conn_established()
    conn.send(bytes(30 * 1460))
    first = recv(conn)
    assert len(first) == 10
    assert conn.stats.cwnd == 14600
    # One ACK for two segments grows cwnd by one SMSS and opens room for three.
    send(conn, seg(PEER, DATA + 2 * 1460))
    assert conn.stats.cwnd == 14600 + 1460
    assert len(recv(conn)) == 3


def test_never_more_than_the_peer_window() -> None:
    conn = conn_established(window=3000)
    conn.send(bytes(10_000))
    segments = recv(conn)
    assert sum(len(s.payload) for s in segments) <= 3000
    assert [len(s.payload) for s in segments] == [1460, 1460]
    send(conn, seg(PEER, DATA + 2920, window=3000))
    assert [len(s.payload) for s in recv(conn)] == [1460, 1460]


def test_send_buffer_backpressure() -> None:
    conn = conn_established(config(send_buffer=4000))
    assert conn.send(bytes(3000)) == 3000
    assert conn.send(bytes(3000)) == 1000
    assert conn.send(b"x") == 0
    assert not conn.writable
    assert conn.send_space == 0
    recv(conn)
    send(conn, seg(PEER, DATA + 1460))
    assert conn.writable
    assert conn.send_space == 1460
    assert conn.send(memoryview(bytes(2000))) == 1460


def test_ack_for_unsent_data_is_answered_and_ignored() -> None:
    conn = conn_established()
    conn.send(b"abc")
    recv(conn)
    send(conn, seg(PEER, DATA + 100, ACK, payload=b"zz"))
    check(recv_one(conn), seq=DATA + 3, ack=PEER, flags=ACK)
    assert conn.recv() == b""  # the segment was dropped, data included
    assert conn.send_space == 65536 - 3


def test_stale_window_update_is_ignored() -> None:
    conn = conn_established()
    send(conn, seg(PEER, DATA, ACK, payload=b"12345", window=1000))
    recv(conn)
    # An older segment (reordered) must not reopen the window (SND.WL1 rule).
    send(conn, seg(PEER - 100, DATA, ACK, window=60000))
    recv(conn)
    assert conn.stats.snd_wnd == 1000


def test_send_after_close_is_refused() -> None:
    conn = conn_established()
    conn.close()
    with pytest.raises(TcpStateError):
        conn.send(b"late")
    assert not conn.writable
    assert conn.send_space == 0


# ---------------------------------------------------------------------- receiving


@pytest.mark.parametrize(("isn", "remote_isn"), WRAPPING)
def test_receive_in_order(isn: int, remote_isn: int) -> None:
    conn = conn_established(isn=isn, remote_isn=remote_isn)
    assert not conn.readable
    send(conn, seg(remote_isn + 1, isn + 1, ACK | PSH, payload=b"x" * 300))
    assert conn.readable
    check(recv_one(conn), seq=isn + 1, ack=remote_isn + 301, flags=ACK, window=65535 - 300)
    send(conn, seg(remote_isn + 301, isn + 1, ACK | PSH, payload=b"y" * 300))
    check(recv_one(conn), ack=remote_isn + 601)
    assert conn.recv(400) == b"x" * 300 + b"y" * 100
    assert conn.recv() == b"y" * 200
    assert conn.recv() == b""
    assert not conn.readable


def test_duplicate_segment_is_acknowledged_not_delivered_twice() -> None:
    conn = conn_established()
    send(conn, seg(PEER, DATA, payload=b"abc"))
    recv(conn)
    send(conn, seg(PEER, DATA, payload=b"abc"))
    check(recv_one(conn), ack=PEER + 3)
    assert conn.recv() == b"abc"
    assert conn.stats.dropped_out_of_window == 1


def test_partly_old_segment_delivers_only_the_new_part() -> None:
    conn = conn_established()
    send(conn, seg(PEER, DATA, payload=b"abc"))
    send(conn, seg(PEER + 1, DATA, payload=b"bcdef"))
    assert conn.recv() == b"abcdef"
    check(recv(conn)[-1], ack=PEER + 6)


def test_out_of_order_segment_is_queued_and_acked_at_once() -> None:
    conn = conn_established(config(delayed_ack=0.2))
    send(conn, seg(PEER + 3, DATA, payload=b"def"))
    check(recv_one(conn), seq=DATA, ack=PEER, flags=ACK)  # duplicate ACK, not delayed
    assert conn.recv() == b""
    assert conn.stats.ooo_segments == 1
    send(conn, seg(PEER, DATA, payload=b"abc"))
    check(recv_one(conn), ack=PEER + 6)  # the gap is filled: ACK at once
    assert conn.recv() == b"abcdef"


def test_reassembly_of_a_reversed_flight() -> None:
    conn = conn_established()
    chunks = [bytes([65 + i]) * 100 for i in range(8)]
    for i in reversed(range(8)):
        send(conn, seg(PEER + 100 * i, DATA, payload=chunks[i]))
    assert conn.recv() == b"".join(chunks)
    check(recv(conn)[-1], ack=PEER + 800)


def test_out_of_order_queue_is_bounded() -> None:
    conn = conn_established(config(ooo_limit_bytes=1000))
    send(conn, seg(PEER + 100, DATA, payload=bytes(600)))
    send(conn, seg(PEER + 1000, DATA, payload=bytes(600)))  # would exceed the bound
    assert conn.stats.ooo_segments == 1
    assert conn.stats.ooo_dropped == 1
    check(recv(conn)[-1], ack=PEER)
    send(conn, seg(PEER, DATA, payload=bytes(100)))
    assert len(conn.recv()) == 700


def test_data_beyond_the_window_is_trimmed() -> None:
    conn = conn_established(config(recv_buffer=1000))
    send(conn, seg(PEER, DATA, payload=bytes(1500)))
    check(recv_one(conn), ack=PEER + 1000, window=0)
    assert len(conn.recv()) == 1000


def test_segment_entirely_outside_the_window_is_acked_and_dropped() -> None:
    conn = conn_established()
    send(conn, seg(PEER + 70_000, DATA, payload=b"far"))
    check(recv_one(conn), seq=DATA, ack=PEER, flags=ACK)
    assert conn.stats.dropped_out_of_window == 1
    assert conn.stats.ooo_segments == 0


# ---------------------------------------------------------------------- ACK generation


def test_delayed_ack_fires_after_the_delay() -> None:
    conn = conn_established(config(delayed_ack=0.04))
    send(conn, seg(PEER, DATA, ACK | PSH, payload=b"tick"), now=1.0)
    recv_nothing(conn, 1.0)
    assert conn.poll_at() == pytest.approx(1.04)
    recv_nothing(conn, 1.039)
    check(recv_one(conn, 1.04), ack=PEER + 4)
    assert conn.poll_at() is None


def test_every_second_full_segment_is_acked_at_once() -> None:
    conn = conn_established(config(delayed_ack=0.04))
    send(conn, seg(PEER, DATA, payload=bytes(1460)))
    recv_nothing(conn)
    send(conn, seg(PEER + 1460, DATA, payload=bytes(1460)))
    check(recv_one(conn), ack=PEER + 2920)


def test_ack_every_can_be_raised() -> None:
    conn = conn_established(config(delayed_ack=0.04, ack_every=3))
    for i in range(2):
        send(conn, seg(PEER + 1460 * i, DATA, payload=bytes(1460)))
    recv_nothing(conn)
    send(conn, seg(PEER + 2920, DATA, payload=bytes(1460)))
    check(recv_one(conn), ack=PEER + 3 * 1460)


def test_quickack_on_psh() -> None:
    conn = conn_established(config(delayed_ack=0.04, quickack_on_psh=True))
    send(conn, seg(PEER, DATA, ACK, payload=b"a"))
    recv_nothing(conn)
    send(conn, seg(PEER + 1, DATA, ACK | PSH, payload=b"b"))
    check(recv_one(conn), ack=PEER + 2)


def test_outgoing_data_carries_the_pending_ack() -> None:
    conn = conn_established(config(delayed_ack=0.04))
    send(conn, seg(PEER, DATA, ACK | PSH, payload=b"ping"))
    conn.send(b"pong")
    check(recv_one(conn), seq=DATA, ack=PEER + 4, flags=ACK | PSH, payload=b"pong")
    assert conn.poll_at() == pytest.approx(conn.stats.rto)  # the retransmission timer only
    send(conn, seg(PEER + 4, DATA + 4), now=0.01)
    assert conn.poll_at() is None  # the delayed ACK was cancelled
    recv_nothing(conn, 1.0)


def test_poll_at_means_now_while_output_is_pending() -> None:
    conn = conn_established()
    recv_nothing(conn, 3.0)
    conn.send(b"x")
    at = conn.poll_at()
    assert at is not None and at <= 3.0
    recv(conn, 3.5)
    assert conn.poll_at() == pytest.approx(3.5 + conn.stats.rto)


# ---------------------------------------------------------------------- FIN, RST, abort


def test_fin_with_data_delivers_data_then_eof() -> None:
    conn = conn_established()
    send(conn, seg(PEER, DATA, ACK | PSH | FIN, payload=b"last words"))
    assert conn.state is TcpState.CLOSE_WAIT
    check(recv_one(conn), ack=PEER + 10 + 1, flags=ACK)
    assert conn.readable
    assert not conn.at_eof
    assert conn.recv() == b"last words"
    assert conn.at_eof
    assert conn.readable  # EOF is something to read


def test_out_of_order_fin_waits_for_the_gap() -> None:
    conn = conn_established()
    send(conn, seg(PEER + 5, DATA, ACK | FIN, payload=b"world"))
    assert conn.state is TcpState.ESTABLISHED
    check(recv_one(conn), ack=PEER)
    send(conn, seg(PEER, DATA, ACK, payload=b"hello"))
    assert conn.state is TcpState.CLOSE_WAIT
    check(recv_one(conn), ack=PEER + 10 + 1)
    assert conn.recv() == b"helloworld"
    assert conn.at_eof


def test_abort_sends_reset_and_closes() -> None:
    conn = conn_established()
    conn.send(b"unsent? no, sent")
    recv(conn)
    conn.send(b"queued")
    conn.abort()
    assert conn.state is TcpState.CLOSED
    assert conn.error is None
    check(recv_one(conn), seq=DATA + 16, flags=RST)
    recv_nothing(conn, 10.0)
    # A straggler from the peer now matches a closed connection: RST <SEQ=SEG.ACK>.
    send(conn, seg(PEER, DATA + 16, ACK, payload=b"late"))
    check(recv_one(conn), seq=DATA + 16, flags=RST)


def test_received_data_stays_readable_after_a_reset() -> None:
    conn = conn_established()
    send(conn, seg(PEER, DATA, payload=b"keep me"))
    send(conn, seg(PEER + 7, 0, RST))
    assert conn.state is TcpState.CLOSED
    assert conn.recv() == b"keep me"


def test_stats_count_segments_and_bytes() -> None:
    conn = conn_established()
    conn.send(b"12345")
    recv(conn)
    send(conn, seg(PEER, DATA + 5, payload=b"abc"))
    recv(conn)
    stats = conn.stats
    assert stats.bytes_out == 5
    assert stats.bytes_in == 3
    assert stats.segments_in == 2  # SYN,ACK and the data
    assert stats.segments_out == 4  # SYN, ACK, data, ACK


def test_options_are_empty_when_nothing_was_negotiated() -> None:
    conn = conn_established()
    conn.send(b"a")
    assert recv_one(conn).options == TcpOptions()


def test_fin_flag_only_on_the_final_segment() -> None:
    conn = conn_established()
    conn.send(bytes(3000))
    conn.close()
    segments = recv(conn)
    assert [bool(s.flags & FIN) for s in segments] == [False, False, True]
    check(segments[-1], seq=DATA + 2920, flags=ACK | PSH | FIN, payload=bytes(80))
