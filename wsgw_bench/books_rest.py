"""A Binance REST book snapshot (GET /api/v3/depth?limit=1000) fetched over wsgw's DPDK
engine, as a dpdk session's books fetch theirs (dataplane.transports.http, issue #21), beside
the same GET through the kernel.

The feed simulator runs in the lab's peer namespace on every address; 200 updates give its
book depth first. Contenders, alternated in rounds, one request at a time, each timed from
the call to the whole body:

- dpdk: `get_threadsafe(loop, url, engine=)` as the book manager calls it from its pool
  thread: http_get on the engine's own loop (engine.mode "loop", the gateway's default),
  over the lab's DPDK port;
- kernel: the same `http_get` over the kernel's sockets, from a thread in the lab's twin
  namespace (`Lab(kernel_client=True)`): a veth to the same peer;
- kernel urllib (the reference): what kernel sessions' books use (`urllib.request`).

    python -m wsgw_bench.books_rest [--requests 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import statistics
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from gateway.lab import Lab
from wsgw_bench.core import BenchOptions, Measurement, scenario, unique_lab_name

if TYPE_CHECKING:
    from dataplane.loop import EngineLoopThread

PORT = 9630
PATH = "/api/v3/depth?symbol=BTCUSDT&limit=1000"
DPDK, KERNEL, URLLIB = "dpdk: on the engine loop", "kernel: http_get", "kernel: urllib"


@contextmanager
def loop_engine(lab: Lab) -> Iterator[EngineLoopThread]:
    """The engine on the lab's DPDK port, its loop on a thread of its own (as DpdkEngines
    runs it in engine.mode "loop"); stopped and closed, with the port, on the way out."""
    from dataplane.dpdk import Eal, EalConfig
    from dataplane.engine import Engine
    from dataplane.loop import EngineLoopThread
    from dataplane.stack.tcp import TcpConfig

    eal = Eal.init(EalConfig())
    with eal.open_port(lab.vdev) as port:
        engine = Engine.on_port(port, lab.gw_ip, lab.netmask, tcp_config=TcpConfig())
        runner = EngineLoopThread(engine, name="wsgw-bench-engine")
        runner.start()
        try:
            yield runner
        finally:
            runner.stop()
            engine.close()


def _timed(fetch: Callable[[], bytes], count: int) -> tuple[list[float], int]:
    """count fetches one after another: their times (ms) and the last body's size."""
    times, size = [], 0
    for _ in range(count):
        start = time.perf_counter()
        size = len(fetch())
        times.append((time.perf_counter() - start) * 1000)
    return times, size


def run(requests: int, rounds: int, lab_name: str = "brest") -> dict[str, object]:
    from dataplane.transports.http import get_threadsafe, http_get
    from gateway.simulator.process import start_simulator

    lab = Lab(lab_name, kernel_client=True)
    lab.down()
    lab.up()
    got: dict[str, list[float]] = {DPDK: [], KERNEL: [], URLLIB: []}
    size = 0
    sim = None
    try:
        sim = start_simulator(lab, PORT, 0, host="0.0.0.0", stdin=True)  # noqa: S104 (lab netns)
        assert sim.stdin is not None
        assert sim.stdout is not None
        sim.stdout.readline()  # the server's description
        emit = {"cmd": "emit", "dialect": "binance", "topic": "btcusdt@depth@100ms", "count": 200}
        sim.stdin.write(json.dumps(emit) + "\n")
        sim.stdin.flush()
        sim.stdout.readline()
        twin = f"http://{lab.peer_client_ip}:{PORT}{PATH}"
        with lab.client_threads():  # the kernel contenders' thread: sockets in the twin
            kernel = concurrent.futures.ThreadPoolExecutor(1)
            kernel_loop = kernel.submit(asyncio.new_event_loop).result()
        with loop_engine(lab) as runner, kernel:
            url = f"http://{lab.peer_ip}:{PORT}{PATH}"

            def over_dpdk() -> bytes:
                return get_threadsafe(runner.loop, url, 5.0, engine=runner.engine)

            def over_kernel() -> bytes:
                return kernel_loop.run_until_complete(http_get(twin)).body

            def with_urllib() -> bytes:
                with urllib.request.urlopen(twin, timeout=5) as answer:
                    body: bytes = answer.read()
                    return body

            load_before = os.getloadavg()
            for _ in range(rounds):
                times, size = _timed(over_dpdk, requests)
                got[DPDK] += times
                for name, fetch in ((KERNEL, over_kernel), (URLLIB, with_urllib)):
                    got[name] += kernel.submit(_timed, fetch, requests).result()[0]
            load_after = os.getloadavg()
        kernel_loop.close()
    finally:
        if sim is not None:
            sim.kill()
            sim.wait()
        lab.down()
    return {
        "body_bytes": size,
        "load": [round(load_before[0], 1), round(load_after[0], 1)],
        "ms": {
            name: {
                "p50": round(statistics.median(t), 3),
                "p99": round(statistics.quantiles(t, n=100)[98], 3),
            }
            for name, t in got.items()
        },
    }


@scenario(
    "books_rest",
    "a Binance depth-1000 REST snapshot GET over the DPDK engine vs the kernel (http_get, "
    "urllib), from the simulator in the lab: p50/p99 ms",
    needs_root=True,
)
def bench_books_rest(options: BenchOptions) -> list[Measurement]:
    result = run(50 if options.quick else 200, 2 if options.quick else 5,
                 unique_lab_name(options, "brest"))  # fmt: skip
    load = result["load"]
    note = f"{result['body_bytes']} B body, load {load[0]} -> {load[1]}"  # type: ignore[index]
    figures: dict[str, dict[str, float]] = result["ms"]  # type: ignore[assignment]
    return [
        Measurement(
            "books_rest",
            f"snapshot GET {q}",
            name,
            "ms",
            False,
            [ms[q]],
            reference=name == URLLIB,
            note=note,
        )
        for name, ms in figures.items()
        for q in ("p50", "p99")
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="per contender and round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    print(json.dumps(run(args.requests, args.rounds), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
