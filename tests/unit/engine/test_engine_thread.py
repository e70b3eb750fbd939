"""The engine thread: pinning, scheduling policy, commands, orderly start and stop."""

from __future__ import annotations

import os
import threading
import time

import pytest

from dataplane.engine import Engine, EngineConfig, EngineError, parse_cpu_list
from dataplane.links.memory import memory_link_pair
from dataplane.stack.iface import Interface

IP, MASK = 0xC0000201, 0xFFFFFF00


def make(config: EngineConfig) -> Engine:
    a, _ = memory_link_pair()
    return Engine(Interface(a.mac, IP, MASK, announce=False), link=a, config=config)


def test_parse_cpu_list() -> None:
    assert parse_cpu_list("0-2,5\n") == {0, 1, 2, 5}
    assert parse_cpu_list("") == set()


def test_pinned_to_the_configured_cpu_and_stopped_in_order() -> None:
    cpu = max(os.sched_getaffinity(0))
    engine = make(EngineConfig(cpu=cpu))
    engine.start()
    try:
        assert engine.running
        assert engine.native_id is not None
        assert os.sched_getaffinity(engine.native_id) == {cpu}
        assert engine.call(lambda: threading.current_thread().name).result(5) == "wsgw-engine"
        deadline = time.monotonic() + 5
        while "loops" not in engine.snapshot() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert engine.snapshot()["loops"] >= 1  # published after each batch
    finally:
        engine.close()
    assert not engine.running
    assert os.sched_getaffinity(0) != {cpu} or len(os.sched_getaffinity(0)) == 1


def test_a_cpu_outside_the_allowed_set_is_a_clear_error() -> None:
    engine = make(EngineConfig(cpu=4095))
    with pytest.raises(EngineError, match="cannot pin the engine to CPU 4095"):
        engine.start()
    assert not engine.running
    engine.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="SCHED_FIFO needs root or CAP_SYS_NICE")
def test_sched_fifo_when_permitted() -> None:
    engine = make(EngineConfig(sched_fifo_priority=1))
    engine.start()
    try:
        assert engine.native_id is not None
        assert os.sched_getscheduler(engine.native_id) == os.SCHED_FIFO
    finally:
        engine.close()


def test_sched_fifo_out_of_range_names_the_valid_range() -> None:
    engine = make(EngineConfig(sched_fifo_priority=1000))
    with pytest.raises(EngineError, match=r"valid priorities are 1\.\.99|not permitted"):
        engine.start()
    engine.close()


def test_commands_run_on_the_engine_thread_and_carry_errors() -> None:
    engine = make(EngineConfig())
    engine.start()
    try:

        def boom() -> None:
            raise ValueError("from the engine")

        with pytest.raises(ValueError, match="from the engine"):
            engine.call(boom).result(5)
        assert engine.call(lambda: 41 + 1).result(5) == 42
    finally:
        engine.close()


def test_an_engine_needs_exactly_one_device() -> None:
    a, _ = memory_link_pair()
    with pytest.raises(EngineError, match="exactly one"):
        Engine(Interface(a.mac, IP, MASK), config=EngineConfig())
