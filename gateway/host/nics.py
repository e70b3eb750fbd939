"""PCI network devices: what they are, whether the host uses them, binding them for DPDK.

Facts come from sysfs (under an injectable root); addresses and routes from `NetInfo`.
Whether DPDK can drive a device comes from DPDK itself: every PMD library embeds a
PMD_INFO_STRING with its PCI id table and the kernel modules it needs (what
dpdk-pmdinfo.py reads).

Binding follows the kernel's own interface: write the DPDK driver to `driver_override`,
unbind the device from its driver, ask `drivers_probe` to probe it again. Unbinding clears
the override and probes again, so the kernel picks the device's own driver. A device whose
interface is up with an address or a route (the management NIC) is refused unless forced:
taking it would cut the host off the network.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from glob import glob
from pathlib import Path

from dataplane.hostinfo import InterfaceAddresses
from gateway.host.errors import HostInvalidError, HostNotFoundError, HostRefusedError
from gateway.host.system import (
    CommandRunner,
    HostPaths,
    NetInfo,
    SysfsIO,
    run_command,
)
from gateway.store.validate import normalise_pci

#: Kernel drivers that hand a device to DPDK (user-space I/O).
DPDK_DRIVERS = ("vfio-pci", "uio_pci_generic", "igb_uio")
#: What the API may bind to: igb_uio is out of tree and unsafe, so not offered.
BIND_DRIVERS = ("vfio-pci", "uio_pci_generic")
NETWORK_CLASS = 0x02
IFF_UP = 0x1
ANY = 0xFFFF
PMD_INFO = re.compile(rb"PMD_INFO_STRING= (\{[^\x00]*\})")


@dataclass(frozen=True)
class PmdMatch:
    pmd: str
    kmods: str  # e.g. "* igb_uio | uio_pci_generic | vfio-pci"; empty: none named

    @property
    def needs_binding(self) -> bool:
        """True when the PMD needs a user-space I/O driver; False for bifurcated PMDs (mlx5)."""
        return not self.kmods or any(d in self.kmods for d in DPDK_DRIVERS)


@dataclass(frozen=True)
class PmdTable:
    """PCI ids -> the DPDK net PMD that drives them."""

    entries: tuple[tuple[int, int, int, int, str, str], ...]
    sources: int  # how many PMD libraries were read

    def match(self, vendor: int, device: int, sub_vendor: int, sub_device: int) -> PmdMatch | None:
        for v, d, sv, sd, pmd, kmods in self.entries:
            if (
                v == vendor
                and d in (device, ANY)
                and sv in (sub_vendor, ANY)
                and sd in (sub_device, ANY)
            ):
                return PmdMatch(pmd, kmods)
        return None


_pmd_lock = threading.Lock()


@lru_cache(maxsize=8)
def _load_pmd_table(dirs: tuple[str, ...]) -> PmdTable:
    entries: list[tuple[int, int, int, int, str, str]] = []
    seen: set[Path] = set()
    for pattern in dirs:
        for folder in sorted(glob(pattern)):
            for lib in sorted(Path(folder).glob("librte_net_*.so*")):
                real = lib.resolve()
                if real in seen or not real.is_file():
                    continue
                seen.add(real)
                try:
                    data = real.read_bytes()
                except OSError:
                    continue
                for blob in PMD_INFO.findall(data):
                    try:
                        info = json.loads(blob)
                    except ValueError:
                        continue
                    for ids in info.get("pci_ids", []):
                        if len(ids) == 4:
                            v, d, sv, sd = (int(x) for x in ids)
                            entries.append(
                                (v, d, sv, sd, str(info.get("name", "")), str(info.get("kmod", "")))
                            )
    return PmdTable(tuple(entries), len(seen))


def pmd_table(dirs: Iterable[str]) -> PmdTable:
    """The PMD id table of the DPDK installed under `dirs` (read once per process)."""
    with _pmd_lock:
        return _load_pmd_table(tuple(dirs))


@lru_cache(maxsize=4)
def _pci_names(path: Path) -> dict[tuple[int, int | None], str]:
    names: dict[tuple[int, int | None], str] = {}
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return names
    vendor: int | None = None
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if line.startswith("C "):
            break  # device classes follow the vendor list
        if not line.startswith("\t"):
            head, _, name = line.partition("  ")
            vendor = int(head, 16) if _is_hex(head) else None
            if vendor is not None:
                names[(vendor, None)] = name.strip()
        elif vendor is not None and not line.startswith("\t\t"):
            head, _, name = line.strip().partition("  ")
            if _is_hex(head):
                names[(vendor, int(head, 16))] = name.strip()
    return names


def _is_hex(text: str) -> bool:
    return bool(text) and all(c in "0123456789abcdefABCDEF" for c in text)


@dataclass(frozen=True)
class NetInterface:
    name: str
    admin_up: bool
    oper_state: str
    mac: str | None
    mtu: int | None
    addresses: list[str]
    routes: list[str]
    default_route: bool

    @property
    def use(self) -> InterfaceAddresses:
        return InterfaceAddresses(tuple(self.addresses), tuple(self.routes), self.default_route)

    @property
    def in_use(self) -> bool:
        """The host's (dataplane.hostinfo's rule, the one DPDK ports follow too)."""
        return self.use.in_use

    def describe(self) -> str:
        return f"interface {self.name} carries {self.use.describe()}"


@dataclass(frozen=True)
class Nic:
    address: str
    vendor_id: str
    device_id: str
    vendor_name: str | None
    device_name: str | None
    pci_class: str
    driver: str | None
    numa_node: int | None
    iommu_group: str | None
    interfaces: list[NetInterface]
    pmd: str | None
    dpdk_capable: bool | None  # None: no DPDK PMD libraries found to tell
    needs_binding: bool
    bound_to_dpdk: bool
    in_use: bool
    in_use_reason: str | None
    bindable: bool
    bind_refusal: str | None
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class BindResult:
    nic: Nic
    changed: bool
    previous_driver: str | None
    message: str


class NicManager:
    """Lists PCI network devices and moves them between kernel and DPDK drivers."""

    def __init__(
        self,
        paths: HostPaths,
        io: SysfsIO,
        net: NetInfo,
        runner: CommandRunner = run_command,
        pmds: PmdTable | None = None,
    ) -> None:
        self.paths = paths
        self.io = io
        self.net = net
        self.runner = runner
        self._pmds = pmds

    @property
    def pmds(self) -> PmdTable:
        if self._pmds is None:
            self._pmds = pmd_table(self.paths.pmd_dirs)
        return self._pmds

    # -- reading --------------------------------------------------------------------------

    def all(self) -> list[Nic]:
        nics = []
        root = self.paths.pci_devices
        for entry in sorted(root.iterdir()) if root.is_dir() else []:
            if self._class(entry) >> 16 == NETWORK_CLASS:
                nics.append(self._nic(entry))
        return nics

    def get(self, address: str) -> Nic:
        return self._nic(self._device(address))

    def _device(self, address: str) -> Path:
        full = normalise_pci(address)
        if full is None:
            raise HostInvalidError(
                f"{address!r} is not a PCI address: write it as 0000:03:00.0 (or 03:00.0)"
            )
        path = self.paths.pci_devices / full
        if not path.exists():
            raise HostNotFoundError(f"PCI device {full} not found")
        return path

    def _class(self, dev: Path) -> int:
        value = self.io.read_or(dev / "class", "0x0") or "0x0"
        try:
            return int(value, 16)
        except ValueError:
            return 0

    def _hex(self, dev: Path, name: str) -> int:
        try:
            return int(self.io.read_or(dev / name, "0xffff") or "0xffff", 16)
        except ValueError:
            return ANY

    def driver_of(self, dev: Path) -> str | None:
        link = dev / "driver"
        return os.path.basename(os.readlink(link)) if link.is_symlink() else None

    def _interfaces(self, dev: Path) -> list[NetInterface]:
        # A NIC's interface sits in net/ or, for virtio, one level down (virtio2/net/eth0).
        names = sorted({p.name for p in [*dev.glob("net/*"), *dev.glob("*/net/*")]})
        result = []
        for name in names:
            folder = self.paths.net / name
            flags = self.io.read_or(folder / "flags", "0x0") or "0x0"
            mtu = self.io.read_or(folder / "mtu")
            use: InterfaceAddresses = self.net.of(name)
            result.append(
                NetInterface(
                    name=name,
                    admin_up=bool(int(flags, 16) & IFF_UP)
                    if _is_hex(flags.removeprefix("0x"))
                    else False,
                    oper_state=self.io.read_or(folder / "operstate", "unknown") or "unknown",
                    mac=self.io.read_or(folder / "address"),
                    mtu=int(mtu) if mtu and mtu.isdigit() else None,
                    addresses=list(use.addresses),
                    routes=list(use.routes),
                    default_route=use.default_route,
                )
            )
        return result

    def _nic(self, dev: Path) -> Nic:
        vendor, device = self._hex(dev, "vendor"), self._hex(dev, "device")
        match = self.pmds.match(
            vendor, device, self._hex(dev, "subsystem_vendor"), self._hex(dev, "subsystem_device")
        )
        capable = True if match else (False if self.pmds.sources else None)
        driver = self.driver_of(dev)
        interfaces = self._interfaces(dev)
        used = [i for i in interfaces if i.in_use]
        reason = "; ".join(i.describe() for i in used) or None
        numa = self.io.read_or(dev / "numa_node")
        group = dev / "iommu_group"
        notes: list[str] = []
        refusal: str | None = None
        bound = driver in DPDK_DRIVERS
        needs = match.needs_binding if match else True
        if bound:
            refusal = f"already bound to {driver}"
        elif capable is False:
            refusal = "no DPDK driver (PMD) handles this device"
        elif match and not match.needs_binding:
            refusal = (
                f"{match.pmd} drives it beside its kernel driver (bifurcated): no binding needed"
            )
        elif used:
            refusal = f"in use by the host: {reason}"
        if capable is None:
            notes.append("no DPDK PMD libraries found: cannot tell whether DPDK drives it")
        if not group.exists() and not bound:
            notes.append("no IOMMU group: vfio-pci needs the IOMMU on (or no-IOMMU mode)")
        names = _pci_names_any(self.paths.pci_ids)
        return Nic(
            address=dev.name,
            vendor_id=f"{vendor:04x}",
            device_id=f"{device:04x}",
            vendor_name=names.get((vendor, None)),
            device_name=names.get((vendor, device)),
            pci_class=f"{self._class(dev):06x}",
            driver=driver,
            numa_node=int(numa) if numa and numa.lstrip("-").isdigit() and int(numa) >= 0 else None,
            iommu_group=os.path.basename(os.readlink(group)) if group.is_symlink() else None,
            interfaces=interfaces,
            pmd=match.pmd if match else None,
            dpdk_capable=capable,
            needs_binding=needs,
            bound_to_dpdk=bound,
            in_use=bool(used),
            in_use_reason=reason,
            bindable=refusal is None,
            bind_refusal=refusal,
            notes=notes,
        )

    # -- changing -------------------------------------------------------------------------

    def bind(self, address: str, driver: str, *, force: bool = False) -> BindResult:
        """Hand the device to a DPDK driver (vfio-pci or uio_pci_generic)."""
        if driver not in BIND_DRIVERS:
            raise HostInvalidError(
                f"driver must be one of {', '.join(BIND_DRIVERS)}, not {driver!r}"
            )
        dev = self._device(address)
        nic = self._nic(dev)
        if int(nic.pci_class, 16) >> 16 != NETWORK_CLASS:
            raise HostRefusedError(
                f"PCI device {dev.name} is not a network device (class {nic.pci_class})"
            )
        if nic.driver == driver:
            return BindResult(nic, False, driver, f"{dev.name} is already bound to {driver}")
        if nic.in_use and not force:
            raise HostRefusedError(
                f"refusing to bind {dev.name}: {nic.in_use_reason}. Taking it from the kernel "
                "would cut the host off that network (if this is the management NIC you would "
                "lock yourself out). Move the addresses and routes away first, or pass "
                "force=true if you really mean it."
            )
        if nic.dpdk_capable is False and not force:
            raise HostRefusedError(
                f"no DPDK PMD drives {dev.name} ({nic.vendor_id}:{nic.device_id}); binding it "
                "would only take it from the kernel (force=true to do it anyway)"
            )
        self._ensure_driver(driver)
        if driver == "vfio-pci" and nic.iommu_group is None and not self._noiommu():
            raise HostRefusedError(
                f"{dev.name} has no IOMMU group, so vfio-pci cannot take it: boot with the "
                "IOMMU on (intel_iommu=on iommu=pt, or amd_iommu=on), or bind uio_pci_generic, "
                "or enable vfio's no-IOMMU mode (echo Y > /sys/module/vfio/parameters/"
                "enable_unsafe_noiommu_mode)"
            )
        previous = nic.driver
        self._write(dev / "driver_override", driver)
        if previous is not None:
            self._write(dev / "driver" / "unbind", dev.name)
        self._write(self.paths.sys / "bus/pci/drivers_probe", dev.name)
        now = self.driver_of(dev)
        if now != driver:
            self._write(dev / "driver_override", "\n")
            self._write(self.paths.sys / "bus/pci/drivers_probe", dev.name)
            raise HostRefusedError(
                f"the kernel did not bind {dev.name} to {driver} (it is on "
                f"{self.driver_of(dev) or 'no driver'} now); the kernel log (dmesg) says why"
            )
        return BindResult(
            self._nic(dev),
            True,
            previous,
            f"{dev.name} bound to {driver} (was {previous or 'unbound'})",
        )

    def unbind(self, address: str) -> BindResult:
        """Give the device back to the kernel: the driver its ids match (virtio-pci, ixgbe...)."""
        dev = self._device(address)
        previous = self.driver_of(dev)
        override = (self.io.read_or(dev / "driver_override") or "").strip()
        if previous not in DPDK_DRIVERS and override in ("", "(null)"):
            nic = self._nic(dev)
            return BindResult(
                nic,
                False,
                previous,
                f"{dev.name} is on its kernel driver ({previous or 'none'}) already",
            )
        self._write(dev / "driver_override", "\n")
        if previous is not None:
            self._write(dev / "driver" / "unbind", dev.name)
        self._write(self.paths.sys / "bus/pci/drivers_probe", dev.name)
        if self.driver_of(dev) is None:
            modalias = self.io.read_or(dev / "modalias")
            if modalias:
                self.runner(["modprobe", modalias])
                self._write(self.paths.sys / "bus/pci/drivers_probe", dev.name)
        now = self.driver_of(dev)
        message = (
            f"{dev.name} is back on its kernel driver {now}"
            if now
            else f"{dev.name} was released from {previous}, but no kernel driver took it "
            "(its module may not be installed)"
        )
        return BindResult(self._nic(dev), True, previous, message)

    def _ensure_driver(self, driver: str) -> None:
        if (self.paths.pci_drivers / driver).is_dir():
            return
        result = self.runner(["modprobe", driver])
        if not (self.paths.pci_drivers / driver).is_dir():
            detail = (result.stderr or result.stdout).strip() or f"exit {result.returncode}"
            raise HostRefusedError(
                f"driver {driver} is not loaded and `modprobe {driver}` did not load it "
                f"({detail}): install the module (linux-modules for this kernel) or pick the "
                "other driver"
            )

    def _noiommu(self) -> bool:
        value = self.io.read_or(
            self.paths.sys / "module/vfio/parameters/enable_unsafe_noiommu_mode"
        )
        return (value or "N").upper().startswith("Y")

    def _write(self, path: Path, value: str) -> None:
        try:
            self.io.write(path, value)
        except OSError as exc:
            raise HostRefusedError(
                f"writing {value.strip() or 'an empty value'} to {path} failed: "
                f"{exc.strerror or exc}"
            ) from None


def _pci_names_any(paths: Iterable[Path]) -> dict[tuple[int, int | None], str]:
    for path in paths:
        if path.is_file():
            return _pci_names(path)
    return {}
