"""Shared fixtures: the lab (a peer namespace + veth pair) and the process's DPDK EAL."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gateway.lab import Lab

IS_ROOT = os.geteuid() == 0


def _has_dpdk() -> bool:
    """Whether the shim was built with DPDK. A shim that does not load is an error, never a
    reason to skip: a stale or missing library must fail the run."""
    from dataplane.shim import load

    return load().has_dpdk


requires_root = pytest.mark.skipif(not IS_ROOT, reason="needs root (network namespaces)")
requires_dpdk = pytest.mark.skipif(
    not (IS_ROOT and _has_dpdk() and shutil.which("ip")),
    reason="needs root and a shim built with DPDK",
)


def _lab_name(request: pytest.FixtureRequest) -> str:
    # Short, unique per test and per process, so parallel runs and leftovers never collide.
    return f"t{os.getpid() % 10000}{abs(hash(request.node.nodeid)) % 1000}"[:10]


@pytest.fixture
def lab(request: pytest.FixtureRequest) -> Iterator[Lab]:
    """A fresh lab for one test, removed afterwards whatever happened."""
    with fresh_lab(_lab_name(request)) as made:
        yield made


@contextlib.contextmanager
def fresh_lab(name: str, **options: Any) -> Iterator[Lab]:
    """Lab(name, **options) up (whatever an earlier run left of it removed first), and down
    afterwards whatever happened; skips the test without root."""
    if not IS_ROOT:
        pytest.skip("needs root (network namespaces)")
    made = Lab(name, **options)
    made.down()
    try:
        yield made.up()
    finally:
        made.down()
        assert not made.exists(), f"lab {made.name} left behind"


@pytest.fixture(scope="session")
def eal():  # type: ignore[no-untyped-def]
    """The process-wide DPDK environment, without hugepages so it never competes for them."""
    if not (IS_ROOT and _has_dpdk()):
        pytest.skip("needs root and a shim built with DPDK")
    from dataplane.dpdk import Eal, EalConfig

    return Eal.init(EalConfig(hugepages="off", memory_mb=256))


def run_python(
    code: str, *, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run code in a fresh interpreter: DPDK allows one EAL per process."""
    import sys

    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=full_env
    )


@pytest.fixture
def lab_engine(eal, lab: Lab):  # type: ignore[no-untyped-def]
    """start(**tcp_config) -> (engine, lab): a started engine on a DPDK port on the lab's
    veth; engine and port are closed after the test."""
    from dataplane.engine import Engine
    from dataplane.stack.tcp import TcpConfig

    opened: list[tuple[Engine, object]] = []

    def start(**tcp: object):  # type: ignore[no-untyped-def]
        port = eal.open_port(lab.vdev)
        engine = Engine.on_port(port, lab.gw_ip, lab.netmask, tcp_config=TcpConfig(**tcp))  # type: ignore[arg-type]
        opened.append((engine, port))
        engine.start()
        return engine, lab

    yield start
    for engine, port in opened:
        engine.close()
        port.close()  # type: ignore[attr-defined]


@pytest.fixture
def loop_engine(eal, lab: Lab):  # type: ignore[no-untyped-def]
    """(engine, lab): an engine on a DPDK port on the lab's veth, not started — the test runs
    it on its own event loop with `run_in_loop`; engine and port are closed afterwards."""
    from dataplane.engine import Engine
    from dataplane.stack.tcp import TcpConfig

    port = eal.open_port(lab.vdev)
    engine = Engine.on_port(
        port, lab.gw_ip, lab.netmask, tcp_config=TcpConfig(time_wait=0.5, recv_buffer=4 << 20)
    )
    try:
        yield engine, lab
    finally:
        engine.close()
        port.close()


def run_in_loop(engine: Any, main: Callable[[], Any]) -> Any:
    """main() on the engine's own event loop (dataplane/loop.py), to completion."""
    with asyncio.Runner(loop_factory=engine.loop_factory) as runner:
        return runner.run(main())


@pytest.fixture
def lab_spawn(lab: Lab) -> Iterator[Callable[[list[str]], None]]:
    """spawn(argv): `python argv` in the lab's peer namespace, returned once it printed
    `ready`; every process spawned is killed after the test."""
    import sys

    procs: list[subprocess.Popen[str]] = []

    def spawn(argv: list[str]) -> None:
        proc = lab.popen([sys.executable, *argv], stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"

    yield spawn
    for proc in procs:
        proc.kill()
        proc.wait()
