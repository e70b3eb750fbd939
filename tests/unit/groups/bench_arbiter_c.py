"""Cost of arbitration per message, C vs the Python reference (issue #19 target: under 1 us):
two legs, every message on both (the first wins, the second is a duplicate), in order.

Run from the repository: PYTHONPATH=. python tests/unit/groups/bench_arbiter_c.py [messages]
Prints ns per message (a message = its two arrivals) for: the C arbiter fed pre-packed
batches of 256 arrivals (one ctypes call per batch: what a C caller pays, plus 1/256 of a
crossing), CArbiter.offer_many (packing and output tuples in Python), and the reference."""

from __future__ import annotations

import sys
import time
from array import array
from itertools import accumulate

from dataplane.arbiter import NO_PREV, CArbiter
from gateway.groups import Arbiter

BATCH = 256
LAG_NS = 300_000


def arrivals(messages: int) -> list[tuple[int, int, int, int | None, bytes, int]]:
    payload = b'{"e":"trade","s":"BTCUSDT","t":%d,"p":"97000.1","q":"0.01"}'
    out = []
    for i in range(1, messages + 1):
        body = payload % i
        out.append((0, 0, i, i - 1, body, i * 1000))
        out.append((1, 0, i, i - 1, body, i * 1000 + LAG_NS))
    return out


def best(runs: int, fn: object) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter_ns() - start)
    return min(times)


def main() -> None:
    messages = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    feed = arrivals(messages)
    batches = [feed[i : i + BATCH] for i in range(0, len(feed), BATCH)]

    packed = []
    for batch in batches:
        legs, keys, thises, prevs, payloads, nows = zip(*batch, strict=True)
        offsets = array("I", [0])
        offsets.extend(accumulate(map(len, payloads)))
        cols = (
            array("I", legs),
            array("I", keys),
            array("q", thises),
            array("q", [NO_PREV if p is None else p for p in prevs]),
            array("q", nows),
        )
        packed.append((len(batch), cols, b"".join(payloads), offsets))

    def c_packed() -> None:
        arb = CArbiter(2)
        call, h = arb._lib.wsgw_arb_offer_columns, arb._h
        for n, cols, buf, offsets in packed:
            call(h, n, *(c.buffer_info()[0] for c in cols), buf, offsets.buffer_info()[0])
        assert arb.duplicates == messages and arb.stats[0].won == messages
        arb.close()

    def c_wrapper() -> None:
        arb = CArbiter(2)
        for batch in batches:
            arb.offer_many(batch)
        assert arb.duplicates == messages
        arb.close()

    def python() -> None:
        arb: Arbiter[bytes] = Arbiter(2)
        for a in feed:
            arb.offer(*a)
        assert arb.duplicates == messages

    def python_untrimmed() -> None:
        """The reference trims its won window with list(dict) per delivery once full: an
        O(window) step; with a window that never fills, its per-message cost alone."""
        arb: Arbiter[bytes] = Arbiter(2, won_window=messages + 1)
        for a in feed:
            arb.offer(*a)
        assert arb.duplicates == messages

    c_ns = best(5, c_packed) / messages
    wrap_ns = best(3, c_wrapper) / messages
    py_ns = best(3, python) / messages
    py_untrimmed_ns = best(3, python_untrimmed) / messages
    print(f"{messages} messages x 2 legs, batches of {BATCH} arrivals; ns per message:")
    print(f"  C, pre-packed batches     {c_ns:8.1f}")
    print(f"  CArbiter.offer_many       {wrap_ns:8.1f}")
    print(f"  Python reference          {py_ns:8.1f}")
    print(f"  Python reference, no trim {py_untrimmed_ns:8.1f}")
    print(f"  reference / C: {py_ns / c_ns:.1f}x, / offer_many: {py_ns / wrap_ns:.1f}x")
    print(f"  untrimmed reference / C: {py_untrimmed_ns / c_ns:.1f}x")


if __name__ == "__main__":
    main()
