"""What a bench run must not leave behind, checked one way for every scenario's quick run."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Protocol

#: The network namespace the test process began in (read at import, before any run).
NETNS_AT_START = os.readlink("/proc/self/ns/net")


class HasReport(Protocol):
    def as_dict(self) -> dict[str, Any]: ...


def assert_run_left_nothing(result: HasReport, shm_prefix: str) -> None:
    """The calling thread is back in its namespace (setns undone), no ring file named
    `<shm_prefix><pid>-*` is left in /dev/shm, and the report is what `--out` can write
    (strict JSON: no NaN)."""
    assert os.readlink("/proc/thread-self/ns/net") == NETNS_AT_START  # setns undone
    assert not list(Path("/dev/shm").glob(f"{shm_prefix}{os.getpid()}-*"))
    json.dumps(result.as_dict(), allow_nan=False)
