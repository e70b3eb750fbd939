"""FaultInjector: each fault does what it says, is counted, and is the same run per seed."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from dataplane.links import FaultConfig, FaultInjector, Link, VirtualClock, memory_link_pair

FRAMES = [i.to_bytes(4, "big") + bytes(56) for i in range(2000)]


def run(
    config: FaultConfig, seed: int, *, step: float = 0.0001
) -> tuple[list[bytes], dict[str, dict[str, int]]]:
    """Send FRAMES through an injector on a's tx side, one frame per clock step."""
    clock = VirtualClock()
    a, b = memory_link_pair(clock=clock)
    faulty = FaultInjector(a, config, seed, clock=clock)
    received: list[bytes] = []
    for frame in FRAMES:
        assert faulty.tx_burst([frame]) == 1
        received.extend(b.rx_burst(64))
        clock.advance(step)
    for _ in range(10_000):  # drain held frames
        when = faulty.poll_at()
        if when is None:
            break
        clock.advance_to(when)
        faulty.rx_burst()
        received.extend(b.rx_burst(64))
    received.extend(b.rx_burst(10_000))
    return received, faulty.counters()


def ids(frames: list[bytes]) -> list[int]:
    return [int.from_bytes(f[:4], "big") for f in frames]


@pytest.mark.parametrize(
    "config",
    [
        FaultConfig(drop_pct=10),
        FaultConfig(corrupt_pct=10),
        FaultConfig(duplicate_pct=10),
        FaultConfig(reorder_pct=10),
        FaultConfig(delay=0.002, delay_jitter=0.003),
        FaultConfig(max_frames_per_s=5000),
        FaultConfig(max_bytes_per_s=300_000),
        FaultConfig(drop_pct=5, corrupt_pct=5, duplicate_pct=5, reorder_pct=5),
    ],
    ids=["drop", "corrupt", "duplicate", "reorder", "delay", "fps", "bps", "all"],
)
def test_same_seed_same_run(config: FaultConfig) -> None:
    first = run(config, seed=7)
    assert run(config, seed=7) == first
    if not (config.max_frames_per_s or config.max_bytes_per_s):  # rate limits draw no dice
        assert run(config, seed=8) != first


def test_faulty_link_is_a_link() -> None:
    a, _ = memory_link_pair()
    faulty = FaultInjector(a, FaultConfig(), 1)
    assert isinstance(faulty, Link)
    assert faulty.mac == a.mac
    assert faulty.mtu == a.mtu


def test_no_faults_passes_everything_in_order() -> None:
    received, counters = run(FaultConfig(), seed=1)
    assert received == FRAMES
    assert counters["tx"]["frames_in"] == counters["tx"]["frames_out"] == len(FRAMES)


def test_drop_counts_match_what_is_missing() -> None:
    received, counters = run(FaultConfig(drop_pct=10), seed=3)
    tx = counters["tx"]
    assert 100 < tx["dropped"] < 300
    assert len(received) == len(FRAMES) - tx["dropped"] == tx["frames_out"]
    assert ids(received) == sorted(ids(received))


def test_corrupt_flips_exactly_one_bit() -> None:
    received, counters = run(FaultConfig(corrupt_pct=10), seed=4)
    assert len(received) == len(FRAMES)
    flipped = [
        sum(bin(x ^ y).count("1") for x, y in zip(got, sent, strict=True))
        for got, sent in zip(received, FRAMES, strict=True)
    ]
    assert set(flipped) == {0, 1}
    assert flipped.count(1) == counters["tx"]["corrupted"] > 100


def test_duplicates_are_extra_copies() -> None:
    received, counters = run(FaultConfig(duplicate_pct=10), seed=5)
    assert len(received) == len(FRAMES) + counters["tx"]["duplicated"]
    assert sorted(set(received)) == sorted(FRAMES)


def test_reorder_swaps_without_loss() -> None:
    received, counters = run(FaultConfig(reorder_pct=10), seed=6)
    assert sorted(received) == sorted(FRAMES)
    order = ids(received)
    out_of_order = sum(1 for x, y in itertools.pairwise(order) if x > y)
    assert counters["tx"]["reordered"] > 100
    # Two frames held back to back come out together: one inversion for both.
    assert counters["tx"]["reordered"] * 0.7 < out_of_order <= counters["tx"]["reordered"]


def test_reordered_last_frame_is_released_by_timeout() -> None:
    clock = VirtualClock()
    a, b = memory_link_pair(clock=clock)
    faulty = FaultInjector(a, FaultConfig(reorder_pct=100, reorder_timeout=0.01), 1, clock=clock)
    faulty.tx_burst([b"only" * 15])
    assert b.rx_burst() == []
    assert faulty.poll_at() == pytest.approx(0.01)
    clock.advance(0.01)
    faulty.rx_burst()  # any call releases due frames
    assert b.rx_burst() == [b"only" * 15]


def test_delay_holds_frames_on_the_clock() -> None:
    clock = VirtualClock()
    a, b = memory_link_pair(clock=clock)
    faulty = FaultInjector(a, FaultConfig(delay=0.05), 1, clock=clock)
    faulty.tx_burst([b"late" * 15])
    clock.advance(0.049)
    faulty.rx_burst()
    assert b.rx_burst() == []
    clock.advance(0.001)
    faulty.rx_burst()
    assert b.rx_burst() == [b"late" * 15]
    assert faulty.tx_counters.delayed == 1


def test_size_limit_drops_big_frames() -> None:
    a, b = memory_link_pair()
    faulty = FaultInjector(a, FaultConfig(max_frame_size=100), 1)
    assert faulty.tx_burst([bytes(100), bytes(101), bytes(60)]) == 3
    assert [len(f) for f in b.rx_burst()] == [100, 60]
    assert faulty.tx_counters.oversize == 1


def test_frame_rate_limit() -> None:
    clock = VirtualClock()
    a, b = memory_link_pair(clock=clock)
    faulty = FaultInjector(a, FaultConfig(max_frames_per_s=1000, rate_burst=0.01), 1, clock=clock)
    faulty.tx_burst([bytes(60)] * 50)  # bucket holds 10 frames
    assert len(b.rx_burst(100)) == 10
    assert faulty.tx_counters.rate_limited == 40
    clock.advance(0.005)  # refills 5
    faulty.tx_burst([bytes(60)] * 50)
    assert len(b.rx_burst(100)) == 5


def test_byte_rate_limit() -> None:
    clock = VirtualClock()
    a, b = memory_link_pair(clock=clock)
    faulty = FaultInjector(a, FaultConfig(max_bytes_per_s=100_000, rate_burst=0.03), 1, clock=clock)
    faulty.tx_burst([bytes(1000)] * 10)  # 3000-byte bucket
    assert len(b.rx_burst(100)) == 3
    assert faulty.tx_counters.rate_limited == 7


def test_rx_direction_faults_incoming_frames() -> None:
    a, b = memory_link_pair()
    faulty_b = FaultInjector(b, FaultConfig(drop_pct=100, direction="rx"), 1)
    assert faulty_b.tx_burst([bytes(60)]) == 1
    assert len(a.rx_burst()) == 1  # tx untouched
    a.tx_burst([bytes(60)] * 3)
    assert faulty_b.rx_burst() == []
    assert faulty_b.rx_counters.dropped == 3
    assert faulty_b.tx_counters.dropped == 0


def test_back_pressure_from_the_inner_link() -> None:
    a, b = memory_link_pair(ring_size=2)
    faulty = FaultInjector(a, FaultConfig(), 1)
    assert faulty.tx_burst([bytes(60)] * 3) == 3  # third waits in the injector's backlog
    assert faulty.tx_burst([bytes(60)]) == 0  # refused while the backlog is not empty
    assert len(b.rx_burst()) == 2
    assert faulty.tx_burst([bytes(60)]) == 1
    assert len(b.rx_burst()) == 2


@pytest.mark.parametrize(
    "kwargs",
    [
        {"drop_pct": -1},
        {"corrupt_pct": 101},
        {"delay": -0.1},
        {"reorder_gap": 0},
        {"direction": "up"},
    ],
)
def test_bad_config_is_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        FaultConfig(**kwargs)
