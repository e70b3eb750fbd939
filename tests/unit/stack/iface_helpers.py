"""Addresses and a factory shared by the Interface tests: we are OUR_*, the test plays PEER_*."""

from __future__ import annotations

from typing import Any

from dataplane.stack.iface import Interface, InterfaceCounters
from dataplane.wire.addr import ip_to_int

OUR_MAC = bytes.fromhex("020000000001")
PEER_MAC = bytes.fromhex("020000000002")
OUR_IP = ip_to_int("198.18.0.1")
PEER_IP = ip_to_int("198.18.0.2")
NETMASK = ip_to_int("255.255.255.0")

# Every counter a frame can be dropped under: a corrupted frame lands in exactly one of them.
DROP_COUNTERS = (
    "rx_dropped_malformed",
    "rx_dropped_checksum",
    "rx_dropped_not_for_us",
    "rx_dropped_unsupported",
    "rx_dropped_martian",
    "fragments_dropped",
)


def dropped(counters: InterfaceCounters) -> int:
    """How many frames the interface dropped, under whichever counter."""
    return sum(getattr(counters, name) for name in DROP_COUNTERS)


def make_iface(gateway: int | None = None, *, learn_peer: bool = True, **kwargs: Any) -> Interface:
    """Our interface, deterministic (seed 1), strict, quiet (no announcement) unless overridden;
    the peer's MAC already in the ARP cache unless `learn_peer` is False."""
    options: dict[str, Any] = {"seed": 1, "strict": True, "announce": False}
    options.update(kwargs)
    iface = Interface(OUR_MAC, OUR_IP, NETMASK, gateway, **options)
    if learn_peer:
        iface.arp.learn(PEER_IP, PEER_MAC, 0.0)
    return iface
