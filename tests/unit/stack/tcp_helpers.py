"""Factories and helpers for the TCP state machine tests, in smoltcp's style.

"We" are the `TcpConnection` under test (LOCAL); the test plays the peer (REMOTE). `send`
hands the connection a segment from the peer, `recv` collects what the connection emits.
Factories build a connection in each state through the real transitions, so every test
starts from a state the state machine itself reached.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dataplane.stack.tcp import TcpConfig, TcpConnection, TcpState
from dataplane.wire.tcp import TcpFlags, TcpOptions, TcpRepr

LOCAL_IP = 0xC6120001  # 198.18.0.1
REMOTE_IP = 0xC6120002  # 198.18.0.2
LOCAL_PORT = 49152
REMOTE_PORT = 443
LOCAL_SEQ = 10_000  # our ISN
REMOTE_SEQ = 20_000  # the peer's ISN
DATA = LOCAL_SEQ + 1  # our first data byte
PEER = REMOTE_SEQ + 1  # the peer's first data byte

SYN = TcpFlags.SYN
ACK = TcpFlags.ACK
FIN = TcpFlags.FIN
RST = TcpFlags.RST
PSH = TcpFlags.PSH
NO_OPTIONS = TcpOptions()
PEER_SYN_OPTIONS = TcpOptions(mss=1460)


def config(**overrides: Any) -> TcpConfig:
    """A config with the optional extensions off and immediate ACKs, so that expected
    segments stay short; tests that exercise an extension switch it back on."""
    base: dict[str, Any] = {
        "recv_buffer": 65535,
        "send_buffer": 65536,
        "window_scaling": False,
        "timestamps": False,
        "sack": False,
        "delayed_ack": 0.0,
        "time_wait": 2.0,
    }
    base.update(overrides)
    return TcpConfig(**base)


def seg(
    seq: int,
    ack: int = 0,
    flags: TcpFlags = ACK,
    payload: bytes = b"",
    window: int = 65535,
    options: TcpOptions = NO_OPTIONS,
) -> TcpRepr:
    """A segment from the peer to us. `seq`/`ack` are taken modulo 2**32."""
    return TcpRepr(
        src_port=REMOTE_PORT,
        dst_port=LOCAL_PORT,
        seq=seq & 0xFFFFFFFF,
        ack=ack & 0xFFFFFFFF,
        flags=flags,
        window=window,
        options=options,
        payload=payload,
    )


def synack(options: TcpOptions = PEER_SYN_OPTIONS, window: int = 65535) -> TcpRepr:
    """The peer's SYN,ACK to our SYN (ISNs LOCAL_SEQ and REMOTE_SEQ)."""
    return seg(REMOTE_SEQ, DATA, SYN | ACK, window=window, options=options)


def send(conn: TcpConnection, segment: TcpRepr, now: float = 0.0) -> None:
    """The peer's segment arrives."""
    conn.on_segment(segment, now)


def recv(conn: TcpConnection, now: float = 0.0) -> list[TcpRepr]:
    """Everything the connection transmits at `now`."""
    out = conn.poll_output(now)
    for segment in out:
        assert segment.src_port == LOCAL_PORT
        assert segment.dst_port == REMOTE_PORT
        assert 0 <= segment.window <= 0xFFFF
        assert 0 <= segment.seq <= 0xFFFFFFFF
    return out


def recv_one(conn: TcpConnection, now: float = 0.0) -> TcpRepr:
    out = recv(conn, now)
    assert len(out) == 1, out
    return out[0]


def recv_nothing(conn: TcpConnection, now: float = 0.0) -> None:
    out = recv(conn, now)
    assert out == [], out


def check(
    segment: TcpRepr,
    *,
    seq: int | None = None,
    ack: int | None = None,
    flags: TcpFlags | None = None,
    payload: bytes | None = None,
    window: int | None = None,
    options: TcpOptions | None = None,
) -> None:
    """Assert the given fields of an emitted segment (sequence numbers modulo 2**32)."""
    if seq is not None:
        assert segment.seq == seq & 0xFFFFFFFF, (segment, "seq", seq)
    if ack is not None:
        assert segment.ack == ack & 0xFFFFFFFF, (segment, "ack", ack)
    if flags is not None:
        assert segment.flags == flags, (segment, "flags", flags)
    if payload is not None:
        assert segment.payload == payload, (segment, "payload", payload)
    if window is not None:
        assert segment.window == window, (segment, "window", window)
    if options is not None:
        assert segment.options == options, (segment, "options", options)


def with_payload(segment: TcpRepr, payload: bytes) -> TcpRepr:
    return replace(segment, payload=payload)


# ---------------------------------------------------------------------- factories


def conn_closed(cfg: TcpConfig | None = None, isn: int = LOCAL_SEQ) -> TcpConnection:
    return TcpConnection(
        LOCAL_IP, LOCAL_PORT, REMOTE_IP, REMOTE_PORT, cfg or config(), isn=isn, ts_offset=0
    )


def conn_syn_sent(cfg: TcpConfig | None = None, isn: int = LOCAL_SEQ) -> TcpConnection:
    """connect() called and the SYN sent."""
    conn = conn_closed(cfg, isn)
    conn.connect(0.0)
    syn = recv_one(conn)
    assert syn.flags == SYN
    assert conn.state is TcpState.SYN_SENT
    return conn


def conn_syn_received(
    cfg: TcpConfig | None = None,
    syn_options: TcpOptions = PEER_SYN_OPTIONS,
    isn: int = LOCAL_SEQ,
    remote_isn: int = REMOTE_SEQ,
) -> TcpConnection:
    """Passive open from the peer's SYN, our SYN,ACK sent."""
    syn = seg(remote_isn, 0, SYN, options=syn_options)
    conn = TcpConnection.from_syn(
        syn, LOCAL_IP, REMOTE_IP, cfg or config(), isn=isn, now=0.0, ts_offset=0
    )
    synack = recv_one(conn)
    assert synack.flags == SYN | ACK
    assert conn.state is TcpState.SYN_RECEIVED
    return conn


def conn_established(
    cfg: TcpConfig | None = None,
    synack_options: TcpOptions = PEER_SYN_OPTIONS,
    isn: int = LOCAL_SEQ,
    remote_isn: int = REMOTE_SEQ,
    window: int = 65535,
) -> TcpConnection:
    """Active open completed: SND.NXT = isn + 1, RCV.NXT = remote_isn + 1."""
    conn = conn_syn_sent(cfg, isn)
    send(conn, seg(remote_isn, isn + 1, SYN | ACK, window=window, options=synack_options))
    assert conn.state is TcpState.ESTABLISHED
    check(recv_one(conn), seq=isn + 1, ack=remote_isn + 1, flags=ACK)
    return conn


def _close(conn: TcpConnection, ack: int, state: TcpState) -> TcpConnection:
    """close() with no data outstanding: our FIN goes out at DATA and the state is `state`."""
    conn.close()
    check(recv_one(conn), seq=DATA, ack=ack, flags=FIN | ACK)
    assert conn.state is state
    return conn


def _peer_fin(conn: TcpConnection, ack: int, state: TcpState, our_seq: int) -> TcpConnection:
    """The peer's FIN (at PEER, acknowledging `ack`) arrives; we move to `state` and ACK it."""
    send(conn, seg(PEER, ack, FIN | ACK))
    assert conn.state is state
    check(recv_one(conn), seq=our_seq, ack=PEER + 1, flags=ACK)
    return conn


def conn_fin_wait_1(cfg: TcpConfig | None = None) -> TcpConnection:
    """close() called, our FIN (at LOCAL_SEQ + 1) sent, not yet acknowledged."""
    return _close(conn_established(cfg), PEER, TcpState.FIN_WAIT_1)


def conn_fin_wait_2(cfg: TcpConfig | None = None) -> TcpConnection:
    """Our FIN acknowledged (ACK = LOCAL_SEQ + 2), the peer's FIN not yet received."""
    conn = conn_fin_wait_1(cfg)
    send(conn, seg(PEER, DATA + 1))
    assert conn.state is TcpState.FIN_WAIT_2
    recv_nothing(conn)
    return conn


def conn_closing(cfg: TcpConfig | None = None) -> TcpConnection:
    """Simultaneous close: the peer's FIN crossed ours (it does not acknowledge ours)."""
    return _peer_fin(conn_fin_wait_1(cfg), DATA, TcpState.CLOSING, DATA + 1)


def conn_time_wait(cfg: TcpConfig | None = None) -> TcpConnection:
    """Active close finished at time 0: the peer's FIN acknowledged, timer running."""
    return _peer_fin(conn_fin_wait_2(cfg), DATA + 1, TcpState.TIME_WAIT, DATA + 1)


def conn_close_wait(cfg: TcpConfig | None = None) -> TcpConnection:
    """The peer closed first (its FIN at REMOTE_SEQ + 1), we acknowledged it."""
    return _peer_fin(conn_established(cfg), DATA, TcpState.CLOSE_WAIT, DATA)


def conn_last_ack(cfg: TcpConfig | None = None) -> TcpConnection:
    """Passive close: we closed after the peer, our FIN (at LOCAL_SEQ + 1) is out."""
    return _close(conn_close_wait(cfg), PEER + 1, TcpState.LAST_ACK)


#: What the test_tcp_* modules take with `from tcp_helpers import *`.
__all__ = [
    "ACK",
    "DATA",
    "FIN",
    "LOCAL_IP",
    "LOCAL_PORT",
    "LOCAL_SEQ",
    "NO_OPTIONS",
    "PEER",
    "PEER_SYN_OPTIONS",
    "PSH",
    "REMOTE_IP",
    "REMOTE_PORT",
    "REMOTE_SEQ",
    "RST",
    "SYN",
    "check",
    "config",
    "conn_close_wait",
    "conn_closed",
    "conn_closing",
    "conn_established",
    "conn_fin_wait_1",
    "conn_fin_wait_2",
    "conn_last_ack",
    "conn_syn_received",
    "conn_syn_sent",
    "conn_time_wait",
    "recv",
    "recv_nothing",
    "recv_one",
    "seg",
    "send",
    "synack",
    "with_payload",
]
