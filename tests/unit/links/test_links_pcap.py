"""Captures are classic pcap that other tools read."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from dataplane.links import DLT_EN10MB, PcapLink, PcapWriter, VirtualClock, memory_link_pair


def read_pcap(path: Path) -> tuple[int, int, list[tuple[int, int, bytes]]]:
    data = path.read_bytes()
    magic, major, minor, _, _, _, linktype = struct.unpack_from("<IHHiIII", data, 0)
    assert (major, minor) == (2, 4)
    records = []
    offset = 24
    while offset < len(data):
        sec, frac, caplen, origlen = struct.unpack_from("<IIII", data, offset)
        offset += 16
        assert caplen == origlen
        records.append((sec, frac, data[offset : offset + caplen]))
        offset += caplen
    return magic, linktype, records


def test_writer_microseconds(tmp_path: Path) -> None:
    path = tmp_path / "us.pcap"
    with PcapWriter(path) as writer:
        writer.write(b"\x01" * 60, 12.5)
        writer.write(b"\x02" * 64, 13.000001)
    magic, linktype, records = read_pcap(path)
    assert magic == 0xA1B2C3D4
    assert linktype == DLT_EN10MB
    assert records == [(12, 500_000, b"\x01" * 60), (13, 1, b"\x02" * 64)]


def test_writer_nanoseconds(tmp_path: Path) -> None:
    path = tmp_path / "ns.pcap"
    with PcapWriter(path, nanoseconds=True) as writer:
        writer.write(b"\x03" * 60, 1.000000002)
    magic, _, records = read_pcap(path)
    assert magic == 0xA1B23C4D
    assert records == [(1, 2, b"\x03" * 60)]


def test_write_after_close_is_an_error(tmp_path: Path) -> None:
    writer = PcapWriter(tmp_path / "c.pcap")
    writer.close()
    with pytest.raises(ValueError, match="closed"):
        writer.write(b"x", 0.0)


def test_pcap_link_records_both_directions_and_scapy_reads_it(tmp_path: Path) -> None:
    scapy_all = pytest.importorskip("scapy.all")
    clock = VirtualClock(1000.0)
    a, b = memory_link_pair(clock=clock)
    path = tmp_path / "link.pcap"
    arp_request = (
        b"\xff" * 6
        + a.mac
        + b"\x08\x06"
        + bytes.fromhex("0001080006040001")
        + a.mac
        + bytes([198, 18, 0, 1])
        + bytes(6)
        + bytes([198, 18, 0, 2])
        + bytes(18)
    )
    with PcapLink(a, path, clock=clock) as captured:
        assert captured.tx_burst([arp_request]) == 1
        clock.advance(0.25)
        b.tx_burst([b.mac + a.mac + b"\x08\x00" + bytes(46)])
        assert len(captured.rx_burst()) == 1
    packets = scapy_all.rdpcap(str(path))
    assert len(packets) == 2
    assert bytes(packets[0]) == arp_request
    assert packets[0].haslayer(scapy_all.ARP)
    assert packets[0][scapy_all.ARP].pdst == "198.18.0.2"
    assert float(packets[1].time) == pytest.approx(1000.25)
