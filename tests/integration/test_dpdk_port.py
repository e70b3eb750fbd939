"""A real DPDK port (net_af_packet) on the lab's veth: frames both ways with the peer kernel."""

from __future__ import annotations

import json
import socket
import time

import pytest

from dataplane.dpdk import DpdkPort, Eal
from dataplane.errors import DeviceNotFoundError, PortError, UnsafeInterfaceError
from dataplane.wire.addr import ip_to_int, mac_from_str, mac_to_str
from dataplane.wire.arp import OP_REPLY, OP_REQUEST, ArpRepr
from dataplane.wire.ethernet import ETHERTYPE_ARP, EthernetRepr
from gateway.lab import Lab
from tests.conftest import requires_dpdk

pytestmark = [requires_dpdk, pytest.mark.dpdk]


def wait_for_frames(port: DpdkPort, predicate, timeout: float = 5.0) -> list[bytes]:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    seen: list[bytes] = []
    while time.monotonic() < deadline:
        for frame in port.rx_burst():
            seen.append(frame)
            if predicate(frame):
                return seen
        time.sleep(0.002)
    raise AssertionError(f"no matching frame within {timeout}s; got {len(seen)} others")


def is_arp_request_for(ip: int):  # type: ignore[no-untyped-def]
    def check(frame: bytes) -> bool:
        eth, payload = EthernetRepr.parse(frame)
        if eth.ethertype != ETHERTYPE_ARP:
            return False
        arp = ArpRepr.parse(payload)
        return arp.operation == OP_REQUEST and arp.target_ip == ip

    return check


def test_arp_request_in_reply_out_cached_by_peer_kernel(eal: Eal, lab: Lab) -> None:
    with eal.open_port(lab.vdev) as port:
        assert port.link()["up"] == 1
        assert port.mtu == 1500
        gw_ip = ip_to_int(lab.gw_ip)
        # The peer kernel sends a datagram to the stack's address: it must ARP for it first.
        lab.exec(
            [
                "python3",
                "-c",
                f"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                f"s.sendto(b'x', ('{lab.gw_ip}', 9))",
            ]
        )
        frames = wait_for_frames(port, is_arp_request_for(gw_ip))
        _, payload = EthernetRepr.parse(frames[-1])
        request = ArpRepr.parse(payload)
        assert mac_to_str(request.sender_mac) == lab.peer_mac()
        assert request.sender_ip == ip_to_int(lab.peer_ip)

        reply = ArpRepr(OP_REPLY, port.mac, gw_ip, request.sender_mac, request.sender_ip)
        frame = EthernetRepr(request.sender_mac, port.mac, ETHERTYPE_ARP).emit(
            reply.emit(), pad=True
        )
        assert port.tx_burst([frame]) == 1

        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if lab.neighbours().get(lab.gw_ip) == mac_to_str(port.mac):
                break
            time.sleep(0.05)
        assert lab.neighbours().get(lab.gw_ip) == mac_to_str(port.mac)
        stats = port.stats()
        assert stats["rx_packets"] >= 1
        assert stats["tx_packets"] == 1
        assert stats["tx_dropped"] == stats["tx_nombuf"] == stats["tx_oversize"] == 0


def test_burst_of_frames_reaches_peer_intact(eal: Eal, lab: Lab) -> None:
    """A batch TX of 200 UDP frames in one call; the peer kernel receives every payload."""
    import struct

    from dataplane.wire.ipv4 import PROTO_UDP, Ipv4Repr
    from dataplane.wire.udp import UdpRepr

    receiver = lab.popen(
        [
            "python3",
            "-c",
            "import socket,sys\n"
            "s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            f"s.bind(('{lab.peer_ip}', 7000)); s.settimeout(5)\n"
            "print('ready', flush=True)\n"
            "got=set()\n"
            "try:\n"
            "  while len(got) < 200:\n"
            "    got.add(int.from_bytes(s.recv(2048)[:4], 'big'))\n"
            "except OSError: pass\n"
            "print(len(got), flush=True)\n",
        ],
        stdout=__import__("subprocess").PIPE,
        text=True,
    )
    try:
        assert receiver.stdout is not None
        assert receiver.stdout.readline().strip() == "ready"
        with eal.open_port(lab.vdev) as port:
            src, dst = ip_to_int(lab.gw_ip), ip_to_int(lab.peer_ip)
            peer_mac = mac_from_str(lab.peer_mac())
            frames = []
            for i in range(200):
                udp = UdpRepr(40000, 7000, struct.pack("!I", i) + bytes(100)).emit(src, dst)
                ip = Ipv4Repr(src=src, dst=dst, protocol=PROTO_UDP, payload_len=len(udp)).emit(udp)
                frames.append(EthernetRepr(peer_mac, port.mac, 0x0800).emit(ip))
            sent = 0
            for start in range(0, 200, 50):
                sent += port.tx_burst(frames[start : start + 50])
                time.sleep(0.01)
            assert sent == 200
            out, _ = receiver.communicate(timeout=10)
            assert out.strip() == "200"
            assert port.stats()["tx_packets"] == 200
    finally:
        receiver.kill()


def test_reopen_same_device_after_close(eal: Eal, lab: Lab) -> None:
    port = eal.open_port(lab.vdev)
    mac = port.mac
    port.close()
    port.close()  # twice is fine
    with pytest.raises(PortError, match="closed"):
        port.rx_burst()
    with eal.open_port(lab.vdev) as again:
        assert again.mac == mac


def test_missing_interface_is_named(eal: Eal) -> None:
    with pytest.raises(DeviceNotFoundError, match="'nosuch0' does not exist"):
        eal.open_port("net_af_packet_x,iface=nosuch0")


def test_unknown_vdev_driver_is_named(eal: Eal) -> None:
    with pytest.raises(DeviceNotFoundError, match="no DPDK driver for vdev 'net_bogus0'"):
        eal.open_port("net_bogus0")


def test_missing_pci_device_is_named(eal: Eal) -> None:
    with pytest.raises(DeviceNotFoundError, match=r"PCI device 0000:ff:1f\.7 does not exist"):
        eal.open_port("0000:ff:1f.7")


@pytest.mark.parametrize("iface", ["lo", "eth0"])
def test_interface_the_host_uses_is_refused(eal: Eal, iface: str) -> None:
    import os

    if not os.path.exists(f"/sys/class/net/{iface}"):
        pytest.skip(f"no {iface} here")
    with pytest.raises(UnsafeInterfaceError, match=f"refusing to open a DPDK port on {iface}"):
        eal.open_port(f"net_af_packet_u,iface={iface}")


def test_port_counters_shape(eal: Eal) -> None:
    with eal.open_port("net_null_c") as port:
        stats = port.stats()
        assert set(stats) >= {"rx_packets", "tx_packets", "rx_missed", "tx_dropped", "rx_nombuf"}
        assert json.dumps(stats)
        assert port.tx_burst([bytes(60)] * 10) == 10
        assert port.tx_burst([bytes(4000)]) == 0
        assert port.stats()["tx_oversize"] == 1


def test_no_socket_api_used_by_port(eal: Eal) -> None:
    """Sanity: socket is only the peer's business here."""
    assert socket is not None
