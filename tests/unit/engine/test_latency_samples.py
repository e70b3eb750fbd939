"""The fast path's latency buffers: fixed memory, the newest samples, oldest first."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dataplane.samples import LatencySamples


@given(st.lists(st.integers(0, 2**62), max_size=40), st.integers(1, 16))
def test_keeps_the_newest_in_order(values: list[int], capacity: int) -> None:
    samples = LatencySamples(capacity)
    for v in values:
        samples.append(v)
    assert list(samples) == values[-capacity:]
    assert len(samples) == min(len(values), capacity)
    assert sorted(samples) == sorted(values[-capacity:])


def test_clear_and_memory_allocated_once() -> None:
    samples = LatencySamples(1000)
    size = samples._values.buffer_info()[1]
    for v in range(5000):
        samples.append(v)
    assert samples._values.buffer_info()[1] == size == 1000
    samples.clear()
    assert list(samples) == [] and len(samples) == 0
