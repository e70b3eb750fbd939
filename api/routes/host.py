"""/v1/host: CPUs, NUMA, hugepages, kernel hints, NICs and their DPDK binding (admin)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path

from api.deps import AdminDep, HostDep
from api.routes import resource_router
from api.schemas.common import responses
from api.schemas.host import (
    BindResultPublic,
    HostPublic,
    HugepagesChangePublic,
    HugepagesUpdate,
    NicBind,
    NicListPublic,
    NicPublic,
)

router = resource_router("/v1/host", "host")

PciAddress = Annotated[
    str,
    Path(
        min_length=7,
        max_length=12,
        description="PCI address, 0000:03:00.0 or 03:00.0",
        examples=["0000:03:00.0"],
        json_schema_extra={
            "pattern": r"^(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$"
        },
    ),
]


@router.get("", response_model=HostPublic)
def get_host(host: HostDep, _: AdminDep) -> HostPublic:
    """What decides where DPDK can run: CPUs, NUMA nodes, hugepages, boot parameters."""
    info = host.info()
    return HostPublic.model_validate(
        {
            "cpus": {
                "online": info.cpus_online,
                "isolated": info.cpus_isolated,
                "nohz_full": info.cpus_nohz_full,
                "allowed": info.cpus_allowed,
            },
            "numa_nodes": info.numa_nodes,
            "hugepages": info.hugepages,
            "default_hugepage_kb": info.default_hugepage_kb,
            "hugetlbfs_mounts": info.hugetlbfs_mounts,
            "cmdline": info.cmdline,
            "iommu_groups": info.iommu_groups,
            "vfio_noiommu": info.vfio_noiommu,
            "warnings": info.warnings,
        }
    )


@router.put("/hugepages", response_model=HugepagesChangePublic, responses=responses(404, 409))
def set_hugepages(body: HugepagesUpdate, host: HostDep, _: AdminDep) -> HugepagesChangePublic:
    """Reserve hugepages of one size (on one NUMA node) and mount hugetlbfs if missing."""
    change = host.set_hugepages(body.size_kb, body.count, body.node, mount=body.mount)
    return HugepagesChangePublic.model_validate(change)


@router.get("/nics", response_model=NicListPublic)
def list_nics(host: HostDep, _: AdminDep) -> NicListPublic:
    """PCI network devices, whether the host uses them and whether DPDK can take them."""
    return NicListPublic(data=[NicPublic.model_validate(n) for n in host.list_nics()])


@router.get("/nics/{pci}", response_model=NicPublic, responses=responses(404))
def get_nic(pci: PciAddress, host: HostDep, _: AdminDep) -> NicPublic:
    return NicPublic.model_validate(host.get_nic(pci))


@router.post("/nics/{pci}/bind", response_model=BindResultPublic, responses=responses(404, 409))
def bind_nic(
    pci: PciAddress, host: HostDep, _: AdminDep, body: NicBind | None = None
) -> BindResultPublic:
    """Hand a NIC to a DPDK driver. Refused (409) when the host uses it, unless force."""
    body = body or NicBind()
    return BindResultPublic.model_validate(host.bind(pci, body.driver, force=body.force))


@router.post("/nics/{pci}/unbind", response_model=BindResultPublic, responses=responses(404, 409))
def unbind_nic(pci: PciAddress, host: HostDep, _: AdminDep) -> BindResultPublic:
    """Give a NIC back to its kernel driver."""
    return BindResultPublic.model_validate(host.unbind(pci))
