"""FIN-WAIT-1, FIN-WAIT-2, CLOSING, TIME-WAIT, CLOSE-WAIT, LAST-ACK: every way to close.

A FIN takes one sequence number, so its acknowledgement is always fin_seq + 1.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from tcp_helpers import *

from dataplane.stack.tcp import TcpConnection, TcpResetError, TcpState, TcpStateError

OUR_FIN = LOCAL_SEQ + 1  # with no data sent, our FIN sits right after the SYN
THEIR_FIN = REMOTE_SEQ + 1

# ---------------------------------------------------------------------- FIN-WAIT-1


def test_fin_wait_1_ack_of_fin_goes_to_fin_wait_2() -> None:
    conn = conn_fin_wait_1()
    send(conn, seg(THEIR_FIN, OUR_FIN + 1))
    assert conn.state is TcpState.FIN_WAIT_2
    recv_nothing(conn)
    assert conn.poll_at() is None


def test_fin_wait_1_ack_below_our_fin_keeps_waiting() -> None:
    conn = conn_fin_wait_1()
    send(conn, seg(THEIR_FIN, OUR_FIN))
    assert conn.state is TcpState.FIN_WAIT_1


def test_fin_wait_1_fin_and_ack_go_to_time_wait() -> None:
    conn = conn_fin_wait_1()
    send(conn, seg(THEIR_FIN, OUR_FIN + 1, FIN | ACK))
    assert conn.state is TcpState.TIME_WAIT
    check(recv_one(conn), seq=OUR_FIN + 1, ack=THEIR_FIN + 1, flags=ACK)


def test_fin_wait_1_fin_without_ack_of_ours_goes_to_closing() -> None:
    conn = conn_fin_wait_1()
    send(conn, seg(THEIR_FIN, OUR_FIN, FIN | ACK))
    assert conn.state is TcpState.CLOSING
    check(recv_one(conn), seq=OUR_FIN + 1, ack=THEIR_FIN + 1, flags=ACK)


def test_fin_wait_1_still_receives_data() -> None:
    conn = conn_fin_wait_1()
    send(conn, seg(THEIR_FIN, OUR_FIN, ACK | PSH, payload=b"still talking"))
    check(recv_one(conn), ack=THEIR_FIN + 13)
    assert conn.recv() == b"still talking"
    assert conn.state is TcpState.FIN_WAIT_1


def test_fin_wait_1_retransmits_the_fin() -> None:
    conn = conn_fin_wait_1()
    rto = conn.stats.rto
    check(recv_one(conn, rto), seq=OUR_FIN, ack=THEIR_FIN, flags=FIN | ACK)
    assert conn.stats.retransmits == 1


def test_close_sends_fin_after_queued_data() -> None:
    conn = conn_established()
    conn.send(b"goodbye")
    conn.close()
    assert conn.state is TcpState.FIN_WAIT_1
    segment = recv_one(conn)
    check(segment, seq=LOCAL_SEQ + 1, flags=ACK | PSH | FIN, payload=b"goodbye")
    send(conn, seg(THEIR_FIN, LOCAL_SEQ + 1 + 7))  # data acked, not the FIN
    assert conn.state is TcpState.FIN_WAIT_1
    send(conn, seg(THEIR_FIN, LOCAL_SEQ + 1 + 7 + 1))
    assert conn.state is TcpState.FIN_WAIT_2


def test_fin_wait_1_reset_by_peer() -> None:
    conn = conn_fin_wait_1()
    send(conn, seg(THEIR_FIN, 0, RST))
    assert conn.state is TcpState.CLOSED
    assert isinstance(conn.error, TcpResetError)


# ---------------------------------------------------------------------- FIN-WAIT-2


def test_fin_wait_2_receives_data_then_fin() -> None:
    conn = conn_fin_wait_2()
    send(conn, seg(THEIR_FIN, OUR_FIN + 1, ACK, payload=b"tail"))
    check(recv_one(conn), seq=OUR_FIN + 1, ack=THEIR_FIN + 4)
    send(conn, seg(THEIR_FIN + 4, OUR_FIN + 1, FIN | ACK))
    assert conn.state is TcpState.TIME_WAIT
    check(recv_one(conn), seq=OUR_FIN + 1, ack=THEIR_FIN + 4 + 1, flags=ACK)
    assert conn.recv() == b"tail"
    assert conn.at_eof


def test_fin_wait_2_fin_with_data() -> None:
    conn = conn_fin_wait_2()
    send(conn, seg(THEIR_FIN, OUR_FIN + 1, FIN | ACK | PSH, payload=b"12345"))
    assert conn.state is TcpState.TIME_WAIT
    check(recv_one(conn), ack=THEIR_FIN + 5 + 1)


def test_fin_wait_2_has_no_timer_of_its_own() -> None:
    conn = conn_fin_wait_2()
    assert conn.poll_at() is None
    recv_nothing(conn, 1000.0)
    assert conn.state is TcpState.FIN_WAIT_2


# ---------------------------------------------------------------------- CLOSING


def test_closing_ack_of_fin_goes_to_time_wait() -> None:
    conn = conn_closing()
    send(conn, seg(THEIR_FIN + 1, OUR_FIN + 1))
    assert conn.state is TcpState.TIME_WAIT
    recv_nothing(conn)


# ---------------------------------------------------------------------- TIME-WAIT


def test_time_wait_expires() -> None:
    conn = conn_time_wait(config(time_wait=2.0))
    assert conn.poll_at() == 2.0
    recv_nothing(conn, 1.99)
    assert conn.state is TcpState.TIME_WAIT
    recv_nothing(conn, 2.0)
    assert conn.state is TcpState.CLOSED
    assert conn.error is None
    assert conn.poll_at() is None


def test_time_wait_acks_a_retransmitted_fin_and_restarts_the_timer() -> None:
    conn = conn_time_wait(config(time_wait=2.0))
    send(conn, seg(THEIR_FIN, OUR_FIN + 1, FIN | ACK), now=1.5)
    check(recv_one(conn, 1.5), seq=OUR_FIN + 1, ack=THEIR_FIN + 1, flags=ACK)
    assert conn.poll_at() == 3.5
    recv_nothing(conn, 3.0)
    assert conn.state is TcpState.TIME_WAIT


def test_time_wait_rst_closes_quietly() -> None:
    conn = conn_time_wait()
    send(conn, seg(THEIR_FIN + 1, 0, RST))
    assert conn.state is TcpState.CLOSED
    assert conn.error is None


def test_time_wait_syn_draws_a_challenge_ack() -> None:
    conn = conn_time_wait()
    send(conn, seg(THEIR_FIN + 1, 0, SYN))
    check(recv_one(conn), seq=OUR_FIN + 1, ack=THEIR_FIN + 1, flags=ACK)
    assert conn.state is TcpState.TIME_WAIT


def test_close_again_changes_nothing() -> None:
    conn = conn_time_wait()
    conn.close()
    assert conn.state is TcpState.TIME_WAIT


# ---------------------------------------------------------------------- CLOSE-WAIT


def test_close_wait_can_still_send() -> None:
    conn = conn_close_wait()
    assert conn.at_eof
    assert conn.writable
    conn.send(b"reply")
    check(recv_one(conn), seq=LOCAL_SEQ + 1, ack=THEIR_FIN + 1, payload=b"reply")


def test_close_wait_acks_a_retransmitted_fin() -> None:
    conn = conn_close_wait()
    send(conn, seg(THEIR_FIN, LOCAL_SEQ + 1, FIN | ACK))
    check(recv_one(conn), ack=THEIR_FIN + 1, flags=ACK)
    assert conn.state is TcpState.CLOSE_WAIT


def test_close_wait_close_sends_fin_after_data() -> None:
    conn = conn_close_wait()
    conn.send(b"last")
    conn.close()
    assert conn.state is TcpState.LAST_ACK
    check(recv_one(conn), seq=LOCAL_SEQ + 1, flags=ACK | PSH | FIN, payload=b"last")
    with pytest.raises(TcpStateError):
        conn.send(b"more")


# ---------------------------------------------------------------------- LAST-ACK


def test_last_ack_ack_of_fin_closes() -> None:
    conn = conn_last_ack()
    send(conn, seg(THEIR_FIN + 1, OUR_FIN + 1))
    assert conn.state is TcpState.CLOSED
    assert conn.error is None
    recv_nothing(conn)
    assert conn.poll_at() is None


def test_last_ack_rst_closes_quietly() -> None:
    conn = conn_last_ack()
    send(conn, seg(THEIR_FIN + 1, 0, RST))
    assert conn.state is TcpState.CLOSED
    assert conn.error is None


# ---------------------------------------------------------------------- CLOSING and LAST-ACK

# Both states wait only for the ACK of our FIN (RFC 9293 3.10.7.4), so the same rules hold.
WAITING_FOR_OUR_FIN_ACK = pytest.mark.parametrize(
    ("factory", "state"),
    [(conn_closing, TcpState.CLOSING), (conn_last_ack, TcpState.LAST_ACK)],
    ids=["closing", "last_ack"],
)


@WAITING_FOR_OUR_FIN_ACK
def test_other_ack_keeps_waiting(factory: Callable[[], TcpConnection], state: TcpState) -> None:
    conn = factory()
    send(conn, seg(THEIR_FIN + 1, OUR_FIN))
    assert conn.state is state


@WAITING_FOR_OUR_FIN_ACK
def test_our_fin_is_retransmitted(factory: Callable[[], TcpConnection], state: TcpState) -> None:
    conn = factory()
    check(recv_one(conn, conn.stats.rto), seq=OUR_FIN, ack=THEIR_FIN + 1, flags=FIN | ACK)
    assert conn.state is state


# ---------------------------------------------------------------------- whole sequences


def test_active_close_sequence() -> None:
    conn = conn_established(config(time_wait=1.0))
    conn.send(b"abc")
    conn.close()
    check(recv_one(conn), seq=LOCAL_SEQ + 1, flags=ACK | PSH | FIN, payload=b"abc")
    fin_seq = LOCAL_SEQ + 1 + 3
    send(conn, seg(THEIR_FIN, fin_seq + 1))
    assert conn.state is TcpState.FIN_WAIT_2
    send(conn, seg(THEIR_FIN, fin_seq + 1, FIN | ACK))
    check(recv_one(conn), seq=fin_seq + 1, ack=THEIR_FIN + 1, flags=ACK)
    assert conn.state is TcpState.TIME_WAIT
    recv_nothing(conn, 1.0)
    assert conn.state is TcpState.CLOSED


def test_passive_close_sequence() -> None:
    conn = conn_established()
    send(conn, seg(THEIR_FIN, LOCAL_SEQ + 1, FIN | ACK))
    assert conn.state is TcpState.CLOSE_WAIT
    check(recv_one(conn), ack=THEIR_FIN + 1, flags=ACK)
    conn.send(b"xyz")
    conn.close()
    check(recv_one(conn), seq=LOCAL_SEQ + 1, ack=THEIR_FIN + 1, flags=ACK | PSH | FIN)
    fin_seq = LOCAL_SEQ + 1 + 3
    send(conn, seg(THEIR_FIN + 1, fin_seq + 1))
    assert conn.state is TcpState.CLOSED
    assert conn.error is None


def test_simultaneous_close_sequence() -> None:
    conn = conn_established(config(time_wait=1.0))
    conn.close()
    check(recv_one(conn), seq=OUR_FIN, flags=FIN | ACK)
    # The peer's FIN crosses ours.
    send(conn, seg(THEIR_FIN, OUR_FIN, FIN | ACK))
    assert conn.state is TcpState.CLOSING
    check(recv_one(conn), seq=OUR_FIN + 1, ack=THEIR_FIN + 1, flags=ACK)
    # Then its ACK of our FIN.
    send(conn, seg(THEIR_FIN + 1, OUR_FIN + 1))
    assert conn.state is TcpState.TIME_WAIT
    recv_nothing(conn, 1.0)
    assert conn.state is TcpState.CLOSED


def test_fin_retransmission_after_data_loss_keeps_the_fin_position() -> None:
    conn = conn_established()
    conn.send(bytes(2000))
    conn.close()
    first = recv(conn)
    assert [len(s.payload) for s in first] == [1460, 540]
    assert first[-1].flags & FIN
    send(conn, seg(THEIR_FIN, LOCAL_SEQ + 1 + 1460))
    again = recv_one(conn, 0.01 + conn.stats.rto)
    check(again, seq=LOCAL_SEQ + 1 + 1460, flags=ACK | PSH | FIN, payload=bytes(540))


# ---------------------------------------------------------------------- abort (RFC 9293 3.10.5)


@pytest.mark.parametrize(
    ("factory", "reset_seq"),
    [
        (conn_fin_wait_1, OUR_FIN + 1),
        (conn_fin_wait_2, OUR_FIN + 1),
        (conn_close_wait, LOCAL_SEQ + 1),
        (conn_closing, None),
        (conn_last_ack, None),
        (conn_time_wait, None),
    ],
)
def test_abort_resets_only_where_the_rfc_says_so(factory: Any, reset_seq: int | None) -> None:
    conn = factory()
    conn.abort()
    assert conn.state is TcpState.CLOSED
    assert conn.error is None
    if reset_seq is None:
        recv_nothing(conn)
    else:
        check(recv_one(conn), seq=reset_seq, flags=RST)
    assert conn.poll_at() is None
