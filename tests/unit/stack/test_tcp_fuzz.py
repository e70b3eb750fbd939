"""Property tests: whatever the peer sends and the application does, the connection never
raises, emits only well-formed segments and never asks to be polled in a busy loop."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tcp_helpers import *

from dataplane.stack.tcp import TcpConnection, TcpState, TcpStateError
from dataplane.wire.tcp import TcpFlags, TcpOptions

FACTORIES = [
    conn_syn_sent,
    conn_syn_received,
    conn_established,
    conn_fin_wait_1,
    conn_fin_wait_2,
    conn_closing,
    conn_time_wait,
    conn_close_wait,
    conn_last_ack,
]
ALL_EXTENSIONS = config(
    window_scaling=True, timestamps=True, sack=True, delayed_ack=0.04, recv_buffer=8192, mss=536
)


def near(base: int) -> st.SearchStrategy[int]:
    """Sequence numbers around the interesting values, plus anything at all."""
    return st.one_of(
        st.integers(-3000, 70_000).map(lambda d: (base + d) % 2**32),
        st.integers(0, 2**32 - 1),
    )


segments = st.builds(
    seg,
    seq=near(REMOTE_SEQ),
    ack=near(LOCAL_SEQ),
    flags=st.integers(0, 0xFF).map(TcpFlags),
    payload=st.binary(max_size=1200),
    window=st.integers(0, 0xFFFF),
    options=st.builds(
        TcpOptions,
        mss=st.none() | st.integers(0, 0xFFFF),
        window_scale=st.none() | st.integers(0, 255),
        sack_permitted=st.booleans(),
        sack_blocks=st.lists(st.tuples(near(LOCAL_SEQ), near(LOCAL_SEQ)), max_size=4).map(tuple),
        timestamp=st.none() | st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)),
    ),
)

actions = st.one_of(
    st.tuples(st.just("segment"), segments),
    st.tuples(st.just("send"), st.binary(max_size=5000)),
    st.tuples(st.just("recv"), st.integers(0, 10_000)),
    st.tuples(st.just("close"), st.none()),
    st.tuples(st.just("abort"), st.none()),
    st.tuples(st.just("wait"), st.floats(0.0, 5.0)),
)


def check_output(conn: TcpConnection, now: float) -> None:
    for out in conn.poll_output(now):
        assert 0 <= out.seq < 2**32 and 0 <= out.ack < 2**32
        assert 0 <= out.window <= 0xFFFF
        assert len(out.payload) <= 1460
        assert not (out.flags & TcpFlags.RST and out.payload)
    at = conn.poll_at()
    assert at is None or at > now, (at, now, conn)


def run(conn: TcpConnection, steps: list[tuple[str, Any]]) -> None:
    now = 0.0
    for action, argument in steps:
        if action == "segment":
            conn.on_segment(argument, now)
        elif action == "send":
            try:
                conn.send(argument)
            except TcpStateError:
                assert conn.state not in (TcpState.ESTABLISHED, TcpState.CLOSE_WAIT) or (
                    conn.send_space == 0
                )
        elif action == "recv":
            conn.recv(argument)
        elif action == "close":
            conn.close()
        elif action == "abort":
            conn.abort()
        else:
            now += argument
        check_output(conn, now)
        assert isinstance(conn.state, TcpState)
        stats = conn.stats
        assert stats.cwnd > 0 and stats.rcv_wnd >= 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(FACTORIES), st.lists(actions, max_size=25))
def test_random_segments_and_calls_never_break_the_connection(
    factory: Any, steps: list[tuple[str, Any]]
) -> None:
    run(factory(), steps)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(actions, max_size=25))
def test_with_every_extension_negotiated(steps: list[tuple[str, Any]]) -> None:
    conn = conn_established(
        ALL_EXTENSIONS,
        synack_options=TcpOptions(mss=536, window_scale=3, sack_permitted=True, timestamp=(1, 0)),
    )
    run(conn, steps)
