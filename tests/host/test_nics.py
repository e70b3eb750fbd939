"""NIC listing and binding on a sysfs tree built by the test (never a real device), and the
real machine's NIC list (read only)."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

from gateway.host import HostManager, HostNotFoundError, HostRefusedError
from gateway.host.errors import HostChangesDisabledError, HostInvalidError
from gateway.host.nics import pmd_table
from gateway.host.system import CommandResult, HostPaths, IpNetInfo, SysfsIO
from gateway.settings import Settings
from tests.host.fakesys import FakeHost

SPARE = "0000:03:00.0"
MGMT = "0000:00:03.0"


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    host = FakeHost(tmp_path)
    host.add_nic(SPARE, ifname="ens3")
    host.add_nic(
        MGMT, 0x1AF4, 0x1041, "virtio-pci", "eth0", up=True,
        addresses=["192.0.2.2/24"], routes=["default", "192.0.2.0/24"], virtio_child=True,
    )  # fmt: skip
    host.add_nic("0000:05:00.0", 0x15B3, 0x1017, "mlx5_core", "ens5")
    host.add_nic("0000:06:00.0", 0x1234, 0x5678, None)  # no PMD knows it
    host.add_nic("0000:07:00.0", pci_class="0x010802", driver="nvme")  # not a NIC
    return host


def test_list_describes_each_nic(host: FakeHost) -> None:
    nics = {n.address: n for n in host.manager().list_nics()}
    assert set(nics) == {SPARE, MGMT, "0000:05:00.0", "0000:06:00.0"}
    spare = nics[SPARE]
    assert (spare.vendor_id, spare.device_id, spare.driver) == ("8086", "10fb", "ixgbe")
    assert (spare.pmd, spare.dpdk_capable, spare.bindable) == ("net_ixgbe", True, True)
    assert spare.iommu_group == "7"
    assert [i.name for i in spare.interfaces] == ["ens3"]
    assert not spare.in_use

    mgmt = nics[MGMT]
    assert [i.name for i in mgmt.interfaces] == ["eth0"]  # found under virtio0/net
    assert mgmt.in_use and not mgmt.bindable
    assert "192.0.2.2/24" in (mgmt.in_use_reason or "")
    assert "the default route" in (mgmt.bind_refusal or "")

    mlx = nics["0000:05:00.0"]
    assert not mlx.needs_binding and not mlx.bindable
    assert "bifurcated" in (mlx.bind_refusal or "")
    unknown = nics["0000:06:00.0"]
    assert unknown.dpdk_capable is False
    assert unknown.bind_refusal == "no DPDK driver (PMD) handles this device"


def test_bind_then_unbind(host: FakeHost) -> None:
    manager = host.manager()
    result = manager.bind(SPARE, "vfio-pci")
    assert result.changed and result.previous_driver == "ixgbe"
    assert host.driver(SPARE) == "vfio-pci"
    assert host.runner.calls == [["modprobe", "vfio-pci"]]  # loaded on demand
    assert [w[0] for w in host.io.writes] == [
        f"bus/pci/devices/{SPARE}/driver_override",
        f"bus/pci/devices/{SPARE}/driver/unbind",
        "bus/pci/drivers_probe",
    ]
    assert result.nic.bound_to_dpdk and result.nic.interfaces == []
    again = manager.bind(SPARE, "vfio-pci")
    assert not again.changed
    assert again.message == f"{SPARE} is already bound to vfio-pci"

    back = manager.unbind(SPARE)
    assert back.changed and back.previous_driver == "vfio-pci"
    assert host.driver(SPARE) == "ixgbe"
    assert back.message == f"{SPARE} is back on its kernel driver ixgbe"
    assert (host.sys / f"bus/pci/devices/{SPARE}/driver_override").read_text().strip() == ""
    assert [i.name for i in back.nic.interfaces] == ["ens3"]
    assert not manager.unbind(SPARE).changed  # already on the kernel driver


def test_bind_uio_with_short_address(host: FakeHost) -> None:
    result = host.manager().bind("03:00.0", "uio_pci_generic")
    assert host.driver(SPARE) == "uio_pci_generic"
    assert result.nic.address == SPARE


def test_a_down_interface_that_keeps_an_address_is_still_the_hosts(host: FakeHost) -> None:
    """One rule for binding and for DPDK ports (dataplane.hostinfo): an address or a route
    makes the interface the host's, up or down (it comes back up with them)."""
    host.add_nic("0000:09:00.0", ifname="eth5", up=False, addresses=["198.51.100.7/24"])
    nic = host.manager().nics.get("0000:09:00.0")
    assert nic.in_use and not nic.bindable
    assert "interface eth5 carries addresses 198.51.100.7/24" in (nic.in_use_reason or "")
    with pytest.raises(HostRefusedError):
        host.manager().bind("0000:09:00.0", "vfio-pci")


def test_the_management_nic_is_refused(host: FakeHost) -> None:
    with pytest.raises(HostRefusedError) as refused:
        host.manager().bind(MGMT, "vfio-pci")
    text = str(refused.value)
    assert "interface eth0 carries addresses 192.0.2.2/24" in text
    assert "force=true" in text
    assert host.driver(MGMT) == "virtio-pci"
    assert host.io.writes == []


def test_force_takes_it_anyway(host: FakeHost) -> None:
    host.manager().bind(MGMT, "vfio-pci", force=True)
    assert host.driver(MGMT) == "vfio-pci"


def test_unknown_and_malformed_addresses(host: FakeHost) -> None:
    with pytest.raises(HostNotFoundError, match=r"PCI device 0000:99:00\.0 not found"):
        host.manager().bind("0000:99:00.0", "vfio-pci")
    with pytest.raises(HostInvalidError, match="is not a PCI address"):
        host.manager().get_nic("eth0")


def test_refusals(host: FakeHost) -> None:
    manager = host.manager()
    with pytest.raises(HostRefusedError, match="not a network device"):
        manager.bind("0000:07:00.0", "vfio-pci")
    with pytest.raises(HostRefusedError, match="no DPDK PMD drives"):
        manager.bind("0000:06:00.0", "vfio-pci")
    with pytest.raises(HostInvalidError, match="driver must be one of"):
        manager.bind(SPARE, "igb_uio")
    host.runner.modprobe_fails = True
    with pytest.raises(HostRefusedError, match="modprobe vfio-pci` did not load it"):
        manager.bind(SPARE, "vfio-pci")
    assert host.driver(SPARE) == "ixgbe"


def test_vfio_needs_an_iommu_group(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.add_nic(SPARE, iommu_group=None)
    with pytest.raises(HostRefusedError, match="no IOMMU group"):
        host.manager().bind(SPARE, "vfio-pci")
    host.manager().bind(SPARE, "uio_pci_generic")
    assert host.driver(SPARE) == "uio_pci_generic"


def test_changes_can_be_disabled(host: FakeHost) -> None:
    with pytest.raises(HostChangesDisabledError, match="allow_changes"):
        host.manager(allow_changes=False).bind(SPARE, "vfio-pci")


def test_pmd_table_from_the_installed_dpdk() -> None:
    table = pmd_table(Settings().host.pmd_dirs)
    if not table.sources:
        pytest.skip("no DPDK PMD libraries installed")
    match = table.match(0x1AF4, 0x1041, 0x1AF4, 0x1100)
    assert match is not None and match.pmd == "net_virtio"
    assert match.needs_binding


def test_real_machine_nics_show_eth0_in_use_and_not_bindable() -> None:
    """Read only. The NIC that carries this machine's address and route must never be
    offered for binding."""
    if not Path("/sys/class/net/eth0").exists() or not shutil.which("ip"):
        pytest.skip("no eth0 on this machine")
    nics = HostManager(HostPaths(pmd_dirs=tuple(Settings().host.pmd_dirs))).list_nics()
    carrying = [n for n in nics if "eth0" in [i.name for i in n.interfaces]]
    if not carrying:
        pytest.skip("eth0 is not a PCI device here")
    eth0 = carrying[0]
    assert eth0.in_use
    assert not eth0.bindable
    assert "eth0" in (eth0.in_use_reason or "")
    # The refusal must come before any write; the IO and runner given here could not
    # change the device anyway.
    guarded = HostManager(HostPaths(), io=ReadOnlyIO(), runner=no_commands, net=IpNetInfo())
    with pytest.raises(HostRefusedError, match="refusing to bind"):
        guarded.bind(eth0.address, "vfio-pci")


class ReadOnlyIO(SysfsIO):
    def write(self, path: Path, value: str) -> None:
        raise AssertionError(f"a test tried to write {value!r} to {path} on the real host")


def no_commands(argv: Sequence[str]) -> CommandResult:
    raise AssertionError(f"a test tried to run {argv} on the real host")
