"""Checks of configured values, each raising ValueError with what to fix.

Used by the API schemas (pydantic turns the ValueError into a 422 with this message) and by
the service layer on merged updates, so a PATCH cannot sneak in a combination that a
POST would refuse.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

from dataplane.transports.base import parse_ws_url
from dataplane.ws.errors import LocalProtocolError

# The patterns below are also the OpenAPI document's `pattern`s (api/schemas), so what the
# document calls valid is what the checks accept. They are written in the subset that
# Python, ECMA-262 and Rust regexes read alike (no \s, \d or lookarounds).
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
NAME_RULE = "1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
PCI_SHORT = re.compile(r"^[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
PCI_FULL = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
VDEV = re.compile(r"^net_[a-z][a-z0-9_]*$")
#: A devarg value: printable ASCII but the comma that separates devargs (and no space).
_DEVARG_VALUE = r"[\x21-\x2b\x2d-\x7e]*"
DEVARG = re.compile(rf"^[A-Za-z_][A-Za-z0-9_]*={_DEVARG_VALUE}$")
DEVICE = re.compile(
    r"^(?:(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]|net_[a-z][a-z0-9_]*)"
    rf"(?:,[A-Za-z_][A-Za-z0-9_]*={_DEVARG_VALUE})*$"
)
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
#: A unicast host address: first octet 1-223 but 127 (not 0/8, loopback, multicast, 240/4).
IPV4_HOST = re.compile(
    rf"^(?:22[0-3]|2[01][0-9]|1[013-9][0-9]|12[0-689]|[1-9][0-9]?)(?:\.{_OCTET}){{3}}$"
)
#: Every contiguous netmask but 0.0.0.0: /1 to /32.
NETMASKS = tuple(str(ipaddress.IPv4Network(f"0.0.0.0/{n}").netmask) for n in range(1, 33))
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?"
#: A DNS name (RFC 1123 labels of 1-63 characters; '_' tolerated inside) or an IPv4 address.
HOST_NAME = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*$")
HOST_NAME_RULE = (
    "a DNS name (labels of 1-63 letters, digits and '-', separated by dots) or an IPv4 address"
)
_PORT = r"(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})"
_PCHAR = r"(?:[A-Za-z0-9._~!$&'()*+,;=:@/-]|%[0-9A-Fa-f]{2})"
#: ws[s]://host[:port][/path][?query] in RFC 3986 characters (RFC 6455 section 3): no user
#: info, no fragment, nothing a request line cannot carry (space, CR, LF, NUL, non-ASCII).
#: An IPv6 literal in brackets (RFC 3986 section 3.2.2); check_ws_url parses it too.
_IPV6_LITERAL = r"\[[0-9A-Fa-f:.]{2,45}\]"
WS_URL = re.compile(
    rf"^wss?://(?:{_LABEL}(?:\.{_LABEL})*|{_IPV6_LITERAL})(?::{_PORT})?"
    rf"(?:/{_PCHAR}*)?(?:\?(?:{_PCHAR}|\?)*)?$"
)
#: Topics are printable ASCII without spaces: what every dialect's requests can carry.
TOPIC = re.compile(r"^[\x21-\x7e]+$")
TOPIC_MAX = 256
#: A file path on the gateway host: no control characters (NUL cannot reach the OS).
FILE_PATH = re.compile(r"^[^\x00-\x1f\x7f]+$")


class FieldError(ValueError):
    """A ValueError that names the field to blame (the rules between fields)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def check_pattern(pattern: re.Pattern[str], value: str, what: str, must_be: str) -> str:
    """value when pattern matches it; else ValueError saying what it must be."""
    if not pattern.match(value):
        raise ValueError(f"{what} {value!r} must be {must_be}")
    return value


def check_name(value: str, what: str = "name") -> str:
    return check_pattern(NAME, value, what, NAME_RULE)


def normalise_pci(value: str) -> str | None:
    """'03:00.0' -> '0000:03:00.0'; None when `value` is not a PCI address."""
    if PCI_SHORT.match(value):
        return f"0000:{value.lower()}"
    if PCI_FULL.match(value):
        return value.lower()
    return None


def check_device(value: str) -> str:
    """A PCI address (0000:03:00.0) or a vdev with its devargs (net_af_packet0,iface=veth0)."""
    _refuse_unsafe_characters("device", value, ": EAL arguments are printable ASCII")
    name, _, params = value.partition(",")
    pci = normalise_pci(name)
    if pci is not None:
        name = pci
    elif not VDEV.match(name):
        raise ValueError(
            f"device {value!r} is neither a PCI address (0000:03:00.0) nor a DPDK vdev "
            "name starting with net_ (net_af_packet0,iface=veth0)"
        )
    for arg in params.split(",") if params or value.endswith(",") else ():
        if not DEVARG.match(arg):
            raise ValueError(
                f"device argument {arg!r} in {value!r} is not key=value (net_tap0,iface=tap0)"
            )
    return f"{name},{params}" if params else name


def device_claims(device: str) -> dict[str, str]:
    """What a port's device takes for itself, kind -> value: the PCI address or the vdev
    name (DPDK refuses a second device of either), and the host interface an af_packet,
    tap or pcap vdev attaches to (iface=...): two ports on one interface would each see
    the other's frames and answer ARP twice."""
    name, _, params = device.partition(",")
    claims = {"pci address" if normalise_pci(name) else "vdev": normalise_pci(name) or name}
    for arg in params.split(",") if params else ():
        key, _, value = arg.partition("=")
        if key == "iface" and value:
            claims["interface"] = value
    return claims


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
    if not IPV4_HOST.match(value):
        raise ValueError(
            f"{what} {value} cannot be a host address: 0.0.0.0/8 and 240.0.0.0/4 are not "
            "unicast host ranges (RFC 1122 section 3.2.1.3, RFC 1112 section 4)"
        )
    return value


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
    try:
        prefix = netmask_prefix(netmask)
    except ValueError as exc:
        raise FieldError("netmask", str(exc)) from None
    iface = ipaddress.IPv4Interface(f"{ipv4}/{prefix}")
    network = iface.network
    if prefix <= 30 and iface.ip in (network.network_address, network.broadcast_address):
        which = "network" if iface.ip == network.network_address else "broadcast"
        raise FieldError(
            "ipv4", f"ipv4 {ipv4} is the {which} address of {network}: pick a host address"
        )
    if gateway is None:
        return
    gw = ipaddress.IPv4Address(gateway)
    if gw not in network:
        raise FieldError("gateway", f"gateway {gateway} is outside the port's subnet {network}")
    if gw == iface.ip:
        raise FieldError("gateway", f"gateway {gateway} is the port's own address")
    if prefix <= 30 and gw in (network.network_address, network.broadcast_address):
        raise FieldError(
            "gateway", f"gateway {gateway} is the network or broadcast address of {network}"
        )


def _refuse_unsafe_characters(what: str, value: str, fix: str) -> None:
    """ValueError naming the first space, control or non-ASCII character of `value`: none of
    them can travel in a request line, a header or a C string (CR/LF would split an HTTP
    request: RFC 9112 section 2.2; NUL ends the string DPDK reads)."""
    for index, char in enumerate(value):
        if not "\x21" <= char <= "\x7e":
            raise ValueError(
                f"{what} {value!r} has {_char_name(char)} at position {index}, which it cannot "
                f"carry{fix}"
            )


def _char_name(char: str) -> str:
    names = {" ": "a space", "\r": "a CR", "\n": "an LF", "\t": "a tab", "\x00": "a NUL"}
    return names.get(char, f"the character U+{ord(char):04X}")


def check_ws_url(value: str) -> str:
    """ws[s]://host[:port][/path][?query]: what an upstream WebSocket session connects to.

    Checked here as the session will parse it when it starts (parse_ws_url), and stricter:
    a URL that urlsplit would quietly repair (it drops tabs, CR and LF) is refused. The
    scheme is case-insensitive (RFC 3986 section 3.1): WSS:// is stored as wss://."""
    scheme, sep, rest = value.partition("://")
    if sep and scheme.lower() in ("ws", "wss"):
        scheme = scheme.lower()
        value = f"{scheme}://{rest}"
    if not sep or scheme not in ("ws", "wss"):
        raise ValueError(
            f"url {value!r} must start with ws:// or wss:// (a WebSocket endpoint), "
            f"not {scheme + '://' if sep and scheme else 'no scheme'}"
        )
    authority = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if "@" in authority:
        raise ValueError(
            "url must not carry credentials (user:password@host): wsgw does not send them "
            "and would keep them in clear; use what the exchange documents (a token in the "
            "path or query)"
        )
    _refuse_unsafe_characters("url", value, ": percent-encode it (a space is %20)")
    if "#" in value:
        raise ValueError(f"url {value!r} has a fragment (#...), which WebSocket URLs may not have")
    if not authority:
        raise ValueError(f"url {value!r} has no host")
    try:
        parse_ws_url(value)
        port = urlsplit(value).port
    except (LocalProtocolError, ValueError) as exc:
        raise ValueError(f"url {value!r} is not a valid WebSocket URL ({exc})") from None
    if port == 0:
        raise ValueError(f"url {value!r} has port 0")
    if not WS_URL.match(value) or not _valid_ipv6_literal(authority):
        raise ValueError(
            f"url {value!r} must be ws[s]://host[:port][/path][?query]: host a DNS name, an "
            "IPv4 address or an IPv6 address in brackets, port 1-65535, path and query "
            "in RFC 3986 characters (others percent-encoded)"
        )
    return value


def _valid_ipv6_literal(authority: str) -> bool:
    """True unless the authority holds a bracketed host that is not an IPv6 address."""
    if not authority.startswith("["):
        return True
    try:
        ipaddress.IPv6Address(authority[1:].partition("]")[0])
    except ValueError:
        return False
    return True


def hide_user_info(url: str) -> str:
    """`url` with any user:password@ replaced by ***@: rows stored before check_ws_url
    refused user info may hold a secret, which no answer shows."""
    scheme, sep, rest = url.partition("://")
    end = next((i for i, c in enumerate(rest) if c in "/?#"), len(rest))
    authority, tail = rest[:end], rest[end:]
    if not sep or "@" not in authority:
        return url
    return f"{scheme}://***@{authority.rpartition('@')[2]}{tail}"


def check_host_name(value: str, what: str = "tls_server_name") -> str:
    """A DNS name or IPv4 address, as TLS SNI (RFC 6066 section 3) can carry it."""
    return check_pattern(HOST_NAME, value, what, HOST_NAME_RULE)


def check_file_path(value: str, what: str = "tls_ca_file") -> str:
    for index, char in enumerate(value):
        if char < " " or char == "\x7f":
            raise ValueError(
                f"{what} {value!r} has {_char_name(char)} at position {index}: a file path "
                "cannot carry control characters"
            )
    return value


def check_topic(value: str) -> str:
    if not value or len(value) > TOPIC_MAX:
        raise ValueError(f"a topic must be 1-{TOPIC_MAX} characters")
    if not TOPIC.match(value):
        _refuse_unsafe_characters("topic", value, ": topics are printable ASCII without spaces")
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
