"""Interface: whatever arrives, it is counted and dropped, never raised (DESIGN "Errors")."""

from __future__ import annotations

import random
import struct

import pytest
from iface_helpers import NETMASK, OUR_IP, OUR_MAC, PEER_IP, PEER_MAC, dropped, make_iface

from dataplane.stack.iface import Interface, InterfaceCounters
from dataplane.wire.addr import ip_to_int
from dataplane.wire.arp import OP_REQUEST, ArpRepr
from dataplane.wire.ethernet import BROADCAST, ETHERTYPE_ARP, ETHERTYPE_IPV4, EthernetRepr
from dataplane.wire.icmp import TYPE_ECHO_REQUEST, IcmpRepr
from dataplane.wire.ipv4 import PROTO_ICMP, PROTO_TCP, PROTO_UDP, Ipv4Repr
from dataplane.wire.tcp import TcpFlags, TcpRepr
from dataplane.wire.udp import UdpRepr


def eth(payload: bytes, ethertype: int = ETHERTYPE_IPV4, dst: bytes = OUR_MAC) -> bytes:
    return EthernetRepr(dst, PEER_MAC, ethertype).emit(payload)


def ipv4(protocol: int, payload: bytes, *, src: int = PEER_IP, dst: int = OUR_IP) -> bytes:
    return Ipv4Repr(src, dst, protocol, len(payload)).emit(payload)


def tcp(flags: TcpFlags = TcpFlags.ACK, dst_port: int = 80) -> bytes:
    return TcpRepr(40000, dst_port, 1000, 1, flags, 65535).emit(PEER_IP, OUR_IP)


def flip(data: bytes, offset: int, mask: int = 0x01) -> bytes:
    changed = bytearray(data)
    changed[offset] ^= mask
    return bytes(changed)


def with_field(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    changed = bytearray(data)
    struct.pack_into(fmt, changed, offset, value)
    return bytes(changed)


def fragment() -> bytes:
    payload = tcp()
    packet = bytearray(ipv4(PROTO_TCP, payload))
    struct.pack_into("!H", packet, 6, 0x2000)  # MF set
    struct.pack_into("!H", packet, 10, 0)
    checksum = 0
    for (word,) in struct.iter_unpack("!H", bytes(packet[:20])):
        checksum += word
    while checksum >> 16:
        checksum = (checksum & 0xFFFF) + (checksum >> 16)
    struct.pack_into("!H", packet, 10, ~checksum & 0xFFFF)
    return bytes(packet)


CASES: list[tuple[str, bytes, str]] = [
    ("empty frame", b"", "rx_dropped_malformed"),
    ("truncated Ethernet header", b"\x02" * 13, "rx_dropped_malformed"),
    (
        "other MAC",
        eth(ipv4(PROTO_TCP, tcp()), dst=bytes.fromhex("02aabbccddee")),
        "rx_dropped_not_for_us",
    ),
    ("IPv6", eth(bytes(40), ethertype=0x86DD), "rx_dropped_unsupported"),
    ("802.3 length field", OUR_MAC + PEER_MAC + b"\x01\x00" + bytes(46), "rx_dropped_unsupported"),
    (
        "VLAN tagged",
        OUR_MAC + PEER_MAC + b"\x81\x00\x00\x05\x08\x00" + ipv4(PROTO_TCP, tcp()),
        "rx_dropped_unsupported",
    ),
    ("truncated IPv4", eth(ipv4(PROTO_TCP, tcp())[:15]), "rx_dropped_malformed"),
    (
        "IP version 6 in an IPv4 frame",
        eth(flip(ipv4(PROTO_TCP, tcp()), 0, 0x20)),
        "rx_dropped_malformed",
    ),
    ("bad IPv4 header checksum", eth(flip(ipv4(PROTO_TCP, tcp()), 8)), "rx_dropped_checksum"),
    ("IPv4 total length beyond frame", eth(ipv4(PROTO_TCP, tcp())[:30]), "rx_dropped_malformed"),
    ("IPv4 fragment", eth(fragment()), "fragments_dropped"),
    (
        "IPv4 to another host",
        eth(ipv4(PROTO_TCP, tcp(), dst=ip_to_int("198.18.0.9"))),
        "rx_dropped_not_for_us",
    ),
    (
        "martian source: our own address",
        eth(ipv4(PROTO_TCP, tcp(), src=OUR_IP)),
        "rx_dropped_martian",
    ),
    ("martian source: broadcast", eth(ipv4(PROTO_UDP, b"", src=0xFFFFFFFF)), "rx_dropped_martian"),
    ("unknown IP protocol", eth(ipv4(47, bytes(8))), "rx_dropped_unsupported"),
    ("bad TCP checksum", eth(ipv4(PROTO_TCP, flip(tcp(), 10))), "rx_dropped_checksum"),
    ("truncated TCP header", eth(ipv4(PROTO_TCP, tcp()[:12])), "rx_dropped_malformed"),
    (
        "TCP data offset below 5",
        eth(ipv4(PROTO_TCP, with_field(tcp(), 12, "!B", 0x40))),
        "rx_dropped_malformed",
    ),
    (
        "TCP to broadcast",
        eth(ipv4(PROTO_TCP, tcp(), dst=0xFFFFFFFF), dst=BROADCAST),
        "rx_dropped_not_for_us",
    ),
    (
        "bad ICMP checksum",
        eth(ipv4(PROTO_ICMP, flip(IcmpRepr(TYPE_ECHO_REQUEST, 0, 1, 1, b"x").emit(), 8))),
        "rx_dropped_checksum",
    ),
    ("truncated ICMP", eth(ipv4(PROTO_ICMP, b"\x08\x00")), "rx_dropped_malformed"),
    (
        "bad UDP checksum",
        eth(ipv4(PROTO_UDP, flip(UdpRepr(1, 2, b"data").emit(PEER_IP, OUR_IP), 9))),
        "rx_dropped_checksum",
    ),
    (
        "UDP length below header",
        eth(ipv4(PROTO_UDP, with_field(UdpRepr(1, 2, b"").emit(PEER_IP, OUR_IP), 4, "!H", 4))),
        "rx_dropped_malformed",
    ),
    (
        "truncated ARP",
        eth(
            ArpRepr(OP_REQUEST, PEER_MAC, PEER_IP, bytes(6), OUR_IP).emit()[:20],
            ETHERTYPE_ARP,
            BROADCAST,
        ),
        "rx_dropped_malformed",
    ),
    (
        "ARP for another protocol",
        eth(
            with_field(
                ArpRepr(OP_REQUEST, PEER_MAC, PEER_IP, bytes(6), OUR_IP).emit(), 2, "!H", 0x86DD
            ),
            ETHERTYPE_ARP,
            BROADCAST,
        ),
        "rx_dropped_unsupported",
    ),
]


@pytest.mark.parametrize(
    ("frame", "counter"), [(f, c) for _, f, c in CASES], ids=[n for n, _, _ in CASES]
)
def test_bad_frame_is_counted_and_dropped(frame: bytes, counter: str) -> None:
    iface = make_iface()
    iface.receive([frame], 0.0)  # strict: an internal error would raise here
    counts = iface.counters.as_dict()
    assert counts[counter] == 1, {k: v for k, v in counts.items() if v}
    assert iface.poll(0.0) == []
    assert counts["rx_frames"] == 1
    assert counts["rx_errors_internal"] == 0


def valid_frames() -> list[bytes]:
    return [
        eth(ipv4(PROTO_TCP, tcp(TcpFlags.SYN))),
        eth(ipv4(PROTO_TCP, tcp(TcpFlags.ACK | TcpFlags.PSH))),
        eth(ipv4(PROTO_ICMP, IcmpRepr(TYPE_ECHO_REQUEST, 0, 9, 9, bytes(32)).emit())),
        eth(ipv4(PROTO_UDP, UdpRepr(5353, 9, b"hello").emit(PEER_IP, OUR_IP))),
        eth(
            ArpRepr(OP_REQUEST, PEER_MAC, PEER_IP, bytes(6), OUR_IP).emit(),
            ETHERTYPE_ARP,
            BROADCAST,
        ),
    ]


def test_every_single_bit_flip_in_ip_frames_is_caught() -> None:
    """One flipped bit anywhere after the source MAC of an IPv4 frame never gets through."""
    for frame in valid_frames()[:4]:
        for bit in range(14 * 8 - 16, len(frame) * 8):  # EtherType onwards, and the dst MAC
            iface = make_iface()
            iface.receive([flip(frame, bit >> 3, 1 << (bit & 7))], 0.0)
            assert dropped(iface.counters) == 1, (frame.hex(), bit)
        for bit in range(48):  # destination MAC
            iface = make_iface()
            iface.receive([flip(frame, bit >> 3, 1 << (bit & 7))], 0.0)
            assert iface.counters.rx_dropped_not_for_us == 1


def test_random_garbage_and_mutations_never_raise() -> None:
    rng = random.Random(1234)
    iface = make_iface()
    base = valid_frames()
    frames: list[bytes] = []
    for _ in range(3000):
        choice = rng.random()
        if choice < 0.3:
            frames.append(rng.randbytes(rng.randrange(0, 120)))
        elif choice < 0.6:
            mutated = bytearray(rng.choice(base))
            for _ in range(rng.randrange(1, 6)):
                mutated[rng.randrange(len(mutated))] = rng.randrange(256)
            frames.append(bytes(mutated))
        else:
            frame = rng.choice(base)
            frames.append(frame[: rng.randrange(len(frame) + 1)])
    for start in range(0, len(frames), 64):
        iface.receive(frames[start : start + 64], float(start))
        iface.poll(float(start))
    assert iface.counters.rx_frames == 3000
    assert iface.counters.rx_errors_internal == 0


def test_internal_errors_are_counted_when_not_strict(monkeypatch: pytest.MonkeyPatch) -> None:
    iface = Interface(OUR_MAC, OUR_IP, NETMASK, None, seed=1, announce=False)

    def broken(*args: object) -> None:
        raise RuntimeError("bug")

    monkeypatch.setattr(iface, "_receive_ipv4", broken)
    iface.receive([eth(ipv4(PROTO_TCP, tcp()))], 0.0)
    assert iface.counters.rx_errors_internal == 1


def test_counters_as_dict_lists_every_field() -> None:
    counts = InterfaceCounters().as_dict()
    for name in (
        "rx_frames",
        "rx_dropped_malformed",
        "rx_dropped_checksum",
        "rx_dropped_not_for_us",
        "fragments_dropped",
        "arp_requests_sent",
        "arp_replies_sent",
        "icmp_echo_replies",
        "tcp_rst_sent",
    ):
        assert counts[name] == 0
