"""Text <-> int/bytes address conversions."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from wire_strategies import WIRE_SETTINGS, macs, u32

from dataplane.wire.addr import int_to_ip, ip_to_int, mac_from_str, mac_to_str


def test_ip_known_values() -> None:
    assert ip_to_int("198.18.0.1") == 0xC6120001
    assert ip_to_int("0.0.0.0") == 0
    assert ip_to_int("255.255.255.255") == 0xFFFFFFFF
    assert int_to_ip(0xC6120001) == "198.18.0.1"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "1.2.3",
        "1.2.3.4.5",
        "256.0.0.1",
        "01.2.3.4",
        "1.2.3.4 ",
        " 1.2.3.4",
        "a.b.c.d",
        "10.1",
        "1..2.3",
        "\u0661.2.3.4",
        "0x1.2.3.4",
    ],
)
def test_ip_rejects_bad_text(text: str) -> None:
    with pytest.raises(ValueError, match="IPv4"):
        ip_to_int(text)


@pytest.mark.parametrize("value", [-1, 1 << 32])
def test_int_to_ip_rejects_out_of_range(value: int) -> None:
    with pytest.raises(ValueError, match="out of range"):
        int_to_ip(value)


@WIRE_SETTINGS
@given(u32)
def test_ip_round_trip_matches_ipaddress(value: int) -> None:
    text = int_to_ip(value)
    assert text == str(ipaddress.IPv4Address(value))
    assert ip_to_int(text) == value


def test_mac_known_values() -> None:
    assert mac_to_str(b"\x02\x00\x00\x00\x00\x01") == "02:00:00:00:00:01"
    assert mac_from_str("02:00:00:00:00:01") == b"\x02\x00\x00\x00\x00\x01"
    assert mac_from_str("AA-BB-CC-DD-EE-FF") == b"\xaa\xbb\xcc\xdd\xee\xff"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "02:00:00:00:00",
        "02:00:00:00:00:01:02",
        "02-00:00:00:00:01",
        "0200.0000.0001",
        "g2:00:00:00:00:01",
        "2:0:0:0:0:1",
        "02:00:00:00:00:01\n",
    ],
)
def test_mac_rejects_bad_text(text: str) -> None:
    with pytest.raises(ValueError, match="MAC"):
        mac_from_str(text)


@pytest.mark.parametrize("mac", [b"", b"\x00" * 5, b"\x00" * 7])
def test_mac_to_str_rejects_bad_length(mac: bytes) -> None:
    with pytest.raises(ValueError, match="6 bytes"):
        mac_to_str(mac)


@WIRE_SETTINGS
@given(macs)
def test_mac_round_trip(mac: bytes) -> None:
    assert mac_from_str(mac_to_str(mac)) == mac
    assert mac_from_str(mac_to_str(mac).upper().replace(":", "-")) == mac
