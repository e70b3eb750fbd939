"""Test ring names whose /dev/shm files are always removed, and the check that none are left."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from dataplane.ring import SHM_DIR


def module_prefix(request: pytest.FixtureRequest, tag: str | None = None) -> str:
    """The /dev/shm prefix of one test module in this process: wsgw-test-<pid>-<tag>-."""
    return f"wsgw-test-{os.getpid()}-{tag or request.module.__name__.rsplit('.', 1)[-1]}-"


def test_ring_name(prefix: str, request: pytest.FixtureRequest) -> str:
    """prefix + the test's name, reduced to what a ring name may hold."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", f"{prefix}{request.node.name[:40]}")


test_ring_name.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


@contextmanager
def removed_after(name: str) -> Iterator[str]:
    """Yield `name`; afterwards its ring file and any temporary sibling are removed."""
    try:
        yield name
    finally:
        for path in SHM_DIR.glob(name + "*"):
            path.unlink(missing_ok=True)


def leftovers(prefix: str) -> list[Path]:
    return sorted(SHM_DIR.glob(prefix + "*"))
