"""Data segments built in C (`wsgw_engine_flow_send`), checked by code that is not the C.

An engine without a port captures what it transmits; each frame is parsed with the
project's wire layer (which verifies both checksums) and, when scapy is installed, dissected
by scapy with its own checksum computations.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.fastpath import FLOW_ACKS, FLOW_DATA
from dataplane.shim import EngineBinding, FlowStruct, load
from dataplane.wire.ethernet import EthernetRepr
from dataplane.wire.ipv4 import PROTO_TCP, Ipv4Repr
from dataplane.wire.tcp import TcpFlags, TcpRepr
from tests.unit.engine import test_fastpath_c as fp

MASK = 0xFFFFFFFF
NOW_NS = 7_654_321_000_000  # the engine's virtual clock: TSval = NOW_NS / 1 ms + ts_offset
TS_OFFSET = 0x1234_5678
RCV_NXT, SND_NXT = 1000, 5000
FRAME_MAX = 2048
TEMPLATE_TS, TEMPLATE_PLAIN = 14 + 20 + 32, 14 + 20 + 20  # the ACK template's length
DATA = TcpFlags.ACK | TcpFlags.PSH


@pytest.fixture
def engine() -> Iterator[EngineBinding]:
    yield from fp.engine_at(NOW_NS)


def flow_for_tx(engine: EngineBinding, **kwargs: int) -> tuple[int, FlowStruct]:
    ts = bool(kwargs.pop("ts", True))
    slot, flow = fp.register(engine, snd_una=SND_NXT, ts=ts, **kwargs)
    flow.ts_offset = TS_OFFSET
    flow.active = FLOW_DATA | FLOW_ACKS
    return slot, flow


def send(engine: EngineBinding, slot: int, payload: bytes) -> int:
    """wsgw_engine_flow_send itself (the binding's wrapper has its own test), with the
    receive space the flow already has (Python passes its free buffer)."""
    try:
        space = engine.flow(slot).rcv_space
    except KeyError:
        space = 0  # no such flow: C refuses before it looks
    return int(load().lib.wsgw_engine_flow_send(engine.handle, slot, payload, len(payload), space))


def bound_send(engine: EngineBinding, slot: int, payload: bytes) -> int:
    """Through `EngineBinding.flow_sender`: a functools.partial over the C function."""
    sender: Any = engine.flow_sender(slot)
    return int(sender(payload, len(payload), engine.flow(slot).rcv_space))


def parse(raw: bytes) -> tuple[EthernetRepr, Ipv4Repr, TcpRepr]:
    """The frame through the wire layer: IPv4 and TCP checksums are verified on the way."""
    eth, rest = EthernetRepr.parse(raw)
    ip, segment_bytes = Ipv4Repr.parse(rest)
    return eth, ip, TcpRepr.parse(segment_bytes, ip.src, ip.dst)


def ts_now(offset: int = TS_OFFSET) -> int:
    return (NOW_NS // 1_000_000 + offset) & MASK


# ---- the frame --------------------------------------------------------------------------------


def test_the_segment_parses_with_the_wire_layer(engine: EngineBinding) -> None:
    slot, flow = flow_for_tx(engine)
    payload = b"GET /feed HTTP/1.1\r\n\r\n"
    right = send(engine, slot, payload)
    (raw,) = engine.take_tx()
    assert len(raw) == TEMPLATE_TS + len(payload)
    eth, ip, tcp = parse(raw)
    assert (eth.src, eth.dst, eth.ethertype) == (fp.LOCAL_MAC, fp.REMOTE_MAC, 0x0800)
    assert (ip.src, ip.dst, ip.protocol) == (fp.LOCAL_IP, fp.REMOTE_IP, PROTO_TCP)
    assert ip.payload_len == 32 + len(payload)  # the IPv4 total length was rewritten
    assert (ip.ttl, ip.ident, ip.dont_fragment) == (64, 0, True)
    assert (tcp.src_port, tcp.dst_port) == (fp.LPORT, fp.RPORT)
    assert (tcp.seq, tcp.ack) == (SND_NXT, RCV_NXT)
    assert tcp.flags == DATA
    assert tcp.window == 512  # 65536 bytes free, scaled by 2**7
    assert tcp.options.timestamp == (ts_now(), 100)  # (TSval, TS.Recent)
    assert tcp.options.mss is None and not tcp.options.sack_blocks
    assert tcp.payload == payload
    assert flow.snd_nxt == SND_NXT + len(payload)
    assert right == flow.rcv_adv_right == RCV_NXT + (512 << 7)


def test_the_segment_dissects_in_scapy_with_checksums_it_agrees_with(
    engine: EngineBinding,
) -> None:
    scapy_inet = pytest.importorskip("scapy.layers.inet")
    scapy_l2 = pytest.importorskip("scapy.layers.l2")
    scapy_utils = pytest.importorskip("scapy.utils")
    slot, _ = flow_for_tx(engine)
    payload = bytes(range(256)) * 3 + b"odd"  # an odd length: the checksum's last byte
    send(engine, slot, payload)
    (raw,) = engine.take_tx()
    packet = scapy_l2.Ether(raw)
    ip, tcp = packet[scapy_inet.IP], packet[scapy_inet.TCP]
    assert (packet.src, packet.dst) == ("02:00:00:00:00:02", "02:00:00:00:00:01")
    assert (ip.src, ip.dst, ip.proto, ip.len) == ("198.18.2.2", "198.18.2.1", 6, len(raw) - 14)
    header = raw[14:34]
    assert ip.chksum == scapy_utils.checksum(header[:10] + b"\x00\x00" + header[12:])
    segment_bytes = raw[34:]
    zeroed = segment_bytes[:16] + b"\x00\x00" + segment_bytes[18:]
    assert tcp.chksum == scapy_inet.in4_chksum(6, ip, zeroed)
    assert (tcp.sport, tcp.dport, tcp.seq, tcp.ack) == (fp.LPORT, fp.RPORT, SND_NXT, RCV_NXT)
    assert str(tcp.flags) == "PA"
    assert tcp.window == 512 and tcp.dataofs == 8
    assert tcp.options == [("NOP", None), ("NOP", None), ("Timestamp", (ts_now(), 100))]
    assert bytes(tcp.payload) == payload


def test_without_timestamps_the_header_has_no_options(engine: EngineBinding) -> None:
    slot, _ = flow_for_tx(engine, ts=False)
    send(engine, slot, b"abc")
    (raw,) = engine.take_tx()
    assert len(raw) == TEMPLATE_PLAIN + 3
    _, ip, tcp = parse(raw)
    assert ip.payload_len == 20 + 3
    assert tcp.options.timestamp is None and tcp.payload == b"abc"
    assert raw[14 + 20 + 12] >> 4 == 5  # data offset


def test_sends_in_a_row_take_consecutive_sequence_numbers(engine: EngineBinding) -> None:
    slot, flow = flow_for_tx(engine)
    payloads = [b"a", b"bb" * 50, b"c" * 1448, b"dddd"]
    for payload in payloads:
        assert send(engine, slot, payload) >= 0
    frames = [parse(raw)[2] for raw in engine.take_tx()]
    assert [t.payload for t in frames] == payloads
    seq = SND_NXT
    for tcp, payload in zip(frames, payloads, strict=True):
        assert tcp.seq == seq and tcp.ack == RCV_NXT and tcp.flags == DATA
        seq += len(payload)
    total = sum(map(len, payloads))
    assert flow.snd_nxt == SND_NXT + total
    assert (flow.tx_segments, flow.tx_bytes) == (len(payloads), total)
    stats = engine.stats()
    assert (stats["tx_data_segments"], stats["tx_data_bytes"]) == (len(payloads), total)
    assert stats["acks_sent"] == 0  # data segments are not counted as ACKs


def test_sequence_numbers_wrap(engine: EngineBinding) -> None:
    slot, flow = flow_for_tx(engine)
    flow.snd_una = flow.snd_nxt = MASK - 2
    send(engine, slot, b"0123456789")
    send(engine, slot, b"next")
    first, second = (parse(raw)[2] for raw in engine.take_tx())
    assert first.seq == MASK - 2 and second.seq == 7
    assert flow.snd_nxt == 11


def test_the_receive_side_is_in_the_segment(engine: EngineBinding) -> None:
    """ACK = RCV.NXT and TSecr = TS.Recent as C has them after taking data."""
    slot, flow = flow_for_tx(engine)
    engine.inject([fp.segment(RCV_NXT, b"hello", tsval=4321, ack=SND_NXT)])
    engine.poll(0, 0)
    assert engine.flow_read(slot) == b"hello"
    send(engine, slot, b"reply")
    (tcp,) = [parse(raw)[2] for raw in engine.take_tx()]
    assert tcp.ack == RCV_NXT + 5 == flow.rcv_nxt
    assert tcp.options.timestamp == (ts_now(), 4321)


def test_the_bindings_flow_sender_is_the_same_call(engine: EngineBinding) -> None:
    slot, flow = flow_for_tx(engine)
    assert bound_send(engine, slot, b"bound") == flow.rcv_adv_right
    assert bound_send(engine, slot, b"") == -errno.EMSGSIZE
    (tcp,) = [parse(raw)[2] for raw in engine.take_tx()]
    assert (tcp.seq, tcp.payload) == (SND_NXT, b"bound")
    assert flow.snd_nxt == SND_NXT + 5


def test_only_the_data_bit_is_enough_to_send(engine: EngineBinding) -> None:
    slot, flow = flow_for_tx(engine)
    flow.active = FLOW_DATA
    assert send(engine, slot, b"x") >= 0
    assert len(engine.take_tx()) == 1


# ---- the delayed ACK it carries ------------------------------------------------------------


def test_a_pending_delayed_ack_is_settled(engine: EngineBinding) -> None:
    slot, flow = flow_for_tx(engine)  # policy "delayed"
    engine.inject([fp.segment(RCV_NXT, b"tick", ack=SND_NXT)])
    engine.poll(0, 0)
    assert engine.take_tx() == []
    deadline = int(flow.ack_deadline_ns)
    assert deadline > NOW_NS and flow.unacked_bytes == 4 and flow.unacked_segments == 1
    send(engine, slot, b"tock")
    (tcp,) = [parse(raw)[2] for raw in engine.take_tx()]
    assert tcp.ack == RCV_NXT + 4  # the ACK that was owed rides on the data
    assert flow.ack_deadline_ns == 0
    assert (flow.unacked_bytes, flow.unacked_segments) == (0, 0)
    assert flow.last_ack_sent == flow.rcv_nxt == RCV_NXT + 4
    # Past the old deadline, the timer has nothing left to send.
    engine.set_time(deadline + 1_000_000)
    result = engine.poll(deadline + 1_000_000, 0)
    assert result.slow_frames == 0
    assert engine.take_tx() == []
    assert flow.acks_sent == 0 and engine.stats()["acks_sent"] == 0


def test_after_settling_c_owes_acks_again_for_new_data(engine: EngineBinding) -> None:
    slot, _ = flow_for_tx(engine, policy=2)  # immediate
    send(engine, slot, b"q")
    engine.take_tx()
    engine.inject([fp.segment(RCV_NXT, b"answer", ack=SND_NXT + 1)])
    engine.poll(0, 0)
    (ack,) = [fp.parse_ack(raw) for raw in engine.take_tx()]
    assert ack.flags == TcpFlags.ACK and ack.ack == RCV_NXT + 6 and ack.seq == SND_NXT + 1


@pytest.mark.parametrize(
    ("space", "wscale", "shrink_right"),
    [
        (1 << 16, 7, 0),
        (65536, 0, 0),  # never truncated to 16 bits: 65535
        (5000, 0, 0),
        (3000, 2, 0),  # SWS avoidance against the current right edge
        (1 << 16, 7, 60_000),  # a right edge offered earlier, far left of the space
        (100, 0, 65_000),  # less space than already offered: the edge never moves left
    ],
)
def test_the_window_is_the_one_c_puts_in_its_acks(
    space: int, wscale: int, shrink_right: int
) -> None:
    """The same state gives a C ACK and a C data segment the same window field."""
    windows = []
    for kind in ("ack", "data"):
        engine = fp.make_engine()
        try:
            engine.set_time(NOW_NS)
            slot, flow = flow_for_tx(engine, space=space, wscale=wscale, ring=1 << 17)
            flow.rcv_adv_right = (RCV_NXT + (1 << 16) - shrink_right) & MASK
            if kind == "ack":
                engine.flow_give_ack(slot, 1, 0, 0)  # due at once
                engine.poll(0, 0)
            else:
                send(engine, slot, b"x")
            (raw,) = engine.take_tx()
            tcp = parse(raw)[2]
            right = RCV_NXT + (tcp.window << wscale)
            assert flow.rcv_adv_right == max(right, RCV_NXT + (1 << 16) - shrink_right)
            windows.append(tcp.window)
        finally:
            engine.destroy()
    assert windows[0] == windows[1]


# ---- refusals -----------------------------------------------------------------------------------


def refused(engine: EngineBinding, slot: int, payload: bytes, code: int) -> None:
    """The send fails with -code and changes nothing."""
    flow = (
        engine.flow(slot) if engine.flow_lookup(fp.REMOTE_IP, fp.RPORT, fp.LPORT) == slot else None
    )
    before = (int(flow.snd_nxt), int(flow.ack_deadline_ns)) if flow is not None else None
    stats = engine.stats()
    assert send(engine, slot, payload) == -code
    assert engine.take_tx() == []
    if flow is not None:
        assert (int(flow.snd_nxt), int(flow.ack_deadline_ns)) == before
    after = engine.stats()
    assert after["tx_data_segments"] == stats["tx_data_segments"]


def test_an_inactive_flow_refuses(engine: EngineBinding) -> None:
    slot, flow = flow_for_tx(engine)
    flow.active = 0
    refused(engine, slot, b"x", errno.ENOENT)


def test_with_the_fast_path_off_it_refuses(engine: EngineBinding) -> None:
    slot, _ = flow_for_tx(engine)
    engine.set_fast_path(False)
    refused(engine, slot, b"x", errno.ENOENT)
    engine.set_fast_path(True)
    assert send(engine, slot, b"x") >= 0


def test_an_unknown_or_deleted_slot_refuses(engine: EngineBinding) -> None:
    refused(engine, 5, b"x", errno.ENOENT)  # never added
    refused(engine, 10_000, b"x", errno.ENOENT)  # outside the table
    slot, _ = flow_for_tx(engine)
    assert engine.flow_del(slot) == 0
    refused(engine, slot, b"x", errno.ENOENT)


def test_a_flow_without_a_template_refuses(engine: EngineBinding) -> None:
    slot = engine.flow_add(fp.REMOTE_IP, fp.RPORT, fp.LPORT, 1 << 12)
    engine.flow(slot).active = FLOW_DATA
    refused(engine, slot, b"x", errno.ENOENT)


def test_an_empty_payload_is_refused(engine: EngineBinding) -> None:
    slot, _ = flow_for_tx(engine)
    refused(engine, slot, b"", errno.EMSGSIZE)


@pytest.mark.parametrize(("ts", "template"), [(True, TEMPLATE_TS), (False, TEMPLATE_PLAIN)])
def test_a_frame_over_2048_bytes_is_refused(engine: EngineBinding, ts: bool, template: int) -> None:
    slot, _ = flow_for_tx(engine, ts=ts)
    largest = FRAME_MAX - template
    refused(engine, slot, bytes(largest + 1), errno.EMSGSIZE)
    assert send(engine, slot, bytes(largest)) >= 0
    (raw,) = engine.take_tx()
    assert len(raw) == FRAME_MAX
    assert parse(raw)[2].payload == bytes(largest)


def test_a_full_capture_refuses_with_enobufs_then_recovers(engine: EngineBinding) -> None:
    slot, flow = flow_for_tx(engine)
    sent = 0
    for _ in range(1000):
        right = send(engine, slot, bytes(1400))
        if right < 0:
            break
        sent += 1
    assert right == -errno.ENOBUFS
    assert sent > 0 and flow.snd_nxt == SND_NXT + 1400 * sent
    frames = engine.take_tx()
    assert len(frames) == sent
    assert [parse(raw)[2].seq for raw in frames] == [SND_NXT + 1400 * i for i in range(sent)]
    assert send(engine, slot, b"again") >= 0
    assert parse(engine.take_tx()[0])[2].seq == SND_NXT + 1400 * sent


def test_tx_flush_without_a_port_keeps_the_captured_frames(engine: EngineBinding) -> None:
    slot, _ = flow_for_tx(engine)
    send(engine, slot, b"kept")
    engine.tx_flush()
    engine.poll(0, 0)  # a poll flushes too
    (raw,) = engine.take_tx()
    assert parse(raw)[2].payload == b"kept"


# ---- any state, any size --------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    rcv_nxt=st.integers(0, MASK),
    snd_nxt=st.integers(0, MASK),
    ts_recent=st.integers(0, MASK),
    ts_offset=st.integers(0, MASK),
    ts=st.booleans(),
    size=st.integers(1, FRAME_MAX - TEMPLATE_PLAIN),
    fill=st.integers(0, 255),
)
def test_any_state_and_size_gives_a_valid_segment(
    rcv_nxt: int, snd_nxt: int, ts_recent: int, ts_offset: int, ts: bool, size: int, fill: int
) -> None:
    engine = fp.make_engine()
    try:
        engine.set_time(NOW_NS)
        slot, flow = flow_for_tx(engine, rcv_nxt=rcv_nxt, ts=ts)
        flow.snd_una = flow.snd_nxt = snd_nxt
        flow.ts_recent = ts_recent
        flow.ts_offset = ts_offset
        payload = bytes([fill]) * (size - 1) + bytes([size & 0xFF])
        right = send(engine, slot, payload)
        if ts and size > FRAME_MAX - TEMPLATE_TS:
            assert right == -errno.EMSGSIZE
            return
        assert right == flow.rcv_adv_right
        (raw,) = engine.take_tx()
        _, ip, tcp = parse(raw)  # both checksums verify
        assert ip.payload_len == len(raw) - 14 - 20
        assert (tcp.seq, tcp.ack, tcp.flags) == (snd_nxt, rcv_nxt, DATA)
        assert tcp.options.timestamp == ((ts_now(ts_offset), ts_recent) if ts else None)
        assert tcp.payload == payload
        assert flow.snd_nxt == (snd_nxt + size) & MASK
    finally:
        engine.destroy()
