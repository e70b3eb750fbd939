"""Coverage-guided fuzzing of every wire parser with atheris (libFuzzer), run by hand.

The invariant is h11's: parse it or raise `WireError`. Anything that parses must also
re-emit to bytes that parse back to the same representation. Any other exception, or a
broken round trip, is a crash that libFuzzer reports with the input that caused it.

    .venv/bin/pip install atheris
    .venv/bin/python tests/fuzz/fuzz_wire.py --make-corpus /tmp/wire-corpus
    .venv/bin/python tests/fuzz/fuzz_wire.py /tmp/wire-corpus -max_total_time=300 \
        -artifact_prefix=/tmp/wire-crash-

The first input byte picks the parser (and whether checksums are verified); the rest is the
packet. The file name does not start with test_, so pytest never collects it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import atheris

with atheris.instrument_imports(include=["dataplane.wire"]):
    from dataplane.wire.arp import ArpRepr
    from dataplane.wire.errors import WireError
    from dataplane.wire.ethernet import EthernetRepr
    from dataplane.wire.icmp import IcmpRepr
    from dataplane.wire.ipv4 import Ipv4Repr
    from dataplane.wire.tcp import TcpFlags, TcpOptions, TcpRepr
    from dataplane.wire.udp import UdpRepr

SRC_IP = 0xC6120001
DST_IP = 0xC6120002


def _eth(data: bytes, verify: bool) -> Any:
    repr_, payload = EthernetRepr.parse(data)
    return repr_, bytes(payload)


def _ipv4(data: bytes, verify: bool) -> Any:
    repr_, payload = Ipv4Repr.parse(data, verify_checksum=verify)
    return repr_, bytes(payload)


# name -> (parse(data, verify), emit(parsed) -> bytes)
TARGETS: list[tuple[str, Callable[[bytes, bool], Any], Callable[[Any], bytes]]] = [
    ("ethernet", _eth, lambda p: p[0].emit(p[1])),
    ("arp", lambda d, v: ArpRepr.parse(d), lambda p: p.emit()),
    ("ipv4", _ipv4, lambda p: p[0].emit(p[1])),
    ("icmp", lambda d, v: IcmpRepr.parse(d, verify_checksum=v), lambda p: p.emit()),
    (
        "udp",
        lambda d, v: UdpRepr.parse(d, SRC_IP, DST_IP, verify_checksum=v),
        lambda p: p.emit(SRC_IP, DST_IP),
    ),
    (
        "tcp",
        lambda d, v: TcpRepr.parse(d, SRC_IP, DST_IP, verify_checksum=v),
        lambda p: p.emit(SRC_IP, DST_IP),
    ),
    ("tcp-options", lambda d, v: TcpOptions.parse(d), lambda p: p.emit()),
]


def test_one_input(data: bytes) -> None:
    if not data:
        return
    selector, body = data[0], data[1:]
    _, parse, emit = TARGETS[(selector & 0x7F) % len(TARGETS)]
    verify = bool(selector & 0x80)
    try:
        parsed = parse(body, verify)
    except WireError:
        return
    emitted = emit(parsed)
    again = parse(emitted, True)
    if again != parsed:
        raise AssertionError(f"round trip changed {parsed!r} into {again!r}")
    if emit(again) != emitted:
        raise AssertionError(f"emit is not stable for {parsed!r}")


def seeds() -> list[bytes]:
    """One valid input per target, with and without checksum verification."""
    syn = TcpRepr(
        55686,
        5555,
        1,
        0,
        TcpFlags.SYN,
        64240,
        TcpOptions(mss=1460, window_scale=7, sack_permitted=True, timestamp=(1, 0)),
    )
    tcp = syn.emit(SRC_IP, DST_IP)
    ip = Ipv4Repr(SRC_IP, DST_IP, 6, len(tcp)).emit(tcp)
    bodies = [
        EthernetRepr(b"\x02" * 6, b"\x04" * 6, 0x0800, vlan=5).emit(ip),
        ArpRepr(1, b"\x02" * 6, SRC_IP, bytes(6), DST_IP).emit(),
        ip,
        IcmpRepr(8, 0, 1, 2, b"ping").emit(),
        UdpRepr(1000, 53, b"query").emit(SRC_IP, DST_IP),
        TcpRepr(
            1,
            2,
            3,
            4,
            TcpFlags.ACK,
            5,
            TcpOptions(timestamp=(1, 2), sack_blocks=((10, 20), (30, 40))),
            b"data",
        ).emit(SRC_IP, DST_IP),
        syn.options.emit(),
    ]
    return [bytes([index | flag]) + body for index, body in enumerate(bodies) for flag in (0, 0x80)]


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--make-corpus":
        corpus = Path(sys.argv[2])
        corpus.mkdir(parents=True, exist_ok=True)
        for number, seed in enumerate(seeds()):
            (corpus / f"seed-{number:02d}").write_bytes(seed)
        print(f"wrote {len(seeds())} seeds to {corpus}")
        return
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
