"""Fast path on versus off: the same transfers must give byte-identical received streams.

One side is the engine (C fast path + Python slow path) over an in-memory link, the other
a plain Python stack; a seeded fault injector sits between them; everything runs on one
virtual clock, so a run is deterministic per seed and nothing sleeps.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

import pytest

from dataplane.engine import Engine, EngineConfig
from dataplane.fastpath import FastPathConfig
from dataplane.links.clock import VirtualClock
from dataplane.links.faults import FaultConfig, FaultInjector
from dataplane.links.memory import memory_link_pair
from dataplane.stack.runner import StackRunner
from dataplane.stack.tcp import TcpConfig
from tests.unit.engine.engine_peer import ENGINE_MAC, PEER_IP, PEER_MAC, iface_pair

PORT = 7000
TCP = TcpConfig(time_wait=0.05, rto_min=0.05, recv_buffer=256 << 10, send_buffer=256 << 10)


@dataclass
class Result:
    engine_received: bytes
    peer_received: bytes
    fast_segments: int
    slow_frames: int
    virtual_seconds: float


def transfer(
    size: int,
    *,
    fast_path: bool,
    faults: FaultConfig | None,
    seed: int,
    policy: str = "delayed",
    engine_sends: bool = True,
) -> Result:
    """`size` bytes from the peer to the engine and, if `engine_sends`, as many back."""
    clock = VirtualClock()
    a, b = memory_link_pair(clock=clock, latency=0.0005, mac_a=ENGINE_MAC, mac_b=PEER_MAC)
    peer_link = FaultInjector(b, faults, seed, clock=clock) if faults else b
    engine_iface, peer_iface = iface_pair(TCP, seed=seed)
    engine = Engine(
        engine_iface,
        link=a,
        clock=clock,
        config=EngineConfig(fastpath=FastPathConfig(enabled=fast_path, ack_policy=policy)),
    )  # type: ignore[arg-type]
    peer = StackRunner(peer_iface, peer_link, clock)
    listener = peer_iface.listen(PORT)
    to_engine = random.Random(seed).randbytes(size)
    to_peer = random.Random(seed + 7).randbytes(size if engine_sends else 0)
    sock = engine_iface.connect(PEER_IP, PORT, clock())
    got_engine, got_peer = bytearray(), bytearray()
    sent_engine = sent_peer = 0
    server = None
    try:
        for _ in range(2_000_000):
            peer.step()
            engine.run_once(0.0)
            if server is None:
                server = listener.accept()
            if server is not None:
                if sent_peer < size:
                    sent_peer += server.send(memoryview(to_engine)[sent_peer : sent_peer + 65536])
                got_peer += server.recv(1 << 20)
            if sent_engine < len(to_peer) and sock.state.name == "ESTABLISHED":
                sent_engine += sock.send(memoryview(to_peer)[sent_engine : sent_engine + 65536])
            got_engine += sock.recv(1 << 20)
            assert sock.error is None, sock.error
            if len(got_engine) == size and len(got_peer) == len(to_peer):
                break
            # Nothing moved: jump to the next timer or frame, as the runner does.
            times = [
                t
                for t in (
                    peer.poll_at(),
                    engine_iface.poll_at(),
                    getattr(peer_link, "poll_at", lambda: None)(),
                    a.poll_at() if hasattr(a, "poll_at") else None,
                )
                if t is not None
            ]
            clock.advance_to(max(clock() + 1e-5, min(times) if times else clock() + 1e-3))
        else:
            pytest.fail("transfer did not finish")
        stats = engine.fastpath.stats()
    finally:
        engine.close()
    return Result(
        bytes(got_engine), bytes(got_peer), stats["fast_segments"], stats["slow_frames"], clock()
    )


FAULTS = {
    "clean": None,
    "drop1": FaultConfig(drop_pct=1.0),
    "drop5": FaultConfig(drop_pct=5.0),
    "drop10": FaultConfig(drop_pct=10.0),
    "reorder": FaultConfig(reorder_pct=5.0),
    "duplicate": FaultConfig(duplicate_pct=5.0),
    "corrupt": FaultConfig(corrupt_pct=3.0),
}


@pytest.mark.parametrize("name", list(FAULTS))
def test_fast_path_on_and_off_receive_identical_streams(name: str) -> None:
    size = 1 << 20
    on = transfer(size, fast_path=True, faults=FAULTS[name], seed=5)
    off = transfer(size, fast_path=False, faults=FAULTS[name], seed=5)
    expected_engine = hashlib.sha256(random.Random(5).randbytes(size)).digest()
    expected_peer = hashlib.sha256(random.Random(12).randbytes(size)).digest()
    for result in (on, off):
        assert hashlib.sha256(result.engine_received).digest() == expected_engine
        assert hashlib.sha256(result.peer_received).digest() == expected_peer
    assert on.engine_received == off.engine_received
    assert off.fast_segments == 0


@pytest.mark.parametrize("name", ["clean", "drop1", "reorder"])
def test_one_way_feed_mostly_takes_the_fast_path(name: str) -> None:
    """A market-data feed only receives: header prediction holds for nearly every segment
    when nothing goes wrong, and the streams stay identical to the slow path's."""
    size = 2 << 20
    on = transfer(size, fast_path=True, faults=FAULTS[name], seed=2, engine_sends=False)
    off = transfer(size, fast_path=False, faults=FAULTS[name], seed=2, engine_sends=False)
    assert on.engine_received == off.engine_received == random.Random(2).randbytes(size)
    data_segments = size // 1448  # MSS less the timestamp option
    share = on.fast_segments / data_segments
    assert share >= (0.95 if name == "clean" else 0.5), share


def test_same_seed_same_run() -> None:
    first = transfer(256 << 10, fast_path=True, faults=FAULTS["drop5"], seed=9)
    second = transfer(256 << 10, fast_path=True, faults=FAULTS["drop5"], seed=9)
    assert (first.fast_segments, first.slow_frames, first.virtual_seconds) == (
        second.fast_segments,
        second.slow_frames,
        second.virtual_seconds,
    )


@pytest.mark.parametrize("policy", ["immediate", "every_second"])
def test_ack_policies_deliver_intact(policy: str) -> None:
    result = transfer(512 << 10, fast_path=True, faults=FAULTS["drop1"], seed=3, policy=policy)
    assert (
        hashlib.sha256(result.engine_received).digest()
        == hashlib.sha256(random.Random(3).randbytes(512 << 10)).digest()
    )
    assert result.fast_segments > 0
