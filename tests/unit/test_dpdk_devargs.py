"""The devargs a port is probed with (`dataplane.dpdk.with_rx_ring`, the lab's `vdev`)."""

from __future__ import annotations

import pytest

from dataplane.dpdk import AF_PACKET_FRAMES, rx_queue_frames, with_rx_ring
from gateway.lab import Lab, af_packet_frame_size


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


def test_an_ethernet_lab_leaves_the_pmds_frame_size() -> None:
    assert "framesz" not in Lab("devargs").vdev


def test_a_jumbo_lab_asks_for_frames_that_hold_its_mtu() -> None:
    """A 9000-byte frame, 66 bytes of tpacket2 header before it, in one ring frame; blocks
    of whole frames (the kernel refuses a ring whose blocks do not divide into them)."""
    args = dict(a.split("=") for a in Lab("devargs", mtu=9000).vdev.split(",")[1:])
    frame, block = int(args["framesz"]), int(args["blocksz"])
    assert frame == af_packet_frame_size(9000) >= 9000 + 14 + 66
    assert frame % 16 == 0 and block % 4096 == 0 and block % frame == 0
    assert af_packet_frame_size(1500) == 2048  # what the PMD and the mbufs use by default


@pytest.mark.parametrize("mtu", [1499, 9001, 576])
def test_a_lab_mtu_outside_ethernet_to_jumbo_is_refused(mtu: int) -> None:
    with pytest.raises(ValueError, match="mtu"):
        Lab("devargs", mtu=mtu)
