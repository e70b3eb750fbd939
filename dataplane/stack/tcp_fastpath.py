"""What a TCP connection shares with the C fast path (see dataplane/fastpath.py)."""

from __future__ import annotations

from typing import NamedTuple


class FastPathState(NamedTuple):
    """A connection's receive state as the C fast path needs it: 32-bit wire values.

    `ack_deadline`/`unacked_bytes` carry a delayed ACK that Python still owes, handed to C.
    Immutable and compared as a whole (a tuple: built once per export, cheaply).
    """

    rcv_nxt: int
    rcv_adv_right: int
    ts_recent: int
    last_ack_sent: int
    snd_una: int
    snd_nxt: int
    snd_wnd_field: int
    rcv_wscale: int
    ts_enabled: bool
    ts_offset: int
    rcv_space: int
    mss: int
    ack_deadline: float | None = None
    unacked_bytes: int = 0
    #: C may also take segments that advance SND.UNA (WSGW_FLOW_ACKS): nothing on the
    #: send side needs a per-ACK decision (no recovery, FIN, SACK holes or zero window).
    acks_in_c: bool = False
