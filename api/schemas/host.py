"""The host: CPUs, NUMA, hugepages, kernel command line hints, NICs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictBool

from api.schemas.common import PublicSchema, Schema


class HugepagePoolPublic(PublicSchema):
    size_kb: int
    total: int
    free: int
    reserved: int
    surplus: int
    node: int | None


class HugetlbfsMountPublic(PublicSchema):
    path: str
    pagesize_kb: int


class NumaNodePublic(PublicSchema):
    id: int
    cpus: list[int]
    hugepages: list[HugepagePoolPublic]


class CmdlinePublic(PublicSchema):
    params: dict[str, str | None] = Field(description="isolcpus, nohz_full, rcu_nocbs as booted")
    cpus: dict[str, list[int]]
    missing: list[str] = Field(
        description="isolation parameters that do not cover the dataplane CPUs"
    )
    suggestion: str | None
    iommu: str | None
    hugepage_params: list[str]


class CpusPublic(PublicSchema):
    online: list[int]
    isolated: list[int]
    nohz_full: list[int]
    allowed: list[int] = Field(description="CPUs this process may run on")


class HostPublic(PublicSchema):
    cpus: CpusPublic
    numa_nodes: list[NumaNodePublic]
    hugepages: list[HugepagePoolPublic]
    default_hugepage_kb: int | None
    hugetlbfs_mounts: list[HugetlbfsMountPublic]
    cmdline: CmdlinePublic
    iommu_groups: int
    vfio_noiommu: bool
    warnings: list[str]


class HugepagesUpdate(Schema):
    size_kb: int = Field(ge=4, le=16 * 1024 * 1024, description="page size: 2048 or 1048576 on x86")
    count: int = Field(ge=0, le=1 << 20, description="pages to reserve (0 frees them)")
    node: int | None = Field(
        default=None, ge=0, le=1023, description="NUMA node; null: system-wide"
    )
    mount: StrictBool = Field(default=True, description="mount hugetlbfs for this size if none is")


class HugepagesChangePublic(PublicSchema):
    size_kb: int
    node: int | None
    requested: int
    before: int
    pool: HugepagePoolPublic
    mounted: HugetlbfsMountPublic | None
    warnings: list[str]


class NetInterfacePublic(PublicSchema):
    name: str
    admin_up: bool
    oper_state: str
    mac: str | None
    mtu: int | None
    addresses: list[str]
    routes: list[str]
    default_route: bool


class NicPublic(PublicSchema):
    address: str = Field(description="PCI address")
    vendor_id: str
    device_id: str
    vendor_name: str | None
    device_name: str | None
    pci_class: str
    driver: str | None
    numa_node: int | None
    iommu_group: str | None
    interfaces: list[NetInterfacePublic]
    pmd: str | None = Field(description="the DPDK driver (PMD) for this device")
    dpdk_capable: bool | None
    needs_binding: bool
    bound_to_dpdk: bool
    in_use: bool = Field(description="an interface of it is up with an address or a route")
    in_use_reason: str | None
    bindable: bool
    bind_refusal: str | None
    notes: list[str]


class NicListPublic(PublicSchema):
    data: list[NicPublic]


class NicBind(Schema):
    driver: Literal["vfio-pci", "uio_pci_generic"] = "vfio-pci"
    force: StrictBool = Field(
        default=False, description="bind even if the host uses the device (cuts its network)"
    )


class BindResultPublic(PublicSchema):
    nic: NicPublic
    changed: bool
    previous_driver: str | None
    message: str
