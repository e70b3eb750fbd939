"""Fixtures shared by the integration tests."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from multiprocessing.context import SpawnProcess

import pytest

from tests.utils.shm import leftovers, module_prefix, removed_after, test_ring_name


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
