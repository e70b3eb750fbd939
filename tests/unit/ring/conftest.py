"""Fixtures of the ring's unit tests: a fresh ring name per test, and no file left behind."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from ring_helpers import leftovers, shm_name


@pytest.fixture
def name(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh ring name tagged with the module (test_ring_wait -> wait)."""
    with shm_name(request.module.__name__.removeprefix("test_ring_")) as ring:
        yield ring


@pytest.fixture(scope="module", autouse=True)
def _no_leftovers() -> Iterator[None]:
    yield
    assert leftovers() == []
