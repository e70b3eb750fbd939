"""Proof that an asyncio loop was not blocked: a task that counts its turns meanwhile, and
notes the loop thread's CPU time at each (a loop held by a spin shows as a long stretch of
CPU between two turns, however loaded the machine: CPU time, unlike wall time, does not grow
while the scheduler runs others)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from itertools import pairwise


@dataclass
class Ticks:
    #: time.thread_time() of the loop's thread at each turn.
    cpu: list[float] = field(default_factory=list)

    @property
    def count(self) -> int:
        """How many turns the ticker had."""
        return len(self.cpu)

    def longest_cpu_hold(self, end: float) -> float:
        """The most CPU the loop's thread used between two turns of the ticker, or from the
        last turn to `end` (its thread_time when the block being measured ended)."""
        marks = [*self.cpu, end]
        return max((b - a for a, b in pairwise(marks)), default=0.0)


@asynccontextmanager
async def loop_ticks(interval: float) -> AsyncIterator[Ticks]:
    """Count, every `interval` seconds, that the loop ran another task, while the block runs."""
    ticks = Ticks()

    async def tick() -> None:
        while True:
            ticks.cpu.append(time.thread_time())
            await asyncio.sleep(interval)

    task = asyncio.create_task(tick())
    try:
        yield ticks
    finally:
        task.cancel()
