"""EngineLoopThread's own lifecycle, on a stand-in engine (a plain asyncio loop): the DPDK
side is covered by tests/integration/test_engine_loop.py."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from dataplane.loop import EngineLoopThread


class FakeEngine:
    def __init__(self, fail: BaseException | None = None) -> None:
        self.fail = fail

    def loop_factory(self) -> asyncio.AbstractEventLoop:
        if self.fail is not None:
            raise self.fail
        return asyncio.new_event_loop()


def runner_for(engine: Any) -> EngineLoopThread:
    return EngineLoopThread(engine, name="unit-engine-loop")


def test_start_submit_stop_and_start_again() -> None:
    runner = runner_for(FakeEngine())
    for _ in range(2):  # a stopped runner starts again, with a new loop
        runner.start()
        assert runner.alive

        async def where() -> str:
            return threading.current_thread().name

        assert runner.submit(where()).result(5) == "unit-engine-loop"
        pending = runner.submit(asyncio.sleep(3600))
        runner.stop()
        assert not runner.alive and pending.cancelled()
        with pytest.raises(RuntimeError, match="not running"):
            runner.loop  # noqa: B018


def test_stop_from_its_own_thread_only_asks() -> None:
    runner = runner_for(FakeEngine())
    runner.start()

    async def stop_myself() -> None:
        runner.stop()  # would deadlock if it joined itself

    runner.submit(stop_myself()).result(5)
    runner.stop()  # from here: joins what the loop's own request ended
    assert not runner.alive


def test_an_engine_that_cannot_give_a_loop_fails_the_start() -> None:
    runner = runner_for(FakeEngine(fail=ValueError("no loop for you")))
    with pytest.raises(ValueError, match="no loop for you"):
        runner.start()
    assert not runner.alive
    runner.stop()  # nothing to do


def test_a_second_start_is_refused() -> None:
    runner = runner_for(FakeEngine())
    runner.start()
    try:
        with pytest.raises(RuntimeError, match="already started"):
            runner.start()
    finally:
        runner.stop()
