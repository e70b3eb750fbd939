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

A service whose coroutines come from other threads (the gateway's runtime: the API starts
sessions) runs the loop on a thread of its own, `EngineLoopThread`, and submits to it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import selectors
import threading
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from dataplane.engine import Engine

__all__ = ["EngineEventLoop", "EngineLoopThread", "EngineSelector", "engine_of"]

log = logging.getLogger("wsgw.engine")
T = TypeVar("T")


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


class EngineLoopThread:
    """The engine loop on a thread of its own, serving coroutines other threads submit: the
    engine's sockets, the WebSocket and the code of those coroutines then share that one
    thread (no hand-off per batch, as on the engine's own thread).

        runner = EngineLoopThread(engine, name="wsgw-engine-1")
        runner.start()                                    # the engine must not be started
        future = runner.submit(session_main())            # concurrent.futures.Future
        runner.stop()                                     # tasks left are cancelled
    """

    def __init__(self, engine: Engine, name: str = "wsgw-engine-loop") -> None:
        self.engine = engine
        self.name = name
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("the engine loop thread is not running")
        return self._loop

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, timeout: float = 10.0) -> None:
        """Start the thread and wait until its loop runs; raises what stopped it (the
        engine already running, the thread's preparation failing)."""
        if self._thread is not None:
            raise RuntimeError("the engine loop thread is already started")
        self._ready.clear()
        self._error = None
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            self.stop(timeout)  # if it comes up after all, it goes down again
            raise RuntimeError(f"the engine loop did not start within {timeout} s")
        if self._error is not None:
            error, self._error = self._error, None
            self._thread.join(timeout)
            self._thread = None
            raise error

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run coro on the loop (from any thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self, timeout: float = 10.0) -> None:
        """End the loop: tasks still running are cancelled, the engine is detached (and
        free to close). Safe to call twice. From the loop's own thread it only asks (the
        loop ends once the current callback returns). Raises RuntimeError when the thread
        is still running after `timeout`: the engine is not free then, do not close it."""
        thread, loop, stopping = self._thread, self._loop, self._stopping
        if thread is None:
            return
        if loop is not None and stopping is not None:
            with contextlib.suppress(RuntimeError):  # closed on its own (an error)
                loop.call_soon_threadsafe(stopping.set)
        if thread is threading.current_thread():
            return
        thread.join(timeout)
        if thread.is_alive():
            raise RuntimeError(f"the engine loop {self.name} did not stop within {timeout} s")
        self._thread = None
        self._loop = None

    def _main(self) -> None:
        self._loop = None
        try:
            with asyncio.Runner(loop_factory=self.engine.loop_factory) as runner:
                runner.run(self._serve())
        except BaseException as exc:
            if not self._ready.is_set():
                self._error = exc
            else:
                log.exception("the engine loop %s stopped on an error", self.name)
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        self._ready.set()
        await self._stopping.wait()
