"""Driving a `wsgw consume` process from a test that writes the ring it reads."""

from __future__ import annotations

import subprocess
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
