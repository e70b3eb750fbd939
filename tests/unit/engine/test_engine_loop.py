"""The engine loop (dataplane/loop.py) on an in-memory link: the loop's own timers, fds and
thread-safe callbacks keep working while the engine idles in its adaptive C sleep, commands
from other threads run on the loop's thread, and the modes exclude each other."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from dataplane.engine import Engine, EngineConfig, EngineError
from dataplane.fastpath import FastPathConfig
from dataplane.links.memory import memory_link_pair
from dataplane.loop import EngineEventLoop, EngineSelector, engine_of
from dataplane.stack.iface import Interface

IP, MASK = 0xC0000201, 0xFFFFFF00


def make(**fastpath: object) -> Engine:
    a, _ = memory_link_pair()
    config = EngineConfig(fastpath=FastPathConfig(**fastpath))  # type: ignore[arg-type]
    return Engine(Interface(a.mac, IP, MASK, announce=False), link=a, config=config)


def test_the_loop_is_the_engine_and_runs_its_batches() -> None:
    engine = make()
    turns: list[float] = []
    engine.services.append(turns.append)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, EngineEventLoop) and engine_of(loop) is engine
        assert engine.in_loop and engine.running and engine.on_engine_thread
        assert engine.native_id == threading.get_native_id()
        await asyncio.sleep(0.02)

    try:
        with asyncio.Runner(loop_factory=engine.loop_factory) as runner:
            runner.run(main())
        assert not engine.in_loop  # the loop's close detached it
        assert len(turns) >= 2  # services ran on the loop's turns
        assert engine.snapshot()["loops"] >= 2
    finally:
        engine.close()


def test_timers_fds_and_threadsafe_calls_fire_while_the_engine_sleeps() -> None:
    engine = make(poll_mode="adaptive", sleep_max_ns=1_000_000)
    left, right = socket.socketpair()

    async def main() -> dict[str, float]:
        loop = asyncio.get_running_loop()
        out: dict[str, float] = {}
        # a timer well inside the engine's budget and back-off ceiling
        start = time.monotonic()
        await asyncio.sleep(0.005)
        out["sleep"] = time.monotonic() - start
        # another fd of the loop: written from another thread while the engine idles
        got: asyncio.Future[float] = loop.create_future()

        def readable() -> None:
            left.recv(16)
            if not got.done():
                got.set_result(time.monotonic())

        loop.add_reader(left.fileno(), readable)
        await asyncio.sleep(0.05)  # idle: the engine is in its back-off sleep by now
        sleeps_before = engine.fastpath.stats()["sleeps"]
        sent_at: list[float] = []

        def writer() -> None:
            sent_at.append(time.monotonic())
            right.send(b"x")

        threading.Timer(0.02, writer).start()
        arrived = await asyncio.wait_for(got, 5)
        out["fd"] = arrived - sent_at[0]
        out["slept"] = engine.fastpath.stats()["sleeps"] - sleeps_before
        loop.remove_reader(left.fileno())
        # call_soon_threadsafe from another thread (the loop's self-pipe is in its epoll)
        woke: asyncio.Future[float] = loop.create_future()
        t0: list[float] = []

        def poke() -> None:
            t0.append(time.monotonic())
            loop.call_soon_threadsafe(lambda: woke.set_result(time.monotonic()))

        threading.Timer(0.02, poke).start()
        woken_at = await asyncio.wait_for(woke, 5)
        out["threadsafe"] = woken_at - t0[0]
        return out

    try:
        with asyncio.Runner(loop_factory=engine.loop_factory) as runner:
            out = runner.run(main())
    finally:
        engine.close()
        left.close()
        right.close()
    assert 0.005 <= out["sleep"] < 0.1, out
    assert out["slept"] > 0, out  # the engine really slept in C while we waited
    # woken by the epoll fd, not at the end of a budget or back-off (generous: shared CPUs)
    assert out["fd"] < 0.05 and out["threadsafe"] < 0.05, out


def test_engine_call_from_another_thread_runs_on_the_loop_thread() -> None:
    engine = make()

    async def main() -> tuple[int, int]:
        ident = threading.get_ident()

        def other() -> int:
            return engine.call(threading.get_ident).result(5)

        return ident, await asyncio.to_thread(other)

    try:
        with asyncio.Runner(loop_factory=engine.loop_factory) as runner:
            loop_ident, ran_on = runner.run(main())
        assert ran_on == loop_ident
    finally:
        engine.close()


def test_modes_exclude_each_other() -> None:
    engine = make()
    try:
        engine.start()
        with pytest.raises(EngineError, match="runs its own thread"):
            engine.loop_factory()
        with pytest.raises(EngineError, match="another thread"):
            engine.flush()  # the stack belongs to the engine thread
        engine.stop()
        loop = engine.loop_factory()
        try:
            with pytest.raises(EngineError, match="inside an event loop"):
                engine.start()
            with pytest.raises(EngineError, match="already runs inside"):
                EngineSelector(engine)
        finally:
            loop.close()
        engine.start()  # free again once the loop is closed
        assert engine.call(lambda: 1).result(5) == 1
    finally:
        engine.close()
