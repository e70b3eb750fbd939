"""Timestamps, RTTM and PAWS (RFC 7323), SACK generation (RFC 2018), MSS and options space."""

from __future__ import annotations

import pytest
from tcp_helpers import *

from dataplane.stack.tcp import TcpConnection, TcpState
from dataplane.wire.tcp import TcpOptions

PEER_TS0 = 50_000  # the peer's TSval in its SYN,ACK


def ts_conn(**overrides: object) -> TcpConnection:
    """Timestamps negotiated; our TSval is the time in ms (ts_offset=0)."""
    conn = conn_syn_sent(config(timestamps=True, **overrides))
    send(conn, synack(TcpOptions(mss=1460, timestamp=(PEER_TS0, 0))), now=0.0)
    check(recv_one(conn), ack=PEER, options=TcpOptions(timestamp=(0, PEER_TS0)))
    return conn


def ts(tsval: int, tsecr: int = 0) -> TcpOptions:
    return TcpOptions(timestamp=(tsval, tsecr))


def sack_conn(**overrides: object) -> TcpConnection:
    return conn_established(
        config(sack=True, **overrides), synack_options=TcpOptions(mss=1460, sack_permitted=True)
    )


# ---------------------------------------------------------------------- timestamps


def test_every_segment_carries_timestamps_once_negotiated() -> None:
    conn = ts_conn()
    conn.send(b"hi")
    check(recv_one(conn, 1.234), payload=b"hi", options=ts(1234, PEER_TS0))


def test_timestamps_shrink_the_payload_by_their_option_space() -> None:
    conn = ts_conn()
    conn.send(bytes(3000))
    assert [len(s.payload) for s in recv(conn)] == [1448, 1448, 104]


def test_segment_without_timestamp_is_dropped_once_negotiated() -> None:
    conn = ts_conn()
    send(conn, seg(PEER, DATA, payload=b"no ts"))
    assert conn.recv() == b""
    recv_nothing(conn)


def test_rst_without_timestamp_is_still_accepted() -> None:
    conn = ts_conn()
    send(conn, seg(PEER, 0, flags=RST))
    assert conn.state is TcpState.CLOSED
    assert conn.error is not None


def test_paws_drops_a_segment_with_an_old_timestamp() -> None:
    conn = ts_conn()
    send(conn, seg(PEER, DATA, payload=b"new", options=ts(PEER_TS0 + 10)))
    check(recv_one(conn), ack=PEER + 3)
    # An old duplicate with an in-window sequence number but an older timestamp.
    send(conn, seg(PEER + 3, DATA, payload=b"old", options=ts(PEER_TS0 + 5)))
    check(recv_one(conn), ack=PEER + 3)  # acknowledged, not accepted
    assert conn.recv() == b"new"
    assert conn.stats.paws_rejected == 1


def test_paws_compares_timestamps_modulo_2_32() -> None:
    conn = conn_syn_sent(config(timestamps=True))
    near_wrap = 0xFFFFFFF0
    send(
        conn,
        seg(REMOTE_SEQ, DATA, SYN | ACK, options=TcpOptions(mss=1460, timestamp=(near_wrap, 0))),
    )
    recv(conn)
    send(conn, seg(PEER, DATA, payload=b"a", options=ts(5)))  # wrapped: newer
    assert conn.recv() == b"a"
    assert conn.stats.paws_rejected == 0


def test_ts_recent_follows_only_in_sequence_segments() -> None:
    conn = ts_conn()
    # Out of order, newer timestamp: TS.Recent must not jump (its SEQ > Last.ACK.sent).
    send(conn, seg(PEER + 10, DATA, payload=b"later", options=ts(PEER_TS0 + 100)))
    check(recv_one(conn), ack=PEER, options=ts(0, PEER_TS0))
    send(conn, seg(PEER, DATA, payload=b"0123456789", options=ts(PEER_TS0 + 50)))
    check(recv_one(conn), ack=PEER + 15, options=ts(0, PEER_TS0 + 50))


def test_rtt_is_measured_from_the_echoed_timestamp() -> None:
    conn = ts_conn()
    conn.send(b"x")
    recv(conn, 1.0)  # TSval 1000
    send(conn, seg(PEER, DATA + 1, options=ts(PEER_TS0 + 1, 1000)), now=1.08)
    # The handshake gave a first sample of 0; this one is folded in with alpha = 1/8.
    assert conn.stats.rtt_srtt == pytest.approx(0.08 / 8)
    assert conn.stats.rtt_var == pytest.approx(0.08 / 4)


def test_timestamps_give_a_valid_sample_even_for_a_retransmission() -> None:
    conn = ts_conn()
    conn.send(b"x")
    recv(conn, 1.0)
    retransmission = recv_one(conn, 1.2)  # TSval 1200
    assert retransmission.options.timestamp == (1200, PEER_TS0)
    send(conn, seg(PEER, DATA + 1, options=ts(PEER_TS0 + 1, 1200)), now=1.25)
    assert conn.stats.rtt_srtt == pytest.approx(0.05 / 8)  # sampled despite the resend
    assert conn.stats.rto == pytest.approx(0.2)  # and the backoff ended


def test_timestamps_not_used_when_the_peer_does_not_offer_them() -> None:
    conn = conn_established(config(timestamps=True))
    conn.send(b"x")
    assert recv_one(conn).options.timestamp is None


# ---------------------------------------------------------------------- SACK generation


def test_duplicate_ack_carries_a_sack_block() -> None:
    conn = sack_conn()
    send(conn, seg(PEER + 100, DATA, payload=bytes(50)))
    check(
        recv_one(conn),
        ack=PEER,
        options=TcpOptions(sack_blocks=((PEER + 100, PEER + 150),)),
    )


def test_sack_blocks_most_recent_first() -> None:
    conn = sack_conn()
    send(conn, seg(PEER + 100, DATA, payload=bytes(50)))
    send(conn, seg(PEER + 300, DATA, payload=bytes(50)))
    send(conn, seg(PEER + 500, DATA, payload=bytes(50)))
    send(conn, seg(PEER + 150, DATA, payload=bytes(50)))  # extends the first block
    blocks = recv(conn)[-1].options.sack_blocks
    assert blocks == (
        (PEER + 100, PEER + 200),
        (PEER + 500, PEER + 550),
        (PEER + 300, PEER + 350),
    )


def test_at_most_four_sack_blocks_without_timestamps_three_with() -> None:
    conn = sack_conn()
    for i in range(6):
        send(conn, seg(PEER + 100 * (i + 1), DATA, payload=bytes(10)))
    assert len(recv(conn)[-1].options.sack_blocks) == 4

    both = conn_syn_sent(config(sack=True, timestamps=True))
    send(both, synack(TcpOptions(mss=1460, sack_permitted=True, timestamp=(1, 0))))
    recv(both)
    for i in range(6):
        send(both, seg(PEER + 100 * (i + 1), DATA, payload=bytes(10), options=ts(2)))
    assert len(recv(both)[-1].options.sack_blocks) == 3


def test_sack_blocks_disappear_once_the_gap_is_filled() -> None:
    conn = sack_conn()
    send(conn, seg(PEER + 10, DATA, payload=bytes(10)))
    recv(conn)
    send(conn, seg(PEER, DATA, payload=bytes(10)))
    check(recv_one(conn), ack=PEER + 20, options=TcpOptions())


def test_sack_blocks_shrink_the_data_payload() -> None:
    conn = sack_conn()
    send(conn, seg(PEER + 10, DATA, payload=bytes(10)))
    recv(conn)
    conn.send(bytes(1460))
    first = recv(conn)[0]
    assert len(first.payload) == 1460 - 12  # one block: 2 + 8 bytes, padded to 12


def test_no_sack_blocks_unless_negotiated() -> None:
    conn = conn_established(config(sack=True))  # the peer did not offer SACK
    send(conn, seg(PEER + 100, DATA, payload=bytes(50)))
    assert recv_one(conn).options.sack_blocks == ()
