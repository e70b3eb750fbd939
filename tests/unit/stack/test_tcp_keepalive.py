"""Keep-alive (RFC 9293 section 3.8.4, RFC 1122 section 4.2.3.6) and idle-time behaviour."""

from __future__ import annotations

import pytest
from tcp_helpers import *

from dataplane.stack.tcp import TcpConnection, TcpState, TcpTimeoutError


def keepalive_conn() -> TcpConnection:
    return conn_established(config(keepalive=10.0, keepalive_interval=1.0, keepalive_probes=3))


def test_keepalive_is_off_by_default() -> None:
    conn = conn_established()
    assert conn.poll_at() is None
    recv_nothing(conn, 10_000.0)


def test_keepalive_probe_after_idle_time() -> None:
    conn = keepalive_conn()
    assert conn.poll_at() == 10.0
    recv_nothing(conn, 9.9)
    probe = recv_one(conn, 10.0)
    # <SEQ=SND.NXT-1>, no data: the peer must answer with an ACK.
    check(probe, seq=DATA - 1, ack=PEER, flags=ACK, payload=b"")
    assert conn.stats.keepalives_sent == 1
    assert conn.poll_at() == 11.0


def test_answered_probe_restarts_the_idle_period() -> None:
    conn = keepalive_conn()
    recv_one(conn, 10.0)
    send(conn, seg(PEER, DATA), now=10.05)
    assert conn.poll_at() == pytest.approx(20.05)
    recv_nothing(conn, 11.0)
    assert conn.state is TcpState.ESTABLISHED


def test_unanswered_probes_reset_the_connection() -> None:
    conn = keepalive_conn()
    for at in (10.0, 11.0, 12.0):
        check(recv_one(conn, at), seq=DATA - 1)
    reset = recv_one(conn, 13.0)
    check(reset, seq=DATA, flags=RST)
    assert conn.state is TcpState.CLOSED
    assert isinstance(conn.error, TcpTimeoutError)


def test_traffic_postpones_keepalive() -> None:
    conn = keepalive_conn()
    send(conn, seg(PEER, DATA, payload=b"tick"), now=8.0)
    recv(conn, 8.0)
    assert conn.poll_at() == 18.0


def test_no_keepalive_while_data_is_outstanding() -> None:
    conn = keepalive_conn()
    conn.send(b"x")
    recv(conn, 0.0)
    at = conn.poll_at()
    assert at is not None and at < 10.0  # the retransmission timer, not keep-alive
    send(conn, seg(PEER, DATA + 1), now=0.1)
    assert conn.poll_at() == pytest.approx(10.1)  # idle since the last segment received
