"""Passive open: LISTEN -> SYN-RECEIVED -> ESTABLISHED (RFC 9293 sections 3.10.7.2, 3.10.7.4)."""

from __future__ import annotations

import pytest
from tcp_helpers import *

from dataplane.stack.tcp import (
    TcpConnection,
    TcpResetError,
    TcpState,
    TcpStateError,
    TcpTimeoutError,
)
from dataplane.wire.tcp import TcpFlags, TcpOptions


def test_from_syn_answers_with_syn_ack() -> None:
    syn = seg(REMOTE_SEQ, 0, SYN, options=TcpOptions(mss=1400))
    conn = TcpConnection.from_syn(syn, LOCAL_IP, REMOTE_IP, config(), isn=LOCAL_SEQ, now=0.0)
    assert (conn.local_port, conn.remote_port) == (LOCAL_PORT, REMOTE_PORT)
    assert conn.state is TcpState.SYN_RECEIVED
    synack = recv_one(conn)
    check(
        synack,
        seq=LOCAL_SEQ,
        ack=REMOTE_SEQ + 1,
        flags=SYN | ACK,
        window=65535,
        options=TcpOptions(mss=1460),
    )


@pytest.mark.parametrize("flags", [ACK, SYN | ACK, RST, SYN | RST, FIN])
def test_from_syn_needs_a_plain_syn(flags: object) -> None:
    with pytest.raises(ValueError, match="SYN"):
        TcpConnection.from_syn(
            seg(REMOTE_SEQ, 0, flags),  # type: ignore[arg-type]
            LOCAL_IP,
            REMOTE_IP,
            config(),
            isn=LOCAL_SEQ,
            now=0.0,
        )


def test_syn_ack_offers_only_what_the_syn_offered() -> None:
    all_on = config(window_scaling=True, sack=True, timestamps=True, recv_buffer=256 * 1024)
    offered = TcpOptions(mss=1460, window_scale=7, sack_permitted=True, timestamp=(111, 0))
    conn = TcpConnection.from_syn(
        seg(REMOTE_SEQ, 0, SYN, options=offered),
        LOCAL_IP,
        REMOTE_IP,
        all_on,
        isn=LOCAL_SEQ,
        now=2.0,
        ts_offset=0,
    )
    synack = recv_one(conn, 2.0)
    assert synack.options == TcpOptions(
        mss=1460, window_scale=3, sack_permitted=True, timestamp=(2000, 111)
    )
    assert synack.window == 65535  # never scaled in a SYN

    bare = conn_syn_received(all_on, syn_options=TcpOptions(mss=1460))
    send(bare, seg(REMOTE_SEQ, 0, SYN, options=TcpOptions(mss=1460)))  # retransmitted SYN
    assert recv_one(bare).options == TcpOptions(mss=1460)


def test_ack_establishes() -> None:
    conn = conn_syn_received()
    send(conn, seg(REMOTE_SEQ + 1, LOCAL_SEQ + 1))
    assert conn.state is TcpState.ESTABLISHED
    assert conn.writable
    recv_nothing(conn)
    assert conn.poll_at() is None


def test_data_on_the_handshake_ack_is_kept() -> None:
    conn = conn_syn_received()
    send(conn, seg(REMOTE_SEQ + 1, LOCAL_SEQ + 1, ACK | PSH, payload=b"GET / HTTP/1.1\r\n"))
    assert conn.state is TcpState.ESTABLISHED
    check(recv_one(conn), seq=LOCAL_SEQ + 1, ack=REMOTE_SEQ + 1 + 16, flags=ACK)
    assert conn.recv() == b"GET / HTTP/1.1\r\n"


def test_first_data_completes_the_handshake_when_the_ack_was_lost() -> None:
    conn = conn_syn_received()
    # The bare ACK was lost; two data segments follow, the second one first.
    send(conn, seg(REMOTE_SEQ + 1 + 3, LOCAL_SEQ + 1, ACK, payload=b"def"))
    assert conn.state is TcpState.ESTABLISHED
    check(recv_one(conn), ack=REMOTE_SEQ + 1, flags=ACK)  # duplicate ACK for the gap
    send(conn, seg(REMOTE_SEQ + 1, LOCAL_SEQ + 1, ACK, payload=b"abc"))
    check(recv_one(conn), ack=REMOTE_SEQ + 1 + 6, flags=ACK)
    assert conn.recv() == b"abcdef"


def test_ack_with_fin_goes_to_close_wait() -> None:
    conn = conn_syn_received()
    send(conn, seg(REMOTE_SEQ + 1, LOCAL_SEQ + 1, ACK | FIN))
    assert conn.state is TcpState.CLOSE_WAIT
    check(recv_one(conn), seq=LOCAL_SEQ + 1, ack=REMOTE_SEQ + 2, flags=ACK)
    assert conn.at_eof


@pytest.mark.parametrize("bad_ack", [LOCAL_SEQ, LOCAL_SEQ + 2])
def test_unacceptable_ack_draws_a_reset(bad_ack: int) -> None:
    conn = conn_syn_received()
    send(conn, seg(REMOTE_SEQ + 1, bad_ack))
    check(recv_one(conn), seq=bad_ack, flags=RST)
    assert conn.state is TcpState.SYN_RECEIVED


def test_segment_without_ack_is_dropped() -> None:
    conn = conn_syn_received()
    send(conn, seg(REMOTE_SEQ + 1, 0, PSH, payload=b"x"))
    assert conn.state is TcpState.SYN_RECEIVED
    recv_nothing(conn)


def test_rst_resets_the_half_open_connection() -> None:
    conn = conn_syn_received()
    send(conn, seg(REMOTE_SEQ + 1, 0, RST))
    assert conn.state is TcpState.CLOSED
    assert isinstance(conn.error, TcpResetError)
    recv_nothing(conn)


def test_retransmitted_syn_gets_the_syn_ack_again() -> None:
    conn = conn_syn_received()
    send(conn, seg(REMOTE_SEQ, 0, SYN, options=TcpOptions(mss=1460)))
    check(recv_one(conn), seq=LOCAL_SEQ, ack=REMOTE_SEQ + 1, flags=SYN | ACK)
    assert conn.state is TcpState.SYN_RECEIVED


def test_other_syn_in_window_draws_a_challenge_ack() -> None:
    conn = conn_syn_received()
    send(conn, seg(REMOTE_SEQ + 100, 0, SYN))
    check(recv_one(conn), seq=LOCAL_SEQ + 1, ack=REMOTE_SEQ + 1, flags=ACK)
    assert conn.stats.challenge_acks == 1
    assert conn.state is TcpState.SYN_RECEIVED


def test_syn_ack_is_retransmitted_then_times_out() -> None:
    conn = conn_syn_received(config(syn_retries=1))
    check(recv_one(conn, 1.0), seq=LOCAL_SEQ, flags=SYN | ACK)
    recv_nothing(conn, 2.9)
    recv_nothing(conn, 3.0)
    assert conn.state is TcpState.CLOSED
    assert isinstance(conn.error, TcpTimeoutError)


def test_close_in_syn_received_sends_fin_once_established() -> None:
    conn = conn_syn_received()
    conn.close()
    assert conn.state is TcpState.SYN_RECEIVED
    recv_nothing(conn)
    send(conn, seg(REMOTE_SEQ + 1, LOCAL_SEQ + 1))
    assert conn.state is TcpState.FIN_WAIT_1
    check(recv_one(conn), seq=LOCAL_SEQ + 1, ack=REMOTE_SEQ + 1, flags=FIN | ACK)


def test_data_queued_in_syn_received_goes_once_established() -> None:
    conn = conn_syn_received()
    assert conn.send(b"welcome") == 7
    recv_nothing(conn)
    send(conn, seg(REMOTE_SEQ + 1, LOCAL_SEQ + 1))
    check(recv_one(conn), seq=LOCAL_SEQ + 1, flags=ACK | PSH, payload=b"welcome")


def test_abort_in_syn_received_sends_a_reset() -> None:
    conn = conn_syn_received()
    conn.abort()
    assert conn.state is TcpState.CLOSED
    check(recv_one(conn), seq=LOCAL_SEQ + 1, flags=RST)


def test_syn_data_is_not_acknowledged_without_fast_open() -> None:
    syn = seg(REMOTE_SEQ, 0, SYN, payload=b"early", options=TcpOptions(mss=1460))
    conn = TcpConnection.from_syn(syn, LOCAL_IP, REMOTE_IP, config(), isn=LOCAL_SEQ, now=0.0)
    [synack] = recv(conn)
    check(synack, ack=REMOTE_SEQ + 1)
    send(conn, seg(REMOTE_SEQ + 1, LOCAL_SEQ + 1, ACK, payload=b"early"))
    assert conn.recv() == b"early"


# ---------------------------------------------------------------------- LISTEN


def conn_listen() -> TcpConnection:
    conn = TcpConnection(LOCAL_IP, LOCAL_PORT, REMOTE_IP, REMOTE_PORT, config(), isn=LOCAL_SEQ)
    conn.listen()
    assert conn.state is TcpState.LISTEN
    assert conn.poll_at() is None
    return conn


@pytest.mark.parametrize("flags", [RST, FIN], ids=["rst is ignored", "no syn is dropped"])
def test_listen_stays_silent(flags: TcpFlags) -> None:
    conn = conn_listen()
    send(conn, seg(REMOTE_SEQ, 0, flags))
    assert conn.state is TcpState.LISTEN
    recv_nothing(conn)


def test_listen_answers_an_ack_with_a_reset() -> None:
    conn = conn_listen()
    send(conn, seg(REMOTE_SEQ, 777, ACK, payload=b"stray"))
    check(recv_one(conn), seq=777, flags=RST)
    assert conn.state is TcpState.LISTEN


def test_listen_syn_goes_to_syn_received() -> None:
    conn = conn_listen()
    send(conn, seg(REMOTE_SEQ, 0, SYN, options=TcpOptions(mss=1460)))
    assert conn.state is TcpState.SYN_RECEIVED
    check(recv_one(conn), seq=LOCAL_SEQ, ack=REMOTE_SEQ + 1, flags=SYN | ACK)


def test_close_in_listen() -> None:
    conn = conn_listen()
    conn.close()
    assert conn.state is TcpState.CLOSED
    with pytest.raises(TcpStateError):
        conn.listen()  # a connection object is opened once
