"""Checks of configured values, each raising ValueError with what to fix.

Used by the API schemas (pydantic turns the ValueError into a 422 with this message) and by
the service layer on merged updates, so a PATCH cannot sneak in a combination that a
POST would refuse.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
PCI_SHORT = re.compile(r"^[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
PCI_FULL = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
VDEV = re.compile(r"^net_[a-z][a-z0-9_]*[0-9]*$")
DEVARG = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=[^,\s]*$")
TOPIC_MAX = 256


def check_name(value: str, what: str = "name") -> str:
    if not NAME.match(value):
        raise ValueError(
            f"{what} {value!r} must be 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return value


def normalise_pci(value: str) -> str | None:
    """'03:00.0' -> '0000:03:00.0'; None when `value` is not a PCI address."""
    if PCI_SHORT.match(value):
        return f"0000:{value.lower()}"
    if PCI_FULL.match(value):
        return value.lower()
    return None


def check_device(value: str) -> str:
    """A PCI address (0000:03:00.0) or a vdev with its devargs (net_af_packet0,iface=veth0)."""
    value = value.strip()
    name, _, params = value.partition(",")
    pci = normalise_pci(name)
    if pci is not None:
        name = pci
    elif not VDEV.match(name):
        raise ValueError(
            f"device {value!r} is neither a PCI address (0000:03:00.0) nor a DPDK vdev "
            "name starting with net_ (net_af_packet0,iface=veth0)"
        )
    for arg in (p for p in params.split(",") if params):
        if not DEVARG.match(arg):
            raise ValueError(
                f"device argument {arg!r} in {value!r} is not key=value (net_tap0,iface=tap0)"
            )
    return f"{name},{params}" if params else name


def check_ipv4_host(value: str, what: str = "ipv4") -> str:
    try:
        address = ipaddress.IPv4Address(value)
    except ValueError:
        raise ValueError(f"{what} {value!r} is not a dotted IPv4 address (198.18.0.2)") from None
    if address.is_unspecified or address.is_multicast or address.is_loopback:
        raise ValueError(
            f"{what} {value} cannot be a host address (unspecified, multicast or loopback)"
        )
    if address == ipaddress.IPv4Address("255.255.255.255"):
        raise ValueError(f"{what} {value} is the broadcast address")
    return str(address)


def netmask_prefix(value: str) -> int:
    """The prefix length of a dotted netmask; ValueError when the ones are not contiguous."""
    try:
        mask = int(ipaddress.IPv4Address(value))
    except ValueError:
        raise ValueError(
            f"netmask {value!r} is not a dotted IPv4 netmask (255.255.255.0)"
        ) from None
    inverted = ~mask & 0xFFFFFFFF
    if inverted & (inverted + 1):
        raise ValueError(
            f"netmask {value} is not contiguous: its one bits must come first "
            "(255.255.255.0 is /24; 255.0.255.0 is not a netmask)"
        )
    prefix = 32 - inverted.bit_length()
    if prefix == 0:
        raise ValueError("netmask 0.0.0.0 puts every address on the link: give the real subnet")
    return prefix


def check_netmask(value: str) -> str:
    netmask_prefix(value)
    return str(ipaddress.IPv4Address(value))


def check_port_network(ipv4: str, netmask: str, gateway: str | None) -> None:
    """The address is a host of its subnet and the gateway sits in the same subnet."""
    prefix = netmask_prefix(netmask)
    iface = ipaddress.IPv4Interface(f"{ipv4}/{prefix}")
    network = iface.network
    if prefix <= 30 and iface.ip in (network.network_address, network.broadcast_address):
        which = "network" if iface.ip == network.network_address else "broadcast"
        raise ValueError(f"ipv4 {ipv4} is the {which} address of {network}: pick a host address")
    if gateway is None:
        return
    gw = ipaddress.IPv4Address(gateway)
    if gw not in network:
        raise ValueError(f"gateway {gateway} is outside the port's subnet {network}")
    if gw == iface.ip:
        raise ValueError(f"gateway {gateway} is the port's own address")
    if prefix <= 30 and gw in (network.network_address, network.broadcast_address):
        raise ValueError(f"gateway {gateway} is the network or broadcast address of {network}")


def check_ws_url(value: str) -> str:
    """A ws:// or wss:// URL with a host: what an upstream WebSocket session connects to."""
    value = value.strip()
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"url {value!r} is not a valid URL ({exc})") from None
    if parts.scheme not in ("ws", "wss"):
        raise ValueError(
            f"url {value!r} must start with ws:// or wss:// (a WebSocket endpoint), "
            f"not {parts.scheme + '://' if parts.scheme else 'no scheme'}"
        )
    if not parts.hostname:
        raise ValueError(f"url {value!r} has no host")
    if port == 0:
        raise ValueError(f"url {value!r} has port 0")
    if parts.fragment:
        raise ValueError(f"url {value!r} has a fragment (#...), which WebSocket URLs may not have")
    return value


def check_topic(value: str) -> str:
    if not value or len(value) > TOPIC_MAX:
        raise ValueError(f"a topic must be 1-{TOPIC_MAX} characters")
    if any(c.isspace() or not c.isprintable() for c in value):
        raise ValueError(f"topic {value!r} contains whitespace or control characters")
    return value


def check_topics(values: list[str]) -> list[str]:
    if not values:
        raise ValueError("topics must name at least one topic")
    seen: set[str] = set()
    for topic in values:
        check_topic(topic)
        if topic in seen:
            raise ValueError(f"topic {topic!r} is listed twice")
        seen.add(topic)
    return values
