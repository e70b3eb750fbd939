"""The C fast path on its own: header prediction accepts exactly the common case.

Frames are built with the wire layer and injected (no DPDK port); ACKs come back from the
capture arena and are parsed with the wire layer, so both directions are checked by code
that is not the C under test.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from dataplane.fastpath import ack_template
from dataplane.shim import EngineBinding, EngineConf, FlowStruct, flow_template, load
from dataplane.wire.ethernet import EthernetRepr
from dataplane.wire.ipv4 import PROTO_TCP, Ipv4Repr
from dataplane.wire.tcp import TcpFlags, TcpOptions, TcpRepr

LOCAL_IP = 0xC6120202  # 198.18.2.2
REMOTE_IP = 0xC6120201
LOCAL_MAC = bytes.fromhex("020000000002")
REMOTE_MAC = bytes.fromhex("020000000001")
LPORT, RPORT = 40000, 443
ACK = TcpFlags.ACK
SHIM_DIR = Path(load().path).parent


def make_engine(**overrides: int) -> EngineBinding:
    values = dict(
        local_ip=LOCAL_IP,
        burst=32,
        max_flows=8,
        slow_arena_bytes=1 << 18,
        slow_max_frames=256,
        verify_checksums=1,
        idle_polls_before_sleep=0,
        sleep_min_ns=0,
        sleep_max_ns=0,
        delayed_ack_ns=40_000_000,
        fast_path=1,
        ts_hz=1000,
    )
    values.update(overrides)
    engine = EngineBinding(load().lib, EngineConf(**values), 0)
    assert engine.rc == 0, load().last_error()
    return engine


def engine_at(now_ns: int | None = None) -> Iterator[EngineBinding]:
    """A fixture's engine (at virtual time now_ns when given), destroyed after the test."""
    e = make_engine()
    if now_ns is not None:
        e.set_time(now_ns)
    yield e
    e.destroy()


@pytest.fixture
def engine() -> Iterator[EngineBinding]:
    yield from engine_at()


def register(
    engine: EngineBinding,
    *,
    rcv_nxt: int = 1000,
    snd_una: int = 5000,
    window: int = 512,
    ts: bool = True,
    policy: int = 0,
    ring: int = 1 << 16,
    space: int = 1 << 16,
    wscale: int = 7,
) -> tuple[int, FlowStruct]:
    slot = engine.flow_add(REMOTE_IP, RPORT, LPORT, ring)
    assert slot >= 0
    flow = engine.flow(slot)
    flow.rcv_nxt = rcv_nxt
    flow.rcv_adv_right = rcv_nxt + space
    flow.last_ack_sent = rcv_nxt
    flow.snd_una = snd_una
    flow.snd_nxt = snd_una
    flow.snd_wnd_field = window
    flow.rcv_wscale = wscale
    flow.ts_enabled = int(ts)
    flow.ts_recent = 100
    flow.rcv_space = space
    flow.mss = 1460
    flow.ack_policy = policy
    flow_template(flow, ack_template(LOCAL_MAC, REMOTE_MAC, LOCAL_IP, REMOTE_IP, LPORT, RPORT, ts))
    flow.active = 1
    return slot, flow


def segment(
    seq: int,
    payload: bytes,
    *,
    ack: int = 5000,
    flags: TcpFlags = ACK,
    window: int = 512,
    tsval: int | None = 200,
    src_port: int = RPORT,
    corrupt: bool = False,
) -> bytes:
    options = TcpOptions(timestamp=(tsval, 77)) if tsval is not None else TcpOptions()
    tcp = TcpRepr(src_port, LPORT, seq, ack, flags, window, options, payload).emit(
        REMOTE_IP, LOCAL_IP
    )
    if corrupt:
        tcp = tcp[:-1] + bytes([tcp[-1] ^ 1]) if payload else tcp
    ip = Ipv4Repr(src=REMOTE_IP, dst=LOCAL_IP, protocol=PROTO_TCP, payload_len=len(tcp)).emit(tcp)
    return EthernetRepr(LOCAL_MAC, REMOTE_MAC, 0x0800).emit(ip)


def poll(engine: EngineBinding):  # type: ignore[no-untyped-def]
    return engine.poll(0, 0)


def parse_ack(frame: bytes) -> TcpRepr:
    eth, payload = EthernetRepr.parse(frame)
    assert eth.src == LOCAL_MAC and eth.dst == REMOTE_MAC
    ip, tcp = Ipv4Repr.parse(payload)  # verifies the IP checksum
    assert (ip.src, ip.dst) == (LOCAL_IP, REMOTE_IP)
    return TcpRepr.parse(tcp, ip.src, ip.dst)  # verifies the TCP checksum


def test_in_order_segment_goes_to_the_ring(engine: EngineBinding) -> None:
    slot, flow = register(engine)
    engine.inject([segment(1000, b"hello"), segment(1005, b" world")])
    result = poll(engine)
    assert result.slow_frames == 0
    assert engine.touched(result.touched) == [slot]
    assert engine.flow_read(slot) == b"hello world"
    assert flow.rcv_nxt == 1011
    assert flow.fast_segments == 2
    assert flow.ts_recent == 200  # seq <= Last.ACK.sent for the first segment


@pytest.mark.parametrize(
    "frame_args",
    [
        {"seq": 999},  # old data
        {"seq": 1001},  # a hole: out of order
        {"flags": ACK | TcpFlags.FIN},
        {"flags": ACK | TcpFlags.RST},
        {"flags": TcpFlags.PSH},  # no ACK
        {"ack": 5001},  # acknowledges new data: Python's congestion control must see it
        {"window": 513},  # window update
        {"tsval": None},  # timestamps negotiated but missing
        {"tsval": 99},  # PAWS: older than TS.Recent
        {"src_port": 444},  # another flow
        {"corrupt": True},  # bad TCP checksum
    ],
)
def test_anything_unusual_goes_to_the_slow_path_unchanged(
    engine: EngineBinding, frame_args
) -> None:  # type: ignore[no-untyped-def]
    slot, flow = register(engine)
    args = {"seq": 1000, "payload": b"data"} | frame_args
    frame = segment(**args)
    engine.inject([frame])
    result = poll(engine)
    assert result.slow_frames == 1
    assert engine.slow_frames(1) == [frame]
    assert flow.rcv_nxt == 1000
    assert engine.flow_read(slot) == b""


def test_pure_ack_goes_to_the_slow_path(engine: EngineBinding) -> None:
    register(engine)
    engine.inject([segment(1000, b"")])
    assert poll(engine).slow_frames == 1


def test_after_a_slow_frame_the_flow_stays_slow_for_the_poll(engine: EngineBinding) -> None:
    """Order: an out-of-order segment followed by in-order ones must all reach Python."""
    slot, flow = register(engine)
    frames = [segment(1004, b"5678"), segment(1000, b"1234"), segment(1008, b"9")]
    engine.inject(frames)
    result = poll(engine)
    assert engine.slow_frames(result.slow_frames) == frames
    assert flow.slow_pending == 1
    assert engine.flow_read(slot) == b""
    engine.flow_synced(slot)
    assert flow.slow_pending == 0


def test_fast_path_off_sends_everything_slow(engine: EngineBinding) -> None:
    register(engine)
    engine.set_fast_path(False)
    engine.inject([segment(1000, b"x")])
    assert poll(engine).slow_frames == 1


def test_inactive_flow_is_not_touched(engine: EngineBinding) -> None:
    _, flow = register(engine)
    flow.active = 0
    engine.inject([segment(1000, b"x")])
    assert poll(engine).slow_frames == 1


def test_segment_beyond_the_advertised_window_is_slow(engine: EngineBinding) -> None:
    _, flow = register(engine, space=8)
    engine.inject([segment(1000, b"123456789")])
    assert poll(engine).slow_frames == 1
    assert flow.rcv_nxt == 1000


def test_immediate_policy_acks_once_per_burst_with_valid_checksums(engine: EngineBinding) -> None:
    _, flow = register(engine, policy=2)
    engine.inject([segment(1000, b"a" * 100), segment(1100, b"b" * 100)])
    poll(engine)
    acks = engine.take_tx()
    assert len(acks) == 1
    ack = parse_ack(acks[0])
    assert ack.flags == ACK
    assert ack.seq == 5000 and ack.ack == 1200
    assert ack.options.timestamp is not None and ack.options.timestamp[1] == 200
    assert flow.last_ack_sent == 1200 and flow.acks_sent == 1


def test_delayed_policy_acks_every_second_full_segment(engine: EngineBinding) -> None:
    register(engine, policy=0)
    engine.inject([segment(1000, b"a" * 1460)])
    poll(engine)
    assert engine.take_tx() == []
    engine.inject([segment(2460, b"b" * 1460)])
    poll(engine)
    (ack,) = [parse_ack(f) for f in engine.take_tx()]
    assert ack.ack == 1000 + 2 * 1460


def test_delayed_ack_timer_fires(engine: EngineBinding) -> None:
    _, flow = register(engine, policy=0)
    engine.inject([segment(1000, b"tiny")])
    poll(engine)
    assert engine.take_tx() == []
    assert flow.ack_deadline_ns > 0
    result = engine.poll(flow.ack_deadline_ns + 1_000_000, 200_000_000)
    assert result.reason & (4 | 16)
    (ack,) = [parse_ack(f) for f in engine.take_tx()]
    assert ack.ack == 1004
    assert flow.ack_deadline_ns == 0


def test_window_field_never_truncated_to_zero(engine: EngineBinding) -> None:
    """A 65536-byte buffer without scaling advertises 65535 (old C client: (uint16_t)65536)."""
    _, flow = register(engine, policy=2, wscale=0, space=65536, ring=1 << 17)
    flow.rcv_adv_right = 1001  # a one-byte window so far
    engine.inject([segment(1000, b"x")])
    poll(engine)
    (ack,) = [parse_ack(f) for f in engine.take_tx()]
    assert ack.window == 65535


def test_window_right_edge_never_moves_left(engine: EngineBinding) -> None:
    _, flow = register(engine, policy=2, wscale=0, space=4000, ring=1 << 12)
    right_before = flow.rcv_adv_right
    engine.inject([segment(1000, b"z" * 3000)])  # ring 4096: 1096 free
    poll(engine)
    (ack,) = [parse_ack(f) for f in engine.take_tx()]
    assert ack.ack + ack.window >= right_before


def test_without_timestamps(engine: EngineBinding) -> None:
    slot, _ = register(engine, ts=False, policy=2)
    engine.inject([segment(1000, b"abc", tsval=None)])
    result = poll(engine)
    assert result.slow_frames == 0
    assert engine.flow_read(slot) == b"abc"
    (ack,) = [parse_ack(f) for f in engine.take_tx()]
    assert ack.options.timestamp is None


def test_ring_wraps(engine: EngineBinding) -> None:
    slot, _ = register(engine, ring=64, space=1 << 16)
    data = os.urandom(200)
    got = b""
    seq = 1000
    for i in range(0, 200, 40):
        engine.inject([segment(seq, data[i : i + 40])])
        seq += 40
        assert poll(engine).slow_frames == 0
        got += engine.flow_read(slot)
    assert got == data


def test_flow_table_add_lookup_delete_reuse(engine: EngineBinding) -> None:
    slots = [engine.flow_add(REMOTE_IP, RPORT + i, LPORT, 1024) for i in range(8)]
    assert sorted(slots) == list(range(8))
    assert engine.flow_add(REMOTE_IP, 9999, LPORT, 1024) < 0  # full
    assert "all 8 flow slots" in load().last_error()
    assert engine.flow_add(REMOTE_IP, RPORT, LPORT, 1024) < 0  # duplicate
    for i, slot in enumerate(slots):
        assert engine.flow_lookup(REMOTE_IP, RPORT + i, LPORT) == slot
    # The key is (remote ip, remote port, local port) of an INBOUND segment: the reverse
    # tuple is another flow (regression: an old C client matched one direction only).
    assert engine.flow_lookup(LOCAL_IP, LPORT, RPORT) == -1
    for _ in range(5):  # churn: tombstones must not break lookups
        for i, slot in enumerate(slots[:4]):
            assert engine.flow_del(slot) == 0
            slots[i] = engine.flow_add(REMOTE_IP, RPORT + i, LPORT, 1024)
        for i, slot in enumerate(slots):
            assert engine.flow_lookup(REMOTE_IP, RPORT + i, LPORT) == slot


def test_ring_size_must_be_a_power_of_two(engine: EngineBinding) -> None:
    assert engine.flow_add(REMOTE_IP, RPORT, LPORT, 1000) < 0
    assert "power of two" in load().last_error()


def test_bad_configuration_is_refused() -> None:
    engine = EngineBinding(load().lib, EngineConf(local_ip=1, burst=0, max_flows=1), 0)
    assert engine.rc < 0 and engine.handle == 0
    assert "burst" in load().last_error()


def test_budget_returns_and_adaptive_sleep_counts(engine: EngineBinding) -> None:
    engine.set_sleep(4, 10_000, 200_000)
    result = engine.poll(0, 20_000_000)
    assert result.reason & 16
    stats = engine.stats()
    assert stats["sleeps"] > 0 and stats["empty_polls"] > 4


def test_microbenchmarks_run(engine: EngineBinding) -> None:
    slot, _ = register(engine, policy=1)
    frames = [segment(1000 + i * 100, bytes(100), tsval=200 + i) for i in range(32)]
    assert engine.bench_fast_path(slot, frames, 3) > 0
    assert engine.bench_flow_lookup(1000) > 0


def test_default_settings_ack_a_feeds_small_segments_at_once(engine: EngineBinding) -> None:
    """Two small segments (a feed's messages, together under two full-sized segments) are
    acknowledged at once under the gateway's default engine settings, not after the
    delayed-ACK timer: a sender whose congestion window is down to a few segments (BBR's
    PROBE_RTT keeps 4 for 200 ms every 10 s) sends nothing more until that ACK, so the
    timer's 40 ms became 40 ms stalls of the feed (issue #16, docs/PERFORMANCE.md)."""
    from dataplane.engine import engine_config_from
    from dataplane.fastpath import ACK_POLICIES, FastPathConfig
    from gateway.settings import Settings

    policy = engine_config_from(Settings().engine).fastpath.ack_policy
    assert FastPathConfig().ack_policy == policy  # one default, the dataplane's too
    _, flow = register(engine, policy=ACK_POLICIES[policy])
    engine.inject([segment(1000, b"a" * 200)])
    poll(engine)
    engine.inject([segment(1200, b"b" * 200)])
    poll(engine)
    assert [parse_ack(f).ack for f in engine.take_tx()] == [1400]
    assert flow.ack_deadline_ns == 0
