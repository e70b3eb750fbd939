"""Ephemeral ports (RFC 6056 algorithm 4): unpredictable, distinct, not reused too soon."""

from __future__ import annotations

import pytest

import dataplane.stack.ports as ports_module
from dataplane.stack.ports import (
    DEFAULT_HIGH,
    DEFAULT_LOW,
    EphemeralPorts,
    PortInUseError,
    PortsExhaustedError,
)
from dataplane.wire.addr import ip_to_int

LOCAL = ip_to_int("198.18.0.1")
SERVER = ip_to_int("198.18.0.2")


def test_fresh_allocators_do_not_start_from_the_same_port() -> None:
    # Regression: a C client that never seeded rand() used one source port on every run.
    firsts = {EphemeralPorts().allocate(LOCAL, SERVER, 443, 0.0) for _ in range(8)}
    assert len(firsts) > 1  # all 8 equal by chance: p = 28232**-7
    assert all(DEFAULT_LOW <= port <= DEFAULT_HIGH for port in firsts)


def test_thousand_connects_give_thousand_distinct_ports() -> None:
    ports = EphemeralPorts()
    allocated = [ports.allocate(LOCAL, SERVER, 443, float(i)) for i in range(1000)]
    assert len(set(allocated)) == 1000


def test_thousand_connect_close_cycles_never_reuse_a_port() -> None:
    ports = EphemeralPorts(reuse_delay=60.0)
    seen = []
    for i in range(1000):
        port = ports.allocate(LOCAL, SERVER, 443, i * 0.01)
        seen.append(port)
        ports.release(port, SERVER, 443, i * 0.01)
    assert len(set(seen)) == 1000


def test_released_port_waits_out_the_reuse_delay() -> None:
    ports = EphemeralPorts(low=40000, high=40001, reuse_delay=60.0, seed=1)
    first = ports.allocate(LOCAL, SERVER, 443, 0.0)
    second = ports.allocate(LOCAL, SERVER, 443, 0.0)
    assert {first, second} == {40000, 40001}
    ports.release(first, SERVER, 443, 1.0)
    with pytest.raises(PortsExhaustedError, match="reuse delay"):
        ports.allocate(LOCAL, SERVER, 443, 30.0)
    assert ports.allocate(LOCAL, SERVER, 443, 61.0) == first


def test_port_in_use_for_one_remote_is_free_for_another() -> None:
    ports = EphemeralPorts(low=40000, high=40000, seed=1)
    assert ports.allocate(LOCAL, SERVER, 443, 0.0) == 40000
    assert ports.allocate(LOCAL, SERVER, 80, 0.0) == 40000
    with pytest.raises(PortsExhaustedError):
        ports.allocate(LOCAL, SERVER, 443, 0.0)


def test_seed_makes_the_sequence_reproducible() -> None:
    def sequence(seed: int) -> list[int]:
        ports = EphemeralPorts(seed=seed)
        return [ports.allocate(LOCAL, SERVER, 443, 0.0) for _ in range(5)]

    assert sequence(3) == sequence(3)
    assert sequence(3) != sequence(4)


def test_reserved_and_claimed_ports() -> None:
    ports = EphemeralPorts(low=40000, high=40001, seed=1)
    ports.reserve(40000)
    assert ports.allocate(LOCAL, SERVER, 443, 0.0) == 40001
    with pytest.raises(PortInUseError):
        ports.claim(40001, SERVER, 443)
    with pytest.raises(PortInUseError):
        ports.claim(40000, SERVER, 80)
    ports.claim(5555, SERVER, 443)
    assert ports.in_use(5555, SERVER, 443)


def test_bad_range_is_refused() -> None:
    with pytest.raises(ValueError):
        EphemeralPorts(low=5000, high=4000)


def test_f_and_g_are_remembered_per_three_tuple_within_a_bound() -> None:
    """Reconnecting to a remote reuses its F and G (one keyed hash per new 3-tuple); the
    memory is bounded, and what it gives is what the hash gives."""
    ports = EphemeralPorts(seed=7)
    first = ports._f_and_g(1, 2, 80)
    assert ports._f_and_g(1, 2, 80) is first
    fresh = EphemeralPorts(seed=7)
    assert fresh._f_and_g(1, 2, 80) == first  # the same keys give the same values
    assert ports._f_and_g(1, 2, 81) != first
    for remote_port in range(1, ports_module._HASHES_KEPT + 10):
        ports._f_and_g(1, 3, remote_port)
    assert len(ports._hashes) <= ports_module._HASHES_KEPT
    assert ports._f_and_g(1, 2, 80) == first
