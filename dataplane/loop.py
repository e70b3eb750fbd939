"""The engine loop: an asyncio event loop whose selector is the dataplane engine.

    engine = Engine.on_port(port, ip, netmask)          # not started: no engine thread
    with asyncio.Runner(loop_factory=engine.loop_factory) as runner:
        runner.run(main())                              # connect_dpdk(..., engine=engine)

The stack, the WebSocket and the application then share one thread, and nothing crosses
threads on the data path. Each turn of the loop (`EngineSelector.select`):

1. the engine flushes what callbacks wrote to its sockets since the last turn;
2. the C poll runs with the GIL released, bounded by the loop's timeout (its next timer),
   and wakes early for received frames, the stack's own timers, `engine.call()` from
   another thread (eventfd), or readiness of the loop's epoll fd (its other sockets, the
   self-pipe of `call_soon_threadsafe`), on which the adaptive back-off sleeps;
3. the batch is handled: bytes absorbed from the fast path, slow-path frames through the
   stack, commands, services; the DPDK transport's service hands received bytes straight
   to its protocol (`data_received`), and what the protocol answers leaves in this batch;
4. `epoll_wait(0)` collects the loop's ready fds, which asyncio handles as usual.

The thread that creates the loop is prepared like the engine thread (CPU pinning,
SCHED_FIFO, DPDK lcore registration) and the engine must not run its own thread meanwhile.
"""

from __future__ import annotations

import asyncio
import selectors
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dataplane.engine import Engine

__all__ = ["EngineEventLoop", "EngineSelector", "engine_of"]


class EngineSelector(selectors.EpollSelector):
    """An epoll selector whose `select` turns the engine first (see the module docstring)."""

    def __init__(self, engine: Engine) -> None:
        super().__init__()
        self.engine: Engine | None = engine
        try:
            engine.attach_loop(self.fileno())
        except BaseException:
            super().close()
            raise

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        engine = self.engine
        if engine is None:
            return super().select(timeout)
        engine.turn(None if timeout is None else max(timeout, 0.0))
        return super().select(0)

    def close(self) -> None:
        engine, self.engine = self.engine, None
        try:
            if engine is not None:
                engine.detach_loop()
        finally:
            super().close()


class EngineEventLoop(asyncio.SelectorEventLoop):
    """asyncio's selector event loop on an `EngineSelector`: create it on the thread that
    runs it (`asyncio.Runner(loop_factory=engine.loop_factory)` does)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        super().__init__(EngineSelector(engine))


def engine_of(loop: asyncio.AbstractEventLoop) -> Engine | None:
    """The engine whose selector this loop is, or None for any other loop."""
    if isinstance(loop, EngineEventLoop):
        return loop.engine
    return None
