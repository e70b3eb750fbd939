"""DPDK ports: their rows, and bringing them up and down in the runtime with them.

Rules: one port per device (PCI address, vdev name, host interface); a port in use by a
session cannot be deleted; a change the runtime must apply (device, address, MTU, disable)
is refused while a session on the port runs; every session's URL stays routable.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from sqlalchemy.orm import Session

from dataplane.transports.base import parse_ws_url
from dataplane.ws.errors import LocalProtocolError
from gateway.control.transactions import RowService, Transactions
from gateway.runtime import PortSpec, Runtime, RuntimeRefusedError
from gateway.store.errors import ConflictError, InvalidError
from gateway.store.models import PortRow, with_defaults
from gateway.store.repository import PortRepository, SessionRepository
from gateway.store.validate import FieldError, check_port_network, device_claims

#: Port fields the runtime opens the port with: changing one takes the port down and up.
PORT_RUNTIME_FIELDS = frozenset({"device", "ipv4", "netmask", "gateway", "mtu"})


def port_spec(port: PortRow) -> PortSpec:
    """The runtime's view of a row: each PortSpec field is the row's column of that name
    (a field added to PortSpec is a column, read here without another line)."""
    return PortSpec(**{f.name: getattr(port, f.name) for f in fields(PortSpec)})


def route_problem(port: PortRow, url: str) -> str | None:  # noqa: PLR0911 (one return per reason a route fails)
    """Why a dpdk session to `url` through `port` cannot connect, for a URL whose host is
    an IPv4 address (a name is resolved at connect): the stack's connect refuses its own
    address and martians, and an off-subnet host without a gateway has no route."""
    try:
        host = parse_ws_url(url).host
    except LocalProtocolError:
        return None
    if ":" in host:
        return f"url host {host} is an IPv6 address: the DPDK stack speaks IPv4 only"
    try:
        address = ipaddress.IPv4Address(host)
    except ValueError:
        return None
    network = ipaddress.IPv4Interface(f"{port.ipv4}/{port.netmask}").network
    if address == ipaddress.IPv4Address(port.ipv4):
        return f"url host {address} is port {port.id}'s own address"
    if address.is_loopback or address.is_multicast or address.is_unspecified:
        return f"url host {address} is not a unicast address the stack can connect to"
    if address not in network and port.gateway is None:
        return (
            f"url host {address} is outside port {port.id}'s subnet {network} and the port "
            "has no gateway: give the port a gateway or use a host of its subnet"
        )
    return None


def _check_network(ipv4: str, netmask: str, gateway: str | None) -> None:
    try:
        check_port_network(ipv4, netmask, gateway)
    except FieldError as exc:
        raise InvalidError(str(exc), exc.field) from None


class PortService(RowService[PortRow]):
    """Create, change and delete ports; an enabled port is up in the runtime."""

    def __init__(self, tx: Transactions, runtime: Runtime) -> None:
        super().__init__(tx, PortRepository)
        self.runtime = runtime

    def create(self, values: Mapping[str, Any]) -> PortRow:
        _check_network(values["ipv4"], values["netmask"], values.get("gateway"))
        with self.tx.write() as s:
            ports = PortRepository(s)
            self._check_unique(ports, values["name"], values["device"], None)
            port = ports.add(PortRow(**with_defaults(PortRow, values)))
            if port.enabled:
                self.runtime.port_up(port_spec(port))
            return port

    def update(self, port_id: int, values: Mapping[str, Any]) -> PortRow:
        with self.tx.write() as s:
            ports = PortRepository(s)
            port = ports.get(port_id)
            changed = {k: v for k, v in values.items() if getattr(port, k) != v}
            if not changed:
                return port
            self._check_unique(ports, changed.get("name"), changed.get("device"), port_id)
            was_enabled = port.enabled
            before = port_spec(port)
            for key, value in changed.items():
                setattr(port, key, value)
            _check_network(port.ipv4, port.netmask, port.gateway)
            for user in SessionRepository(s).on_port(port_id):
                if problem := route_problem(port, user.url):
                    field = "gateway" if "gateway" in changed else "ipv4"
                    raise InvalidError(f"session {user.id} ({user.name}): {problem}", field)
            affects_runtime = was_enabled and (
                not port.enabled or bool(PORT_RUNTIME_FIELDS & changed.keys())
            )
            if affects_runtime:
                self._refuse_running_sessions(s, port_id, "change or disable it")
                self.runtime.port_down(port_id)
            s.flush()
            if port.enabled and (affects_runtime or not was_enabled):
                try:
                    self.runtime.port_up(port_spec(port))
                except RuntimeRefusedError:
                    if affects_runtime:  # the change is rolled back: so is the runtime
                        self.runtime.port_up(before)
                    raise
            return port

    def delete(self, port_id: int) -> None:
        with self.tx.write() as s:
            ports = PortRepository(s)
            port = ports.get(port_id)
            users = SessionRepository(s).on_port(port_id)
            if users:
                names = ", ".join(f"{u.id} ({u.name})" for u in users)
                raise ConflictError(
                    f"port {port_id} is used by session(s) {names}: delete them or move "
                    "them to another port first"
                )
            if port.enabled:
                self.runtime.port_down(port_id)
            ports.delete(port)

    @staticmethod
    def _check_unique(
        ports: PortRepository, name: str | None, device: str | None, own: int | None
    ) -> None:
        if name is not None and (other := ports.by_name(name)) and other.id != own:
            raise ConflictError(f"port name {name!r} is taken by port {other.id}")
        if device is None:
            return
        if (other := ports.by_device(device)) and other.id != own:
            raise ConflictError(f"device {device!r} is already port {other.id} ({other.name})")
        # One port per PCI address, vdev name and host interface: the second would be
        # accepted here and fail when the dataplane opens it (or steal the first's frames).
        claims = device_claims(device)
        for other in ports.all():
            if other.id == own:
                continue
            for kind, value in device_claims(other.device).items():
                if claims.get(kind) == value:
                    raise ConflictError(
                        f"device {device!r}: {kind} {value} is already used by port {other.id} "
                        f"({other.name}, {other.device}): one port per {kind}"
                    )

    @staticmethod
    def _refuse_running_sessions(s: Session, port_id: int, action: str) -> None:
        running = [u for u in SessionRepository(s).on_port(port_id) if u.desired_state == "running"]
        if running:
            ids = ", ".join(str(u.id) for u in running)
            raise ConflictError(
                f"port {port_id} carries running session(s) {ids}: stop them before you {action}"
            )
