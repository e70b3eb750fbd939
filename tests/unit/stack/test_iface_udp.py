"""Interface: UDP is counted, and kept in a small queue for a bound port."""

from __future__ import annotations

import iface_helpers
import pytest
from iface_helpers import OUR_IP, OUR_MAC, PEER_IP, PEER_MAC

from dataplane.stack.iface import Interface, UdpDatagram
from dataplane.wire.ethernet import ETHERTYPE_IPV4, EthernetRepr
from dataplane.wire.ipv4 import PROTO_UDP, Ipv4Repr
from dataplane.wire.udp import UdpRepr


def make_iface() -> Interface:
    """A queue of two datagrams per bound port, so that a test can fill it."""
    return iface_helpers.make_iface(udp_queue_limit=2)


def udp_frame(dst_port: int, payload: bytes) -> bytes:
    datagram = UdpRepr(5000, dst_port, payload).emit(PEER_IP, OUR_IP)
    packet = Ipv4Repr(PEER_IP, OUR_IP, PROTO_UDP, len(datagram)).emit(datagram)
    return EthernetRepr(OUR_MAC, PEER_MAC, ETHERTYPE_IPV4).emit(packet)


def test_unbound_port_is_counted_and_dropped() -> None:
    iface = make_iface()
    iface.receive([udp_frame(9, b"discard")], 0.0)
    assert iface.counters.udp_rx == 1
    assert iface.counters.udp_dropped_no_port == 1
    assert iface.poll(0.0) == []


def test_bound_port_queue_is_bounded() -> None:
    iface = make_iface()
    iface.udp_bind(7000)
    iface.receive([udp_frame(7000, bytes([i])) for i in range(3)], 0.0)
    assert iface.udp_recv(7000) == [
        UdpDatagram(PEER_IP, 5000, b"\x00"),
        UdpDatagram(PEER_IP, 5000, b"\x01"),
    ]
    assert iface.counters.udp_dropped_queue_full == 1
    assert iface.udp_recv(7000) == []


def test_udp_send_is_a_valid_datagram() -> None:
    iface = make_iface()
    assert iface.udp_send(PEER_IP, 53, 40000, b"query", 0.0)
    [frame] = iface.poll(0.0)
    ip, payload = Ipv4Repr.parse(EthernetRepr.parse(frame)[1])
    assert (ip.src, ip.dst, ip.protocol) == (OUR_IP, PEER_IP, PROTO_UDP)
    assert UdpRepr.parse(payload, ip.src, ip.dst) == UdpRepr(40000, 53, b"query")
    with pytest.raises(ValueError, match="MTU"):
        iface.udp_send(PEER_IP, 53, 40000, bytes(1473), 0.0)
