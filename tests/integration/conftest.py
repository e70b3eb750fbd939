"""Fixtures shared by the integration tests."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from multiprocessing.context import SpawnProcess

import pytest


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
