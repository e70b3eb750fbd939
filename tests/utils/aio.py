"""Proof that an asyncio loop was not blocked: a task that counts its turns meanwhile."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass


@dataclass
class Ticks:
    count: int = 0


@asynccontextmanager
async def loop_ticks(interval: float) -> AsyncIterator[Ticks]:
    """Count, every `interval` seconds, that the loop ran another task, while the block runs."""
    ticks = Ticks()

    async def tick() -> None:
        while True:
            ticks.count += 1
            await asyncio.sleep(interval)

    task = asyncio.create_task(tick())
    try:
        yield ticks
    finally:
        task.cancel()
