"""The C fast path taking ACKs (flows with WSGW_FLOW_ACKS): segments that move the send side.

Per case, at the C level: frames built with the wire layer are injected into an engine
without a port, as in test_fastpath_c.py. The rule under test (RFC 9293 section 3.10.7.4):
with bit 2 of `active` set, C also takes an in-order segment whose ACK advances SND.UNA
(SND.UNA < SEG.ACK =< SND.NXT, data or not) or a data segment whose non-zero window
changed; everything else that moves the send side stays Python's. The last test holds a
random stream of segments to a small Python oracle of that rule.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataplane.fastpath import FLOW_ACKS, FLOW_DATA
from dataplane.shim import EngineBinding, FlowStruct
from dataplane.wire.ethernet import EthernetRepr
from dataplane.wire.ipv4 import PROTO_TCP, Ipv4Repr
from dataplane.wire.tcp import TcpFlags, TcpOptions, TcpRepr
from tests.unit.engine import test_fastpath_c as fp

ACK, PSH, FIN, RST, SYN, URG, ECE = (
    TcpFlags.ACK,
    TcpFlags.PSH,
    TcpFlags.FIN,
    TcpFlags.RST,
    TcpFlags.SYN,
    TcpFlags.URG,
    TcpFlags.ECE,
)
MASK = 0xFFFFFFFF
RCV_NXT, SND_UNA, SND_NXT, WINDOW = 1000, 5000, 6000, 512
TSECR = 77
BOTH = FLOW_DATA | FLOW_ACKS
VIRTUAL_NOW_NS = 10**9  # a fixed C clock: no delayed-ACK timer fires during a poll
TCP_CSUM_AT = 14 + 20 + 16  # the TCP checksum's offset in a frame


def seq_diff(a: int, b: int) -> int:
    """a - b as a signed 32-bit sequence-space distance (C's seq_diff)."""
    d = (a - b) & MASK
    return d - (1 << 32) if d >= 1 << 31 else d


def frame(
    seq: int,
    payload: bytes = b"",
    *,
    ack: int = SND_UNA,
    window: int = WINDOW,
    flags: TcpFlags = ACK,
    tsval: int | None = 200,
    tsecr: int = TSECR,
    corrupt: bool = False,
) -> bytes:
    """A segment from the peer, Ethernet to payload; seq/ack taken modulo 2**32."""
    options = TcpOptions(timestamp=(tsval & MASK, tsecr)) if tsval is not None else TcpOptions()
    tcp = TcpRepr(fp.RPORT, fp.LPORT, seq & MASK, ack & MASK, flags, window, options, payload).emit(
        fp.REMOTE_IP, fp.LOCAL_IP
    )
    ip = Ipv4Repr(src=fp.REMOTE_IP, dst=fp.LOCAL_IP, protocol=PROTO_TCP, payload_len=len(tcp)).emit(
        tcp
    )
    out = EthernetRepr(fp.LOCAL_MAC, fp.REMOTE_MAC, 0x0800).emit(ip)
    if corrupt:  # flip a checksum bit: the IP header still verifies, the TCP one does not
        out = out[: TCP_CSUM_AT + 1] + bytes([out[TCP_CSUM_AT + 1] ^ 1]) + out[TCP_CSUM_AT + 2 :]
    return out


def acks_flow(
    engine: EngineBinding,
    *,
    rcv_nxt: int = RCV_NXT,
    snd_una: int = SND_UNA,
    snd_nxt: int = SND_NXT,
    window: int = WINDOW,
    bits: int = BOTH,
    ts: bool = True,
    space: int = 1 << 16,
) -> tuple[int, FlowStruct]:
    """A flow as an export with `acks_in_c` leaves it: SND.NXT - SND.UNA bytes in flight."""
    slot, flow = fp.register(
        engine, rcv_nxt=rcv_nxt & MASK, snd_una=snd_una & MASK, window=window, ts=ts, space=space
    )
    flow.snd_nxt = snd_nxt & MASK
    flow.active = bits
    return slot, flow


@pytest.fixture
def engine() -> Iterator[EngineBinding]:
    yield from fp.engine_at(VIRTUAL_NOW_NS)


def run(engine: EngineBinding, frames: list[bytes]) -> tuple[list[bytes], list[int]]:
    """Inject, poll once: (the slow-path frames, the touched slots)."""
    assert engine.inject(frames) == len(frames)
    result = engine.poll(0, 0)
    return engine.slow_frames(result.slow_frames), engine.touched(result.touched)


# ---- taken by C -------------------------------------------------------------------------------


def test_data_with_an_advancing_ack_is_taken(engine: EngineBinding) -> None:
    slot, flow = acks_flow(engine)
    slow, touched = run(engine, [frame(RCV_NXT, b"hello", ack=5400, tsval=201, tsecr=4242)])
    assert slow == [] and touched == [slot]
    assert engine.flow_read(slot) == b"hello"
    assert flow.rcv_nxt == RCV_NXT + 5
    assert flow.snd_una == 5400
    assert flow.acks_advanced == 1
    assert flow.ack_tsecr == 4242
    assert flow.snd_wnd_field == WINDOW and flow.snd_wl1 == RCV_NXT
    assert flow.pure_acks == 0 and flow.fast_segments == 1
    assert engine.stats()["fast_acks"] == 1


def test_a_pure_advancing_ack_is_taken(engine: EngineBinding) -> None:
    slot, flow = acks_flow(engine)
    slow, touched = run(engine, [frame(RCV_NXT, ack=5600, tsecr=99)])
    assert slow == [] and touched == [slot]
    assert flow.touched == 1
    assert engine.flow_read(slot) == b""
    assert flow.rcv_nxt == RCV_NXT and flow.fast_segments == 0
    assert flow.snd_una == 5600 and flow.ack_tsecr == 99
    assert flow.pure_acks == 1 and flow.acks_advanced == 1
    # Nothing was received: no ACK is owed for it.
    assert flow.unacked_bytes == 0 and flow.ack_deadline_ns == 0
    assert engine.take_tx() == []


def test_an_ack_of_everything_sent_is_taken(engine: EngineBinding) -> None:
    _, flow = acks_flow(engine)
    slow, _ = run(engine, [frame(RCV_NXT, ack=SND_NXT)])  # SEG.ACK = SND.NXT: the edge
    assert slow == []
    assert flow.snd_una == SND_NXT


def test_a_window_change_on_data_is_taken(engine: EngineBinding) -> None:
    slot, flow = acks_flow(engine)
    slow, touched = run(engine, [frame(RCV_NXT, b"abc", ack=SND_UNA, window=700)])
    assert slow == [] and touched == [slot]
    assert engine.flow_read(slot) == b"abc"
    assert flow.snd_una == SND_UNA
    assert flow.snd_wnd_field == 700
    assert flow.snd_wl1 == RCV_NXT  # SND.WL1 = SEG.SEQ
    assert flow.acks_advanced == 1  # Python must take the new window


def test_a_window_change_with_an_advancing_ack_takes_both(engine: EngineBinding) -> None:
    _, flow = acks_flow(engine)
    slow, _ = run(engine, [frame(RCV_NXT, b"x", ack=5100, window=300)])
    assert slow == []
    assert (flow.snd_una, flow.snd_wnd_field, flow.snd_wl1) == (5100, 300, RCV_NXT)


def test_several_acks_in_one_poll_leave_the_last_ones_values(engine: EngineBinding) -> None:
    slot, flow = acks_flow(engine)
    frames = [
        frame(RCV_NXT, b"aa", ack=5100, tsval=201, tsecr=1),
        frame(RCV_NXT + 2, ack=5200, tsval=202, tsecr=2),
        frame(RCV_NXT + 2, b"bb", ack=5300, window=600, tsval=203, tsecr=3),
        frame(RCV_NXT + 4, b"cc", ack=5300, window=600, tsval=204, tsecr=4),  # data only
    ]
    slow, touched = run(engine, frames)
    assert slow == [] and touched == [slot]
    assert engine.flow_read(slot) == b"aabbcc"
    assert flow.snd_una == 5300 and flow.snd_wnd_field == 600
    assert flow.snd_wl1 == RCV_NXT + 2  # the last segment that moved the send side
    assert flow.ack_tsecr == 3
    assert flow.acks_advanced == 3 and flow.pure_acks == 1
    assert engine.stats()["fast_acks"] == 3


def test_ack_tsecr_stays_that_of_the_segment_that_advanced_snd_una(
    engine: EngineBinding,
) -> None:
    """wsgw_engine.h: ack_tsecr is the "TSecr of the last segment that advanced snd_una",
    the echo Python times the batch's ACK with; RFC 7323 section 4.1 takes RTTM only from
    a segment that advances SND.UNA. A later data segment of the same poll that only
    changes the window must not replace it (Python's slow path would not sample it)."""
    _, flow = acks_flow(engine)
    slow, _ = run(
        engine,
        [
            frame(RCV_NXT, ack=5100, tsval=201, tsecr=1111),
            frame(RCV_NXT, b"data", ack=5100, window=700, tsval=202, tsecr=2222),
        ],
    )
    assert slow == []
    assert (flow.snd_una, flow.snd_wnd_field, flow.snd_wl1) == (5100, 700, RCV_NXT)
    assert flow.ack_tsecr == 1111


def test_data_under_an_unchanged_zero_window_is_the_receive_fast_path(
    engine: EngineBinding,
) -> None:
    """SEG.ACK = SND.UNA and the window field Python exported (0, with only bit 1: an
    export with a zero window does not set bit 2): nothing on the send side moves."""
    slot, flow = acks_flow(engine, window=0, bits=FLOW_DATA)
    slow, _ = run(engine, [frame(RCV_NXT, b"data", window=0)])
    assert slow == []
    assert engine.flow_read(slot) == b"data"
    assert flow.acks_advanced == 0 and flow.snd_wnd_field == 0


def test_sync_reports_the_acks_and_starts_counting_again(engine: EngineBinding) -> None:
    slot, flow = acks_flow(engine)
    run(engine, [frame(RCV_NXT, b"abc", ack=5400, window=640, tsecr=55)])
    (data, rcv_nxt, _, _, _, segments, acks, snd_una, wl1, tsecr, _, wnd, slow_pending, *_) = (
        engine.flow_sync(slot)
    )
    assert (data, rcv_nxt, segments) == (b"abc", RCV_NXT + 3, 1)
    assert (acks, snd_una, wl1, tsecr, wnd, slow_pending) == (1, 5400, RCV_NXT, 55, 640, 0)
    assert flow.acks_advanced == 0
    assert engine.flow_sync(slot)[6] == 0  # nothing new
    run(engine, [frame(RCV_NXT + 3, ack=5500, window=640)])
    assert flow.acks_advanced == 1
    engine.flow_synced(slot)
    assert flow.acks_advanced == 0
    assert flow.pure_acks == 1  # a counter: never reset


def test_without_timestamps_an_advancing_ack_is_taken(engine: EngineBinding) -> None:
    slot, flow = acks_flow(engine, ts=False)
    slow, _ = run(engine, [frame(RCV_NXT, b"q", ack=5050, tsval=None)])
    assert slow == []
    assert engine.flow_read(slot) == b"q"
    assert flow.snd_una == 5050 and flow.ack_tsecr == 0


def test_a_pure_ack_updates_ts_recent_when_at_last_ack_sent(engine: EngineBinding) -> None:
    """RFC 7323 section 4.3: SEG.SEQ =< Last.ACK.sent, so TS.Recent takes its TSval."""
    _, flow = acks_flow(engine)
    run(engine, [frame(RCV_NXT, ack=5010, tsval=300)])
    assert flow.ts_recent == 300


# ---- left to Python ---------------------------------------------------------------------------

SLOW_CASES: dict[str, tuple[dict[str, object], dict[str, object]]] = {
    # name: (flow arguments, frame arguments); the frame is at RCV.NXT unless it says.
    "duplicate ack": ({}, {}),
    "pure window update": ({}, {"window": 700}),
    "zero window, data, advancing ack": ({}, {"payload": b"data", "ack": 5100, "window": 0}),
    "zero window, pure advancing ack": ({}, {"ack": 5100, "window": 0}),
    "zero window on data": ({}, {"payload": b"data", "window": 0}),
    "ack above snd_nxt, data": ({}, {"payload": b"data", "ack": SND_NXT + 1}),
    "ack above snd_nxt, pure": ({}, {"ack": SND_NXT + 1}),
    "ack below snd_una, data": ({}, {"payload": b"data", "ack": SND_UNA - 1}),
    "ack below snd_una, pure": ({}, {"ack": SND_UNA - 1}),
    "bit 2 off, data, advancing ack": ({"bits": FLOW_DATA}, {"payload": b"data", "ack": 5100}),
    "bit 2 off, pure advancing ack": ({"bits": FLOW_DATA}, {"ack": 5100}),
    "bit 2 off, window change on data": ({"bits": FLOW_DATA}, {"payload": b"d", "window": 9}),
    "seq above rcv_nxt, advancing ack": ({}, {"seq": RCV_NXT + 4, "ack": 5100}),
    "seq below rcv_nxt, advancing ack": ({}, {"seq": RCV_NXT - 1, "payload": b"xy", "ack": 5100}),
    "fin": ({}, {"payload": b"data", "ack": 5100, "flags": ACK | FIN}),
    "rst": ({}, {"ack": 5100, "flags": ACK | RST}),
    "syn": ({}, {"ack": 5100, "flags": ACK | SYN}),
    "urg": ({}, {"payload": b"data", "ack": 5100, "flags": ACK | PSH | URG}),
    "ece": ({}, {"ack": 5100, "flags": ACK | ECE}),
    "no ack flag": ({}, {"payload": b"data", "ack": 5100, "flags": PSH}),
    "paws, data": ({}, {"payload": b"data", "ack": 5100, "tsval": 99}),
    "paws, pure ack": ({}, {"ack": 5100, "tsval": 99}),
    "timestamps missing": ({}, {"ack": 5100, "tsval": None}),
    "bad checksum, data": ({}, {"payload": b"data", "ack": 5100, "corrupt": True}),
    "bad checksum, pure ack": ({}, {"ack": 5100, "corrupt": True}),
    "beyond the window offered": ({"space": 8}, {"payload": b"123456789", "ack": 5100}),
}


def slow_frame(frame_args: dict[str, object]) -> bytes:
    args = {"seq": RCV_NXT} | frame_args
    seq = args.pop("seq")
    payload = args.pop("payload", b"")
    return frame(seq, payload, **args)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", list(SLOW_CASES))
def test_goes_to_the_slow_path_unchanged(engine: EngineBinding, name: str) -> None:
    flow_args, frame_args = SLOW_CASES[name]
    slot, flow = acks_flow(engine, **flow_args)  # type: ignore[arg-type]
    before = (flow.snd_una, flow.snd_wnd_field, flow.snd_wl1, flow.ack_tsecr, flow.ts_recent)
    bad = slow_frame(frame_args)
    slow, touched = run(engine, [bad])
    assert slow == [bad]
    assert touched == [slot] and flow.slow_pending == 1
    assert (flow.snd_una, flow.snd_wnd_field, flow.snd_wl1, flow.ack_tsecr, flow.ts_recent) == (
        before
    )
    assert flow.rcv_nxt == RCV_NXT and engine.flow_read(slot) == b""
    assert flow.acks_advanced == 0 and flow.pure_acks == 0
    assert engine.stats()["fast_acks"] == 0


@pytest.mark.parametrize("name", list(SLOW_CASES))
def test_holds_back_the_flows_later_segments_in_order(engine: EngineBinding, name: str) -> None:
    """Segments C would take on their own follow a slow one in the same poll: all reach
    Python, in arrival order, and C moves nothing."""
    flow_args, frame_args = SLOW_CASES[name]
    slot, flow = acks_flow(engine, **flow_args)  # type: ignore[arg-type]
    followers = [
        frame(RCV_NXT, b"next", tsval=210),
        frame(RCV_NXT + 4, ack=5200, tsval=211),
        frame(RCV_NXT + 4, b"more", ack=5300, window=640, tsval=212),
    ]
    frames = [slow_frame(frame_args), *followers]
    slow, touched = run(engine, frames)
    assert slow == frames
    assert touched == [slot]
    assert flow.snd_una == SND_UNA and flow.rcv_nxt == RCV_NXT
    assert flow.acks_advanced == 0 and engine.flow_read(slot) == b""
    engine.flow_synced(slot)  # Python handled them: the next poll is C's again
    assert flow.slow_pending == 0


def test_the_followers_alone_are_taken(engine: EngineBinding) -> None:
    """(What the hold-back test withholds would be C's without the slow frame.)"""
    slot, flow = acks_flow(engine)
    slow, _ = run(
        engine,
        [
            frame(RCV_NXT, b"next", tsval=210),
            frame(RCV_NXT + 4, ack=5200, tsval=211),
            frame(RCV_NXT + 4, b"more", ack=5300, window=640, tsval=212),
        ],
    )
    assert slow == []
    assert engine.flow_read(slot) == b"nextmore"
    assert flow.snd_una == 5300 and flow.acks_advanced == 2


def test_another_flows_slow_frame_does_not_hold_this_one(engine: EngineBinding) -> None:
    _, flow = acks_flow(engine)
    other = engine.flow_add(fp.REMOTE_IP, fp.RPORT + 1, fp.LPORT, 1 << 12)
    assert other >= 0  # registered, not active: its frames are slow
    tcp = TcpRepr(fp.RPORT + 1, fp.LPORT, 1, 1, ACK, 100, TcpOptions(), b"z").emit(
        fp.REMOTE_IP, fp.LOCAL_IP
    )
    ip = Ipv4Repr(src=fp.REMOTE_IP, dst=fp.LOCAL_IP, protocol=PROTO_TCP, payload_len=len(tcp)).emit(
        tcp
    )
    theirs = EthernetRepr(fp.LOCAL_MAC, fp.REMOTE_MAC, 0x0800).emit(ip)
    slow, _ = run(engine, [theirs, frame(RCV_NXT, ack=5100)])
    assert slow == [theirs]
    assert flow.snd_una == 5100 and flow.slow_pending == 0


# ---- sequence-number wrap-around --------------------------------------------------------------


@pytest.mark.parametrize(
    ("ack", "taken"),
    [
        (2**32 - 50, True),  # forward, before the wrap
        (50, True),  # forward, past the wrap
        (200, True),  # = SND.NXT
        (201, False),  # past SND.NXT
        (2**32 - 101, False),  # behind SND.UNA
        (2**32 - 100, None),  # = SND.UNA: a duplicate ACK when pure
    ],
)
def test_ack_acceptance_across_the_wrap(
    engine: EngineBinding, ack: int, taken: bool | None
) -> None:
    snd_una = 2**32 - 100
    _, flow = acks_flow(engine, snd_una=snd_una, snd_nxt=200)
    slow, _ = run(engine, [frame(RCV_NXT, ack=ack)])
    if taken:
        assert slow == [] and flow.snd_una == ack
    else:
        assert len(slow) == 1 and flow.snd_una == snd_una


def test_data_and_ack_across_both_wraps(engine: EngineBinding) -> None:
    rcv_nxt = 2**32 - 2
    slot, flow = acks_flow(engine, rcv_nxt=rcv_nxt, snd_una=2**32 - 10, snd_nxt=10)
    slow, _ = run(
        engine,
        [frame(rcv_nxt, b"wrap", ack=2**32 - 1), frame(2, b"ped", ack=4, window=600)],
    )
    assert slow == []
    assert engine.flow_read(slot) == b"wrapped"
    assert flow.rcv_nxt == 5
    assert (flow.snd_una, flow.snd_wnd_field, flow.snd_wl1) == (4, 600, 2)
    assert flow.acks_advanced == 2


# ---- the rule against an oracle -------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    """One segment from the peer, as the oracle and the frame builder see it."""

    seq: int
    ack: int
    window: int
    flags: TcpFlags
    payload: bytes
    tsval: int | None
    tsecr: int
    corrupt: bool

    def frame(self) -> bytes:
        return frame(
            self.seq,
            self.payload,
            ack=self.ack,
            window=self.window,
            flags=self.flags,
            tsval=self.tsval,
            tsecr=self.tsecr,
            corrupt=self.corrupt,
        )


@dataclass
class Oracle:
    """What the rule says C does with each segment of one poll (one flow)."""

    rcv_nxt: int
    rcv_adv_right: int
    snd_una: int
    snd_nxt: int
    wnd: int
    bits: int
    ts: bool
    ts_recent: int
    last_ack_sent: int
    wl1: int = 0
    tsecr: int = 0
    acks: int = 0
    pure: int = 0
    held: bool = False
    last_advanced: bool = False
    ring: bytearray = field(default_factory=bytearray)
    slow: list[bytes] = field(default_factory=list)

    def offer(self, seg: Segment, raw: bytes) -> None:
        if self.held or not self.fast(seg):
            self.held = True  # the rest of the flow's segments wait behind it
            self.slow.append(raw)
            return
        if self.ts and seg.tsval is not None and seq_diff(seg.seq, self.last_ack_sent) <= 0:
            self.ts_recent = seg.tsval  # RFC 7323 section 4.3
        if not (seg.ack == self.snd_una and seg.window == self.wnd):
            # The RTT echo is that of a segment that advanced SND.UNA (RFC 7323 section
            # 4.1); a window-only change leaves it (and has a test of its own).
            self.last_advanced = seg.ack != self.snd_una
            if self.ts and self.last_advanced:
                self.tsecr = seg.tsecr
            self.snd_una, self.wnd, self.wl1 = seg.ack, seg.window, seg.seq
            self.acks += 1
            self.pure += not seg.payload
        self.ring += seg.payload
        self.rcv_nxt = (self.rcv_nxt + len(seg.payload)) & MASK

    def fast(self, seg: Segment) -> bool:
        """The rule: C takes the segment (else it goes to the slow path)."""
        plen = len(seg.payload)
        flags = seg.flags
        if seg.corrupt or not flags & ACK or flags & ~(ACK | PSH) or seg.seq != self.rcv_nxt:
            return False
        if seg.ack == self.snd_una and seg.window == self.wnd:
            if plen == 0:
                return False  # a duplicate ACK (or a keep-alive)
            # data that moves nothing on the send side: the receive fast path
        else:
            advances = seq_diff(seg.ack, self.snd_una) >= 0 and seq_diff(seg.ack, self.snd_nxt) <= 0
            window_only = seg.ack == self.snd_una
            if (
                not self.bits & FLOW_ACKS
                or not advances
                or seg.window == 0
                or (window_only and not plen)  # a pure window update
            ):
                return False
        if (seg.tsval is not None) != self.ts:
            return False  # the option missing once negotiated, or there when it was not
        if seg.tsval is not None and seq_diff(seg.tsval, self.ts_recent) < 0:
            return False  # PAWS
        return seq_diff(self.rcv_adv_right, seg.seq + plen) >= 0


u32 = st.integers(0, MASK)
# What a segment looks like before any fault (each is C's or Python's as the rule says).
SHAPES = [
    "data",  # ACK = SND.UNA, same window: the receive fast path
    "data+ack",  # advances SND.UNA
    "pure ack",  # advances SND.UNA, no data
    "ack=nxt",  # acknowledges everything sent
    "data+window",  # ACK = SND.UNA, another non-zero window
    "ack+window",  # advances SND.UNA, another window, with or without data
    "dup ack",  # Python's: no data, nothing moves
    "window update",  # Python's: no data, ACK = SND.UNA, another window
    "random",  # every field drawn on its own
]
# One thing wrong with it (or, most of the time, nothing).
FAULTS = [
    "seq+",
    "seq-",
    "ack above",
    "ack below",
    "ack far",
    "zero window",
    "flags",
    "no ack flag",
    "paws",
    "timestamps",  # missing when negotiated, present when not
    "corrupt",
    "beyond window",
]
BAD_FLAGS = [ACK | FIN, ACK | RST, ACK | SYN, ACK | URG, ACK | ECE, ACK | PSH | FIN]
RANDOM_ACKS = ["una", "nxt", "inside", "above", "below"]


@dataclass(frozen=True)
class Spec:
    """How to build one segment, relative to the state the oracle has by then."""

    shape: str
    fault: str | None
    plen: int
    ack_frac: float
    window: int
    bad_flags: TcpFlags
    tsecr: int
    tsval_step: int
    # for the "random" shape
    r_seq: int
    r_ack: str
    r_window: str
    r_plen: int
    r_flags: TcpFlags


#: The Spec fields drawn from a list, with their lists: the strategy and the plain PRNG
#: below draw from the same ones.
SPEC_CHOICES: dict[str, list[Any]] = {
    "shape": list(SHAPES),
    "plen": [1, 7, 30],
    "bad_flags": list(BAD_FLAGS),
    "r_seq": [0, 0, -1, 1],
    "r_ack": list(RANDOM_ACKS),
    "r_window": ["same", "zero", "other"],
    "r_plen": [0, 0, 5],
    "r_flags": [ACK, ACK | PSH, PSH, *BAD_FLAGS],
}

specs_strategy = st.builds(
    Spec,
    fault=st.integers(0, 9).flatmap(
        lambda roll: st.none() if roll < 7 else st.sampled_from(FAULTS)
    ),
    ack_frac=st.floats(0, 1),
    window=st.integers(1, 65535),
    tsecr=u32,
    tsval_step=st.integers(0, 1000),
    **{name: st.sampled_from(values) for name, values in SPEC_CHOICES.items()},
)


def random_spec(rng: random.Random) -> Spec:
    """What `specs_strategy` draws, from a plain PRNG (uniform: every fault often)."""
    return Spec(
        fault=None if rng.random() < 0.6 else rng.choice(FAULTS),
        ack_frac=rng.random(),
        window=rng.randint(1, 65535),
        tsecr=rng.getrandbits(32),
        tsval_step=rng.randint(0, 1000),
        **{name: rng.choice(values) for name, values in SPEC_CHOICES.items()},
    )


def build(oracle: Oracle, spec: Spec, i: int) -> Segment:
    """The segment `spec` describes, from the state the rule says C is in by now."""
    una, nxt = oracle.snd_una, oracle.snd_nxt
    flight = seq_diff(nxt, una)
    inside = (una + max(1, round(flight * spec.ack_frac))) & MASK
    other = spec.window if spec.window != oracle.wnd else (oracle.wnd % 65535) + 1
    plen = spec.plen
    seq, ack, window, flags = oracle.rcv_nxt, una, oracle.wnd, ACK | PSH
    shape = spec.shape
    if shape in ("data+ack", "pure ack", "ack+window"):
        ack = inside if flight else una
    if shape == "ack=nxt":
        ack = nxt
    if shape in ("data+window", "ack+window", "window update"):
        window = other
    if shape in ("pure ack", "dup ack", "window update") or (shape == "ack+window" and i % 2):
        plen, flags = 0, ACK
    if shape == "random":
        seq += spec.r_seq
        ack = {"una": una, "nxt": nxt, "inside": inside, "above": nxt + 1, "below": una - 1}[
            spec.r_ack
        ]
        window = {"same": oracle.wnd, "zero": 0, "other": other}[spec.r_window]
        plen, flags = spec.r_plen, spec.r_flags
    tsval: int | None = oracle.ts_recent + spec.tsval_step if oracle.ts else None
    corrupt = False
    fault = spec.fault
    if fault == "seq+":
        seq += 1 + plen
    elif fault == "seq-":
        seq -= 1
    elif fault == "ack above":
        ack = nxt + 1
    elif fault == "ack below":
        ack = una - 1
    elif fault == "ack far":
        ack = una + (1 << 31) + 3
    elif fault == "zero window":
        window = 0
    elif fault == "flags":
        flags = spec.bad_flags
    elif fault == "no ack flag":
        flags = PSH
    elif fault == "paws" and oracle.ts:
        tsval = oracle.ts_recent - 1 - spec.tsval_step
    elif fault == "timestamps":
        tsval = None if oracle.ts else 123
    elif fault == "corrupt":
        corrupt = True
    elif fault == "beyond window":
        room = seq_diff(oracle.rcv_adv_right, seq)
        if 0 <= room < 1000:
            plen = room + 1
    return Segment(
        seq & MASK,
        ack & MASK,
        window,
        flags,
        bytes([0x41 + i % 26]) * plen,
        None if tsval is None else tsval & MASK,
        spec.tsecr,
        corrupt,
    )


@dataclass(frozen=True)
class Start:
    """A flow's state when the poll begins."""

    rcv_nxt: int
    snd_una: int
    in_flight: int
    wnd: int
    bits: int
    ts: bool
    ts_recent: int
    space: int


def check(engine: EngineBinding, start: Start, specs: list[Spec]) -> None:
    """One poll of segments built from `specs` for a new flow: C against the oracle."""
    snd_nxt = (start.snd_una + start.in_flight) & MASK
    slot, flow = acks_flow(
        engine,
        rcv_nxt=start.rcv_nxt,
        snd_una=start.snd_una,
        snd_nxt=snd_nxt,
        window=start.wnd,
        bits=start.bits,
        ts=start.ts,
        space=start.space,
    )
    try:
        flow.ts_recent = start.ts_recent
        oracle = Oracle(
            start.rcv_nxt,
            int(flow.rcv_adv_right),
            start.snd_una,
            snd_nxt,
            start.wnd,
            start.bits,
            start.ts,
            start.ts_recent,
            int(flow.last_ack_sent),
        )
        frames = []
        for i, spec in enumerate(specs):
            seg = build(oracle, spec, i)
            raw = seg.frame()
            oracle.offer(seg, raw)
            frames.append(raw)
        fast_acks = engine.stats()["fast_acks"]
        slow, touched = run(engine, frames)
        assert slow == oracle.slow
        assert engine.flow_read(slot) == bytes(oracle.ring)
        assert flow.rcv_nxt == oracle.rcv_nxt
        assert (flow.snd_una, flow.snd_wnd_field) == (oracle.snd_una, oracle.wnd)
        assert (flow.acks_advanced, flow.pure_acks) == (oracle.acks, oracle.pure)
        if oracle.acks:
            assert flow.snd_wl1 == oracle.wl1
        if oracle.last_advanced:
            assert flow.ack_tsecr == oracle.tsecr
        assert flow.ts_recent == oracle.ts_recent
        assert flow.slow_pending == int(bool(oracle.slow))
        assert touched == [slot]  # every segment either moved something or went slow
        assert engine.stats()["fast_acks"] - fast_acks == oracle.acks
    finally:
        assert engine.flow_del(slot) == 0


starts = st.builds(
    Start,
    rcv_nxt=u32,
    snd_una=u32,
    in_flight=st.integers(0, 4000),
    wnd=st.integers(0, 65535),
    bits=st.sampled_from([FLOW_DATA, BOTH, BOTH, BOTH]),
    ts=st.booleans(),
    ts_recent=u32,
    space=st.sampled_from([40, 150, 1 << 16, 1 << 16]),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(start=starts, specs=st.lists(specs_strategy, min_size=1, max_size=8))
def test_c_decides_as_the_rule_says(start: Start, specs: list[Spec]) -> None:
    engine = fp.make_engine()
    try:
        engine.set_time(VIRTUAL_NOW_NS)
        check(engine, start, specs)
    finally:
        engine.destroy()


@pytest.mark.parametrize("seed", range(4))
def test_c_decides_as_the_rule_says_seeded_sweep(engine: EngineBinding, seed: int) -> None:
    """The same check over a seeded uniform sweep, so that every fault and shape is met
    many times whatever the example generator favours."""
    rng = random.Random(seed)
    for _ in range(500):
        start = Start(
            rng.getrandbits(32),
            rng.choice([rng.getrandbits(32), MASK - rng.randint(0, 3000)]),
            rng.randint(0, 4000),
            rng.choice([0, rng.randint(1, 65535)]),
            rng.choice([FLOW_DATA, BOTH, BOTH, BOTH]),
            rng.random() < 0.5,
            rng.getrandbits(32),
            rng.choice([40, 150, 1 << 16, 1 << 16]),
        )
        check(engine, start, [random_spec(rng) for _ in range(rng.randint(1, 8))])
