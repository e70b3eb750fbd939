"""The C UDP generator (dataplane/shim/udpgen.c): frames and checksums as the flood makes
them, checked against the Python wire code; its no-DPDK build."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from dataplane.shim import load, udp_flood, udp_frame
from dataplane.wire.addr import ip_to_int
from dataplane.wire.ethernet import EthernetRepr
from dataplane.wire.ipv4 import Ipv4Repr
from dataplane.wire.udp import UdpRepr
from wsgw_bench.udp import udp_template

SHIM = Path(__file__).resolve().parents[2] / "dataplane" / "shim"
MAC_A, MAC_B = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")


@pytest.mark.parametrize("payload", [12, 18, 19, 64, 1400])
@pytest.mark.parametrize("seq", [0, 1, 0xFFFF, 0x10000, 0x123456789ABCDEF0, 2**64 - 1])
def test_frame_matches_python(payload: int, seq: int) -> None:
    template = udp_template(MAC_A, MAC_B, "198.18.5.2", "198.18.5.1", 9000, payload, 77)
    rc, frame = udp_frame(load().lib, template, seq)
    assert rc == len(template)
    eth, packet = EthernetRepr.parse(frame)
    assert (eth.dst, eth.src) == (MAC_B, MAC_A)
    ip, segment = Ipv4Repr.parse(packet)  # verifies the IPv4 checksum
    udp = UdpRepr.parse(segment, ip.src, ip.dst)  # verifies the UDP checksum
    assert int.from_bytes(udp.payload[:8], "big") == seq
    assert int.from_bytes(udp.payload[8:12], "big") == 77
    expected = UdpRepr(udp.src_port, 9000, seq.to_bytes(8, "big") + udp.payload[8:]).emit(
        ip_to_int("198.18.5.2"), ip_to_int("198.18.5.1")
    )
    assert bytes(segment) == expected


def test_frame_without_checksum() -> None:
    template = udp_template(MAC_A, MAC_B, "198.18.5.2", "198.18.5.1", 9000, 18, 1)
    rc, frame = udp_frame(load().lib, template, 5, checksum=False)
    assert rc > 0
    assert frame[14 + 20 + 6 : 14 + 20 + 8] == b"\0\0"


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (bytes(40), "too short"),
        (bytes(12) + b"\x86\xdd" + bytes(60), "not an untagged IPv4"),
    ],
)
def test_bad_templates_are_refused(frame: bytes, message: str) -> None:
    shim = load()
    rc, _ = udp_frame(shim.lib, frame, 0)
    assert rc < 0
    assert message in shim.last_error()


def test_template_needs_room_for_sequence_and_tag() -> None:
    with pytest.raises(ValueError, match="12 at least"):
        udp_template(MAC_A, MAC_B, "198.18.5.2", "198.18.5.1", 9000, 8, 1)


def test_flood_refuses_a_bad_template_before_touching_the_port() -> None:
    shim = load()
    rc, result = udp_flood(shim.lib, 0, bytes(40), 10)
    assert rc < 0
    assert result.sent == 0


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_builds_without_dpdk(tmp_path: Path) -> None:
    """The shim's benchmark flags, no WSGW_HAVE_DPDK: the flood says 'built without DPDK'."""
    out = tmp_path / "udpgen.o"
    proc = subprocess.run(
        [
            "gcc", "-O2", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden",
            "-fPIC", "-DWSGW_BENCH=1", "-I", str(SHIM), "-c", "-o", str(out),
            str(SHIM / "udpgen.c"),
        ],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert b"built without DPDK" in out.read_bytes()
