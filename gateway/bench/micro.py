"""`micro`: the shim's kernels in ns/op next to the same operation in pure Python."""

from __future__ import annotations

import functools
import os
import struct
import time
from collections.abc import Callable

from gateway.bench.core import BenchOptions, Measurement, alternate, scenario


def python_checksum(data: bytes) -> int:
    """RFC 1071 in pure Python: what the slow path would pay without the shim."""
    if len(data) % 2:
        data += b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def time_per_op(func: Callable[[], object], min_seconds: float) -> float:
    """Seconds per call, calibrated to run at least min_seconds."""
    count = 1
    while True:
        start = time.perf_counter()
        for _ in range(count):
            func()
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return elapsed / count
        count *= 4 if elapsed < min_seconds / 8 else 2


@scenario("micro", "shim kernels (checksum) in ns/op vs pure Python")
def micro(options: BenchOptions) -> list[Measurement]:
    from dataplane.shim import load

    shim = load()
    min_seconds = 0.05 if options.quick else 0.3
    results: list[Measurement] = []
    for size in (64, 1460):
        data = os.urandom(size)
        contenders: dict[str, Callable[[], object]] = {
            "shim (C via ctypes)": functools.partial(shim.checksum, data),
            "pure Python": functools.partial(python_checksum, data),
        }
        ns = {
            name: Measurement(
                "micro",
                f"checksum {size} B",
                name,
                "ns/op",
                False,
                reference=(name == "pure Python"),
            )
            for name in contenders
        }
        for _, name in alternate(options.repetitions, list(contenders)):
            ns[name].samples.append(time_per_op(contenders[name], min_seconds) * 1e9)
        results += ns.values()
    return results
