"""CPUs, NUMA, hugepages and the kernel command line: on a built tree, and on this machine
for real (hugepages set and restored)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gateway.host import HostManager, HostNotFoundError
from gateway.host.memory import cmdline_hints, mount_hugetlbfs, parse_cmdline
from gateway.host.system import HostPaths, format_cpulist, parse_cpulist
from tests.host.fakesys import FakeHost

REAL_2M = Path("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")
IS_ROOT = os.geteuid() == 0


def test_cpulists() -> None:
    assert parse_cpulist("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("managed_irq,domain,2-3") == [2, 3]
    assert parse_cpulist("") == []
    assert format_cpulist([5, 0, 1, 2]) == "0-2,5"


def test_cmdline_parse_stops_at_double_dash() -> None:
    params = parse_cmdline("quiet isolcpus=1-3 nohz_full=1-3 -- --init-arg=1")
    assert params == {"quiet": None, "isolcpus": "1-3", "nohz_full": "1-3"}


def test_cmdline_hints_say_what_is_missing(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    hints = cmdline_hints(host.paths, [0, 1], None)
    assert hints.params["isolcpus"] == "1"
    assert hints.missing == ["nohz_full", "rcu_nocbs"]
    assert hints.suggestion is not None
    assert hints.suggestion.startswith("add nohz_full=1 rcu_nocbs=1 to the kernel command line")
    (host.proc / "cmdline").write_text("isolcpus=1 nohz_full=1 rcu_nocbs=1 intel_iommu=on\n")
    hints = cmdline_hints(host.paths, [0, 1], None)
    assert (hints.missing, hints.suggestion, hints.iommu) == ([], None, "intel_iommu=on")


def test_info_on_a_built_tree(tmp_path: Path) -> None:
    info = FakeHost(tmp_path).manager().info()
    assert info.cpus_online == [0, 1]
    assert [n.id for n in info.numa_nodes] == [0]
    assert [p.size_kb for p in info.hugepages] == [2048, 1048576]
    assert info.default_hugepage_kb == 2048
    assert info.hugetlbfs_mounts == []


def test_set_hugepages_on_a_built_tree_mounts_hugetlbfs(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.hugepage_limit = 3
    change = host.manager().set_hugepages(2048, 4)
    assert (change.before, change.pool.total, change.requested) == (0, 3, 4)
    assert "reserved 3 of the 4" in change.warnings[0]
    assert change.mounted is not None
    assert change.mounted.path == str(tmp_path / "dev/hugepages")
    assert host.runner.calls == [
        ["mount", "-t", "hugetlbfs", "-o", "pagesize=2M", "nodev", str(tmp_path / "dev/hugepages")]
    ]
    # Mounted now: a second change mounts nothing; 1 GB pages get their own mount point.
    assert host.manager().set_hugepages(2048, 2).mounted is None
    giant = host.manager().set_hugepages(1048576, 1, node=0)
    assert giant.mounted is not None and giant.mounted.path.endswith("dev/hugepages-1G")
    assert (
        host.sys / "devices/system/node/node0/hugepages/hugepages-1048576kB/nr_hugepages"
    ).read_text().strip() == "1"


def test_unknown_size_and_node(tmp_path: Path) -> None:
    manager = FakeHost(tmp_path).manager()
    with pytest.raises(HostNotFoundError, match=r"hugepage size 4096 kB not found .*2048 kB"):
        manager.set_hugepages(4096, 1)
    with pytest.raises(HostNotFoundError, match="NUMA node 3 not found"):
        manager.set_hugepages(2048, 1, node=3)


def test_real_host_info() -> None:
    info = HostManager(HostPaths()).info()
    assert info.cpus_online == sorted(os.sched_getaffinity(0)) or info.cpus_online
    assert 2048 in [p.size_kb for p in info.hugepages] or not REAL_2M.exists()
    assert info.numa_nodes


@dataclass
class RealPool:
    """The real 2 MB pool's count before the test, and every count the test wrote."""

    original: int
    written: list[int] = field(default_factory=list)


@pytest.fixture
def real_2m_pages() -> Iterator[RealPool]:
    """Put the real 2 MB hugepage count back afterwards. Should another process (a DPDK
    test) have changed it since the test's own last write, its value is left alone."""
    if not (IS_ROOT and REAL_2M.exists() and os.access(REAL_2M, os.W_OK)):
        pytest.skip("needs root and a writable 2 MB hugepage pool")
    pool = RealPool(int(REAL_2M.read_text()))
    try:
        yield pool
    finally:
        current = int(REAL_2M.read_text())
        if not pool.written or current == pool.written[-1]:
            REAL_2M.write_text(str(pool.original))
            assert int(REAL_2M.read_text()) == pool.original


def test_set_real_hugepages_and_restore(real_2m_pages: RealPool) -> None:
    manager = HostManager(HostPaths())
    original = real_2m_pages.original
    change = manager.set_hugepages(2048, original + 2, mount=False)
    real_2m_pages.written.append(change.pool.total)
    assert change.before == original
    assert int(REAL_2M.read_text()) == change.pool.total <= original + 2
    assert manager.info().hugepages[0].total == change.pool.total  # read back for real
    node = manager.set_hugepages(2048, change.pool.total, node=0, mount=False)
    real_2m_pages.written.append(node.pool.total)
    assert node.node == 0
    back = manager.set_hugepages(2048, original, mount=False)
    real_2m_pages.written.append(back.pool.total)
    assert back.pool.total == original


def test_mount_hugetlbfs_for_real(tmp_path: Path) -> None:
    if not IS_ROOT:
        pytest.skip("mounting needs root")
    paths = HostPaths(hugetlbfs_mount=tmp_path / "hugepages")
    mount = mount_hugetlbfs(paths, 2048)
    try:
        assert mount.path == str(tmp_path / "hugepages")
        mounts = Path("/proc/mounts").read_text()
        assert f"{tmp_path / 'hugepages'} hugetlbfs" in mounts
    finally:
        subprocess.run(["umount", str(tmp_path / "hugepages")], check=True)
    assert str(tmp_path / "hugepages") not in Path("/proc/mounts").read_text()
