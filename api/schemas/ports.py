"""DPDK ports."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import AfterValidator, Field, StrictBool

from api.schemas.common import Name, PagePublic, PublicSchema, Schema, UpdateSchema
from gateway.store.validate import (
    DEVICE,
    IPV4_HOST,
    NETMASKS,
    check_device,
    check_ipv4_host,
    check_netmask,
)

Device = Annotated[
    str,
    Field(
        min_length=1,
        max_length=512,
        description="PCI address (0000:03:00.0) or DPDK vdev with devargs "
        "(net_af_packet0,iface=veth0); one port per device, vdev name and interface",
        examples=["net_af_packet0,iface=wsgw0"],
        json_schema_extra={"pattern": DEVICE.pattern},
    ),
    AfterValidator(check_device),
]
Ipv4 = Annotated[
    str,
    Field(
        max_length=15,
        examples=["198.18.0.2"],
        description="a unicast host address of the port's subnet (not its network or "
        "broadcast address)",
        json_schema_extra={"pattern": IPV4_HOST.pattern},
    ),
    AfterValidator(check_ipv4_host),
]
Netmask = Annotated[
    str,
    Field(max_length=15, examples=["255.255.255.0"], json_schema_extra={"enum": list(NETMASKS)}),
    AfterValidator(check_netmask),
]
Gateway = Annotated[
    str,
    Field(
        max_length=15,
        examples=["198.18.0.1"],
        description="the next hop: a host of the port's subnet other than the port itself",
        json_schema_extra={"pattern": IPV4_HOST.pattern},
    ),
    AfterValidator(lambda v: check_ipv4_host(v, "gateway")),
]
Mtu = Annotated[int, Field(ge=576, le=9600, description="IP MTU")]


class PortBase(Schema):
    name: Name
    device: Device
    ipv4: Ipv4
    netmask: Netmask
    gateway: Gateway | None = None
    mtu: Mtu = 1500
    enabled: StrictBool = Field(default=True, description="open the port in the dataplane")


class PortCreate(PortBase):
    """A port; ipv4 and gateway are checked against the netmask by the control plane (422 naming
    the field), as on PATCH, where they meet the stored values."""


class PortUpdate(UpdateSchema):
    """Fields to change; the result is checked as a whole (address, netmask, gateway)."""

    nullable = frozenset({"gateway"})

    name: Name | None = None
    device: Device | None = None
    ipv4: Ipv4 | None = None
    netmask: Netmask | None = None
    gateway: Gateway | None = None
    mtu: Mtu | None = None
    enabled: StrictBool | None = None


class PortStatusPublic(PublicSchema):
    state: str
    reason: str | None


class PortPublic(PublicSchema):
    id: int
    name: str
    device: str
    ipv4: str
    netmask: str
    gateway: str | None
    mtu: int
    enabled: bool
    created_at: datetime
    updated_at: datetime
    status: PortStatusPublic


class PortListPublic(PagePublic[PortPublic]):
    pass
