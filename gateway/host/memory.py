"""CPUs, NUMA nodes, hugepages and the kernel command line: what decides where DPDK runs.

Read from sysfs and /proc under injectable roots. `set_hugepages` is the one writer here:
it writes the per-size (optionally per-node) nr_hugepages file, reads back what the kernel
really reserved, and mounts hugetlbfs for that size when no mount serves it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from gateway.host.errors import HostInvalidError, HostNotFoundError, HostRefusedError
from gateway.host.system import (
    CommandRunner,
    HostPaths,
    SysfsIO,
    format_cpulist,
    parse_cpulist,
    run_command,
)

CPU_ISOLATION_PARAMS = ("isolcpus", "nohz_full", "rcu_nocbs")


@dataclass(frozen=True)
class HugepagePool:
    size_kb: int
    total: int
    free: int
    reserved: int = 0
    surplus: int = 0
    node: int | None = None  # None: the whole system

    @property
    def free_mb(self) -> int:
        return self.free * self.size_kb // 1024


@dataclass(frozen=True)
class HugetlbfsMount:
    path: str
    pagesize_kb: int


@dataclass(frozen=True)
class NumaNode:
    id: int
    cpus: list[int]
    hugepages: list[HugepagePool]


@dataclass(frozen=True)
class CmdlineHints:
    """The CPU isolation a dataplane lcore wants, what the kernel was booted with, what lacks."""

    params: dict[str, str | None]
    cpus: dict[str, list[int]]
    missing: list[str]
    suggestion: str | None
    iommu: str | None  # intel_iommu= / amd_iommu= / iommu= as given
    hugepage_params: list[str]


@dataclass(frozen=True)
class HostMemoryInfo:
    cpus_online: list[int]
    cpus_isolated: list[int]
    cpus_nohz_full: list[int]
    cpus_allowed: list[int]
    numa_nodes: list[NumaNode]
    hugepages: list[HugepagePool]
    default_hugepage_kb: int | None
    hugetlbfs_mounts: list[HugetlbfsMount]
    cmdline: CmdlineHints
    iommu_groups: int
    vfio_noiommu: bool
    warnings: list[str] = field(default_factory=list)


def _read_int(io: SysfsIO, path: Path) -> int:
    value = io.read_or(path)
    return int(value) if value and value.lstrip("-").isdigit() else 0


def pools_in(io: SysfsIO, folder: Path, node: int | None = None) -> list[HugepagePool]:
    """Every hugepages-<size>kB entry under `folder` (global or a node's)."""
    pools: list[HugepagePool] = []
    if not folder.is_dir():
        return pools
    for entry in sorted(folder.glob("hugepages-*kB"), key=lambda p: _size_of(p.name)):
        pools.append(
            HugepagePool(
                size_kb=_size_of(entry.name),
                total=_read_int(io, entry / "nr_hugepages"),
                free=_read_int(io, entry / "free_hugepages"),
                reserved=_read_int(io, entry / "resv_hugepages"),
                surplus=_read_int(io, entry / "surplus_hugepages"),
                node=node,
            )
        )
    return pools


def _size_of(name: str) -> int:
    return int(name.removeprefix("hugepages-").removesuffix("kB"))


def numa_nodes(paths: HostPaths, io: SysfsIO) -> list[NumaNode]:
    nodes = []
    for entry in sorted(paths.nodes.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        node_id = int(entry.name[4:])
        nodes.append(
            NumaNode(
                id=node_id,
                cpus=parse_cpulist(io.read_or(entry / "cpulist")),
                hugepages=pools_in(io, entry / "hugepages", node_id),
            )
        )
    return nodes


def default_hugepage_kb(paths: HostPaths) -> int | None:
    try:
        for line in (paths.proc / "meminfo").read_text().splitlines():
            if line.startswith("Hugepagesize:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _pagesize_kb(option: str) -> int | None:
    value = option.removeprefix("pagesize=").upper()
    units = {"K": 1, "M": 1024, "G": 1024 * 1024}
    if value and value[-1] in units and value[:-1].isdigit():
        return int(value[:-1]) * units[value[-1]]
    return int(value) // 1024 if value.isdigit() else None


def hugetlbfs_mounts(paths: HostPaths) -> list[HugetlbfsMount]:
    """hugetlbfs mounts with the page size each serves (the default size without pagesize=)."""
    default = default_hugepage_kb(paths) or 2048
    mounts = []
    try:
        lines = (paths.proc / "mounts").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        fields = line.split()
        if len(fields) < 4 or fields[2] != "hugetlbfs":
            continue
        size = default
        for option in fields[3].split(","):
            if option.startswith("pagesize="):
                size = _pagesize_kb(option) or default
        mounts.append(HugetlbfsMount(fields[1], size))
    return mounts


def parse_cmdline(text: str) -> dict[str, str | None]:
    """key=value (or bare key) pairs of the kernel command line, before any '--'."""
    params: dict[str, str | None] = {}
    for word in text.split():
        if word == "--":
            break
        key, sep, value = word.partition("=")
        params[key] = value if sep else None
    return params


def cmdline_hints(paths: HostPaths, online: list[int], wanted: list[int] | None) -> CmdlineHints:
    """Which of isolcpus/nohz_full/rcu_nocbs are missing for the dataplane CPUs.

    `wanted` are the CPUs the dataplane should own; by default every online CPU but the
    first, which stays with the kernel, the API and housekeeping.
    """
    try:
        params = parse_cmdline((paths.proc / "cmdline").read_text())
    except OSError:
        params = {}
    target = wanted if wanted is not None else online[1:]
    given: dict[str, str | None] = {k: params.get(k) for k in CPU_ISOLATION_PARAMS}
    cpus = {k: parse_cpulist(v) for k, v in given.items()}
    missing = [k for k in CPU_ISOLATION_PARAMS if not target or not set(target) <= set(cpus[k])]
    if not target:
        suggestion = "this host has one CPU: nothing can be isolated for the dataplane"
        missing = []
    elif missing:
        cpulist = format_cpulist(target)
        suggestion = (
            "add "
            + " ".join(f"{k}={cpulist}" for k in missing)
            + " to the kernel command line (e.g. GRUB_CMDLINE_LINUX) and reboot, so the "
            "dataplane CPUs run no other tasks, no scheduler tick and no RCU callbacks"
        )
    else:
        suggestion = None
    iommu = " ".join(
        f"{k}={params[k]}" for k in ("intel_iommu", "amd_iommu", "iommu") if params.get(k)
    )
    hugepage_params = [
        f"{k}={v}" if v is not None else k
        for k, v in params.items()
        if k in ("hugepagesz", "hugepages", "default_hugepagesz")
    ]
    return CmdlineHints(given, cpus, missing, suggestion, iommu or None, hugepage_params)


def host_memory_info(
    paths: HostPaths, io: SysfsIO, dataplane_cpus: list[int] | None = None
) -> HostMemoryInfo:
    online = parse_cpulist(io.read_or(paths.cpus / "online"))
    isolated = parse_cpulist(io.read_or(paths.cpus / "isolated"))
    nohz = parse_cpulist(io.read_or(paths.cpus / "nohz_full"))
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except OSError:
        allowed = online
    mounts = hugetlbfs_mounts(paths)
    pools = pools_in(io, paths.hugepages)
    warnings = []
    if any(p.total for p in pools) and not mounts:
        warnings.append(
            "hugepages are reserved but no hugetlbfs is mounted: DPDK cannot use them "
            "(PUT /v1/host/hugepages mounts one)"
        )
    groups = paths.sys / "kernel/iommu_groups"
    noiommu = io.read_or(paths.sys / "module/vfio/parameters/enable_unsafe_noiommu_mode", "N")
    return HostMemoryInfo(
        cpus_online=online,
        cpus_isolated=isolated,
        cpus_nohz_full=nohz,
        cpus_allowed=allowed,
        numa_nodes=numa_nodes(paths, io),
        hugepages=pools,
        default_hugepage_kb=default_hugepage_kb(paths),
        hugetlbfs_mounts=mounts,
        cmdline=cmdline_hints(paths, online, dataplane_cpus),
        iommu_groups=len(list(groups.iterdir())) if groups.is_dir() else 0,
        vfio_noiommu=(noiommu or "N").upper().startswith("Y"),
        warnings=warnings,
    )


@dataclass(frozen=True)
class HugepageChange:
    size_kb: int
    node: int | None
    requested: int
    before: int
    pool: HugepagePool
    mounted: HugetlbfsMount | None  # the mount made by this change, if any
    warnings: list[str]


def _size_label(size_kb: int) -> str:
    if size_kb % (1024 * 1024) == 0:
        return f"{size_kb // (1024 * 1024)}G"
    if size_kb % 1024 == 0:
        return f"{size_kb // 1024}M"
    return f"{size_kb}K"


def nr_hugepages_file(paths: HostPaths, size_kb: int, node: int | None) -> Path:
    """The file whose value is the number of hugepages of this size (on this node)."""
    sizes = sorted(_size_of(p.name) for p in paths.hugepages.glob("hugepages-*kB"))
    if size_kb not in sizes:
        have = ", ".join(f"{s} kB" for s in sizes) or "none"
        raise HostNotFoundError(
            f"hugepage size {size_kb} kB not found on this host (sizes: {have})"
        )
    if node is None:
        return paths.hugepages / f"hugepages-{size_kb}kB" / "nr_hugepages"
    folder = paths.nodes / f"node{node}"
    if not folder.is_dir():
        nodes = ", ".join(p.name[4:] for p in sorted(paths.nodes.glob("node[0-9]*"))) or "none"
        raise HostNotFoundError(f"NUMA node {node} not found (nodes: {nodes})")
    return folder / "hugepages" / f"hugepages-{size_kb}kB" / "nr_hugepages"


def set_hugepages(
    paths: HostPaths,
    io: SysfsIO,
    size_kb: int,
    count: int,
    node: int | None = None,
    *,
    mount: bool = True,
    runner: CommandRunner = run_command,
) -> HugepageChange:
    """Reserve `count` hugepages of `size_kb` (on `node`), then mount hugetlbfs if none serves
    that size. The kernel may reserve fewer than asked (fragmented memory): the answer says."""
    if count < 0:
        raise HostInvalidError("count must be 0 or more")
    target = nr_hugepages_file(paths, size_kb, node)
    before = _read_int(io, target)
    try:
        io.write(target, str(count))
    except OSError as exc:
        raise HostRefusedError(
            f"cannot write {target}: {exc.strerror or exc} (run the gateway as root, and on a "
            "container host give it write access to sysfs)"
        ) from None
    folder = target.parent
    pool = HugepagePool(
        size_kb,
        _read_int(io, folder / "nr_hugepages"),
        _read_int(io, folder / "free_hugepages"),
        _read_int(io, folder / "resv_hugepages"),
        _read_int(io, folder / "surplus_hugepages"),
        node,
    )
    warnings = []
    if pool.total < count:
        warnings.append(
            f"the kernel reserved {pool.total} of the {count} hugepages of {size_kb} kB asked: "
            "memory is fragmented or short; reserve them at boot "
            f"(hugepagesz={_size_label(size_kb)} hugepages={count}) for a reliable count"
        )
    if pool.total > count:
        warnings.append(
            f"{pool.total} hugepages of {size_kb} kB remain: pages in use are freed only "
            "when the programs holding them exit"
        )
    made = None
    if mount and count > 0 and not any(m.pagesize_kb == size_kb for m in hugetlbfs_mounts(paths)):
        made = mount_hugetlbfs(paths, size_kb, runner)
    return HugepageChange(size_kb, node, count, before, pool, made, warnings)


def mount_hugetlbfs(
    paths: HostPaths, size_kb: int, runner: CommandRunner = run_command
) -> HugetlbfsMount:
    """Mount hugetlbfs for one page size: the default size at hugetlbfs_mount, others beside
    it (/dev/hugepages-1G), as DPDK finds a mount per page size."""
    default = default_hugepage_kb(paths)
    where = paths.hugetlbfs_mount
    if default is not None and size_kb != default:
        where = where.with_name(f"{where.name}-{_size_label(size_kb)}")
    try:
        where.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HostRefusedError(f"cannot create mount point {where}: {exc}") from None
    pagesize = f"pagesize={_size_label(size_kb)}"
    result = runner(["mount", "-t", "hugetlbfs", "-o", pagesize, "nodev", str(where)])
    if not result.ok:
        raise HostRefusedError(
            f"mount -t hugetlbfs -o {pagesize} nodev {where} failed: "
            f"{(result.stderr or result.stdout).strip() or f'exit {result.returncode}'}"
        )
    return HugetlbfsMount(str(where), size_kb)
