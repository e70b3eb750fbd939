"""Fixtures of the hub's unit tests: a ring in /dev/shm removed afterwards, a socket pair,
and helpers."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Iterator

import pytest

from dataplane.ring import RingWriter
from gateway.hub import Hub
from gateway.hub.events import Message
from gateway.hub.sink import StreamSink
from tests.utils.shm import leftovers, removed_after, test_ring_name

PREFIX = f"wsgw-test-{os.getpid()}-hub-"


@pytest.fixture
def ring_name(request: pytest.FixtureRequest) -> Iterator[str]:
    with removed_after(test_ring_name(PREFIX, request)) as name:
        yield name


@pytest.fixture
def ring(ring_name: str) -> Iterator[RingWriter]:
    with RingWriter.create(ring_name, 1 << 22) as writer:
        yield writer


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected socket pair (the C sink's tests write to one end)."""
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


@pytest.fixture(scope="module", autouse=True)
def _no_leftovers() -> Iterator[None]:
    yield
    assert leftovers(PREFIX) == []


def msg(session: int, topic: str, i: int, ts: int = 0) -> Message:
    """A message whose payload says which one it is."""
    return (session, topic, f"{topic}#{i}".encode(), ts, i)


async def settle(hub: Hub, rounds: int = 5) -> None:
    """Let this loop's ring follower read and route everything written so far (and the
    consumers' wake-ups run)."""
    for _ in range(5000):
        if hub.caught_up():
            break
        await asyncio.sleep(0.001)
    for _ in range(rounds):
        await asyncio.sleep(0)


@pytest.fixture
def sink(ring: RingWriter) -> Iterator[StreamSink]:
    """The C stream sink on ring, its `$gap` topic registered first (the tests'
    ring.register_topic("$gap") gives the same id); closed afterwards."""
    stream_sink = StreamSink(ring.handle, ring.register_topic("$gap"))
    yield stream_sink
    stream_sink.close()
