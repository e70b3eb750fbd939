"""CLOSED -> SYN-SENT -> ESTABLISHED / SYN-RECEIVED / CLOSED (RFC 9293 section 3.10.7.3)."""

from __future__ import annotations

import errno

import pytest
from tcp_helpers import *

from dataplane.stack.tcp import (
    TcpRefusedError,
    TcpState,
    TcpStateError,
    TcpTimeoutError,
)
from dataplane.wire.tcp import TcpOptions


def test_connect_sends_syn_with_mss_only_when_extensions_are_off() -> None:
    conn = conn_closed()
    assert conn.poll_at() is None
    conn.connect(0.0)
    assert conn.state is TcpState.SYN_SENT
    assert conn.poll_at() == 0.0
    syn = recv_one(conn)
    check(syn, seq=LOCAL_SEQ, ack=0, flags=SYN, window=65535, options=TcpOptions(mss=1460))
    recv_nothing(conn)


def test_connect_offers_every_enabled_extension() -> None:
    conn = conn_closed(config(window_scaling=True, sack=True, timestamps=True))
    conn.connect(5.0)
    syn = recv_one(conn, 5.0)
    assert syn.options == TcpOptions(
        mss=1460, window_scale=0, sack_permitted=True, timestamp=(5000, 0)
    )


def test_connect_twice_is_refused() -> None:
    conn = conn_syn_sent()
    with pytest.raises(TcpStateError):
        conn.connect(0.0)


def test_syn_ack_establishes_and_is_acknowledged() -> None:
    conn = conn_syn_sent()
    assert not conn.writable
    send(conn, seg(REMOTE_SEQ, LOCAL_SEQ + 1, SYN | ACK, options=TcpOptions(mss=1400)))
    assert conn.state is TcpState.ESTABLISHED
    assert conn.writable
    check(recv_one(conn), seq=LOCAL_SEQ + 1, ack=REMOTE_SEQ + 1, flags=ACK, window=65535)
    recv_nothing(conn)
    assert conn.poll_at() is None


def test_data_in_the_syn_ack_is_kept() -> None:
    conn = conn_syn_sent()
    send(conn, seg(REMOTE_SEQ, LOCAL_SEQ + 1, SYN | ACK | PSH, payload=b"hello"))
    assert conn.state is TcpState.ESTABLISHED
    check(recv_one(conn), seq=LOCAL_SEQ + 1, ack=REMOTE_SEQ + 1 + 5, flags=ACK)
    assert conn.recv() == b"hello"


def test_data_arriving_before_our_handshake_ack_went_out_is_kept() -> None:
    conn = conn_syn_sent()
    send(conn, seg(REMOTE_SEQ, LOCAL_SEQ + 1, SYN | ACK))
    # The peer's first data overtakes our (not yet polled) ACK of its SYN.
    send(conn, seg(REMOTE_SEQ + 1, LOCAL_SEQ + 1, ACK | PSH, payload=b"first"))
    check(recv_one(conn), seq=LOCAL_SEQ + 1, ack=REMOTE_SEQ + 1 + 5, flags=ACK)
    assert conn.recv() == b"first"


def test_fin_in_the_syn_ack_takes_one_sequence_number() -> None:
    conn = conn_syn_sent()
    send(conn, seg(REMOTE_SEQ, LOCAL_SEQ + 1, SYN | ACK | FIN, payload=b"bye"))
    assert conn.state is TcpState.CLOSE_WAIT
    check(recv_one(conn), ack=REMOTE_SEQ + 1 + 3 + 1, flags=ACK)
    assert conn.recv() == b"bye"
    assert conn.at_eof


def test_rst_acknowledging_our_syn_means_refused() -> None:
    conn = conn_syn_sent()
    send(conn, seg(0, LOCAL_SEQ + 1, RST | ACK))
    assert conn.state is TcpState.CLOSED
    assert isinstance(conn.error, TcpRefusedError)
    assert conn.error.errno == errno.ECONNREFUSED
    assert conn.readable
    recv_nothing(conn)
    assert conn.poll_at() is None


def test_rst_without_ack_is_ignored() -> None:
    conn = conn_syn_sent()
    send(conn, seg(REMOTE_SEQ, 0, RST))
    assert conn.state is TcpState.SYN_SENT
    assert conn.error is None
    recv_nothing(conn)


def test_rst_with_a_wrong_ack_is_ignored() -> None:
    conn = conn_syn_sent()
    send(conn, seg(REMOTE_SEQ, LOCAL_SEQ + 100, RST | ACK))
    assert conn.state is TcpState.SYN_SENT
    recv_nothing(conn)


@pytest.mark.parametrize("bad_ack", [LOCAL_SEQ, LOCAL_SEQ + 2, LOCAL_SEQ - 1000])
def test_syn_ack_with_unacceptable_ack_draws_a_reset(bad_ack: int) -> None:
    conn = conn_syn_sent()
    send(conn, seg(REMOTE_SEQ, bad_ack, SYN | ACK))
    check(recv_one(conn), seq=bad_ack, flags=RST)
    assert conn.state is TcpState.SYN_SENT


def test_segment_without_syn_or_rst_is_dropped() -> None:
    conn = conn_syn_sent()
    send(conn, seg(REMOTE_SEQ, LOCAL_SEQ + 1, ACK, payload=b"x"))
    assert conn.state is TcpState.SYN_SENT
    recv_nothing(conn)


def test_simultaneous_open() -> None:
    conn = conn_syn_sent()
    send(conn, seg(REMOTE_SEQ, 0, SYN, options=TcpOptions(mss=1460)))
    assert conn.state is TcpState.SYN_RECEIVED
    synack = recv_one(conn)
    check(synack, seq=LOCAL_SEQ, ack=REMOTE_SEQ + 1, flags=SYN | ACK)
    send(conn, seg(REMOTE_SEQ + 1, LOCAL_SEQ + 1))
    assert conn.state is TcpState.ESTABLISHED
    recv_nothing(conn)


def test_syn_is_retransmitted_with_backoff_then_times_out() -> None:
    conn = conn_syn_sent(config(syn_retries=2, rto_initial=1.0))
    assert conn.poll_at() == 1.0
    recv_nothing(conn, 0.999)
    check(recv_one(conn, 1.0), seq=LOCAL_SEQ, flags=SYN)
    assert conn.poll_at() == 3.0  # the RTO doubled
    check(recv_one(conn, 3.0), seq=LOCAL_SEQ, flags=SYN)
    assert conn.poll_at() == 7.0
    recv_nothing(conn, 7.0)
    assert conn.state is TcpState.CLOSED
    assert isinstance(conn.error, TcpTimeoutError)
    assert conn.error.errno == errno.ETIMEDOUT
    assert conn.stats.retransmits == 2


def test_handshake_rtt_is_sampled_when_the_syn_was_not_retransmitted() -> None:
    conn = conn_syn_sent()
    send(conn, seg(REMOTE_SEQ, LOCAL_SEQ + 1, SYN | ACK), now=0.5)
    assert conn.stats.rtt_srtt == pytest.approx(0.5)
    assert conn.stats.rto == pytest.approx(0.5 + 4 * 0.25)


def test_after_a_lost_syn_the_rto_starts_at_three_seconds() -> None:
    # RFC 6298 section 5.7; and Karn: the retransmitted SYN gives no sample.
    conn = conn_syn_sent()
    recv_one(conn, 1.0)
    send(conn, seg(REMOTE_SEQ, LOCAL_SEQ + 1, SYN | ACK), now=1.1)
    assert conn.stats.rtt_srtt == 0.0
    assert conn.stats.rto == 3.0


def test_close_in_syn_sent_forgets_the_connection() -> None:
    conn = conn_syn_sent()
    conn.close()
    assert conn.state is TcpState.CLOSED
    assert conn.error is None
    recv_nothing(conn, 5.0)


def test_abort_in_syn_sent_sends_nothing() -> None:
    conn = conn_syn_sent()
    conn.abort()
    assert conn.state is TcpState.CLOSED
    recv_nothing(conn)


def test_data_queued_before_the_handshake_goes_after_it() -> None:
    conn = conn_syn_sent()
    assert conn.send(b"early") == 5
    recv_nothing(conn)  # no data before ESTABLISHED
    send(conn, seg(REMOTE_SEQ, LOCAL_SEQ + 1, SYN | ACK))
    [data] = recv(conn)  # the data segment carries the handshake ACK
    check(data, seq=LOCAL_SEQ + 1, ack=REMOTE_SEQ + 1, flags=ACK | PSH, payload=b"early")


@pytest.mark.parametrize(
    ("peer_mss", "expected"), [(536, 536), (None, 536), (9000, 1460), (1200, 1200)]
)
def test_send_mss_is_the_smaller_of_both(peer_mss: int | None, expected: int) -> None:
    conn = conn_syn_sent()
    send(conn, seg(REMOTE_SEQ, LOCAL_SEQ + 1, SYN | ACK, options=TcpOptions(mss=peer_mss)))
    recv_one(conn)
    conn.send(bytes(3000))
    sizes = [len(s.payload) for s in recv(conn)]
    assert sizes[0] == expected
    assert sum(sizes) == 3000
    assert all(size == expected for size in sizes[:-1])
