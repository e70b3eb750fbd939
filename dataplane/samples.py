"""Bounded sample buffers for latency figures, allocated once."""

from __future__ import annotations

import array
from collections.abc import Iterator


class LatencySamples:
    """The newest `capacity` latency samples (ns) in memory allocated once, up front: a
    deque of ints grows the heap by ~70 B per sample until it is full, which a memory
    soak then reads as growth."""

    def __init__(self, capacity: int = 65536) -> None:
        self._values = array.array("q", bytes(8 * capacity))
        self._capacity = capacity
        self._count = 0  # samples ever appended since the last clear

    def append(self, value: int) -> None:
        self._values[self._count % self._capacity] = value
        self._count += 1

    def clear(self) -> None:
        self._count = 0

    def __len__(self) -> int:
        return min(self._count, self._capacity)

    def __iter__(self) -> Iterator[int]:
        """Oldest first."""
        if self._count <= self._capacity:
            return iter(self._values[: self._count])
        start = self._count % self._capacity
        return iter(self._values[start:] + self._values[:start])
