"""Client.aread with the ring's wait and read in one call in its waiting thread (session 13)
against the old path (wait there, read on the loop: fused_aread = False): the same events in
the same order, also when aread is cancelled after the waiting thread read a batch (that
batch comes first, to aread or read), and the loop's thread takes the client's slice."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from dataplane.ring import RingWriter
from dataplane.sched import thread_slice_ns
from gateway.client import Client, RingMessage
from gateway.client.core import ClientEvent


def payloads(events: list[ClientEvent]) -> list[bytes]:
    return [bytes(e.payload) for e in events if isinstance(e, RingMessage)]


async def waiting(w: RingWriter, waiters: int = 1) -> None:
    """Until `waiters` readers sleep on the ring's futex."""
    for _ in range(1000):
        if w.info().waiters >= waiters:
            return
        await asyncio.sleep(0.002)
    raise AssertionError("the reader never waited")


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("then", ["aread", "read"])
def test_a_cancelled_aread_loses_and_reorders_nothing(name: str, fused: bool, then: str) -> None:
    """The write lands while aread waits; the loop is held until the waiting thread had
    time to read it, then the task is cancelled: the batch it read is the next one out."""

    async def main() -> list[bytes]:
        got: list[bytes] = []
        with RingWriter.create(name, 1 << 16) as w:
            async with Client.attach(name, copy=True) as client:
                client.fused_aread = fused
                task = asyncio.create_task(client.aread())
                await waiting(w)
                w.write(1, 0, b"first")
                time.sleep(0.2)  # the loop held: the waiting thread reads (fused) meanwhile
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                w.write(1, 0, b"second")
                while len(got) < 2:
                    batch = await client.aread(timeout=2.0) if then == "aread" else None
                    if batch is None:
                        batch = client.read(timeout=2.0)
                    assert batch, f"nothing more after {got}"
                    got += payloads(batch)
        return got

    assert asyncio.run(main()) == [b"first", b"second"]


def test_aread_gets_what_read_gets_both_ways(name: str) -> None:
    """A producer writing in bursts while two clients read by aread, old and new path."""

    async def main() -> tuple[list[bytes], list[bytes]]:
        with RingWriter.create(name, 1 << 20) as w:
            async with (
                Client.attach(name, copy=True) as new,
                Client.attach(name, copy=True) as old,
            ):
                old.fused_aread = False

                async def consume(client: Client) -> list[bytes]:
                    out: list[bytes] = []
                    while len(out) < 200:
                        batch = await client.aread(timeout=5.0)
                        assert batch
                        out += payloads(batch)
                    return out

                tasks = [asyncio.create_task(consume(c)) for c in (new, old)]
                for burst in range(20):
                    await waiting(w, 2)
                    w.write_batch([(1, 0, b"%d.%d" % (burst, i)) for i in range(10)])
                a, b = await asyncio.gather(*tasks)
                return a, b

    new_got, old_got = asyncio.run(main())
    assert new_got == old_got == [b"%d.%d" % (b, i) for b in range(20) for i in range(10)]


def test_the_loop_thread_takes_the_slice_while_the_client_lives(name: str) -> None:
    if thread_slice_ns(threading.get_native_id()) is None:
        pytest.skip("the kernel reports no se.slice (before 6.6)")
    seen: list[int | None] = []

    async def main() -> None:
        with RingWriter.create(name, 1 << 16):
            async with Client.attach(name, slice_ns=300_000) as client:
                assert await client.aread(timeout=0.01) == []
                seen.append(thread_slice_ns(threading.get_native_id()))
        seen.append(thread_slice_ns(threading.get_native_id()))

    def run() -> None:
        seen.append(thread_slice_ns(threading.get_native_id()))
        asyncio.run(main())

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10)
    before, during, after = seen
    assert (during, after) == (300_000, before)
