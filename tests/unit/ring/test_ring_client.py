"""The consumer client over the ring: attach by gateway/name/URL, topic filters, zero-copy or
bytes, sync and asyncio iteration, gaps as events or errors, cancellation."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dataplane.ring import RingNotFoundError, RingReader, RingWriter, ring_name
from gateway.client import (
    Client,
    Gap,
    MessagesLostError,
    Restart,
    RingMessage,
    SourceUnavailableError,
)
from tests.utils.aio import loop_ticks


def test_attach_by_gateway_name_and_url() -> None:
    gateway = f"test{os.getpid()}"
    name = ring_name(gateway, "md")
    try:
        with RingWriter.create(name, 1 << 16) as w:
            openers: list[Callable[[], Client]] = [
                lambda: Client.attach("md", gateway=gateway),
                lambda: Client.attach(name),
                lambda: Client.attach(f"/dev/shm/{name}"),
                lambda: Client.connect(f"shm://{gateway}/md"),
            ]
            for open_client in openers:
                with open_client() as client:
                    w.write(1, 0, b"hi")
                    (msg,) = client.read()
                    assert isinstance(msg, RingMessage) and bytes(msg.payload) == b"hi"
    finally:
        Path("/dev/shm", name).unlink(missing_ok=True)
    with pytest.raises(RingNotFoundError):
        Client.attach("md", gateway="no-such-gateway")
    with socket.socket() as bound:  # a port of ours where nothing listens
        bound.bind(("127.0.0.1", 0))
        port = bound.getsockname()[1]
        with pytest.raises(SourceUnavailableError):
            Client.connect(f"ws://127.0.0.1:{port}/v1/stream")
    with pytest.raises(ValueError, match="unsupported"):
        Client.connect("http://x")
    with pytest.raises(ValueError, match="on_gap"):
        Client(None, on_gap="ignore")  # type: ignore[arg-type]


def test_sync_iteration_filters_and_ends_when_the_gateway_closes(name: str) -> None:
    w = RingWriter.create(name, 1 << 16)
    a, b = w.register_topic("bn:btc"), w.register_topic("kr:btc")
    client = Client.attach(name, topics=["bn:*"], copy=True)

    def produce() -> None:
        for i in range(50):
            w.write_batch([(1, a, b"a%d" % i), (1, b, b"b%d" % i)])
            time.sleep(0.001)
        w.close()

    thread = threading.Thread(target=produce)
    thread.start()
    got = list(client)
    thread.join()
    assert [m.payload for m in got if isinstance(m, RingMessage)] == [b"a%d" % i for i in range(50)]
    assert all(isinstance(m, RingMessage) and m.topic == "bn:btc" for m in got)
    assert client.source.ended
    client.close()
    assert client.closed


def test_messages_with_idle_timeout(name: str) -> None:
    with RingWriter.create(name, 1 << 16) as w, Client.attach(name) as client:
        w.write(1, 0, b"x")
        t0 = time.monotonic()
        got = list(client.messages(idle_timeout=0.2))
        assert len(got) == 1
        assert 0.2 <= time.monotonic() - t0 < 0.2 + 0.5


def test_gaps_as_events_or_errors(name: str) -> None:
    with (
        RingWriter.create(name, 1 << 12) as w,
        Client.attach(name) as events,
        Client.attach(name, on_gap="raise") as strict,
    ):
        w.write_batch([(1, 0, bytes(100))] * 100)
        first = events.read()
        assert isinstance(first[0], Gap) and first[0].lost > 0
        with pytest.raises(MessagesLostError, match=r"lost \d+ messages") as info:
            strict.read()
        assert info.value.gap == first[0]
        # the messages that came with the gap are the next read
        after = strict.read()
        assert [m.seq for m in after if isinstance(m, RingMessage)] == [
            m.seq for m in first[1:] if isinstance(m, RingMessage)
        ]


def test_async_iteration(name: str) -> None:
    async def main() -> list[bytes]:
        w = RingWriter.create(name, 1 << 16)

        async def produce() -> None:
            for i in range(20):
                w.write(1, 0, b"%d" % i)
                await asyncio.sleep(0.002)
            w.close()

        got: list[bytes] = []
        async with Client.attach(name, copy=True) as client:
            task = asyncio.create_task(produce())
            async for event in client:
                assert isinstance(event, RingMessage)
                got.append(bytes(event.payload))
            await task
        return got

    assert asyncio.run(main()) == [b"%d" % i for i in range(20)]


def test_async_read_timeout_and_cancellation(name: str) -> None:
    async def main() -> None:
        with RingWriter.create(name, 1 << 16) as w:
            async with Client.attach(name) as client:
                t0 = time.monotonic()
                assert await client.aread(timeout=0.1) == []
                assert 0.09 <= time.monotonic() - t0 < 1.0
                # a cancelled read interrupts the waiting thread promptly
                task = asyncio.create_task(client.aread())
                await asyncio.sleep(0.05)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                # and the client still works afterwards
                w.write(1, 0, b"after")
                t0 = time.monotonic()
                events = await client.aread(timeout=5.0)
                assert [bytes(m.payload) for m in events if isinstance(m, RingMessage)] == [
                    b"after"
                ]
                assert time.monotonic() - t0 < 1.0
                # the event loop was never blocked: other tasks ran meanwhile
                async with loop_ticks(0.01) as ticks:
                    assert await client.aread(timeout=0.2) == []
                assert ticks.count >= 5

    asyncio.run(main())


def test_each_ring_creation_has_its_own_epoch_read_from_the_header(name: str) -> None:
    """The epoch is the header's `instance` (control line 0, offset 48, wsgw_ring.h): the
    writer, a reader and the raw file agree; a ring made again at the path has another."""
    epochs = []
    for _ in range(2):
        with RingWriter.create(name, 1 << 16, replace=True) as writer:
            raw = Path(writer.path or "").read_bytes()[:64]
            (in_file,) = struct.unpack_from("=Q", raw, 48)
            with RingReader.attach(name) as reader:
                assert writer.epoch == reader.epoch == reader.info().instance == in_file != 0
            epochs.append(writer.epoch)
    assert epochs[0] != epochs[1]


def test_a_client_that_saw_another_epoch_is_told_of_the_restart_first(name: str) -> None:
    with RingWriter.create(name, 1 << 16) as writer:
        tid = writer.register_topic("t")
        writer.write(1, tid, b"new run")
        with Client.attach(name, start="oldest", copy=True, epoch=writer.epoch ^ 1) as client:
            assert client.epoch == writer.epoch
            events = client.read(timeout=1.0)
            assert events == [Restart(writer.epoch ^ 1, writer.epoch)]
            (message,) = client.read(timeout=1.0)
            assert isinstance(message, RingMessage) and message.payload == b"new run"
        with Client.attach(name, start="oldest", copy=True, epoch=writer.epoch) as same:
            assert [type(e) for e in same.read(timeout=1.0)] == [RingMessage]
