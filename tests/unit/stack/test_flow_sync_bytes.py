"""A flow sync hands over the ring's bytes in one copy, into a bytes object C fills in
place: what it returns must be exactly the bytes received, a real immutable `bytes`, also
across the ring's wrap and for the one-byte and empty cases (shared singletons, never
written)."""

from __future__ import annotations

import os

from dataplane.shim import EngineBinding
from tests.unit.engine.test_fastpath_c import engine, poll, register, segment

__all__ = ["engine"]  # the fixture, imported for pytest


def test_each_sync_returns_exactly_the_new_bytes_across_the_wrap(engine: EngineBinding) -> None:
    slot, _ = register(engine, ring=64, space=1 << 16)
    data = os.urandom(400)
    got = []
    seq = 1000
    for size in (40, 1, 63, 2, 64, 30, 50, 64, 45, 41):
        engine.inject([segment(seq, data[seq - 1000 : seq - 1000 + size])])
        seq += size
        assert poll(engine).slow_frames == 0
        chunk = engine.flow_sync(slot)[0]
        assert type(chunk) is bytes and len(chunk) == size
        got.append(chunk)
    assert b"".join(got) == data[: seq - 1000]
    assert engine.flow_sync(slot)[0] == b""  # nothing new


def test_synced_bytes_stay_as_they_were_handed_over(engine: EngineBinding) -> None:
    """Each sync fills a new object: one handed over earlier never changes after."""
    slot, _ = register(engine, ring=64, space=1 << 16)
    first_payload, second_payload = b"a" * 50, b"b" * 50
    engine.inject([segment(1000, first_payload)])
    poll(engine)
    first = engine.flow_sync(slot)[0]
    engine.inject([segment(1050, second_payload)])
    poll(engine)
    second = engine.flow_sync(slot)[0]
    assert (first, second) == (first_payload, second_payload)
    assert hash(first) == hash(first_payload)
