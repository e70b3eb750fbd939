"""`TcpFrameTemplate` emits byte-for-byte what the generic Ethernet/IPv4/TCP emitters do,
and `sum16` is the RFC 1071 sum the C checksum computes."""

from __future__ import annotations

import os
import random

import pytest

from dataplane.wire.checksum import inet_checksum, sum16
from dataplane.wire.ethernet import ETHERTYPE_IPV4, EthernetRepr
from dataplane.wire.ipv4 import PROTO_TCP, Ipv4Repr
from dataplane.wire.tcp import TcpFlags, TcpFrameTemplate, TcpOptions, TcpRepr

SRC_MAC = bytes.fromhex("020000000001")
DST_MAC = bytes.fromhex("020000000002")


def reference(seg: TcpRepr, src: int, dst: int, ident: int) -> bytes:
    tcp = seg.emit(src, dst)
    packet = Ipv4Repr(src, dst, PROTO_TCP, len(tcp), ident=ident).emit(tcp)
    return EthernetRepr(DST_MAC, SRC_MAC, ETHERTYPE_IPV4).emit(packet)


@pytest.mark.parametrize("size", [0, 1, 2, 3, 63, 64, 511, 512, 513, 1460, 1461, 4000])
def test_sum16_is_the_c_checksum(size: int) -> None:
    rng = random.Random(size)
    for _ in range(20):
        data = rng.randbytes(size)
        if any(data):
            assert (-sum16(data)) % 0xFFFF == inet_checksum(data)
    if size:  # a sum of 0xFFFF (negative zero): the checksum is 0, not 0xFFFF
        ones = b"\xff" * size
        assert (-sum16(ones)) % 0xFFFF == inet_checksum(ones)
        if size % 2 == 0:
            assert inet_checksum(ones) == 0


def random_options(rng: random.Random) -> TcpOptions:
    kind = rng.randrange(6)
    ts = (rng.getrandbits(32), rng.getrandbits(32))
    if kind == 0:
        return TcpOptions()
    if kind == 1:
        return TcpOptions(timestamp=ts)
    if kind == 2:  # a SYN's
        return TcpOptions(mss=1460, window_scale=7, sack_permitted=True, timestamp=ts)
    if kind == 3:
        return TcpOptions(mss=rng.randrange(0x10000))
    blocks = tuple((rng.getrandbits(32), rng.getrandbits(32)) for _ in range(rng.randrange(1, 4)))
    return TcpOptions(timestamp=ts if kind == 4 else None, sack_blocks=blocks)


def test_template_matches_the_generic_emitters() -> None:
    rng = random.Random(7)
    for i in range(3000):
        src, dst = rng.getrandbits(32) | 1, rng.getrandbits(32) | 1
        template = TcpFrameTemplate(SRC_MAC, DST_MAC, src, dst)
        payload = rng.randbytes(rng.choice([0, 0, 1, 64, 511, 513, 1448, 1460]))
        seg = TcpRepr(
            rng.randrange(1, 0x10000),
            rng.randrange(1, 0x10000),
            rng.getrandbits(32),
            rng.getrandbits(32),
            TcpFlags(rng.choice([0x10, 0x18, 0x11, 0x02, 0x12, 0x04, 0x14, rng.randrange(256)])),
            rng.randrange(0x10000),
            random_options(rng),
            payload,
            rng.choice([0, 0, rng.randrange(0x10000)]),
        )
        ident = rng.randrange(0x10000)
        assert template.emit(seg, ident) == reference(seg, src, dst, ident), (i, seg)


def test_template_checksums_that_fold_to_zero() -> None:
    """Search for segments whose TCP checksum is 0 (and 0xFFFF sums): the modulo arithmetic
    must give what the C fold gives there too."""
    rng = random.Random(3)
    template = TcpFrameTemplate(SRC_MAC, DST_MAC, 0x0A000001, 0x0A000002)
    seen_zero = False
    for _ in range(200_000):
        seg = TcpRepr(40000, 443, rng.getrandbits(32), 0, TcpFlags.ACK, 0, TcpOptions(), b"")
        frame = template.emit(seg, 0)
        if frame[14 + 20 + 16 : 14 + 20 + 18] == b"\x00\x00":
            seen_zero = True
            assert frame == reference(seg, 0x0A000001, 0x0A000002, 0)
            break
    assert seen_zero


def test_template_refuses_what_the_emitters_refuse() -> None:
    template = TcpFrameTemplate(SRC_MAC, DST_MAC, 1, 2)
    with pytest.raises(ValueError):
        template.emit(TcpRepr(1, 2, 1 << 32, 0, TcpFlags.ACK, 0), 0)
    with pytest.raises(ValueError):
        template.emit(TcpRepr(1, 2, 0, 0, TcpFlags.ACK, 0, payload=os.urandom(70000)), 0)
