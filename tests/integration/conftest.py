"""Fixtures shared by the integration tests."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from collections.abc import Iterator
from multiprocessing.context import SpawnProcess
from typing import Any

import pytest

from tests.utils.shm import leftovers, module_prefix, removed_after, test_ring_name
from wsgw_bench.servers import NatsServer


@pytest.fixture
def ring_name(request: pytest.FixtureRequest) -> Iterator[str]:
    """A ring name unique to the test, under its module's prefix; its files removed afterwards."""
    with removed_after(test_ring_name(module_prefix(request), request)) as name:
        yield name


@pytest.fixture(scope="module")
def no_shm_leftovers(request: pytest.FixtureRequest) -> Iterator[None]:
    """After the module, nothing under its /dev/shm prefix may remain."""
    yield
    assert leftovers(module_prefix(request)) == []


def spawn(procs: list[SpawnProcess], target: Any, *args: Any) -> SpawnProcess:
    """Start `target(*args)` in a spawned daemon process, kept in `procs` for the cleanup."""
    p = mp.get_context("spawn").Process(target=target, args=args, daemon=True)
    p.start()
    procs.append(p)
    return p


@pytest.fixture
def procs() -> Iterator[list[SpawnProcess]]:
    """Every process a test starts; killed (woken first if stopped) and reaped whatever
    happened."""
    started: list[SpawnProcess] = []
    try:
        yield started
    finally:
        for p in started:
            if p.is_alive():
                assert p.pid is not None
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
            p.join(10)


@pytest.fixture
def nats_server() -> Iterator[NatsServer]:
    """A nats-server of the test's own (loopback, free port), stopped after it."""
    with NatsServer() as server:
        yield server
