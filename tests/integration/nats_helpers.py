"""A real NATS subscriber for the tests that read what the gateway's NATS sink published."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from wsgw_bench.servers import nats_server_binary

#: The mark of a test module that runs a real nats-server of its own.
needs_nats = pytest.mark.skipif(
    nats_server_binary() is None,
    reason="nats-server is not installed (apt-get install nats-server)",
)


def wait_until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s")
        time.sleep(0.01)


class Subscriber:
    """A nats-py subscriber on a loop in a thread, collecting (subject, data, headers)."""

    def __init__(self, url: str, subjects: list[str]) -> None:
        self.url = url
        self.subjects = subjects
        self.got: list[tuple[str, bytes, dict[str, str] | None]] = []
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()))
        self.thread.start()
        assert self.ready.wait(10), "subscriber did not connect"

    async def _run(self) -> None:
        import nats

        nc = await nats.connect(self.url)

        async def on_msg(m: Any) -> None:
            self.got.append((m.subject, m.data, m.headers))

        for subject in self.subjects:
            await nc.subscribe(subject, cb=on_msg, pending_msgs_limit=-1, pending_bytes_limit=-1)
        await nc.flush()
        self.ready.set()
        while not self.stop.is_set():
            await asyncio.sleep(0.01)
        await nc.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
