"""The local transport: a gateway's shared-memory ring on this host (zero-copy, no gateway
involvement per message). See dataplane.ring for the ring itself."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Literal, cast

from dataplane.ring import RingReader, WaitOrigin, WaitPolicy

if TYPE_CHECKING:
    from gateway.client.core import ClientEvent


#: The scheduler slice to give a ring consumer's waiting thread (Client.attach slice_ns;
#: EEVDF, dataplane.sched): the engine's (EngineConfig.slice_ns). Not the default: it paid
#: at 1k msg/s and cost at 10k, and a consumer that is CPU-bound (catching up) yields more
#: often with it (docs/PERFORMANCE.md, "session 13, the reader's wake-up").
READER_SLICE_NS = 100_000

#: Client.attach(cpu=): a CPU number, or "engine": the CPU of the engine whose feed writes the
#: ring, as the gateway publishes it in the ring's header (RingWriter.set_writer_cpu).
ReaderCpu = int | Literal["engine"] | None


def pin_reader(reader: RingReader, cpu: ReaderCpu) -> int | None:
    """Pin the calling thread (the one that reads) to `cpu` and return it (None: left as it
    is); a bad cpu closes the reader and raises ValueError. A wake-up on the CPU that wrote
    is a context switch; one on another idle vCPU is an IPI and, in a VM, an exit to the
    host (docs/PERFORMANCE.md, "Wake-ups")."""
    if cpu is None:
        return None
    target = reader.writer_cpu if cpu == "engine" else cpu
    try:
        if target is None:
            raise ValueError(
                "cpu='engine': the gateway publishes no engine CPU in this ring (its engine "
                "is not pinned: set engine.cpu)"
            )
        if isinstance(target, bool) or not isinstance(target, int) or target < 0:
            raise ValueError(f"cpu must be a CPU number or 'engine', not {cpu!r}")
        try:
            os.sched_setaffinity(0, {target})
        except OSError as exc:
            raise ValueError(f"cannot run the reader on CPU {target}: {exc.strerror}") from None
    except ValueError:
        reader.close()
        raise
    return target


class RingSource:
    """Messages from a gateway's shared-memory ring (this host only)."""

    def __init__(self, reader: RingReader) -> None:
        self.reader = reader
        self._ended = False

    def read(self, max: int | None = None, timeout: float | None = 0.0) -> list[ClientEvent]:
        # A list of RingMessage | Gap is a list of ClientEvent (lists are invariant).
        return cast("list[ClientEvent]", self.reader.read_batch(max, timeout))

    @property
    def epoch(self) -> int:
        return self.reader.epoch

    def wait(self, timeout: float | None, spin: float | None = None) -> bool:
        return self.reader.wait(timeout, spin)

    @property
    def wait_policy(self) -> WaitPolicy:
        return self.reader.wait_policy

    @property
    def wait_origin(self) -> WaitOrigin:
        return self.reader.wait_origin

    def interrupt(self) -> None:
        self.reader.interrupt()

    @property
    def continues(self) -> bool:
        return False

    @property
    def ended(self) -> bool:
        if not self._ended:
            # Closed and drained, or the writer died without closing (its flock is gone)
            # and there is nothing left to read.
            reader = self.reader
            self._ended = reader.closed or (not reader.writer_alive() and reader.lag == 0)
        return self._ended

    def close(self) -> None:
        self.reader.close()
