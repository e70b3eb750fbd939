"""The in-memory cable: order, both directions, MTU, back-pressure, latency on a clock."""

from __future__ import annotations

import pytest

from dataplane.links import Link, MemoryLink, VirtualClock, memory_link_pair


def test_pair_endpoints_are_links_with_own_macs() -> None:
    a, b = memory_link_pair()
    assert isinstance(a, Link)
    assert isinstance(b, Link)
    assert a.mac != b.mac
    assert a.mtu == b.mtu == 1500


def test_frames_arrive_in_order_both_ways() -> None:
    a, b = memory_link_pair()
    frames = [bytes([i]) * 60 for i in range(100)]
    assert a.tx_burst(frames) == 100
    assert b.tx_burst([b"reply" * 12]) == 1
    received: list[bytes] = []
    while chunk := b.rx_burst(32):
        assert len(chunk) <= 32
        received.extend(chunk)
    assert received == frames
    assert a.rx_burst() == [b"reply" * 12]
    assert a.rx_burst() == []
    assert a.stats.tx_frames == 100
    assert b.stats.rx_frames == 100


def test_oversize_frame_is_taken_and_dropped() -> None:
    a, b = memory_link_pair(mtu=1500)
    assert a.tx_burst([bytes(1518), bytes(1519)]) == 2
    assert [len(f) for f in b.rx_burst()] == [1518]
    assert a.stats.tx_oversize == 1


def test_full_ring_pushes_back() -> None:
    a, b = memory_link_pair(ring_size=3)
    assert a.tx_burst([b"x" * 60] * 5) == 3
    assert a.stats.tx_ring_full == 1
    assert len(b.rx_burst()) == 3
    assert a.tx_burst([b"y" * 60] * 2) == 2


def test_latency_follows_the_virtual_clock() -> None:
    clock = VirtualClock()
    a, b = memory_link_pair(clock=clock, latency=0.005)
    a.tx_burst([b"first" * 12])
    clock.advance(0.001)
    a.tx_burst([b"second" * 10])
    assert b.rx_burst() == []
    assert b.poll_at() == pytest.approx(0.005)
    clock.advance_to(0.005)
    assert b.rx_burst() == [b"first" * 12]
    clock.advance_to(0.006)
    assert b.rx_burst() == [b"second" * 10]
    assert b.poll_at() is None


def test_bad_construction_is_refused() -> None:
    with pytest.raises(ValueError, match="6 bytes"):
        MemoryLink(b"\x02")
    with pytest.raises(ValueError, match="needs a clock"):
        memory_link_pair(latency=0.001)
    with pytest.raises(ValueError, match="different MAC"):
        memory_link_pair(mac_a=b"\x02" * 6, mac_b=b"\x02" * 6)
    with pytest.raises(RuntimeError, match="not connected"):
        MemoryLink(b"\x02" * 6).tx_burst([b"x"])


def test_virtual_clock_never_goes_back() -> None:
    clock = VirtualClock(10.0)
    clock.advance_to(5.0)
    assert clock() == 10.0
    clock.sleep(0.5)
    assert clock() == 10.5
    with pytest.raises(ValueError, match="back in time"):
        clock.advance(-1)
