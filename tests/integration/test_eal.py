"""EAL start-up errors, each in a fresh process (DPDK allows one EAL per process)."""

from __future__ import annotations

import pytest

from tests.conftest import requires_dpdk, run_python

pytestmark = [requires_dpdk, pytest.mark.dpdk]

PRELUDE = """
import errno, json
from dataplane.dpdk import Eal, EalConfig
from dataplane import errors
def attempt(**kw):
    try:
        Eal.init(EalConfig(**kw))
        return {"ok": True}
    except errors.DataplaneError as e:
        return {"ok": False, "type": type(e).__name__, "msg": str(e), "errno": e.errno}
"""


def run(code: str) -> list[dict[str, object]]:
    import json

    proc = run_python(PRELUDE + code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_too_few_hugepages_is_a_typed_error_before_dpdk_runs() -> None:
    (result,) = run("print(json.dumps(attempt(hugepages='on', memory_mb=1 << 19)))")
    assert result["type"] == "HugepagesError"
    assert "too few hugepages: 524288 MB wanted" in str(result["msg"])


def test_cpu_outside_affinity_is_refused_and_init_still_works_after() -> None:
    results = run(
        "print(json.dumps(attempt(hugepages='off', lcores='0@(4095)')))\n"
        "print(json.dumps(attempt(hugepages='off')))\n"
    )
    assert results[0]["type"] == "EalError"
    assert "4095" in str(results[0]["msg"])
    assert results[1] == {"ok": True}


def test_second_init_after_a_dpdk_failure_says_why_it_cannot() -> None:
    results = run(
        "print(json.dumps(attempt(hugepages='off', extra_args=('--bogus-flag',))))\n"
        "print(json.dumps(attempt(hugepages='off')))\n"
    )
    assert results[0]["type"] == "EalError"
    assert "Invalid argument" in str(results[0]["msg"])
    assert results[1]["type"] == "EalAlreadyInitialisedError"
    assert "start a new process" in str(results[1]["msg"])


def test_init_twice_returns_the_same_environment() -> None:
    (result,) = run(
        "a = Eal.init(EalConfig(hugepages='off')); b = Eal.init()\n"
        "print(json.dumps({'same': a is b}))\n"
    )
    assert result == {"same": True}


@pytest.fixture
def hugepages(tmp_path):  # type: ignore[no-untyped-def]
    """128 x 2 MB hugepages and a hugetlbfs mount for one test; both restored afterwards."""
    import subprocess
    from pathlib import Path

    nr = Path("/proc/sys/vm/nr_hugepages")
    before = nr.read_text().strip()
    mount = tmp_path / "huge"
    mount.mkdir()
    try:
        nr.write_text(str(int(before) + 128))
        free = int(Path("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages").read_text())
        if free < 64:
            pytest.skip(f"the kernel gave only {free} free hugepages")
        subprocess.run(
            ["mount", "-t", "hugetlbfs", "-o", "pagesize=2M", "nodev", str(mount)], check=True
        )
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)
        nr.write_text(before)
        assert nr.read_text().strip() == before


def test_real_hugepages_back_the_mempool(hugepages) -> None:  # type: ignore[no-untyped-def]
    (result,) = run(
        "r = attempt(hugepages='on', memory_mb=96)\n"
        "if r['ok']:\n"
        "    eal = Eal.current()\n"
        "    with eal.open_port('net_null_h', n_mbufs=4095, mbuf_cache=128) as p:\n"
        "        r['tx'] = p.tx_burst([bytes(64)] * 32)\n"
        "    r['args'] = eal.args\n"
        "print(json.dumps(r))\n"
    )
    assert result["ok"] is True, result
    assert "--no-huge" not in result["args"]  # type: ignore[operator]
    assert result["tx"] == 32
