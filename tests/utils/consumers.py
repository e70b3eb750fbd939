"""Driving a `wsgw consume` process from a test that writes the ring it reads."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable


def write_until_exit(
    proc: subprocess.Popen[str], write: Callable[[int], None], timeout: float = 30
) -> tuple[str, str]:
    """write(0), write(1), ... every 20 ms until the consumer exits, then its stdout and
    stderr. A consumer starts at the newest message whenever it attaches, so the test writes
    until it has had its count: no fixed wait for the attach, which a loaded machine outlasts."""
    i = 0
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        write(i)
        i += 1
        time.sleep(0.02)
    return proc.communicate(timeout=timeout)


class IdleReader:
    """A ring reader in another process, listed by the gateway as `name`: once attached it
    reads nothing (its lag grows) until told to, then reads until the gateway closes it. A
    context manager: the process is killed when the block ends."""

    def __init__(self, ring: str, name: str) -> None:
        code = (
            "from dataplane.ring import RingReader, RingEvictedError\n"
            f"r = RingReader.attach({ring!r}, reader_name={name!r})\n"
            "print('attached', flush=True)\n"
            "input()\n"
            "try:\n"
            "    while True: r.read_batch(timeout=None)\n"
            "except RingEvictedError as exc:\n"
            "    print('evicted:', exc, flush=True)\n"
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.pid = self.proc.pid
        try:
            assert self.proc.stdout is not None
            assert self.proc.stdout.readline().strip() == "attached"
        except BaseException:
            self.close()
            raise

    def read_until_evicted(self) -> str:
        """Tell it to read: the line it printed when closed (`evicted: <why>`), once it has
        exited with 0."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("read\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline().strip()
        assert self.proc.wait(10) == 0
        return line

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def __enter__(self) -> IdleReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
