"""The devargs a port is probed with (`dataplane.dpdk.with_rx_ring`)."""

from __future__ import annotations

from dataplane.dpdk import AF_PACKET_FRAMES, rx_queue_frames, with_rx_ring


def test_af_packet_gets_a_larger_ring_than_the_pmds_default() -> None:
    device = "net_af_packet_lab,iface=wsgw-gw0,qdisc_bypass=1"
    assert with_rx_ring(device) == f"{device},framecnt={AF_PACKET_FRAMES}"
    assert AF_PACKET_FRAMES > 512  # the PMD's own default


def test_a_ring_size_the_caller_chose_is_kept() -> None:
    device = "net_af_packet0,iface=veth0,framecnt=1024"
    assert with_rx_ring(device) == device
    assert with_rx_ring("net_af_packet0,iface=veth0, framecnt=256") == (
        "net_af_packet0,iface=veth0, framecnt=256"
    )


def test_other_devices_are_left_alone() -> None:
    for device in ("0000:03:00.0", "net_tap0,iface=tap0", "net_af_xdp0,iface=veth0"):
        assert with_rx_ring(device) == device


def test_the_rx_queue_holds_the_ring_or_the_descriptors() -> None:
    assert rx_queue_frames("net_af_packet0,iface=veth0,framecnt=2048", 1024) == 2048
    assert rx_queue_frames(with_rx_ring("net_af_packet0,iface=veth0"), 1024) == AF_PACKET_FRAMES
    assert rx_queue_frames("0000:03:00.0", 1024) == 1024
