"""RFC 5961 blind-attack protections, replies in CLOSED (RFC 9293 3.10.7.1), ISNs (RFC 6528)."""

from __future__ import annotations

import errno

import pytest
from tcp_helpers import *

from dataplane.stack.tcp import (
    IsnGenerator,
    TcpResetError,
    TcpState,
    reset_for_unmatched,
)
from dataplane.wire.tcp import TcpFlags

# ---------------------------------------------------------------------- RST (RFC 5961 section 3)


def test_rst_exactly_at_rcv_nxt_resets() -> None:
    conn = conn_established()
    send(conn, seg(PEER, 0, RST))
    assert conn.state is TcpState.CLOSED
    assert isinstance(conn.error, TcpResetError)
    assert conn.error.errno == errno.ECONNRESET
    recv_nothing(conn)


def test_rst_in_window_but_not_exact_draws_a_challenge_ack() -> None:
    conn = conn_established()
    send(conn, seg(PEER + 1000, 0, RST))
    assert conn.state is TcpState.ESTABLISHED
    check(recv_one(conn), seq=DATA, ack=PEER, flags=ACK)
    assert conn.stats.challenge_acks == 1
    # The genuine peer answers the challenge with the exact RST.
    send(conn, seg(PEER, 0, RST))
    assert conn.state is TcpState.CLOSED


@pytest.mark.parametrize("offset", [-1, -1000, 65535, 1 << 20, 1 << 31])
def test_rst_outside_the_window_is_ignored(offset: int) -> None:
    conn = conn_established()
    send(conn, seg(PEER + offset, 0, RST))
    assert conn.state is TcpState.ESTABLISHED
    recv_nothing(conn)


def test_rst_with_ack_in_window_not_exact_is_challenged_too() -> None:
    conn = conn_established()
    send(conn, seg(PEER + 1, DATA, RST | ACK))
    assert conn.state is TcpState.ESTABLISHED
    check(recv_one(conn), flags=ACK)


# ---------------------------------------------------------------------- SYN (RFC 5961 section 4)


@pytest.mark.parametrize("offset", [0, 100, -5, 1 << 20])
def test_syn_in_established_draws_a_challenge_ack(offset: int) -> None:
    conn = conn_established()
    send(conn, seg(PEER + offset, 0, SYN))
    assert conn.state is TcpState.ESTABLISHED
    check(recv_one(conn), seq=DATA, ack=PEER, flags=ACK)


def test_syn_with_data_in_established_does_not_deliver_the_data() -> None:
    conn = conn_established()
    send(conn, seg(PEER, DATA, SYN | ACK, payload=b"forged"))
    assert conn.recv() == b""
    check(recv_one(conn), ack=PEER)


# ---------------------------------------------------------------------- ACK (RFC 5961 section 5)


def test_ack_too_old_draws_a_challenge_ack_and_the_data_is_dropped() -> None:
    conn = conn_established(window=1000)
    send(conn, seg(PEER, DATA - 5000, ACK | PSH, payload=b"injected"))
    check(recv_one(conn), seq=DATA, ack=PEER, flags=ACK)
    assert conn.recv() == b""
    assert conn.stats.challenge_acks == 1


def test_slightly_old_ack_is_fine() -> None:
    conn = conn_established()
    conn.send(b"abc")
    recv(conn)
    send(conn, seg(PEER, DATA + 3))
    send(conn, seg(PEER, DATA, ACK | PSH, payload=b"data"))  # older ACK, newer data
    assert conn.recv() == b"data"
    assert conn.stats.challenge_acks == 0


# ---------------------------------------------------------------------- CLOSED


def test_reset_for_unmatched_ack() -> None:
    incoming = seg(5000, 7000, ACK | PSH, payload=b"xx")
    check(reset_for_unmatched(incoming), seq=7000, ack=0, flags=RST)  # type: ignore[arg-type]
    reset = reset_for_unmatched(incoming)
    assert reset is not None
    assert (reset.src_port, reset.dst_port) == (LOCAL_PORT, REMOTE_PORT)
    assert reset.payload == b""


@pytest.mark.parametrize(
    ("flags", "payload", "expected_ack"),
    [(SYN, b"", 5001), (FIN, b"abc", 5004), (SYN | FIN, b"", 5002), (PSH, b"abc", 5003)],
)
def test_reset_for_unmatched_without_ack(
    flags: TcpFlags, payload: bytes, expected_ack: int
) -> None:
    reset = reset_for_unmatched(seg(5000, 0, flags, payload=payload))
    assert reset is not None
    check(reset, seq=0, ack=expected_ack, flags=RST | ACK)


def test_reset_for_unmatched_wraps_the_ack() -> None:
    reset = reset_for_unmatched(seg(0xFFFFFFFF, 0, SYN))
    assert reset is not None
    assert reset.ack == 0


def test_reset_for_unmatched_never_answers_a_reset() -> None:
    assert reset_for_unmatched(seg(1, 2, RST | ACK)) is None
    assert reset_for_unmatched(seg(1, 0, RST)) is None


def test_closed_connection_answers_with_a_reset() -> None:
    conn = conn_closed()
    send(conn, seg(5000, 0, SYN))
    check(recv_one(conn), seq=0, ack=5001, flags=RST | ACK)
    send(conn, seg(5000, 0, RST))
    recv_nothing(conn)
    assert conn.state is TcpState.CLOSED


# ---------------------------------------------------------------------- ISN (RFC 6528)


def test_isn_is_keyed_per_tuple_and_driven_by_a_4us_clock() -> None:
    generator = IsnGenerator(b"0123456789abcdef")
    base = generator(LOCAL_IP, LOCAL_PORT, REMOTE_IP, REMOTE_PORT, 10.0)
    assert generator(LOCAL_IP, LOCAL_PORT, REMOTE_IP, REMOTE_PORT, 10.0) == base
    assert generator(LOCAL_IP, LOCAL_PORT, REMOTE_IP, REMOTE_PORT, 10.000004) == (base + 1) % 2**32
    assert generator(LOCAL_IP, LOCAL_PORT, REMOTE_IP, REMOTE_PORT, 11.0) == (base + 250_000) % 2**32
    assert generator(LOCAL_IP, LOCAL_PORT + 1, REMOTE_IP, REMOTE_PORT, 10.0) != base
    other_key = IsnGenerator(b"another secret!!")
    assert other_key(LOCAL_IP, LOCAL_PORT, REMOTE_IP, REMOTE_PORT, 10.0) != base


def test_the_timestamp_offset_comes_with_the_isn_keyed_and_clock_free() -> None:
    """RFC 7323 section 7.1: a per-connection random TS offset; taken from the other half
    of the ISN's keyed hash, so it is fixed per 4-tuple and key, and not clock-driven."""
    generator = IsnGenerator(b"0123456789abcdef")
    isn, offset = generator.isn_and_ts_offset(LOCAL_IP, LOCAL_PORT, REMOTE_IP, REMOTE_PORT, 10.0)
    assert isn == generator(LOCAL_IP, LOCAL_PORT, REMOTE_IP, REMOTE_PORT, 10.0)
    later = generator.isn_and_ts_offset(LOCAL_IP, LOCAL_PORT, REMOTE_IP, REMOTE_PORT, 11.0)
    assert later == ((isn + 250_000) % 2**32, offset)
    other = generator.isn_and_ts_offset(LOCAL_IP, LOCAL_PORT + 1, REMOTE_IP, REMOTE_PORT, 10.0)
    assert other[1] != offset and 0 <= offset < 2**32


def test_isn_stays_32_bit_and_random_secret_by_default() -> None:
    a, b = IsnGenerator(), IsnGenerator()
    values = {a(1, 2, 3, 4, 1e6), b(1, 2, 3, 4, 1e6)}
    assert all(0 <= v < 2**32 for v in values)
    assert len(values) == 2


def test_isn_secret_must_fit_blake2s() -> None:
    with pytest.raises(ValueError, match="secret"):
        IsnGenerator(bytes(33))
