"""A fake host for tests: a sysfs and /proc tree in a temporary folder, with writes that act
like the kernel's (unbind drops the driver link, drivers_probe honours driver_override),
a command runner that records what it was asked, and fixed addresses and routes.

Nothing here touches the real machine: the binding code under test only ever sees paths
under `FakeHost.root`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dataplane.hostinfo import InterfaceAddresses
from gateway.host import HostManager
from gateway.host.nics import ANY, PmdTable
from gateway.host.system import (
    CommandResult,
    HostPaths,
    StaticNetInfo,
    SysfsIO,
)

VFIO_KMODS = "* igb_uio | uio_pci_generic | vfio-pci"
PMDS = PmdTable(
    (
        (0x8086, 0x10FB, ANY, ANY, "net_ixgbe", VFIO_KMODS),
        (0x1AF4, 0x1041, ANY, ANY, "net_virtio", VFIO_KMODS),
        (0x15B3, 0x1017, ANY, ANY, "net_mlx5", "* ib_uverbs & mlx5_core & mlx5_ib"),
    ),
    3,
)


class FakeKernelIO(SysfsIO):
    """Writes to the fake tree, with the kernel's reactions to the PCI bus files."""

    def __init__(self, host: FakeHost) -> None:
        self.host = host
        self.writes: list[tuple[str, str]] = []

    def write(self, path: Path, value: str) -> None:
        rel = (
            os.path.relpath(path, self.host.sys)
            if path.is_relative_to(self.host.sys)
            else str(path)
        )
        self.writes.append((rel, value))
        if path.name == "unbind":
            self.host.detach(value.strip())
        elif path.name == "drivers_probe":
            self.host.probe(value.strip())
        elif path.name == "nr_hugepages":
            count = int(value)
            granted = min(count, self.host.hugepage_limit)
            path.write_text(f"{granted}\n")
            (path.parent / "free_hugepages").write_text(f"{granted}\n")
        else:
            super().write(path, value)


@dataclass
class FakeRunner:
    """Records commands; `modprobe X` loads driver X, `mount` adds a /proc/mounts line."""

    host: FakeHost
    calls: list[list[str]] = field(default_factory=list)
    modprobe_fails: bool = False

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        self.calls.append(list(argv))
        if argv[0] == "modprobe":
            if self.modprobe_fails:
                return CommandResult(1, "", f"modprobe: FATAL: Module {argv[1]} not found")
            if not argv[1].startswith("pci:"):
                self.host.add_driver(argv[1])
            return CommandResult(0)
        if argv[0] == "mount":
            where, options = argv[-1], argv[argv.index("-o") + 1]
            with (self.host.proc / "mounts").open("a") as mounts:
                mounts.write(f"nodev {where} hugetlbfs rw,relatime,{options} 0 0\n")
            return CommandResult(0)
        return CommandResult(127, "", f"{argv[0]}: not faked")


class FakeHost:
    """A sysfs + /proc tree: 2 CPUs, one NUMA node, 2 MB and 1 GB hugepages, PCI NICs."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sys = root / "sys"
        self.proc = root / "proc"
        self.kernel_driver: dict[str, str] = {}
        self.ifnames: dict[str, str] = {}
        self.hugepage_limit = 1 << 20
        self.net = StaticNetInfo()
        self.io = FakeKernelIO(self)
        self.runner = FakeRunner(self)
        for folder in ("bus/pci/devices", "bus/pci/drivers", "class/net", "kernel/iommu_groups"):
            (self.sys / folder).mkdir(parents=True)
        (self.sys / "bus/pci/drivers_probe").write_text("")
        cpu = self.sys / "devices/system/cpu"
        cpu.mkdir(parents=True)
        (cpu / "online").write_text("0-1\n")
        (cpu / "isolated").write_text("\n")
        node = self.sys / "devices/system/node/node0"
        node.mkdir(parents=True)
        (node / "cpulist").write_text("0-1\n")
        for folder in (self.sys / "kernel/mm/hugepages", node / "hugepages"):
            for size in (2048, 1048576):
                pool = folder / f"hugepages-{size}kB"
                pool.mkdir(parents=True)
                for name in (
                    "nr_hugepages",
                    "free_hugepages",
                    "resv_hugepages",
                    "surplus_hugepages",
                ):
                    (pool / name).write_text("0\n")
        self.proc.mkdir()
        (self.proc / "meminfo").write_text("MemTotal: 16000000 kB\nHugepagesize:       2048 kB\n")
        (self.proc / "mounts").write_text("sysfs /sys sysfs rw 0 0\n")
        (self.proc / "cmdline").write_text("console=ttyS0 isolcpus=1 quiet\n")
        for driver in ("ixgbe", "virtio-pci", "mlx5_core"):
            self.add_driver(driver)

    @property
    def paths(self) -> HostPaths:
        return HostPaths(
            sys=self.sys,
            proc=self.proc,
            hugetlbfs_mount=self.root / "dev/hugepages",
            pmd_dirs=(),
            pci_ids=(),
        )

    def manager(self, *, allow_changes: bool = True) -> HostManager:
        return HostManager(
            self.paths,
            io=self.io,
            runner=self.runner,
            net=self.net,
            pmds=PMDS,
            allow_changes=allow_changes,
        )

    def add_driver(self, name: str) -> Path:
        folder = self.sys / "bus/pci/drivers" / name
        folder.mkdir(parents=True, exist_ok=True)
        for attr in ("bind", "unbind", "new_id"):
            (folder / attr).touch()
        return folder

    def add_nic(
        self,
        address: str,
        vendor: int = 0x8086,
        device: int = 0x10FB,
        driver: str | None = "ixgbe",
        ifname: str | None = None,
        *,
        up: bool = False,
        addresses: Sequence[str] = (),
        routes: Sequence[str] = (),
        iommu_group: int | None = 7,
        pci_class: str = "0x020000",
        virtio_child: bool = False,
    ) -> Path:
        dev = self.sys / "bus/pci/devices" / address
        dev.mkdir(parents=True)
        for name, value in (
            ("vendor", f"0x{vendor:04x}"),
            ("device", f"0x{device:04x}"),
            ("subsystem_vendor", f"0x{vendor:04x}"),
            ("subsystem_device", "0x0000"),
            ("class", pci_class),
            ("numa_node", "0"),
            ("driver_override", ""),
            ("modalias", f"pci:v0000{vendor:04X}d0000{device:04X}"),
        ):
            (dev / name).write_text(value + "\n")
        if iommu_group is not None:
            group = self.sys / "kernel/iommu_groups" / str(iommu_group)
            group.mkdir(parents=True, exist_ok=True)
            (dev / "iommu_group").symlink_to(group)
        if driver:
            self.kernel_driver[address] = driver
            (dev / "driver").symlink_to(self.sys / "bus/pci/drivers" / driver)
        if ifname:
            self.ifnames[address] = ifname
            self.net.table[ifname] = InterfaceAddresses(
                tuple(addresses), tuple(routes), "default" in routes
            )
            self._add_interface(address, up=up, virtio_child=virtio_child)
        return dev

    def _add_interface(self, address: str, *, up: bool, virtio_child: bool = False) -> None:
        ifname = self.ifnames[address]
        dev = self.sys / "bus/pci/devices" / address
        parent = dev / "virtio0" if virtio_child else dev
        folder = parent / "net" / ifname
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "flags").write_text("0x1003\n" if up else "0x1002\n")
        (folder / "operstate").write_text("up\n" if up else "down\n")
        (folder / "address").write_text("02:00:00:00:00:01\n")
        (folder / "mtu").write_text("1500\n")
        link = self.sys / "class/net" / ifname
        if not link.exists():
            link.symlink_to(folder)

    def driver(self, address: str) -> str | None:
        link = self.sys / "bus/pci/devices" / address / "driver"
        return os.path.basename(os.readlink(link)) if link.is_symlink() else None

    def detach(self, address: str) -> None:
        dev = self.sys / "bus/pci/devices" / address
        (dev / "driver").unlink(missing_ok=True)
        ifname = self.ifnames.get(address)
        if ifname:  # the interface goes with the kernel driver
            for folder in (dev / "net", dev / "virtio0"):
                if folder.exists():
                    for child in sorted(folder.rglob("*"), reverse=True):
                        child.unlink() if child.is_file() or child.is_symlink() else child.rmdir()
                    folder.rmdir()
            (self.sys / "class/net" / ifname).unlink(missing_ok=True)
            self.net.table.pop(ifname, None)

    def probe(self, address: str) -> None:
        dev = self.sys / "bus/pci/devices" / address
        if (dev / "driver").is_symlink():
            return
        override = (dev / "driver_override").read_text().strip()
        name = override if override and override != "(null)" else self.kernel_driver.get(address)
        if name and (self.sys / "bus/pci/drivers" / name).is_dir():
            (dev / "driver").symlink_to(self.sys / "bus/pci/drivers" / name)
            if name == self.kernel_driver.get(address) and address in self.ifnames:
                self._add_interface(address, up=False)
