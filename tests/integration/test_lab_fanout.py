"""Labs and DPDK 22.11's net_af_packet fanout groups, `(pid ^ ifindex) & 0xffff` in the
root namespace: two processes whose pid and port give the same group cannot both open
their ports. The lab gives its gateway end an interface index that makes that impossible
for labs made by this code and processes started together (see gateway.lab).

- the arithmetic, exhaustively: no two lab indexes share a group for any pair of pids
  closer than 2 ** FANOUT_SAFE_BITS (nor for one process), while the kernel's consecutive
  indexes did;
- two labs made at once and two processes opening their ports at once: both open;
- the failure is real: a lab forced onto the index that collides makes the second process
  fail to open its port (so the test above could fail)."""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from gateway.lab import FANOUT_SAFE_BITS, FANOUT_SLOTS, Lab, fanout_group, lab_ifindexes
from tests.conftest import requires_dpdk

CLOSE = 1 << FANOUT_SAFE_BITS

# A process that opens one DPDK port when told which, holds it, and closes on the next line.
OPENER = """
import os, sys
print(os.getpid(), flush=True)
vdev = sys.stdin.readline().strip()
from dataplane.dpdk import Eal, EalConfig
try:
    port = Eal.init(EalConfig(hugepages="off", memory_mb=64)).open_port(vdev)
except Exception as exc:
    print("failed", type(exc).__name__, exc, flush=True)
    sys.exit(3)
print("open", flush=True)
sys.stdin.readline()
port.close()
"""


def close_pid_xors() -> np.ndarray:
    """Every `(a ^ b) & 0xffff` of two pids a <= b < a + CLOSE, as a set (boolean mask)."""
    seen = np.zeros(1 << 16, dtype=bool)
    a = np.arange(1 << 16, dtype=np.int64)  # & 0xffff makes pids periodic in 2 ** 16
    for d in range(CLOSE):
        seen[(a ^ (a + d)) & 0xFFFF] = True
    return seen


def colliding_pairs(indexes: list[int], xors: np.ndarray) -> list[tuple[int, int]]:
    return [(i, j) for i, j in itertools.combinations(indexes, 2) if xors[(i ^ j) & 0xFFFF]]


def test_lab_indexes_never_share_a_group_for_close_pids() -> None:
    indexes = lab_ifindexes()
    assert len(indexes) == len(set(indexes)) == FANOUT_SLOTS >= 16
    assert all(0 < i < 1 << 16 for i in indexes)
    xors = close_pid_xors()
    assert xors[0]  # one process opening both ports: same pid
    assert colliding_pairs(indexes, xors) == []
    # What the kernel handed out before: consecutive indexes collide for close pids.
    assert colliding_pairs(list(range(588, 600)), xors)
    pid = 31000
    assert fanout_group(pid, 589) == fanout_group(pid + 1, 588)


# ---- real labs, real ports ---------------------------------------------------------------------
class Opener:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", OPENER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.pid = int(self.proc.stdout.readline())

    def open(self, vdev: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(vdev + "\n")
        self.proc.stdin.flush()

    def result(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def close(self) -> str:
        """Let it close its port and exit; what it wrote to stderr."""
        try:
            _, err = self.proc.communicate("\n", timeout=30)
        except (subprocess.TimeoutExpired, ValueError, OSError):
            self.proc.kill()
            _, err = self.proc.communicate()
        return err or ""


@pytest.fixture
def labs() -> Iterator[list[Lab]]:
    made: list[Lab] = []
    yield made
    for lab in made:
        lab.down()
        assert not lab.exists(), f"lab {lab.name} left behind"


def _name(tag: str) -> str:
    import os

    return f"f{tag}{os.getpid() % 100000}"


@requires_dpdk
@pytest.mark.dpdk
def test_two_labs_and_two_processes_opening_ports_at_once(labs: list[Lab]) -> None:
    pair = [Lab(_name("a")), Lab(_name("b"))]
    for lab in pair:
        lab.down()
    labs += pair
    threads = [threading.Thread(target=lab.up) for lab in pair]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(lab.exists() for lab in pair)
    indexes = [lab.gw_index() for lab in pair]
    assert set(indexes) <= set(lab_ifindexes()) and indexes[0] != indexes[1], indexes
    openers = [Opener(), Opener()]  # started together: close pids
    try:
        for opener, lab in zip(openers, pair, strict=True):
            opener.open(lab.vdev)
        results = [o.result() for o in openers]
        groups = {fanout_group(o.pid, i) for o, i in zip(openers, indexes, strict=True)}
    finally:
        errors = [o.close() for o in openers]
    assert results == ["open", "open"], (results, errors)
    assert len(groups) == 2
    assert [o.proc.returncode for o in openers] == [0, 0], errors


@requires_dpdk
@pytest.mark.dpdk
def test_a_colliding_index_makes_the_second_port_fail(labs: list[Lab]) -> None:
    """The negative control: the same as above with lab B forced onto the index whose
    group equals the first process's group."""
    first, second = Opener(), Opener()
    try:
        lab_a = Lab(_name("c"))
        lab_a.down()
        labs.append(lab_a)
        lab_a.up()
        # The low 16 bits decide the group; bit 20 keeps the index clear of the kernel's.
        forced = (fanout_group(first.pid, lab_a.gw_index()) ^ second.pid) & 0xFFFF | 1 << 20
        lab_b = Lab(_name("d"), gw_ifindex=forced)
        lab_b.down()
        labs.append(lab_b)
        lab_b.up()
        assert lab_b.gw_index() == forced
        assert fanout_group(second.pid, forced) == fanout_group(first.pid, lab_a.gw_index())
        first.open(lab_a.vdev)
        assert first.result() == "open"
        second.open(lab_b.vdev)
        failed = second.result()
    finally:
        first.close()
        err = second.close()
    assert failed.startswith("failed"), failed
    assert "PACKET_FANOUT" in err, err
