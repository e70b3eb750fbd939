"""The TCP connection state machine (RFC 9293), sans-IO.

One `TcpConnection` per 4-tuple. Segments come in through `on_segment(seg, now)`, segments
to transmit come out of `poll_output(now)`, and `poll_at()` says when to call again; time is
injected and nothing here sleeps or touches a socket (smoltcp's socket/tcp.rs, h11's style).

Implemented: every RFC 9293 state with segment arrival processing in the order of section
3.10.7; MSS (3.7.1, RFC 6691); window scaling, timestamps, RTTM and PAWS (RFC 7323);
SACK (RFC 2018) with a scoreboard-driven recovery (RFC 6675); RTO (RFC 6298) with Karn's
rule and backoff; NewReno (RFC 5681, RFC 6582); delayed ACKs; zero-window probing;
keep-alive; TIME-WAIT; the RFC 5961 protections. Nagle is off: the sender coalesces the
send buffer into full-sized segments plus one final short one.

Sequence variables are kept unwrapped (`tcp_seq.unwrap`); they are wrapped to 32 bits only
on the wire.
"""

from __future__ import annotations

import enum
import errno
import hashlib
import secrets
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from dataplane.stack.tcp_buffers import OutOfOrderQueue, SackScoreboard, SendBuffer
from dataplane.stack.tcp_congestion import DUP_THRESH, NewReno
from dataplane.stack.tcp_errors import (
    TcpError,
    TcpRefusedError,
    TcpResetError,
    TcpStateError,
    TcpTimeoutError,
)
from dataplane.stack.tcp_fastpath import FastPathState
from dataplane.stack.tcp_rtt import RttEstimator
from dataplane.stack.tcp_seq import SEQ_MASK, seq_add, seq_lt, unwrap, wrap
from dataplane.wire.tcp import TcpFlags, TcpOptions, TcpRepr

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "IsnGenerator",
    "TcpConfig",
    "TcpConnection",
    "TcpError",
    "TcpRefusedError",
    "TcpResetError",
    "TcpState",
    "TcpStateError",
    "TcpStats",
    "TcpTimeoutError",
    "reset_for_unmatched",
]

_KIB = 1024
_MIB = 1024 * 1024

_MAX_WINDOW_FIELD = 0xFFFF
_MAX_WSCALE = 14  # RFC 7323 section 2.3
_DEFAULT_PEER_MSS = 536  # RFC 9293 section 3.7.1: assumed when the SYN carries no MSS option
# Linux's TCP_MIN_SND_MSS (48 bytes of payload) plus room for 40 bytes of options: a peer
# announcing a tiny MSS must not make us emit empty data segments forever.
_MIN_SND_MSS = 88
_TIMESTAMP_OPTION_SPACE = 12  # 10 bytes plus 2 bytes of padding
_PAWS_IDLE_LIMIT = 24 * 24 * 3600.0  # RFC 7323 section 5.5: TS.Recent is stale after 24 days
_TS_HZ = 1000  # the timestamp clock ticks in milliseconds (RFC 7323 section 5.4: 1 ms - 1 s)
_TS_SECRET = secrets.token_bytes(16)
# The flags as plain ints for the per-segment paths (IntFlag arithmetic builds enum members),
# and every combination interned for the segments we build.
_FIN, _SYN, _RST, _PSH, _ACK = 0x01, 0x02, 0x04, 0x08, 0x10
_FLAGS = tuple(TcpFlags(i) for i in range(256))


class TcpState(enum.Enum):
    CLOSED = "CLOSED"
    LISTEN = "LISTEN"
    SYN_SENT = "SYN_SENT"
    SYN_RECEIVED = "SYN_RECEIVED"
    ESTABLISHED = "ESTABLISHED"
    FIN_WAIT_1 = "FIN_WAIT_1"
    FIN_WAIT_2 = "FIN_WAIT_2"
    CLOSE_WAIT = "CLOSE_WAIT"
    CLOSING = "CLOSING"
    LAST_ACK = "LAST_ACK"
    TIME_WAIT = "TIME_WAIT"

    # Members are singletons: hash them by identity in C (Enum's own __hash__ is Python
    # code, and the per-segment paths test state sets many times per segment).
    __hash__ = object.__hash__


_S = TcpState
# Every legal transition, in one table (RFC 9293 figure 5 plus the resets and timeouts that
# lead to CLOSED from anywhere). `_set_state` refuses anything else.
_TRANSITIONS: dict[TcpState, frozenset[TcpState]] = {
    _S.CLOSED: frozenset({_S.LISTEN, _S.SYN_SENT}),
    _S.LISTEN: frozenset({_S.SYN_RECEIVED, _S.CLOSED}),
    _S.SYN_SENT: frozenset({_S.SYN_RECEIVED, _S.ESTABLISHED, _S.CLOSED}),
    _S.SYN_RECEIVED: frozenset({_S.ESTABLISHED, _S.CLOSED}),
    _S.ESTABLISHED: frozenset({_S.FIN_WAIT_1, _S.CLOSE_WAIT, _S.CLOSED}),
    _S.FIN_WAIT_1: frozenset({_S.FIN_WAIT_2, _S.CLOSING, _S.TIME_WAIT, _S.CLOSED}),
    _S.FIN_WAIT_2: frozenset({_S.TIME_WAIT, _S.CLOSED}),
    _S.CLOSE_WAIT: frozenset({_S.LAST_ACK, _S.CLOSED}),
    _S.CLOSING: frozenset({_S.TIME_WAIT, _S.CLOSED}),
    _S.LAST_ACK: frozenset({_S.CLOSED}),
    _S.TIME_WAIT: frozenset({_S.CLOSED}),
}
# States in which our data and FIN are (re)transmitted.
_SENDING_STATES = frozenset({_S.ESTABLISHED, _S.FIN_WAIT_1, _S.CLOSE_WAIT, _S.CLOSING, _S.LAST_ACK})
# States in which the peer's data is still taken in (RFC 9293 section 3.10.7.4, seventh).
_RECEIVING_STATES = frozenset({_S.ESTABLISHED, _S.FIN_WAIT_1, _S.FIN_WAIT_2})
# States in which the application may still queue data (RFC 9293 section 3.10.2).
_SEND_CALL_STATES = frozenset({_S.SYN_SENT, _S.SYN_RECEIVED, _S.ESTABLISHED, _S.CLOSE_WAIT})
# States whose RST from the peer is reported as an error (RFC 9293 section 3.10.7.4).
_RESET_REPORTED_STATES = frozenset(
    {_S.SYN_RECEIVED, _S.ESTABLISHED, _S.FIN_WAIT_1, _S.FIN_WAIT_2, _S.CLOSE_WAIT}
)


@dataclass(frozen=True, slots=True)
class TcpConfig:
    """Per-connection tunables; the defaults follow Linux where the RFCs leave a choice."""

    mss: int = 1460
    recv_buffer: int = 256 * _KIB
    send_buffer: int = 256 * _KIB
    window_scaling: bool = True
    timestamps: bool = True
    sack: bool = True
    delayed_ack: float = 0.040  # seconds; 0 acknowledges every segment at once
    ack_every: int = 2  # acknowledge at least every Nth full-sized segment
    quickack_on_psh: bool = False
    rto_initial: float = 1.0
    rto_min: float = 0.2
    rto_max: float = 60.0
    syn_retries: int = 6
    data_retries: int = 15
    keepalive: float | None = None  # idle seconds before the first probe; None = off
    keepalive_interval: float = 75.0
    keepalive_probes: int = 9
    time_wait: float = 60.0  # 2 * MSL
    ooo_limit_bytes: int = 1 * _MIB
    initial_cwnd_segments: int = 10
    zero_window_probe_max: float = 60.0

    def __post_init__(self) -> None:
        if self.mss < _MIN_SND_MSS:
            raise ValueError(f"mss must be at least {_MIN_SND_MSS}, not {self.mss}")
        if self.recv_buffer < 1 or self.send_buffer < 1:
            raise ValueError("recv_buffer and send_buffer must be positive")
        if self.recv_buffer > _MAX_WINDOW_FIELD << _MAX_WSCALE:
            raise ValueError("recv_buffer exceeds the largest window TCP can advertise")
        if self.ack_every < 1 or self.initial_cwnd_segments < 1:
            raise ValueError("ack_every and initial_cwnd_segments must be at least 1")
        if not 0 < self.rto_min <= self.rto_initial <= self.rto_max:
            raise ValueError("need 0 < rto_min <= rto_initial <= rto_max")
        if self.delayed_ack < 0 or self.time_wait < 0 or self.ooo_limit_bytes < 0:
            raise ValueError("delayed_ack, time_wait and ooo_limit_bytes cannot be negative")


@dataclass(slots=True)
class TcpStats:
    """Counters (monotonic) and gauges (the values at the time `stats` was read)."""

    segments_in: int = 0
    segments_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    retransmits: int = 0
    fast_retransmits: int = 0
    timeouts: int = 0
    dup_acks: int = 0
    sack_blocks_received: int = 0
    ooo_segments: int = 0
    ooo_dropped: int = 0
    dropped_out_of_window: int = 0
    paws_rejected: int = 0
    challenge_acks: int = 0
    zero_window_probes: int = 0
    keepalives_sent: int = 0
    rtt_srtt: float = 0.0
    rtt_var: float = 0.0
    rto: float = 0.0
    cwnd: int = 0
    ssthresh: int = 0
    snd_wnd: int = 0
    rcv_wnd: int = 0


class _Tx(NamedTuple):
    """One planned transmission: `length` payload bytes at `seq`, plus SYN/FIN."""

    seq: int
    length: int
    syn: bool = False
    fin: bool = False


def _wscale_for(buffer: int) -> int:
    """The smallest shift that lets the whole buffer be advertised (RFC 7323 section 2.2)."""
    shift = 0
    while shift < _MAX_WSCALE and (_MAX_WINDOW_FIELD << shift) < buffer:
        shift += 1
    return shift


def _options_length(options: TcpOptions) -> int:
    """Header bytes the options take once padded to 4 (as `TcpRepr.emit` lays them out)."""
    length = 0
    if options.mss is not None:
        length += 4
    if options.window_scale is not None:
        length += 3
    if options.sack_permitted:
        length += 2
    if options.timestamp is not None:
        length += 10
    if options.sack_blocks:
        length += 2 + 8 * len(options.sack_blocks)
    return (length + 3) & ~3


def reset_for_unmatched(seg: TcpRepr) -> TcpRepr | None:
    """The RST answering a segment that matches no connection (RFC 9293 section 3.10.7.1);
    None for an incoming RST, which must never be answered."""
    if seg.flags & TcpFlags.RST:
        return None
    if seg.flags & TcpFlags.ACK:
        # <SEQ=SEG.ACK><CTL=RST>
        return TcpRepr(seg.dst_port, seg.src_port, seg.ack, 0, TcpFlags.RST, 0)
    # <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>
    return TcpRepr(
        seg.dst_port,
        seg.src_port,
        0,
        seq_add(seg.seq, seg.seg_len),
        TcpFlags.RST | TcpFlags.ACK,
        0,
    )


class IsnGenerator:
    """Initial sequence numbers per RFC 6528 section 3: ISN = M + F(4-tuple, secret), M a
    4-microsecond timer and F a keyed hash, so ISNs are unpredictable per 4-tuple and still
    increase for a reused one."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secrets.token_bytes(16) if secret is None else bytes(secret)
        if not 1 <= len(self._secret) <= 32:
            raise ValueError("the ISN secret must be 1 to 32 bytes (a blake2s key)")

    def __call__(
        self, local_ip: int, local_port: int, remote_ip: int, remote_port: int, now: float
    ) -> int:
        return self.isn_and_ts_offset(local_ip, local_port, remote_ip, remote_port, now)[0]

    def isn_and_ts_offset(
        self, local_ip: int, local_port: int, remote_ip: int, remote_port: int, now: float
    ) -> tuple[int, int]:
        """The ISN and, from the other half of the same keyed hash, the connection's
        timestamp offset (RFC 7323 section 7.1: random per connection): one hash, not two."""
        timer = int(now * 250_000)  # one tick every 4 microseconds
        tuple_bytes = struct.pack("!IHIH", local_ip, local_port, remote_ip, remote_port)
        digest = hashlib.blake2s(tuple_bytes, key=self._secret, digest_size=8).digest()
        isn = (timer + int.from_bytes(digest[:4], "big")) & SEQ_MASK
        return isn, int.from_bytes(digest[4:], "big")


class TcpConnection:
    """One TCP connection (one 4-tuple), sans-IO."""

    def __init__(  # noqa: PLR0915  the whole TCB (RFC 9293 section 3.3.1), declared in one place
        self,
        local_ip: int,
        local_port: int,
        remote_ip: int,
        remote_port: int,
        config: TcpConfig,
        *,
        isn: int,
        ts_offset: int | None = None,
    ) -> None:
        self.local_ip = local_ip
        self.local_port = local_port
        self.remote_ip = remote_ip
        self.remote_port = remote_port
        self.config = config
        self.error: TcpError | None = None
        self._state = TcpState.CLOSED
        self._used = False  # a connection is opened at most once
        self._passive = False
        self._now = 0.0  # the latest time we were given; poll_at() returns it for "now"

        # Send sequence space (RFC 9293 section 3.3.1), unwrapped. The SYN sits at ISS,
        # data from ISS + 1, our FIN right after the last byte queued before close().
        self._iss = isn & SEQ_MASK
        self._snd_una = self._iss
        self._snd_nxt = self._iss
        self._snd_max = self._iss  # highest sequence number sent + 1
        self._snd_wnd = 0
        self._snd_wl1 = 0
        self._snd_wl2 = 0
        self._max_snd_wnd = 0  # RFC 5961 section 5.2 MAX.SND.WND
        self._tx = SendBuffer(config.send_buffer, self._iss + 1)
        self._fin_seq: int | None = None
        self._close_pending = False  # close() in SYN-RECEIVED: FIN once ESTABLISHED

        # Receive sequence space, unwrapped; `_rcv_adv_right` is the right edge of the
        # window we advertised (RCV.NXT + RCV.WND), which never moves left.
        self._irs = 0
        self._rcv_nxt = 0
        self._rcv_adv_right = 0
        self._rx = bytearray()
        self._ooo = OutOfOrderQueue(config.ooo_limit_bytes)
        self._fin_received = False
        self._syn_window = min(config.recv_buffer, _MAX_WINDOW_FIELD)

        # Negotiated options.
        self._wscale_offer = _wscale_for(config.recv_buffer) if config.window_scaling else 0
        self._snd_wscale = 0
        self._rcv_wscale = self._wscale_offer  # reset to 0 if the peer does not agree
        self._wscale_agreed = False
        self._ts_enabled = False
        self._sack_enabled = False
        self._snd_mss = min(_DEFAULT_PEER_MSS, config.mss)
        if ts_offset is None:
            digest = hashlib.blake2s(
                self._iss.to_bytes(4, "big"), key=_TS_SECRET, digest_size=4
            ).digest()
            ts_offset = int.from_bytes(digest, "big")
        self._ts_offset = ts_offset & SEQ_MASK  # RFC 7323 section 7.1: random per connection
        self._ts_recent = 0
        self._ts_recent_time: float | None = None
        self._ts_rto_floor: int | None = None  # TSval at the last timeout (see _on_new_ack)
        self._last_ack_sent = 0  # RFC 7323 section 4.3 Last.ACK.sent

        # ACK generation (RFC 9293 section 3.8.6.3, RFC 5681 section 4.2).
        self._ack_now = False
        self._delack_deadline: float | None = None
        self._unacked_rx_bytes = 0
        self._rcv_mss = min(_DEFAULT_PEER_MSS, config.mss)  # estimate of the peer's MSS

        # Timers.
        self._rto_deadline: float | None = None
        self._retries = 0
        self._syn_retransmitted = False
        self._persist_deadline: float | None = None
        self._persist_backoff = 0
        self._probes_out = 0
        self._tw_deadline: float | None = None
        self._last_rx_time = 0.0
        self._ka_probes = 0
        self._ka_last_probe = 0.0
        self._last_send_time: float | None = None

        # RTT, congestion control, SACK scoreboard.
        self._rtt = RttEstimator(config.rto_initial, config.rto_min, config.rto_max)
        self._rtt_seq: int | None = None  # Karn: the segment being timed ends here
        self._rtt_time = 0.0
        self._cc = NewReno(self._smss, config.initial_cwnd_segments)
        self._cc.recover = self._iss  # RFC 6582 section 3.2 step 1
        self._scoreboard = SackScoreboard()
        self._high_rxt = self._iss  # RFC 6675 HighRxt
        self._forced_rtx: int | None = None  # retransmit this now, whatever cwnd says

        self._control: list[TcpRepr] = []  # RSTs and probes decided outside poll_output
        self._stats = TcpStats()
        #: Called with this connection whenever something outside `poll_output` may have
        #: changed its output or timers (a segment, the application, the fast path): the
        #: interface keeps a set of such connections so idle ones cost nothing per batch.
        self.on_change: Callable[[TcpConnection], None] | None = None
        #: Called when only the timers may have moved (a segment the C fast path sent, or
        #: an ACK it took): the interface reschedules the connection without handling it.
        self.on_timer: Callable[[TcpConnection], None] | None = None
        #: The C fast path's transmit for this connection, installed by each export (the
        #: flow's state in C then matches ours) and dropped by anything that may change
        #: what C would put in a segment before the next export: `send` then builds the
        #: segment in C at once (`_send_in_c`). Returns rcv_adv_right or a negative errno.
        self.fast_sender: Callable[[bytes, int, int], int] | None = None
        #: The engine's clock, installed with `fast_sender`: a send between polls is timed
        #: (RTO, RTT, idle restart) from when it leaves, not from the last poll.
        self.fast_clock: Callable[[], float] | None = None
        #: Where the bytes the C fast path brings go when nothing is buffered ahead of
        #: them: straight to the reader (an event-loop transport's protocol) instead of
        #: the receive buffer that `recv` drains. None: the buffer, as for any segment.
        self.direct_reader: Callable[[bytes], None] | None = None
        #: Segments sent for this connection that carried its current ACK (any kind): the
        #: fast path compares it across exports to learn whether Python acknowledged.
        self.acking_segments_sent = 0

    @property
    def timestamps_enabled(self) -> bool:
        """Both ends agreed on the timestamp option (RFC 7323 section 3.2)."""
        return self._ts_enabled

    def _changed(self) -> None:
        notify = self.on_change
        if notify is not None:
            notify(self)

    def __repr__(self) -> str:
        return (
            f"<TcpConnection :{self.local_port} -> :{self.remote_port} {self._state.name}"
            f" snd_una={wrap(self._snd_una)} rcv_nxt={wrap(self._rcv_nxt)}>"
        )

    # ------------------------------------------------------------------ opening

    @classmethod
    def from_syn(
        cls,
        syn: TcpRepr,
        local_ip: int,
        remote_ip: int,
        config: TcpConfig,
        *,
        isn: int,
        now: float,
        ts_offset: int | None = None,
    ) -> TcpConnection:
        """Passive open: a connection in SYN-RECEIVED for the SYN a listener accepted."""
        if (syn.flags & (TcpFlags.SYN | TcpFlags.ACK | TcpFlags.RST)) != TcpFlags.SYN:
            raise ValueError(f"from_syn needs a SYN without ACK or RST, got {syn.flags!r}")
        conn = cls(
            local_ip, syn.dst_port, remote_ip, syn.src_port, config, isn=isn, ts_offset=ts_offset
        )
        conn.listen()
        conn.on_segment(syn, now)
        return conn

    def listen(self) -> None:
        """Passive open for this one 4-tuple (CLOSED -> LISTEN). Listening on a port is the
        demultiplexer's job, which calls `from_syn`; this is what `from_syn` builds on."""
        if self._used or self._state is not TcpState.CLOSED:
            raise TcpStateError(f"listen() on a connection that is {self._state.name}")
        self._used = True
        self._set_state(TcpState.LISTEN)
        self._changed()

    def connect(self, now: float) -> None:
        """Active open (RFC 9293 section 3.10.1): queue our SYN, CLOSED -> SYN-SENT."""
        if self._used or self._state is not TcpState.CLOSED:
            raise TcpStateError(f"connect() on a connection that is {self._state.name}")
        self._used = True
        self._now = now
        self._last_rx_time = now
        self._set_state(TcpState.SYN_SENT)
        self._changed()

    # ------------------------------------------------------------------ application side

    @property
    def state(self) -> TcpState:
        return self._state

    @property
    def readable(self) -> bool:
        """recv() has something to report: bytes, the end of the stream, or a failure."""
        return bool(self._rx) or self.at_eof or self.error is not None

    @property
    def at_eof(self) -> bool:
        """The peer's FIN arrived and every byte before it has been read."""
        return self._fin_received and not self._rx

    @property
    def writable(self) -> bool:
        """send() would take bytes now (like a socket's POLLOUT: not before ESTABLISHED)."""
        return (
            self._state in (TcpState.ESTABLISHED, TcpState.CLOSE_WAIT)
            and self._fin_seq is None
            and self._tx.free > 0
        )

    @property
    def send_space(self) -> int:
        if self._state not in _SEND_CALL_STATES or self._fin_seq is not None:
            return 0
        if self._close_pending:
            return 0
        return self._tx.free

    @property
    def stats(self) -> TcpStats:
        stats = self._stats
        stats.rtt_srtt = self._rtt.srtt or 0.0
        stats.rtt_var = self._rtt.rttvar
        stats.rto = self._rtt.rto
        stats.cwnd = self._cc.cwnd
        stats.ssthresh = self._cc.ssthresh
        stats.snd_wnd = self._snd_wnd
        stats.rcv_wnd = max(self._rcv_adv_right - self._rcv_nxt, 0)
        return stats

    def send(self, data: bytes | bytearray | memoryview) -> int:
        """Queue bytes; returns how many fit in the send buffer (0 when full)."""
        if self._state not in _SEND_CALL_STATES or self._fin_seq is not None:
            cause = f": {self.error}" if self.error is not None else ""
            raise TcpStateError(
                f"cannot send on a connection in {self._state.name}{cause}", errno.EPIPE
            )
        if self._close_pending:
            raise TcpStateError("cannot send after close()", errno.EPIPE)
        taken = self._tx.write(data)
        if taken:
            sender = self.fast_sender
            if sender is not None and self._send_in_c(sender, data, taken):
                self._timers_moved()
            else:
                self._changed()
        return taken

    def _send_in_c(
        self,
        sender: Callable[[bytes, int, int], int],
        data: bytes | bytearray | memoryview,
        taken: int,
    ) -> bool:
        """The common case of `send` for a connection the C fast path holds: the bytes just
        queued are all there is to send, they fit one segment and both windows, so C builds
        and queues that segment now. Everything `poll_output` would have done besides the
        frame is done here (sequence numbers, RTO, RTT timing, the ACK it carries); the
        bytes stay in the send buffer for retransmission. False: `poll_output` sends them."""
        seq = self._snd_nxt
        tx = self._tx
        if (
            self._state is not TcpState.ESTABLISHED
            or seq != self._snd_max
            or seq + taken != tx.start + len(tx)
            or self._forced_rtx is not None
            or self._control
            or self._cc.in_recovery
            or self._fin_seq is not None
            or self._ack_now  # a window update is owed: poll_output sends it, with the data
            or self._scoreboard
            or self._ooo
            # one segment: the MSS less the timestamp option (no SACK blocks: _ooo is empty)
            or taken > self._snd_mss - (_TIMESTAMP_OPTION_SPACE if self._ts_enabled else 0)
        ):
            return False
        clock = self.fast_clock
        now = clock() if clock is not None else self._now
        self._now = max(self._now, now)
        if (
            self._snd_una == seq
            and self._last_send_time is not None
            and now - self._last_send_time > self._rtt.rto
        ):
            self._cc.restart_after_idle()  # RFC 5681 section 4.1
        in_flight = seq - self._snd_una
        if taken > self._snd_una + self._snd_wnd - seq or taken > self._cc.cwnd - in_flight:
            return False  # a window is full: poll_output waits for it
        if taken < len(data) or not isinstance(data, bytes):
            data = bytes(data[:taken])
        right = sender(data, taken, self._free_receive_space())
        if right < 0:
            return False  # no buffer in C: the Python path sends it
        end = seq + taken
        self._snd_nxt = self._snd_max = end
        if self._rtt_seq is None and not self._ts_enabled:
            self._rtt_seq = end
            self._rtt_time = now
        if self._rto_deadline is None:
            self._rto_deadline = now + self._rtt.rto  # RFC 6298 section 5.1
        stats = self._stats
        stats.bytes_out += taken
        stats.segments_out += 1
        self._last_send_time = now
        self._ack_sent()  # the segment carried C's ACK and window
        moved = (right - self._rcv_adv_right) & SEQ_MASK
        if 0 < moved < 1 << 31:
            self._rcv_adv_right += moved
        return True

    def recv(self, max_bytes: int = 65536) -> bytes:
        """Take up to `max_bytes` in-order bytes; b"" when none (check `at_eof`/`error`)."""
        rx = self._rx
        count = min(max(max_bytes, 0), len(rx))
        if not count:
            return b""
        if count == len(rx):
            data = bytes(rx)
            rx.clear()
        else:
            data = bytes(rx[:count])
            del rx[:count]
        self._maybe_window_update()
        if self._ack_now:
            self._changed()  # a window update is due (the rest waits for other output)
        return data

    # ------------------------------------------------------------------ C fast path hooks

    def fastpath_export(self) -> FastPathState | None:
        """The receive state the C fast path needs, or None while only Python may handle
        this connection's segments: any state but ESTABLISHED, the peer's FIN seen, data
        waiting out of order, or an error (see dataplane/fastpath.py)."""
        if (
            self._state is not TcpState.ESTABLISHED
            or self._fin_received
            or self._ooo
            or self.error is not None
        ):
            return None
        owed = self._ack_now or self._delack_deadline is not None
        window_field = self._snd_wnd >> self._snd_wscale
        # C may take ACKs too while nothing in the send side needs a per-ACK decision.
        acks_in_c = (
            self._fin_seq is None
            and self._snd_nxt == self._snd_max
            and self._forced_rtx is None
            and not self._cc.in_recovery
            and not self._scoreboard
            and self._snd_wnd > 0
        )
        # Positional, in FastPathState's field order (built once per export: kept cheap).
        return FastPathState(
            self._rcv_nxt & SEQ_MASK,
            self._rcv_adv_right & SEQ_MASK,
            self._ts_recent,
            self._last_ack_sent & SEQ_MASK,
            self._snd_una & SEQ_MASK,
            self._snd_max & SEQ_MASK,  # snd_nxt: the highest sent
            window_field if window_field < _MAX_WINDOW_FIELD else _MAX_WINDOW_FIELD,
            self._rcv_wscale,
            self._ts_enabled,
            self._ts_offset,
            self._free_receive_space(),
            self._rcv_mss,
            (self._now if self._ack_now else self._delack_deadline) if owed else None,
            self._unacked_rx_bytes if owed else 0,
            acks_in_c,
        )

    @property
    def send_blocked(self) -> bool:
        """Queued data waits for a window, or the send buffer is full: what the next ACK
        processing frees is awaited."""
        tx = self._tx
        return self._snd_nxt < tx.end or not tx.free

    @property
    def read_seq(self) -> int:
        """The sequence number (32-bit, as on the wire) just past the last byte a reader
        has taken: where the bytes this connection still holds or has yet to get begin."""
        return (self._rcv_nxt - len(self._rx)) & SEQ_MASK

    def reads_directly(self) -> bool:
        """Bytes the fast path brings now go straight to `direct_reader` (nothing is
        buffered ahead of them), not into the receive buffer."""
        return self.direct_reader is not None and not self._rx

    def fastpath_receive_space(self) -> int:
        """Free receive buffer, what C may offer in its window (FastPathState.rcv_space)."""
        return self._free_receive_space()

    def fastpath_ack_handed_over(self) -> None:
        """C now owes the delayed ACK that was ours (it sends it on time)."""
        self._ack_now = False
        self._delack_deadline = None
        self._unacked_rx_bytes = 0
        self._changed()

    def fastpath_owe_ack(self, deadline: float, unacked_bytes: int) -> None:
        """The fast path let go of this connection while it owed a delayed ACK: ours now."""
        self._unacked_rx_bytes += unacked_bytes
        if self._delack_deadline is None or deadline < self._delack_deadline:
            self._delack_deadline = deadline
        self._changed()

    def fastpath_absorb(
        self,
        data: bytes,
        rcv_nxt: int,
        rcv_adv_right: int,
        ts_recent: int,
        last_ack_sent: int,
        segments: int,
        unacked_bytes: int,
        ack_deadline: float | None,
        now: float,
        fed: int = 0,
    ) -> bool:
        """Take in what the fast path received in order since the last sync: its bytes, the
        sequence numbers they moved, what C's ACKs announced, and (when Python is about to
        handle this connection's segments itself) the delayed ACK C still owed. The ACKs
        C took come separately (`fastpath_acked`). `fed`: bytes before `data` that the C
        feed path took (read, into the message ring): RCV.NXT moves past them, nobody here
        sees them. Returns True when nothing but data moved: no output is due, so the
        connection need not be polled or exported."""
        advance = (rcv_nxt - self._rcv_nxt) & SEQ_MASK
        if advance != len(data) + fed:
            raise TcpStateError(
                f"fast path out of step: RCV.NXT moved {advance} for {len(data)} bytes"
                f" and {fed} fed"
            )
        self._stats.segments_in += segments
        reader = None
        if fed and not data:
            self._rcv_nxt += advance
            self._stats.bytes_in += advance
            self._last_rx_time = max(self._last_rx_time, now)
            self._ka_probes = 0
        if data:
            reader = self.direct_reader
            if reader is None or self._rx:
                reader = None
                self._rx += data
            self._rcv_nxt += advance
            self._stats.bytes_in += advance
            self._last_rx_time = max(self._last_rx_time, now)
            self._ka_probes = 0
        # Both only move forward; C wrote 32-bit values.
        right_moved = (rcv_adv_right - self._rcv_adv_right) & SEQ_MASK
        if 0 < right_moved < 1 << 31:
            self._rcv_adv_right += right_moved
        acked_moved = (last_ack_sent - self._last_ack_sent) & SEQ_MASK
        if 0 < acked_moved < 1 << 31:
            self._last_ack_sent += acked_moved
        if ts_recent != self._ts_recent:
            self._ts_recent = ts_recent
            self._ts_recent_time = now
        self._now = max(self._now, now)
        quiet = True
        if segments and advance > segments * self._rcv_mss and self._rcv_mss < self.config.mss:
            # The peer's MSS, learnt from what C took (their mean size: never above the
            # largest), as `_process_text` learns it: C's "every second full-sized
            # segment" (RFC 5681 section 4.2) counts in real segments, not in 536 bytes.
            self._rcv_mss = min(advance // segments, self.config.mss)
            self._changed()  # the next export gives C the new size
            quiet = False
        if ack_deadline is not None or unacked_bytes:
            self._unacked_rx_bytes = unacked_bytes
            if ack_deadline is not None:
                self._delack_deadline = ack_deadline
            self._changed()
            quiet = False
        elif self.config.keepalive is not None:
            self._timers_moved()  # its deadline follows the last segment received
        if reader is not None:
            reader(data)  # last: the connection is in step with C for what it may send
        return quiet

    def fastpath_acked(
        self, acks: int, snd_una: int, window_field: int, wl1: int, tsecr: int, now: float
    ) -> None:
        """The ACK processing for `acks` segments that moved the send side in C (the
        values are the last one's, 32-bit): RTT, send buffer, congestion window, RTO.
        Only the timers move unless it opened a window for data that waits."""
        if self._state is TcpState.CLOSED:
            return  # aborted since C took them: nothing is left to acknowledge
        self._absorb_acks(acks, snd_una, window_field, wl1, tsecr, now)
        if (
            not self._ack_now
            and not self._control
            and self._snd_nxt == self._tx.end
            and self._forced_rtx is None
        ):
            self._timers_moved()  # the RTO stopped or restarted
        else:
            self._changed()

    def _timers_moved(self) -> None:
        notify = self.on_timer
        if notify is not None:
            notify(self)

    def _absorb_acks(
        self, acks: int, snd_una: int, window_field: int, wl1: int, tsecr: int, now: float
    ) -> None:
        """RFC 9293 section 3.10.7.4 fifth, for the ACKs C took (SND.UNA =< SEG.ACK =<
        SND.NXT, a non-zero window, data or an advancing ACK): the window update, then the
        new ACK's RTT sample, send buffer release, congestion window and RTO, once for
        the batch (the congestion window grows as for `acks` separate ACKs)."""
        ack = unwrap(snd_una, self._snd_una)
        if not self._snd_una <= ack <= self._snd_max:
            raise TcpStateError(
                f"fast path out of step: ACK {snd_una} outside [{wrap(self._snd_una)}, "
                f"{wrap(self._snd_max)}]"
            )
        window = window_field << self._snd_wscale
        self._snd_wnd = window
        self._snd_wl1 = unwrap(wl1, self._rcv_nxt)
        self._snd_wl2 = ack
        self._max_snd_wnd = max(self._max_snd_wnd, window)
        self._probes_out = 0
        self._persist_deadline = None
        self._persist_backoff = 0
        self._last_rx_time = now
        self._ka_probes = 0
        if ack > self._snd_una:
            # Processed after the application's turn: the RTT sample is the poll's (when
            # the ACK came), the RTO restarts from now (RFC 6298 5.3), so that a segment
            # sent meanwhile gets its whole RTO.
            restart = max(now, self._now)
            self._on_new_ack(ack, tsecr if self._ts_enabled else None, now, acks, restart)

    def close(self) -> None:
        """Half-close (RFC 9293 section 3.10.4): our FIN goes after the queued data."""
        state = self._state
        if state in (TcpState.LISTEN, TcpState.SYN_SENT):
            # Nothing was synchronised: just forget the connection.
            self._clear()
            self._set_state(TcpState.CLOSED)
        elif state is TcpState.SYN_RECEIVED:
            # Our FIN would overtake the handshake; send it once ESTABLISHED.
            self._close_pending = True
        elif state is TcpState.ESTABLISHED:
            self._fin_seq = self._tx.end
            self._set_state(TcpState.FIN_WAIT_1)
        elif state is TcpState.CLOSE_WAIT:
            self._fin_seq = self._tx.end
            self._set_state(TcpState.LAST_ACK)
        # CLOSED and the closing states: already closed for sending, nothing to do.
        self._changed()

    def abort(self) -> None:
        """RFC 9293 section 3.10.5: reset a synchronised connection, drop everything."""
        if self._state in _RESET_REPORTED_STATES:
            # <SEQ=SND.NXT><CTL=RST>; the highest sequence number sent is the one the
            # peer expects next if nothing is missing (RFC 5961 exact-match rule).
            self._control.append(self._rst(wrap(self._snd_max)))
        self._clear()
        if self._state is not TcpState.CLOSED:
            self._set_state(TcpState.CLOSED)
        self._changed()

    # ------------------------------------------------------------------ the driver side

    def poll_at(self) -> float | None:
        """When poll_output() has something to do: a past time (the latest `now` seen)
        when output is pending, the next timer deadline otherwise, None when idle."""
        if self._output_pending():
            return self._now
        return self.timer_deadline()

    def timer_deadline(self) -> float | None:
        """The earliest timer, None when none runs: `poll_at()` when no output is pending,
        as is always the case right after `poll_output` (it sends everything it may)."""
        best = self._rto_deadline
        for deadline in (
            self._persist_deadline,
            self._delack_deadline,
            self._tw_deadline,
            self._keepalive_deadline() if self.config.keepalive is not None else None,
        ):
            if deadline is not None and (best is None or deadline < best):
                best = deadline
        return best

    def poll_output(self, now: float) -> list[TcpRepr]:
        """Fire due timers and return every segment to transmit now."""
        self._now = now
        self.fast_sender = None  # until the export that follows puts C in step again
        self._fire_timers(now)
        out = list(self._control)
        self._control.clear()
        if self._state in (TcpState.CLOSED, TcpState.LISTEN):
            self._ack_now = False
            self._forced_rtx = None
            self._stats.segments_out += len(out)
            return out
        if self._forced_rtx is not None:
            plan = self._plan_at(self._forced_rtx)
            self._forced_rtx = None
            if plan is not None:
                out.append(self._transmit(plan, now))
        plan = self._plan_next()
        if (
            plan is not None
            and self._snd_una == self._snd_max
            and self._last_send_time is not None
            and now - self._last_send_time > self._rtt.rto
        ):
            self._cc.restart_after_idle()  # RFC 5681 section 4.1
            plan = self._plan_next()
        previous: _Tx | None = None
        while plan is not None:
            if plan == previous:
                raise RuntimeError(f"TCP output made no progress at {plan} ({self!r})")
            out.append(self._transmit(plan, now))
            previous = plan
            plan = self._plan_next()
        if self._ack_now and self._state is not TcpState.SYN_SENT:
            out.append(self._pure_ack(now))
        self._update_timers(now)
        self._stats.segments_out += len(out)
        return out

    def on_segment(self, seg: TcpRepr, now: float) -> None:
        """Process one inbound segment already matched to this 4-tuple (RFC 9293 3.10.7)."""
        self._now = now
        self.fast_sender = None  # C's copy of the state is behind until the next export
        self._stats.segments_in += 1
        self._stats.bytes_in += len(seg.payload)
        state = self._state
        if state is TcpState.CLOSED:
            self._on_segment_closed(seg)
        elif state is TcpState.LISTEN:
            self._on_segment_listen(seg, now)
        elif state is TcpState.SYN_SENT:
            self._on_segment_syn_sent(seg, now)
        else:
            self._on_segment_synchronized(seg, now)
        self._update_timers(now)
        self._changed()

    # ------------------------------------------------------------------ arrival: CLOSED, LISTEN

    def _on_segment_closed(self, seg: TcpRepr) -> None:
        # RFC 9293 section 3.10.7.1: everything but a RST is answered with a RST.
        reset = reset_for_unmatched(seg)
        if reset is not None:
            self._control.append(reset)

    def _on_segment_listen(self, seg: TcpRepr, now: float) -> None:
        flags = seg.flags
        # RFC 9293 section 3.10.7.2, first: an incoming RST is ignored.
        if flags & TcpFlags.RST:
            return
        # Second: any ACK is bad in LISTEN: <SEQ=SEG.ACK><CTL=RST>.
        if flags & TcpFlags.ACK:
            self._control.append(self._rst(seg.ack))
            return
        # Third: the SYN. (Data in a SYN is not kept: without TCP Fast Open we acknowledge
        # only the SYN, like Linux, and the peer sends the data again.)
        if not flags & TcpFlags.SYN:
            return
        self._passive = True
        self._accept_syn(seg, now)
        self._snd_wnd = seg.window  # never scaled in a SYN (RFC 7323 section 2.2)
        self._max_snd_wnd = self._snd_wnd
        self._snd_wl1 = self._irs
        self._snd_wl2 = self._iss
        self._last_rx_time = now
        self._snd_nxt = self._iss  # our SYN,ACK is due
        self._set_state(TcpState.SYN_RECEIVED)

    def _accept_syn(self, seg: TcpRepr, now: float) -> None:
        """Take the peer's ISN and options from its SYN (or SYN,ACK)."""
        self._irs = seg.seq
        self._rcv_nxt = self._irs + 1
        self._rcv_adv_right = self._rcv_nxt + self._syn_window
        self._last_ack_sent = self._rcv_nxt
        options = seg.options
        config = self.config
        # RFC 9293 section 3.7.1 / RFC 6691: our send MSS is the smaller of both.
        peer_mss = options.mss if options.mss else _DEFAULT_PEER_MSS
        self._snd_mss = max(min(peer_mss, config.mss), _MIN_SND_MSS)
        # RFC 7323 section 2.2: scaling is on only if both SYNs carried the option.
        self._wscale_agreed = config.window_scaling and options.window_scale is not None
        if self._wscale_agreed and options.window_scale is not None:
            self._snd_wscale = min(options.window_scale, _MAX_WSCALE)  # section 2.3
            self._rcv_wscale = self._wscale_offer
        else:
            self._snd_wscale = 0
            self._rcv_wscale = 0
        # RFC 2018 section 2 and RFC 7323 section 3.2: likewise SACK and timestamps.
        self._sack_enabled = config.sack and options.sack_permitted
        self._ts_enabled = config.timestamps and options.timestamp is not None
        if self._ts_enabled and options.timestamp is not None:
            self._ts_recent = options.timestamp[0]
            self._ts_recent_time = now
        self._cc.set_smss(self._smss)

    # ------------------------------------------------------------------ arrival: SYN-SENT

    def _on_segment_syn_sent(self, seg: TcpRepr, now: float) -> None:
        flags = seg.flags
        ack: int | None = None
        # RFC 9293 section 3.10.7.3, first: the ACK must acknowledge our SYN and no more.
        if flags & TcpFlags.ACK:
            ack = unwrap(seg.ack, self._iss)
            if ack <= self._iss or ack > self._snd_max:
                if not flags & TcpFlags.RST:
                    self._control.append(self._rst(seg.ack))
                self._stats.dropped_out_of_window += 1
                return
        # Second: a RST counts only if its ACK acknowledges our SYN (RFC 5961 section 3.2).
        if flags & TcpFlags.RST:
            if ack is not None:
                self._fail(TcpRefusedError("connection refused: the peer answered with RST"))
            return
        # Fourth: without SYN there is nothing to do here.
        if not flags & TcpFlags.SYN:
            return
        self._accept_syn(seg, now)
        self._last_rx_time = now
        self._snd_wnd = seg.window  # never scaled in a SYN (RFC 7323 section 2.2)
        self._max_snd_wnd = self._snd_wnd
        self._snd_wl1 = self._irs
        if ack is not None:
            # Our SYN is acknowledged: ESTABLISHED, and ACK the peer's SYN at once.
            self._snd_wl2 = ack
            self._set_state(TcpState.ESTABLISHED)
            self._on_new_ack(ack, _tsecr(seg), now)
            self._on_established()
            self._ack_now = True
            # "If there are other controls or text in the segment, continue processing at
            # the sixth step": data (and a FIN) riding on the SYN,ACK are kept.
            if seg.payload or seg.flags & TcpFlags.FIN:
                self._process_text(seg, self._irs + 1, now)
        else:
            # Simultaneous open: SYN-RECEIVED, answer <SEQ=ISS><ACK=RCV.NXT><CTL=SYN,ACK>.
            self._snd_wl2 = self._iss
            self._snd_nxt = self._iss
            self._set_state(TcpState.SYN_RECEIVED)

    def _on_established(self) -> None:
        if self._syn_retransmitted:
            self._rtt.syn_was_lost()  # RFC 6298 section 5.7
        if self._close_pending:
            self._close_pending = False
            self.close()

    # ------------------------------------------------------------------ arrival: synchronised

    def _on_segment_synchronized(self, seg: TcpRepr, now: float) -> None:
        """A segment in a synchronised state (SYN-RECEIVED onward): the checks of RFC 9293
        section 3.10.7.4 in its order (with RFC 7323's PAWS before them), one step each."""
        flags = int(seg.flags)
        seq = unwrap(seg.seq, self._rcv_nxt)
        if self._ts_enabled and not flags & _RST and not self._timestamp_acceptable(seg, now):
            return
        if (
            self._state is TcpState.SYN_RECEIVED
            and flags & _SYN
            and not flags & _ACK
            and seq == self._irs
        ):
            # The peer did not get our SYN,ACK and sent its SYN again: repeat the SYN,ACK.
            self._snd_nxt = self._iss
            return
        # First: the acceptability test.
        if not self._acceptable(seq, seg):
            self._drop_unacceptable(flags, now)
            return
        self._last_rx_time = now
        self._ka_probes = 0
        # Second: RST; (third, security, does not apply); fourth: SYN.
        if flags & _RST:
            self._on_rst_synchronized(seq)
        elif flags & _SYN:
            self._challenge_ack()  # RFC 5961 section 4.2
        # Fifth: ACK processing (without ACK the segment is dropped); then the text.
        elif flags & _ACK and self._process_ack_field(seg, seq, now):
            self._process_text_and_fin(seg, flags, seq, now)

    def _timestamp_acceptable(self, seg: TcpRepr, now: float) -> bool:
        """RFC 7323, once timestamps are negotiated, for a segment without RST: one without
        TSopt SHOULD be silently dropped (section 3.2); an old duplicate is ACKed and
        dropped (PAWS, section 5.3 R1)."""
        timestamp = seg.options.timestamp
        if timestamp is None:
            self._stats.dropped_out_of_window += 1
            return False
        if self._paws_rejects(timestamp[0], now):
            self._stats.paws_rejected += 1
            self._ack_now = True
            return False
        return True

    def _drop_unacceptable(self, flags: int, now: float) -> None:
        """RFC 9293 section 3.10.7.4, first: a segment outside the window is dropped, with
        <SEQ=SND.NXT><ACK=RCV.NXT><CTL=ACK> unless it is a RST."""
        if not flags & _RST:
            self._ack_now = True
        if self._state is TcpState.TIME_WAIT and flags & _FIN:
            # A retransmitted FIN: acknowledge it and restart the 2 MSL timeout.
            self._tw_deadline = now + self.config.time_wait
        self._stats.dropped_out_of_window += 1

    def _on_rst_synchronized(self, seq: int) -> None:
        """RFC 9293 section 3.10.7.4, second, as RFC 5961 section 3.2 narrows it: only a
        RST at exactly RCV.NXT resets, any other in-window RST draws a challenge ACK."""
        if seq == self._rcv_nxt:
            self._on_peer_reset()
        else:
            self._challenge_ack()

    def _process_ack_field(self, seg: TcpRepr, seq: int, now: float) -> bool:
        """RFC 9293 section 3.10.7.4, fifth: the ACK field. SYN-RECEIVED moves on to
        ESTABLISHED on an acceptable ACK; an ACK of data not yet sent or too old to be
        valid (RFC 5961 section 5.2) is answered and dropped. False when the segment
        goes no further (dropped, or the connection is over)."""
        ack = unwrap(seg.ack, self._snd_una)
        just_established = False
        if self._state is TcpState.SYN_RECEIVED:
            if not self._snd_una < ack <= self._snd_max:
                self._control.append(self._rst(seg.ack))  # <SEQ=SEG.ACK><CTL=RST>
                return False
            just_established = True
            self._snd_wnd = seg.window << self._snd_wscale
            self._max_snd_wnd = max(self._max_snd_wnd, self._snd_wnd)
            self._snd_wl1 = seq
            self._snd_wl2 = ack
            self._set_state(TcpState.ESTABLISHED)
        if ack > self._snd_max:
            # It acknowledges something not yet sent: send an ACK and drop it.
            self._ack_now = True
            return False
        if ack < self._snd_una - self._max_snd_wnd:
            # RFC 5961 section 5.2: too old to be a valid ACK.
            self._challenge_ack()
            return False
        timestamp = seg.options.timestamp
        if (
            self._ts_enabled
            and timestamp is not None
            and seq <= self._last_ack_sent
            and not seq_lt(timestamp[0], self._ts_recent)
        ):
            # RFC 7323 section 4.3: TS.Recent follows the segment that fills Last.ACK.sent.
            self._ts_recent = timestamp[0]
            self._ts_recent_time = now
        self._process_ack(seg, seq, ack, now)
        if just_established:
            self._on_established()
        return self._state is not TcpState.CLOSED

    def _process_text_and_fin(self, seg: TcpRepr, flags: int, seq: int, now: float) -> None:
        """RFC 9293 section 3.10.7.4, sixth to eighth: URG is ignored (RFC 6093 advises
        against it); text and FIN where the state still receives; elsewhere a FIN was
        already seen: ACK it again (TIME-WAIT also restarts its 2 MSL)."""
        if self._state in _RECEIVING_STATES:
            self._process_text(seg, seq, now)
        elif flags & _FIN:
            # CLOSE-WAIT, CLOSING, LAST-ACK: the FIN was already seen; TIME-WAIT: restart.
            self._ack_now = True
            if self._state is TcpState.TIME_WAIT:
                self._tw_deadline = now + self.config.time_wait

    def _paws_rejects(self, tsval: int, now: float) -> bool:
        """RFC 7323 section 5.3: SEG.TSval < TS.Recent while TS.Recent is valid."""
        if self._ts_recent_time is None or now - self._ts_recent_time > _PAWS_IDLE_LIMIT:
            return False  # section 5.5: an idle connection's TS.Recent is no longer valid
        return seq_lt(tsval, self._ts_recent)

    def _acceptable(self, seq: int, seg: TcpRepr) -> bool:
        """RFC 9293 section 3.10.7.4, the four cases of the acceptability test."""
        window = max(self._rcv_adv_right - self._rcv_nxt, 0)
        seg_len = seg.seg_len
        rcv_nxt = self._rcv_nxt
        if window == 0:
            # Zero window: only SEG.SEQ = RCV.NXT. A segment with data is still let in so
            # its ACK, RST or FIN is processed ("special allowance", like Linux); its data
            # is trimmed away and acknowledged (nothing of it is accepted).
            return seq == rcv_nxt
        if seg_len == 0:
            return rcv_nxt <= seq < rcv_nxt + window
        return rcv_nxt <= seq < rcv_nxt + window or rcv_nxt <= seq + seg_len - 1 < rcv_nxt + window

    def _on_peer_reset(self) -> None:
        state = self._state
        if state is TcpState.SYN_RECEIVED and not self._passive:
            error: TcpError | None = TcpRefusedError("connection refused: RST in SYN-RECEIVED")
        elif state in _RESET_REPORTED_STATES:
            error = TcpResetError(f"connection reset by peer in {state.name}")
        else:
            error = None  # CLOSING, LAST-ACK, TIME-WAIT: we were done anyway
        self._clear()
        self._set_state(TcpState.CLOSED)
        self.error = error

    def _challenge_ack(self) -> None:
        """RFC 5961 section 3.2 / 4.2 / 5.2: an ACK that makes a genuine peer resynchronise."""
        self._stats.challenge_acks += 1
        self._ack_now = True

    # ------------------------------------------------------------------ ACK processing

    def _process_ack(self, seg: TcpRepr, seq: int, ack: int, now: float) -> None:
        """RFC 9293 section 3.10.7.4, fifth, for ESTABLISHED and the closing states."""
        window = seg.window << self._snd_wscale
        old_window = self._snd_wnd
        # Window update: only from a segment newer than the one that set it last.
        if ack >= self._snd_una and (
            self._snd_wl1 < seq or (self._snd_wl1 == seq and self._snd_wl2 <= ack)
        ):
            self._snd_wnd = window
            self._snd_wl1 = seq
            self._snd_wl2 = ack
            self._max_snd_wnd = max(self._max_snd_wnd, window)
        self._probes_out = 0  # the peer is alive
        if self._snd_wnd > 0:
            self._persist_deadline = None
            self._persist_backoff = 0
        elif self._snd_una < self._snd_max:
            self._retries = 0  # window shrank to 0 under outstanding data: peer alive

        if self._sack_enabled and seg.options.sack_blocks:
            self._take_sack_blocks(seg.options.sack_blocks)

        if ack > self._snd_una:
            self._on_new_ack(ack, _tsecr(seg), now)
        elif (
            ack == self._snd_una
            and self._snd_max > self._snd_una
            and not seg.payload
            and not int(seg.flags) & (_SYN | _FIN)
            and window == old_window
        ):
            # RFC 5681 section 2, DUPLICATE ACKNOWLEDGMENT (a) to (e).
            self._on_dup_ack()

        if self._fin_seq is not None and self._snd_una > self._fin_seq:
            # Our FIN is acknowledged.
            if self._state is TcpState.FIN_WAIT_1:
                self._set_state(TcpState.FIN_WAIT_2)
            elif self._state is TcpState.CLOSING:
                self._enter_time_wait(now)
            elif self._state is TcpState.LAST_ACK:
                self._clear()
                self._set_state(TcpState.CLOSED)

    def _take_sack_blocks(self, blocks: tuple[tuple[int, int], ...]) -> None:
        """RFC 2018 section 5: record SACK blocks that lie inside the outstanding data."""
        for left_wire, right_wire in blocks:
            self._stats.sack_blocks_received += 1
            left = unwrap(left_wire, self._snd_una)
            right = unwrap(right_wire, self._snd_una)
            # Ignore blocks at or below the cumulative ACK (D-SACK, RFC 2883) and nonsense.
            if self._snd_una <= left < right <= self._snd_max:
                self._scoreboard.add(left, right)

    def _on_new_ack(
        self,
        ack: int,
        tsecr: int | None,
        now: float,
        acks: int = 1,
        restart_at: float | None = None,
    ) -> None:
        """SND.UNA < SEG.ACK =< SND.NXT: new data (or our SYN/FIN) is acknowledged. `tsecr`
        is the segment's TSecr (None without the option); `acks`, how many ACKs this
        stands for (the C fast path reports a batch's as one); `restart_at`, when the
        retransmission timer restarts if not at `now`."""
        if self._ts_enabled and tsecr:
            # RFC 7323 section 4: RTTM from the echoed timestamp, valid even for a
            # retransmission because it names the transmission that was acknowledged...
            ticks = (self._ts_now(now) - tsecr) & SEQ_MASK
            if self._ts_rto_floor is not None and seq_lt(tsecr, self._ts_rto_floor):
                # ...except an echo from before the last timeout: the original was
                # received but its ACK lost, and this ACK (for the resend) carries the
                # old TS.Recent. Its "RTT" would include the whole backoff and feed a
                # spiral of ever longer timeouts. Karn's rule, applied to timestamps.
                pass
            elif ticks < 1 << 31:
                self._rtt.sample(ticks / _TS_HZ)
                self._ts_rto_floor = None
            self._rtt_seq = None
        elif self._rtt_seq is not None and ack >= self._rtt_seq:
            # RFC 6298 section 3 (Karn): the timed segment was never retransmitted.
            self._rtt.sample(now - self._rtt_time)
            self._rtt_seq = None

        self._snd_una = ack
        data_acked = self._tx.ack_to(ack)
        self._scoreboard.prune(ack)
        self._snd_nxt = max(self._snd_nxt, ack)
        self._high_rxt = max(self._high_rxt, ack)
        self._retries = 0

        cc = self._cc
        if cc.in_recovery:
            if ack >= cc.recover:
                cc.on_full_ack(self._snd_max - self._snd_una)
            else:
                cc.on_partial_ack(ack - self._snd_una + data_acked, sack=self._sack_enabled)
                if not self._sack_enabled:
                    # RFC 6582 section 3.2 step 5: retransmit the first unacknowledged
                    # segment (with SACK, the pipe algorithm picks what to resend).
                    self._forced_rtx = self._snd_una
        elif data_acked:
            cc.on_new_ack(data_acked, acks)
        cc.dup_acks = 0

        # RFC 6298 section 5.2 and 5.3: stop the timer when everything is acknowledged,
        # restart it otherwise.
        if self._snd_una >= self._snd_max:
            self._rto_deadline = None
        else:
            self._rto_deadline = (now if restart_at is None else restart_at) + self._rtt.rto

    def _on_dup_ack(self) -> None:
        self._stats.dup_acks += 1
        cc = self._cc
        cc.dup_acks += 1
        if cc.in_recovery:
            cc.on_dup_ack_in_recovery(sack=self._sack_enabled)
            return
        lost = self._sack_enabled and self._scoreboard.is_lost(self._snd_una, self._smss)
        if (cc.dup_acks >= DUP_THRESH or lost) and cc.can_enter_recovery(self._snd_una):
            # RFC 5681 section 3.2 steps 2-4, RFC 6582 section 3.2 step 2, RFC 6675 section
            # 5 step 4: fast retransmit of the first unacknowledged segment.
            cc.enter_recovery(self._snd_max - self._snd_una, self._snd_max, sack=self._sack_enabled)
            self._high_rxt = self._snd_una
            self._forced_rtx = self._snd_una
            self._stats.fast_retransmits += 1

    # ------------------------------------------------------------------ text and FIN

    def _process_text(self, seg: TcpRepr, seq: int, now: float) -> None:
        """RFC 9293 section 3.10.7.4, seventh (text) and eighth (FIN)."""
        payload = memoryview(seg.payload)
        fin = bool(int(seg.flags) & _FIN)
        if seq < self._rcv_nxt:
            # Trim what we already have.
            payload = payload[min(self._rcv_nxt - seq, len(payload)) :]
            seq = self._rcv_nxt
        right_edge = self._rcv_adv_right
        if seq + len(payload) > right_edge:
            # Beyond the window we offered: not kept (and nor is a FIN after it).
            payload = payload[: max(right_edge - seq, 0)]
            fin = False
            self._ack_now = True
        if not payload and not fin:
            return
        if len(seg.payload) > self._rcv_mss:
            self._rcv_mss = min(len(seg.payload), self.config.mss)

        if seq > self._rcv_nxt:
            self._queue_out_of_order(seq, payload, fin)
            return

        filled_gap = bool(self._ooo)
        if payload:
            self._rx += payload
            self._rcv_nxt += len(payload)
            if filled_gap:
                ready = self._ooo.pop_ready(self._rcv_nxt)
                self._rx += ready
                self._rcv_nxt += len(ready)
                if self._ooo.fin is not None and self._ooo.fin == self._rcv_nxt:
                    fin = True
        self._unacked_rx_bytes += len(payload)
        if fin:
            self._on_fin(now)
        elif filled_gap:
            self._ack_now = True  # RFC 5681 section 4.2: a segment that fills a gap
        else:
            self._schedule_ack(now, bool(int(seg.flags) & _PSH))

    def _queue_out_of_order(self, seq: int, payload: memoryview, fin: bool) -> None:
        """A segment beyond RCV.NXT: queued (bounded), and a duplicate ACK at once with SACK
        blocks (RFC 5681 section 4.2, RFC 2018 section 4)."""
        queued = True
        if payload:
            queued = self._ooo.insert(seq, payload)
        if queued:
            self._stats.ooo_segments += 1
            if fin:
                self._ooo.fin = seq + len(payload)
        else:
            self._stats.ooo_dropped += 1
        self._ack_now = True

    def _schedule_ack(self, now: float, psh: bool) -> None:
        """Delayed ACK (RFC 9293 section 3.8.6.3, RFC 5681 section 4.2): at once for every
        `ack_every` full-sized segments, otherwise within `delayed_ack` seconds."""
        config = self.config
        if (
            config.delayed_ack <= 0
            or self._unacked_rx_bytes >= config.ack_every * self._rcv_mss
            or (psh and config.quickack_on_psh)
        ):
            self._ack_now = True
        elif self._delack_deadline is None:
            self._delack_deadline = now + config.delayed_ack

    def _on_fin(self, now: float) -> None:
        """The peer's FIN is next in sequence: it takes one sequence number."""
        if self._fin_received:
            return
        self._fin_received = True
        self._rcv_nxt += 1
        self._ooo.clear()
        self._ack_now = True
        state = self._state
        if state is TcpState.ESTABLISHED:
            self._set_state(TcpState.CLOSE_WAIT)
        elif state is TcpState.FIN_WAIT_1:
            # Our FIN is not acknowledged yet (otherwise we would be in FIN-WAIT-2).
            self._set_state(TcpState.CLOSING)
        elif state is TcpState.FIN_WAIT_2:
            self._enter_time_wait(now)

    def _enter_time_wait(self, now: float) -> None:
        self._set_state(TcpState.TIME_WAIT)
        self._rto_deadline = None
        self._persist_deadline = None
        self._tw_deadline = now + self.config.time_wait

    # ------------------------------------------------------------------ receive window

    def _maybe_window_update(self) -> None:
        """After the application read: announce a window that grew a lot (like Linux's
        tcp_cleanup_rbuf), so a sender stalled on a small window resumes at once."""
        if self._state not in _RECEIVING_STATES or self._fin_received:
            return
        current = max(self._rcv_adv_right - self._rcv_nxt, 0)
        if 2 * current > self.config.recv_buffer:
            return  # the window offered is more than half of anything we could offer
        largest = min(self.config.recv_buffer, _MAX_WINDOW_FIELD << self._rcv_wscale)
        possible = min(self._free_receive_space(), largest)
        if (
            2 * current <= largest
            and possible >= 2 * current
            and (possible - current >= self._sws_threshold())
        ):
            self._ack_now = True

    def _free_receive_space(self) -> int:
        return max(self.config.recv_buffer - len(self._rx), 0)

    def _sws_threshold(self) -> int:
        # RFC 9293 section 3.8.6.2.2: move the right edge by at least min(RCV.BUFF/2, MSS).
        return min(self.config.recv_buffer // 2, self.config.mss)

    def _advertise_window(self) -> int:
        """The 16-bit window field for a non-SYN segment, and remember what it promises.

        min(free buffer, 65535 << RCV.WIND.SHIFT), never shrinking the right edge (RFC 7323
        section 2.4) and never truncated to 16 bits: a 65536-byte buffer without scaling
        advertises 65535, not (uint16_t)65536 == 0.
        """
        shift = self._rcv_wscale
        current = max(self._rcv_adv_right - self._rcv_nxt, 0)
        window = min(self._free_receive_space(), _MAX_WINDOW_FIELD << shift)
        if current < window < current + self._sws_threshold():
            window = current  # receiver SWS avoidance: not worth announcing yet
        window = max(window, current)
        field = window >> shift
        if field << shift < current:
            field += 1  # round up rather than retract the edge by the scaling remainder
        field = min(field, _MAX_WINDOW_FIELD)
        self._rcv_adv_right = max(self._rcv_adv_right, self._rcv_nxt + (field << shift))
        return field

    # ------------------------------------------------------------------ transmission planning

    @property
    def _smss(self) -> int:
        """Sender MSS for congestion control: the payload of a typical data segment."""
        return self._snd_mss - (_TIMESTAMP_OPTION_SPACE if self._ts_enabled else 0)

    def _segment_options(self, now: float) -> TcpOptions:
        """Options of a non-SYN segment: timestamps (RFC 7323 section 3.2, on every
        segment once negotiated) and SACK blocks while data waits beyond a gap."""
        timestamp = (self._ts_now(now), self._ts_recent) if self._ts_enabled else None
        blocks: tuple[tuple[int, int], ...] = ()
        if self._sack_enabled and len(self._ooo):
            # 40 bytes of option space: 3 blocks next to timestamps, 4 without.
            blocks = tuple(
                (wrap(left), wrap(right))
                for left, right in self._ooo.sack_blocks(3 if self._ts_enabled else 4)
            )
        return TcpOptions(timestamp=timestamp, sack_blocks=blocks)

    def _payload_limit(self) -> int:
        """RFC 9293 section 3.7.1: the MSS less the options this segment will carry."""
        if not (self._sack_enabled and len(self._ooo)):
            # Timestamps alone: 10 bytes padded to 12 (what _segment_options would give).
            return max(self._snd_mss - (_TIMESTAMP_OPTION_SPACE if self._ts_enabled else 0), 1)
        options = self._segment_options(self._now)
        return max(self._snd_mss - _options_length(options), 1)

    def _output_pending(self) -> bool:
        if self._control:
            return True
        if self._state in (TcpState.CLOSED, TcpState.LISTEN):
            return False
        if self._ack_now and self._state is not TcpState.SYN_SENT:
            return True
        if self._forced_rtx is not None and self._plan_at(self._forced_rtx) is not None:
            return True
        if self._persist_deadline is None and self._persist_needed():
            return True  # send() filled a closed window: poll_output() arms the timer
        return self._plan_next() is not None

    def _plan_next(self) -> _Tx | None:
        """The next segment to send, without sending it (no side effects)."""
        state = self._state
        if state in (TcpState.SYN_SENT, TcpState.SYN_RECEIVED):
            if self._snd_nxt == self._iss:
                return _Tx(self._iss, 0, syn=True)
            return None  # no data before ESTABLISHED (no TCP Fast Open)
        if state not in _SENDING_STATES:
            return None
        if self._cc.in_recovery and self._sack_enabled:
            return self._plan_sack_recovery()
        return self._plan_from_snd_nxt()

    def _plan_from_snd_nxt(self) -> _Tx | None:
        """New data (or, after a timeout, the go-back-N resend) from SND.NXT."""
        seq = self._snd_nxt
        while seq < self._snd_max:
            # After a timeout, skip what the peer has SACKed (RFC 6675 section 5.1).
            sacked_end = self._scoreboard.covering(seq)
            if sacked_end is None:
                break
            seq = sacked_end
        data_end = self._tx.end
        if seq >= data_end:
            if self._fin_seq is not None and seq == self._fin_seq:
                return _Tx(seq, 0, fin=True)  # a FIN needs no window
            return None
        natural = min(self._payload_limit(), data_end - seq)
        if seq < self._snd_max:
            next_sacked = self._scoreboard.next_sacked_after(seq)
            if next_sacked is not None:
                natural = min(natural, next_sacked - seq)
        in_flight = self._in_flight()
        window_room = self._snd_una + self._snd_wnd - seq
        cwnd_room = self._cc.cwnd - in_flight
        length = min(natural, window_room, cwnd_room)
        if length <= 0:
            return None  # zero window (persist timer) or a full congestion window
        # Nagle is off, but no runt segments either: a short segment goes only when it is
        # the last of the data, the window is idle, or it is at least half the largest
        # window the peer offered (RFC 9293 section 3.8.6.2.1, sender SWS avoidance).
        if (
            length < natural
            and in_flight > 0
            and (cwnd_room < natural or length < self._max_snd_wnd // 2)
        ):
            return None
        fin = self._fin_seq is not None and seq + length == self._fin_seq
        return _Tx(seq, length, fin=fin)

    def _in_flight(self) -> int:
        """Bytes sent and presumed in the network (RFC 5681 FlightSize; after a timeout,
        what was resent since; SACKed bytes excluded)."""
        if self._cc.in_recovery:
            return self._snd_max - self._snd_una  # NewReno counts the whole flight
        return (self._snd_nxt - self._snd_una) - self._scoreboard.sacked_bytes(
            self._snd_una, self._snd_nxt
        )

    def _plan_sack_recovery(self) -> _Tx | None:
        """RFC 6675 section 5 step (C): send while cwnd - pipe >= 1 SMSS, choosing the
        segment with NextSeg() (section 4)."""
        smss = self._smss
        scoreboard = self._scoreboard
        pipe = scoreboard.pipe(self._snd_una, self._snd_max, self._high_rxt, smss)
        if self._cc.cwnd - pipe < smss:
            return None
        limit = self._payload_limit()
        high_sacked = scoreboard.highest or self._snd_una
        start = max(self._high_rxt, self._snd_una)
        holes = scoreboard.holes(start, high_sacked)
        # Rule 1: the first lost, not yet retransmitted hole.
        for hole_start, hole_end in holes:
            if scoreboard.is_lost(hole_start, smss):
                return _Tx(hole_start, min(limit, hole_end - hole_start))
        # Rule 2: new data, if the receiver's window allows.
        seq = self._snd_max
        data_end = self._tx.end
        if seq < data_end:
            length = min(limit, data_end - seq, self._snd_una + self._snd_wnd - seq)
            if length > 0:
                fin = self._fin_seq is not None and seq + length == self._fin_seq
                return _Tx(seq, length, fin=fin)
        elif self._fin_seq is not None and seq == self._fin_seq:
            return _Tx(seq, 0, fin=True)
        # Rule 3: a hole below the highest SACK that is not (yet) deemed lost.
        for hole_start, hole_end in holes:
            return _Tx(hole_start, min(limit, hole_end - hole_start))
        return None

    def _plan_at(self, seq: int) -> _Tx | None:
        """A (re)transmission starting at `seq`, whatever the windows say."""
        if self._state not in _SENDING_STATES or seq < self._snd_una:
            return None
        data_end = self._tx.end
        if seq >= data_end:
            if self._fin_seq is not None and seq == self._fin_seq:
                return _Tx(seq, 0, fin=True)
            return None
        length = min(self._payload_limit(), data_end - seq)
        next_sacked = self._scoreboard.next_sacked_after(seq)
        if next_sacked is not None:
            length = min(length, next_sacked - seq)
        fin = self._fin_seq is not None and seq + length == self._fin_seq
        return _Tx(seq, length, fin=fin)

    # ------------------------------------------------------------------ transmission

    def _transmit(self, plan: _Tx, now: float) -> TcpRepr:
        seq, length, syn, fin = plan
        end = seq + length + int(syn) + int(fin)
        retransmission = seq < self._snd_max
        if syn:
            segment = self._syn_segment(now)
            if retransmission:
                self._syn_retransmitted = True
        else:
            bits = _ACK
            if length and seq + length == self._tx.end:
                bits |= _PSH
            if fin:
                bits |= _FIN
            payload = self._tx.read(seq, length) if length else b""
            segment = self._ack_segment(seq, _FLAGS[bits], now, payload)
        self._snd_nxt = max(self._snd_nxt, end)
        self._snd_max = max(self._snd_max, self._snd_nxt)
        if retransmission:
            self._stats.retransmits += 1
            self._rtt_seq = None  # Karn: no timing across a retransmission
            if self._cc.in_recovery:
                self._high_rxt = max(self._high_rxt, end)
        elif self._rtt_seq is None and not self._ts_enabled:
            self._rtt_seq = end
            self._rtt_time = now
        if self._rto_deadline is None:
            self._rto_deadline = now + self._rtt.rto  # RFC 6298 section 5.1
        self._stats.bytes_out += length
        self._last_send_time = now
        return segment

    def _syn_segment(self, now: float) -> TcpRepr:
        """Our SYN (SYN-SENT) or SYN,ACK (SYN-RECEIVED), with the options to negotiate."""
        config = self.config
        if self._state is TcpState.SYN_SENT:
            options = TcpOptions(
                mss=config.mss,
                window_scale=self._wscale_offer if config.window_scaling else None,
                sack_permitted=config.sack,
                timestamp=(self._ts_now(now), 0) if config.timestamps else None,
            )
            return TcpRepr(
                self.local_port,
                self.remote_port,
                self._iss,
                0,
                TcpFlags.SYN,
                self._syn_window,
                options,
            )
        # RFC 7323 sections 2.2 and 3.2, RFC 2018 section 2: only what the peer offered.
        options = TcpOptions(
            mss=config.mss,
            window_scale=self._rcv_wscale if self._wscale_agreed else None,
            sack_permitted=self._sack_enabled,
            timestamp=(self._ts_now(now), self._ts_recent) if self._ts_enabled else None,
        )
        self._ack_sent()
        return TcpRepr(
            self.local_port,
            self.remote_port,
            self._iss,
            wrap(self._rcv_nxt),
            TcpFlags.SYN | TcpFlags.ACK,
            self._syn_window,  # never scaled in a SYN
            options,
        )

    def _ack_segment(self, seq: int, flags: TcpFlags, now: float, payload: bytes = b"") -> TcpRepr:
        """Any segment after the handshake: it carries the current ACK and window."""
        options = self._segment_options(now)
        window = self._advertise_window()
        self._ack_sent()
        return TcpRepr(
            self.local_port,
            self.remote_port,
            wrap(seq),
            wrap(self._rcv_nxt),
            flags,
            window,
            options,
            payload,
        )

    def _pure_ack(self, now: float) -> TcpRepr:
        # <SEQ=SND.NXT><ACK=RCV.NXT><CTL=ACK>, with SND.NXT the highest sent: after a
        # timeout rewound SND.NXT, an older sequence number would be unacceptable.
        return self._ack_segment(self._snd_max, TcpFlags.ACK, now)

    def _probe_segment(self, now: float) -> TcpRepr:
        """<SEQ=SND.UNA-1>, no data: outside the peer's window, so it must answer with an
        ACK carrying its window (zero-window probe, keep-alive; RFC 9293 section 3.8.4)."""
        return self._ack_segment(self._snd_una - 1, TcpFlags.ACK, now)

    def _ack_sent(self) -> None:
        self.acking_segments_sent += 1
        self._ack_now = False
        self._delack_deadline = None
        self._unacked_rx_bytes = 0
        self._last_ack_sent = self._rcv_nxt

    def _rst(self, seq_wire: int) -> TcpRepr:
        return TcpRepr(self.local_port, self.remote_port, seq_wire & SEQ_MASK, 0, TcpFlags.RST, 0)

    def _ts_now(self, now: float) -> int:
        return (int(now * _TS_HZ) + self._ts_offset) & SEQ_MASK

    # ------------------------------------------------------------------ timers

    def _keepalive_deadline(self) -> float | None:
        """RFC 9293 section 3.8.4 / RFC 1122 section 4.2.3.6: probe an idle connection."""
        idle = self.config.keepalive
        if (
            idle is None
            or self._state not in (TcpState.ESTABLISHED, TcpState.CLOSE_WAIT)
            or self._snd_una != self._snd_max
            or self._snd_nxt < self._tx.end
        ):
            return None
        if self._ka_probes == 0:
            return self._last_rx_time + idle
        return self._ka_last_probe + self.config.keepalive_interval

    def _persist_needed(self) -> bool:
        """Data waits, nothing is in flight, and the peer's window is zero: only probes
        can learn when it reopens (a lost window update would otherwise deadlock)."""
        return (
            self._state in _SENDING_STATES
            and self._snd_wnd == 0
            and self._snd_una == self._snd_max
            and self._snd_nxt < self._tx.end
        )

    def _update_timers(self, now: float) -> None:
        """Arm or disarm the persist timer after anything that changed the windows."""
        if not self._persist_needed():
            self._persist_deadline = None
        elif self._persist_deadline is None:
            # RFC 9293 section 3.8.6.1: probe a zero window, backing off exponentially.
            interval = self._rtt.rto * (1 << min(self._persist_backoff, 30))
            self._persist_deadline = now + min(interval, self.config.zero_window_probe_max)

    def _fire_timers(self, now: float) -> None:
        if self._tw_deadline is not None and now >= self._tw_deadline:
            # RFC 9293 section 3.10.8: the time-wait timeout deletes the TCB.
            self._tw_deadline = None
            self._clear()
            self._set_state(TcpState.CLOSED)
            return
        if self._rto_deadline is not None and now >= self._rto_deadline:
            self._on_retransmission_timeout(now)
        if self._persist_deadline is not None and now >= self._persist_deadline:
            self._on_persist_timeout(now)
        if self._delack_deadline is not None and now >= self._delack_deadline:
            self._delack_deadline = None
            self._ack_now = True
        keepalive = self._keepalive_deadline()
        if keepalive is not None and now >= keepalive:
            self._on_keepalive_timeout(now)

    def _on_retransmission_timeout(self, now: float) -> None:
        self._rto_deadline = None
        if self._snd_una >= self._snd_max or self._state is TcpState.CLOSED:
            return
        self._retries += 1
        synchronising = self._state in (TcpState.SYN_SENT, TcpState.SYN_RECEIVED)
        limit = self.config.syn_retries if synchronising else self.config.data_retries
        if self._retries > limit:
            self._fail(
                TcpTimeoutError(
                    f"connection timed out in {self._state.name} after {limit} retransmissions"
                )
            )
            return
        self._stats.timeouts += 1
        self._rtt.back_off()  # RFC 6298 section 5.5
        self._rtt_seq = None  # Karn
        self._ts_rto_floor = self._ts_now(now)
        if synchronising:
            self._snd_nxt = self._iss
        else:
            # RFC 5681 section 3.1 / RFC 6582 section 3.2 step 4: collapse cwnd, go back.
            self._cc.on_timeout(self._snd_max - self._snd_una, self._snd_max)
            if self._retries >= 2:
                # RFC 2018 section 8: the receiver may have reneged on what it SACKed.
                self._scoreboard.clear()
            self._high_rxt = self._snd_una
            self._snd_nxt = self._snd_una
            self._forced_rtx = self._snd_una  # even into a shrunken window (as Linux)
        self._rto_deadline = now + self._rtt.rto  # RFC 6298 section 5.6

    def _on_persist_timeout(self, now: float) -> None:
        self._persist_deadline = None
        if not self._persist_needed():
            return
        self._probes_out += 1
        if self._probes_out > self.config.data_retries:
            self._fail(TcpTimeoutError("zero-window probes went unanswered"))
            return
        self._control.append(self._probe_segment(now))
        self._stats.zero_window_probes += 1
        self._persist_backoff += 1

    def _on_keepalive_timeout(self, now: float) -> None:
        if self._ka_probes >= self.config.keepalive_probes:
            # Linux resets the connection when keep-alive gives up.
            self._control.append(self._rst(wrap(self._snd_max)))
            self._fail(TcpTimeoutError("keep-alive probes went unanswered"))
            return
        self._control.append(self._probe_segment(now))
        self._ka_probes += 1
        self._ka_last_probe = now
        self._stats.keepalives_sent += 1

    # ------------------------------------------------------------------ state bookkeeping

    def _set_state(self, new: TcpState) -> None:
        if new is not self._state and new not in _TRANSITIONS[self._state]:
            raise TcpStateError(f"illegal TCP transition {self._state.name} -> {new.name}")
        self._state = new

    def _fail(self, error: TcpError) -> None:
        self._clear()
        if self._state is not TcpState.CLOSED:
            self._set_state(TcpState.CLOSED)
        self.error = error

    def _clear(self) -> None:
        """Drop the send side, the reassembly queue and every timer (received in-order
        bytes stay readable: nothing accepted is lost silently)."""
        self._tx.clear()
        self._ooo.clear()
        self._scoreboard.clear()
        self._forced_rtx = None
        self._ack_now = False
        self._rto_deadline = None
        self._persist_deadline = None
        self._delack_deadline = None
        self._tw_deadline = None
        self._close_pending = False


def _tsecr(seg: TcpRepr) -> int | None:
    """The segment's TSecr, or None when it carries no timestamp option."""
    timestamp = seg.options.timestamp
    return None if timestamp is None else timestamp[1]
