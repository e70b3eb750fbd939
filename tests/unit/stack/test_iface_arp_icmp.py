"""Interface: ARP (RFC 826, RFC 5227 announcement), resolution failure, ICMP echo (RFC 792)."""

from __future__ import annotations

from typing import Any

import iface_helpers
import pytest
from iface_helpers import NETMASK, OUR_IP, OUR_MAC, PEER_IP, PEER_MAC

from dataplane.links import VirtualClock, memory_link_pair
from dataplane.stack.arp_cache import ArpConfig, HostUnreachableError
from dataplane.stack.iface import Interface, NoRouteError
from dataplane.stack.runner import StackRunner
from dataplane.wire.addr import ip_to_int
from dataplane.wire.arp import OP_REPLY, OP_REQUEST, ArpRepr
from dataplane.wire.ethernet import BROADCAST, ETHERTYPE_ARP, ETHERTYPE_IPV4, EthernetRepr
from dataplane.wire.icmp import TYPE_ECHO_REPLY, TYPE_ECHO_REQUEST, IcmpRepr
from dataplane.wire.ipv4 import PROTO_ICMP, PROTO_TCP, Ipv4Repr
from dataplane.wire.tcp import TcpFlags, TcpRepr

OTHER_IP = ip_to_int("198.18.0.3")
GATEWAY_IP = ip_to_int("198.18.0.254")
FAR_IP = ip_to_int("203.0.113.7")


def make_iface(**kwargs: Any) -> Interface:
    """Ours behind a default gateway, the ARP cache empty: these tests watch ARP resolve."""
    return iface_helpers.make_iface(GATEWAY_IP, learn_peer=False, **kwargs)


def arp_frame(
    op: int,
    sender_mac: bytes,
    sender_ip: int,
    target_mac: bytes,
    target_ip: int,
    dst: bytes = BROADCAST,
) -> bytes:
    arp = ArpRepr(op, sender_mac, sender_ip, target_mac, target_ip)
    return EthernetRepr(dst, sender_mac, ETHERTYPE_ARP).emit(arp.emit(), pad=True)


def parse_arp(frame: bytes) -> tuple[EthernetRepr, ArpRepr]:
    eth, payload = EthernetRepr.parse(frame)
    assert eth.ethertype == ETHERTYPE_ARP
    return eth, ArpRepr.parse(payload)


def ip_frame(
    src_ip: int, dst_ip: int, protocol: int, payload: bytes, dst_mac: bytes = OUR_MAC
) -> bytes:
    packet = Ipv4Repr(src_ip, dst_ip, protocol, len(payload)).emit(payload)
    return EthernetRepr(dst_mac, PEER_MAC, ETHERTYPE_IPV4).emit(packet)


def test_gratuitous_arp_announcement_once_at_start() -> None:
    iface = make_iface(announce=True)
    [frame] = iface.poll(0.0)
    eth, arp = parse_arp(frame)
    assert eth.dst == BROADCAST
    # RFC 5227 section 2.3: a request with sender and target protocol address both ours.
    assert (arp.operation, arp.sender_mac, arp.sender_ip, arp.target_ip) == (
        OP_REQUEST,
        OUR_MAC,
        OUR_IP,
        OUR_IP,
    )
    assert iface.poll(1.0) == []
    assert iface.counters.arp_announcements_sent == 1


def test_arp_request_for_our_ip_is_answered_with_our_mac() -> None:
    iface = make_iface()
    iface.receive([arp_frame(OP_REQUEST, PEER_MAC, PEER_IP, bytes(6), OUR_IP)], 0.0)
    [frame] = iface.poll(0.0)
    eth, arp = parse_arp(frame)
    assert (eth.dst, eth.src) == (PEER_MAC, OUR_MAC)
    assert arp == ArpRepr(OP_REPLY, OUR_MAC, OUR_IP, PEER_MAC, PEER_IP)
    assert iface.counters.arp_replies_sent == 1
    assert iface.arp.lookup(PEER_IP, 0.0) == PEER_MAC  # learnt: the request was for us


def test_arp_request_for_someone_else_is_ignored_and_not_learnt() -> None:
    iface = make_iface()
    iface.receive([arp_frame(OP_REQUEST, PEER_MAC, PEER_IP, bytes(6), OTHER_IP)], 0.0)
    assert iface.poll(0.0) == []
    assert iface.arp.lookup(PEER_IP, 0.0) is None  # RFC 826: only merge, never add


def test_arp_conflict_is_counted_not_learnt() -> None:
    iface = make_iface()
    iface.receive([arp_frame(OP_REPLY, PEER_MAC, OUR_IP, OUR_MAC, OUR_IP)], 0.0)
    assert iface.counters.arp_conflicts == 1
    assert iface.poll(0.0) == []


def test_arp_from_a_group_address_is_dropped() -> None:
    iface = make_iface()
    iface.receive([arp_frame(OP_REQUEST, BROADCAST, PEER_IP, bytes(6), OUR_IP)], 0.0)
    assert iface.poll(0.0) == []
    assert iface.arp.lookup(PEER_IP, 0.0) is None
    assert iface.counters.rx_dropped_malformed == 1


def test_connect_resolves_next_hop_then_sends_syn() -> None:
    iface = make_iface()
    sock = iface.connect(PEER_IP, 80, 0.0)
    [request] = iface.poll(0.0)
    eth, arp = parse_arp(request)
    assert eth.dst == BROADCAST
    assert (arp.operation, arp.sender_ip, arp.target_ip) == (OP_REQUEST, OUR_IP, PEER_IP)
    iface.receive([arp_frame(OP_REPLY, PEER_MAC, PEER_IP, OUR_MAC, OUR_IP, OUR_MAC)], 0.01)
    [syn_frame] = iface.poll(0.01)
    eth, packet = EthernetRepr.parse(syn_frame)
    assert eth.dst == PEER_MAC
    ip, payload = Ipv4Repr.parse(packet)
    assert (ip.src, ip.dst, ip.protocol) == (OUR_IP, PEER_IP, PROTO_TCP)
    syn = TcpRepr.parse(payload, ip.src, ip.dst)
    assert syn.flags & TcpFlags.SYN
    assert (syn.src_port, syn.dst_port) == (sock.local.port, 80)


def test_off_subnet_destination_resolves_the_gateway() -> None:
    iface = make_iface()
    iface.connect(FAR_IP, 443, 0.0)
    [request] = iface.poll(0.0)
    assert parse_arp(request)[1].target_ip == GATEWAY_IP


def test_no_gateway_no_route() -> None:
    iface = Interface(OUR_MAC, OUR_IP, NETMASK, None, seed=1)
    with pytest.raises(NoRouteError, match=r"203\.0\.113\.7:443"):
        iface.connect(FAR_IP, 443, 0.0)


def test_arp_failure_after_retries_fails_the_connection_clearly() -> None:
    iface = make_iface(arp_config=ArpConfig(retry_interval=1.0, max_requests=3))
    sock = iface.connect(FAR_IP, 443, 0.0)
    sent = []
    for now in (0.0, 0.5, 1.0, 2.0, 2.5):
        sent += [
            parse_arp(f)[1]
            for f in iface.poll(now)
            if EthernetRepr.parse(f)[0].ethertype == ETHERTYPE_ARP
        ]
    assert [arp.target_ip for arp in sent] == [GATEWAY_IP] * 3
    assert sock.error is None
    iface.poll(3.0)
    assert isinstance(sock.error, HostUnreachableError)
    assert str(sock.error) == (
        "host 203.0.113.7 unreachable via gateway 198.18.0.254: "
        "no ARP reply for 198.18.0.254 after 3 requests"
    )
    assert iface.counters.arp_requests_sent == 3
    assert iface.counters.arp_resolution_failures == 1
    assert iface.connection_count == 0
    with pytest.raises(HostUnreachableError):
        sock.send(b"x")
    assert iface.poll(10.0) == []  # nothing left to retry


def test_runner_connect_raises_host_unreachable() -> None:
    clock = VirtualClock()
    ours, _silent = memory_link_pair(clock=clock, mac_a=OUR_MAC)
    iface = make_iface(arp_config=ArpConfig(retry_interval=1.0, max_requests=2))
    runner = StackRunner(iface, ours, clock)
    with pytest.raises(
        HostUnreachableError, match=r"198\.18\.0\.2 unreachable: no ARP reply .* after 2 requests"
    ):
        runner.connect(PEER_IP, 80, timeout=30.0)
    assert 2.0 <= clock() < 3.0  # gave up after the retries, not at the timeout


def test_waiting_queue_is_bounded_and_counted() -> None:
    iface = make_iface(arp_config=ArpConfig(queue_limit=2))
    for port in range(5):
        iface.connect(PEER_IP, 1000 + port, 0.0)
    iface.poll(0.0)
    assert iface.arp.waiting(PEER_IP) == 2
    assert iface.arp.stats.queue_dropped == 3
    iface.receive([arp_frame(OP_REPLY, PEER_MAC, PEER_IP, OUR_MAC, OUR_IP, OUR_MAC)], 0.1)
    frames = iface.poll(0.1)
    syns = [f for f in frames if EthernetRepr.parse(f)[0].ethertype == ETHERTYPE_IPV4]
    assert len(syns) == 2


def test_icmp_echo_reply_is_byte_correct() -> None:
    iface = make_iface()
    iface.arp.learn(PEER_IP, PEER_MAC, 0.0)
    request = IcmpRepr(TYPE_ECHO_REQUEST, 0, 0x1234, 7, bytes(range(56)))
    iface.receive([ip_frame(PEER_IP, OUR_IP, PROTO_ICMP, request.emit())], 0.0)
    [frame] = iface.poll(0.0)
    eth, packet = EthernetRepr.parse(frame)
    assert (eth.dst, eth.src, eth.ethertype) == (PEER_MAC, OUR_MAC, ETHERTYPE_IPV4)
    ip, payload = Ipv4Repr.parse(packet)  # verifies the header checksum
    assert (ip.src, ip.dst, ip.protocol, ip.payload_len) == (OUR_IP, PEER_IP, PROTO_ICMP, 64)
    reply = IcmpRepr.parse(payload)  # verifies the ICMP checksum
    assert reply == IcmpRepr(TYPE_ECHO_REPLY, 0, 0x1234, 7, bytes(range(56)))
    assert bytes(payload) == reply.emit()
    # Same message as the request but type 0 and the checksum 8 (0x0800) higher.
    expected = bytearray(request.emit())
    expected[0] = 0
    expected[2:4] = ((int.from_bytes(expected[2:4], "big") + 0x0800) % 0xFFFF).to_bytes(2, "big")
    assert bytes(payload) == bytes(expected)
    assert iface.counters.icmp_echo_replies == 1


def test_echo_reply_waits_for_arp_when_the_sender_is_unknown() -> None:
    iface = make_iface()
    request = IcmpRepr(TYPE_ECHO_REQUEST, 0, 1, 1, b"ping")
    iface.receive([ip_frame(PEER_IP, OUR_IP, PROTO_ICMP, request.emit())], 0.0)
    [arp_request] = iface.poll(0.0)
    assert parse_arp(arp_request)[1].target_ip == PEER_IP
    iface.receive([arp_frame(OP_REPLY, PEER_MAC, PEER_IP, OUR_MAC, OUR_IP, OUR_MAC)], 0.1)
    [frame] = iface.poll(0.1)
    _, payload = Ipv4Repr.parse(EthernetRepr.parse(frame)[1])
    assert IcmpRepr.parse(payload).type == TYPE_ECHO_REPLY


def test_echo_request_to_broadcast_is_not_answered() -> None:
    iface = make_iface()
    iface.arp.learn(PEER_IP, PEER_MAC, 0.0)
    request = IcmpRepr(TYPE_ECHO_REQUEST, 0, 1, 1, b"ping").emit()
    iface.receive(
        [ip_frame(PEER_IP, ip_to_int("198.18.0.255"), PROTO_ICMP, request, BROADCAST)], 0.0
    )
    assert iface.poll(0.0) == []
    assert iface.counters.icmp_echo_requests == 1
