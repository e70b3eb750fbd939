"""Fixtures the bench tests share."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from wsgw_bench.peers import WsPeer


@pytest.fixture(scope="module")
def ws_peer() -> Iterator[WsPeer]:
    """wsgw_bench/peer/wspeer (echo) on loopback, built with gcc (skipped without it)."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    peer = WsPeer.start(host="127.0.0.1")
    try:
        yield peer
    finally:
        peer.stop()
