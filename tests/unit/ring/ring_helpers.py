"""Shared by the ring tests: unique ring names whose /dev/shm files are always removed, and
payloads whose every byte depends on the sequence number (a torn read cannot match)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.utils import shm

PREFIX = f"wsgw-test-{os.getpid()}-"
_counter = itertools.count()


def leftovers(prefix: str = PREFIX) -> list[Path]:
    return shm.leftovers(prefix)


@contextmanager
def shm_name(tag: str = "r") -> Iterator[str]:
    """A fresh ring name; its file (and any temporary sibling) is removed afterwards."""
    with shm.removed_after(f"{PREFIX}{tag}-{next(_counter)}") as name:
        yield name


def payload_for(seq: int, length: int) -> bytes:
    """length bytes, all determined by seq."""
    return (seq.to_bytes(8, "little") * (length // 8 + 1))[:length]


def length_for(seq: int, limit: int = 700) -> int:
    return (seq * 2654435761) % limit


class RingModel:
    """The writer's placement rules in Python: record sizes, padding at the end of the
    buffer, slices of at most capacity/2, and which records a slice overwrites. It predicts
    the oldest sequence still in the ring, hence the exact size of every gap."""

    def __init__(self, capacity: int) -> None:
        self.cap = capacity
        self.pos = 0
        self.seq = 0
        self.records: list[tuple[int, int]] = []  # (start, seq); seq 0 for padding
        self.lengths: dict[int, int] = {}

    @staticmethod
    def size(length: int) -> int:
        return (32 + length + 7) & ~7

    def write_batch(self, lengths: list[int]) -> int:
        first = self.seq + 1
        i = 0
        while i < len(lengths):
            end, j = self.pos, i
            while j < len(lengths):
                size = self.size(lengths[j])
                off = end % self.cap
                need = size + (self.cap - off if off + size > self.cap else 0)
                if j > i and end + need - self.pos > self.cap // 2:
                    break
                end += need
                j += 1
            self.records = [r for r in self.records if r[0] >= end - self.cap]
            for length in lengths[i:j]:
                size = self.size(length)
                off = self.pos % self.cap
                if off + size > self.cap:
                    self.records.append((self.pos, 0))
                    self.pos += self.cap - off
                self.seq += 1
                self.records.append((self.pos, self.seq))
                self.lengths[self.seq] = length
                self.pos += size
            i = j
        return first

    @property
    def oldest_seq(self) -> int:
        return next((s for _, s in self.records if s), self.seq + 1)
