"""Flow control: the advertised window (RFC 9293 3.8.6, RFC 7323 section 2), window scaling,
SWS avoidance, zero windows and the persist timer."""

from __future__ import annotations

import pytest
from tcp_helpers import *

from dataplane.stack.tcp import TcpConnection, TcpState, TcpTimeoutError
from dataplane.wire.tcp import TcpOptions

SCALED_PEER = TcpOptions(mss=1460, window_scale=0)


def syn_window(recv_buffer: int, window_scaling: bool) -> tuple[int, int | None]:
    conn = conn_closed(config(recv_buffer=recv_buffer, window_scaling=window_scaling))
    conn.connect(0.0)
    syn = recv_one(conn)
    return syn.window, syn.options.window_scale


# ---------------------------------------------------------------------- what we advertise


@pytest.mark.parametrize(
    ("recv_buffer", "window_scaling", "expected_syn_window", "expected_shift"),
    [
        (65535, False, 65535, None),
        (65536, False, 65535, None),  # (uint16_t)65536 == 0 must never happen
        (1 << 20, False, 65535, None),
        (65535, True, 65535, 0),
        (65536, True, 65535, 1),
        (256 * 1024, True, 65535, 3),
        (1000, True, 1000, 0),
    ],
)
def test_syn_window_and_scale_offer(
    recv_buffer: int, window_scaling: bool, expected_syn_window: int, expected_shift: int | None
) -> None:
    assert syn_window(recv_buffer, window_scaling) == (expected_syn_window, expected_shift)


@pytest.mark.parametrize(
    ("recv_buffer", "window_scaling", "peer_options", "expected_field"),
    [
        (65535, False, TcpOptions(mss=1460), 65535),
        (65536, False, TcpOptions(mss=1460), 65535),
        (65535, True, SCALED_PEER, 65535),
        (65536, True, SCALED_PEER, 32768),  # 32768 << 1 == 65536
        (65536, True, TcpOptions(mss=1460), 65535),  # the peer refused scaling
        (256 * 1024, True, SCALED_PEER, 32768),  # 32768 << 3 == 256 KiB
        (1 << 20, False, TcpOptions(mss=1460), 65535),
    ],
)
def test_established_window_field_is_never_truncated(
    recv_buffer: int, window_scaling: bool, peer_options: TcpOptions, expected_field: int
) -> None:
    conn = conn_closed(config(recv_buffer=recv_buffer, window_scaling=window_scaling))
    conn.connect(0.0)
    recv(conn)
    send(conn, seg(REMOTE_SEQ, LOCAL_SEQ + 1, SYN | ACK, options=peer_options))
    ack = recv_one(conn)
    assert ack.window == expected_field
    assert ack.window != 0
    # One byte in: the window field must not wrap either.
    send(conn, seg(PEER, DATA, payload=b"x"))
    assert 0 < recv_one(conn).window <= 65535


def test_window_shrinks_with_buffered_data_and_reopens_after_reading() -> None:
    conn = conn_established(config(recv_buffer=10_000))
    send(conn, seg(PEER, DATA, payload=bytes(4000)))
    check(recv_one(conn), ack=PEER + 4000, window=6000)
    send(conn, seg(PEER + 4000, DATA, payload=bytes(4000)))
    check(recv_one(conn), ack=PEER + 8000, window=2000)
    assert conn.stats.rcv_wnd == 2000
    conn.recv(100)
    recv_nothing(conn)  # a small read is not worth a window update
    conn.recv(7900)
    check(recv_one(conn), ack=PEER + 8000, window=10_000)  # a large one is


def test_zero_window_reopens_only_by_a_worthwhile_amount() -> None:
    # RFC 9293 section 3.8.6.2.2: no window updates smaller than min(buffer/2, MSS).
    conn = conn_established(config(recv_buffer=4000))
    send(conn, seg(PEER, DATA, payload=bytes(4000)))
    check(recv_one(conn), window=0)
    conn.recv(1000)
    recv_nothing(conn)
    send(conn, seg(PEER + 4000, DATA))  # some ACK-only segment provokes no reply...
    recv_nothing(conn)
    conn.send(b"x")  # ...and our next segment still says 0
    check(recv_one(conn), window=0)
    conn.recv(1000)
    check(recv_one(conn), window=2000)


def test_data_into_a_zero_window_is_dropped_and_acked() -> None:
    conn = conn_established(config(recv_buffer=3000))
    send(conn, seg(PEER, DATA, payload=bytes(3000)))
    check(recv_one(conn), ack=PEER + 3000, window=0)
    send(conn, seg(PEER + 3000, DATA, payload=b"more"))
    check(recv_one(conn), ack=PEER + 3000, window=0)
    assert len(conn.recv()) == 3000
    # The ACK part of such a segment is still processed.
    conn2 = conn_established(config(recv_buffer=3000))
    conn2.send(b"abc")
    recv(conn2)
    send(conn2, seg(PEER, DATA, payload=bytes(3000)))
    recv(conn2)
    send(conn2, seg(PEER + 3000, DATA + 3, payload=b"z"))
    assert conn2.send_space == 65536


def test_peer_zero_window_probe_is_answered() -> None:
    conn = conn_established(config(recv_buffer=3000))
    send(conn, seg(PEER, DATA, payload=bytes(3000)))
    recv(conn)
    send(conn, seg(PEER + 3000 - 1, DATA))  # <SEQ=RCV.NXT-1>: a window probe
    check(recv_one(conn), seq=DATA, ack=PEER + 3000, flags=ACK, window=0)


def test_fin_is_accepted_into_a_zero_window() -> None:
    conn = conn_established(config(recv_buffer=3000))
    send(conn, seg(PEER, DATA, payload=bytes(3000)))
    recv(conn)
    send(conn, seg(PEER + 3000, DATA, FIN | ACK))
    assert conn.state is TcpState.CLOSE_WAIT
    check(recv_one(conn), ack=PEER + 3001)


# ---------------------------------------------------------------------- what the peer advertises


def test_peer_window_is_scaled_except_in_its_syn() -> None:
    conn = conn_closed(config(window_scaling=True))
    conn.connect(0.0)
    recv(conn)
    send(conn, synack(TcpOptions(mss=1460, window_scale=2), window=1000))
    assert conn.stats.snd_wnd == 1000  # the SYN's window is never scaled
    recv(conn)
    send(conn, seg(PEER, DATA, window=1000))
    assert conn.stats.snd_wnd == 4000


def test_peer_window_scale_above_14_is_taken_as_14() -> None:
    conn = conn_closed(config(window_scaling=True))
    conn.connect(0.0)
    recv(conn)
    send(conn, seg(REMOTE_SEQ, LOCAL_SEQ + 1, SYN | ACK, options=TcpOptions(window_scale=20)))
    send(conn, seg(PEER, DATA, window=1))
    assert conn.stats.snd_wnd == 1 << 14


def zero_window_conn(**overrides: object) -> TcpConnection:
    conn = conn_established(config(**overrides))
    conn.send(bytes(1000))
    recv(conn, 0.0)
    send(conn, seg(PEER, DATA + 1000, window=0))
    conn.send(b"pending")
    # The driver polls when poll_at() says so: that arms the persist timer.
    assert conn.poll_at() == 0.0
    recv_nothing(conn, 0.0)
    return conn


def test_zero_window_probes_back_off_until_the_window_opens() -> None:
    conn = zero_window_conn()
    rto = conn.stats.rto
    assert conn.poll_at() == pytest.approx(rto)
    probe = recv_one(conn, rto)
    check(probe, seq=DATA + 1000 - 1, ack=PEER, flags=ACK, payload=b"")
    at = conn.poll_at()
    assert at == pytest.approx(rto + 2 * rto)
    # The peer answers, window still closed: probing goes on, the backoff too.
    send(conn, seg(PEER, DATA + 1000, window=0), now=rto + 0.01)
    recv_nothing(conn, rto + 0.01)
    assert at is not None
    check(recv_one(conn, at), seq=DATA + 999, payload=b"")
    assert conn.poll_at() == pytest.approx(at + 4 * rto)
    assert conn.stats.zero_window_probes == 2
    # The window opens: the data goes at once, no more probes.
    send(conn, seg(PEER, DATA + 1000, window=5000), now=at + 0.1)
    check(recv_one(conn, at + 0.1), seq=DATA + 1000, payload=b"pending")
    assert conn.stats.retransmits == 0


def test_zero_window_probe_interval_is_capped() -> None:
    conn = zero_window_conn(zero_window_probe_max=0.5)
    now = 0.0
    intervals = []
    for _ in range(4):
        at = conn.poll_at()
        assert at is not None
        intervals.append(at - now)
        now = at
        recv_one(conn, now)
        send(conn, seg(PEER, DATA + 1000, window=0), now=now)
    assert intervals == pytest.approx([0.2, 0.4, 0.5, 0.5])


def test_unanswered_zero_window_probes_time_out() -> None:
    conn = zero_window_conn(data_retries=2)
    for _ in range(2):
        at = conn.poll_at()
        assert at is not None
        recv_one(conn, at)
    at = conn.poll_at()
    assert at is not None
    recv_nothing(conn, at)
    assert conn.state is TcpState.CLOSED
    assert isinstance(conn.error, TcpTimeoutError)


def test_window_update_without_new_ack_resumes_sending() -> None:
    conn = zero_window_conn()
    send(conn, seg(PEER, DATA + 1000, window=100))
    check(recv_one(conn), seq=DATA + 1000, payload=b"pending")
