"""Address conversions at the edge of the stack.

Inside the stack an IPv4 address is a plain `int` (the 32-bit value, so the address
198.18.0.1 is 0xC6120001) and a MAC address is 6 `bytes`. These functions convert from and
to the text forms used in configuration, the API and logs. Bad text raises `ValueError`
(not a `WireError`): text comes from operators and settings, never from the wire, and
pydantic turns a `ValueError` into a validation error.
"""

from __future__ import annotations

import re
import socket
import struct

_U32 = struct.Struct("!I")
_MAC_RE = re.compile(r"[0-9A-Fa-f]{2}([:-])(?:[0-9A-Fa-f]{2}\1){4}[0-9A-Fa-f]{2}")
_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_DOTTED_QUAD_RE = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}", re.ASCII)

MAC_LEN = 6


def ip_to_int(text: str) -> int:
    """'198.18.0.1' -> 0xC6120001. Only the strict dotted quad is accepted (no '10.1',
    no leading zeros, which inet_aton would read as octal)."""
    if not isinstance(text, str) or not _DOTTED_QUAD_RE.fullmatch(text):
        raise ValueError(f"not an IPv4 address in dotted-quad form: {text!r}")
    value: int = _U32.unpack(socket.inet_aton(text))[0]
    return value


def int_to_ip(value: int) -> str:
    """0xC6120001 -> '198.18.0.1'."""
    if not 0 <= value <= 0xFFFFFFFF:
        raise ValueError(f"IPv4 address out of range: {value!r}")
    return socket.inet_ntoa(_U32.pack(value))


def mac_to_str(mac: bytes) -> str:
    """b'\\x02\\x00\\x00\\x00\\x00\\x01' -> '02:00:00:00:00:01' (lower case, colons)."""
    if len(mac) != MAC_LEN:
        raise ValueError(f"a MAC address has 6 bytes, got {len(mac)}")
    return bytes(mac).hex(":")


def mac_from_str(text: str) -> bytes:
    """'02:00:00:00:00:01' (or with '-', any case) -> 6 bytes."""
    if not isinstance(text, str) or not _MAC_RE.fullmatch(text):
        raise ValueError(f"not a MAC address like 02:00:00:00:00:01: {text!r}")
    return bytes.fromhex(text.replace(text[2], ""))


__all__ = ["MAC_LEN", "int_to_ip", "ip_to_int", "mac_from_str", "mac_to_str"]
