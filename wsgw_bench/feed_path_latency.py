"""Feed latency, C feed path against the Python path, alternated in one run.

    python -m wsgw_bench.feed_path_latency [--rates 1000,10000] [--seconds 4] [--rounds 2]

The feed simulator (binance dialect, one topic, `sim_ts` = its send time in each message)
runs in a lab's peer namespace; a DPDK session (default engine settings, the engine's own
event loop) writes to a message ring; a ring reader in another process takes each message
and records receipt time - sim_ts (CLOCK_REALTIME, the same clock: one machine). Per rate,
the two paths take turns `rounds` times, each phase its own session id, the first second
of every phase dropped (connect, subscribe, warm-up). Prints p50/p99 per path and rate and
the ratios C/Python. Needs root and a shim built with DPDK; cleans up its lab, ring file
and processes whatever happens. Not a CI test: figures are for reading, not asserting.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent  # the source checkout: the children's cwd

CONSUMER = r"""
import json, signal, sys, time
from dataplane.ring import RingMessage, RingReader
reader = RingReader.attach(sys.argv[1], copy=False, start="latest")
out = sys.argv[2]
lat = {}
stop = False
def end(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, end)
print("ready", flush=True)
key = b'"sim_ts":'
while not stop:
    events = reader.read_batch(timeout=0.2)
    now = time.time_ns()
    for ev in events:
        if type(ev) is not RingMessage:
            continue
        p = ev.payload
        raw = bytes(p[-40:])
        at = raw.rfind(key)
        if at < 0:
            continue
        sent = int(raw[at + len(key):].rstrip(b"}"))
        lat.setdefault(ev.session_id, []).append((now - sent, ev.ts_ns - sent))
with open(out, "w") as f:
    json.dump(lat, f)
"""


def percentile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000.0


async def phase(engine: Any, lab: Any, hub: Any, sid: int, path: str, seconds: float) -> int:
    from gateway.sessions import HeartbeatConfig, SessionConfig, UpstreamSession

    config = SessionConfig(
        url=f"ws://{lab.peer_ip}:9470/binance/stream",
        dialect="binance",
        transport="dpdk",
        heartbeat=HeartbeatConfig(ping_interval_s=None, dead_feed_timeout_s=None),
    )
    session = UpstreamSession(
        sid, config, hub, topics=["btcusdt@trade"], engine=engine, feed_path=path
    )
    session.start()
    try:
        await asyncio.sleep(seconds)
    finally:
        await session.stop()
    return session.counters.fed_messages


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rates", default="1000,10000")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--ack-policy", default="delayed", help="the engine's ACK policy")
    args = parser.parse_args()
    rates = [int(r) for r in args.rates.split(",")]

    from dataplane.dpdk import Eal, EalConfig
    from dataplane.engine import Engine, EngineConfig
    from dataplane.fastpath import FastPathConfig
    from dataplane.ring import RingWriter
    from gateway.hub import Hub
    from gateway.lab import Lab
    from gateway.simulator.process import start_simulator

    lab = Lab(f"fb{os.getpid() % 10000}")
    lab.down()
    lab.up()
    ring_file = f"wsgw-feedbench-{os.getpid()}"
    sim = consumer = None
    ring = hub = engine = port = None
    out = Path(tempfile.mkdtemp()) / "lat.json"
    plan: dict[int, tuple[str, int]] = {}
    fed: dict[int, int] = {}
    try:
        eal = Eal.init(EalConfig(hugepages="off", memory_mb=256))
        port = eal.open_port(lab.vdev)
        fastpath = FastPathConfig(ack_policy=args.ack_policy)
        engine = Engine.on_port(
            port, lab.gw_ip, lab.netmask, config=EngineConfig(fastpath=fastpath)
        )
        ring = RingWriter.create(ring_file, 64 << 20, replace=True)
        hub = Hub(ring=ring)
        consumer = subprocess.Popen(
            [sys.executable, "-c", CONSUMER, ring_file, str(out)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        assert consumer.stdout is not None
        assert consumer.stdout.readline().strip() == "ready"
        sim = start_simulator(lab, 9470, rates[0], stdin=True, cwd=ROOT)
        assert sim.stdin is not None

        async def run_all() -> None:
            sid = 0
            for rate in rates:
                assert sim is not None
                assert sim.stdin is not None
                sim.stdin.write(f"rate rate={rate}\n")
                sim.stdin.flush()
                for _ in range(args.rounds):
                    for path in ("python", "c"):
                        sid += 1
                        plan[sid] = (path, rate)
                        fed[sid] = await phase(engine, lab, hub, sid, path, args.seconds)

        with asyncio.Runner(loop_factory=engine.loop_factory) as runner:
            runner.run(run_all())
    finally:
        if consumer is not None:
            consumer.send_signal(signal.SIGTERM)
            consumer.wait(30)
        if sim is not None:
            sim.kill()
            sim.wait()
        if hub is not None:
            hub.close()
        if engine is not None:
            engine.close()
        if port is not None:
            port.close()
        lab.down()
    lat: dict[str, list[list[int]]] = json.loads(out.read_text())
    out.unlink()
    out.parent.rmdir()
    results: dict[tuple[str, int], list[int]] = {}
    stamped: dict[tuple[str, int], list[int]] = {}
    for sid_text, values in lat.items():
        sid = int(sid_text)
        path, rate = plan[sid]
        skip = rate  # the first second of the phase
        results.setdefault((path, rate), []).extend(v[0] for v in values[skip:])
        stamped.setdefault((path, rate), []).extend(v[1] for v in values[skip:])
    # stamp: sim_ts -> the ring record's receive stamp (C path: the RX burst; Python path:
    # the session's read); the rest is ring -> reader (write, wake-up, read).
    print(
        f"{'rate':>6} {'path':>7} {'n':>7} {'p50 us':>8} {'p90 us':>8} {'p99 us':>8}"
        f" {'stamp p50':>9} {'stamp p99':>9}  fed"
    )
    for rate in rates:
        row = {}
        for path in ("python", "c"):
            latencies = results.get((path, rate), [])
            if not latencies:
                print(f"{rate:>6} {path:>7} no messages")
                continue
            p50, p90 = percentile(latencies, 0.5), percentile(latencies, 0.9)
            p99 = percentile(latencies, 0.99)
            row[path] = (p50, p99)
            fed_n = sum(fed[s] for s, (p, r) in plan.items() if p == path and r == rate)
            st = stamped[(path, rate)]
            s50, s99 = percentile(st, 0.5), percentile(st, 0.99)
            print(
                f"{rate:>6} {path:>7} {len(latencies):>7} {p50:>8.1f} {p90:>8.1f} {p99:>8.1f}"
                f" {s50:>9.1f} {s99:>9.1f}  {fed_n}"
            )
        if len(row) == 2:
            (pp50, pp99), (cp50, cp99) = row["python"], row["c"]
            print(f"{rate:>6}  c/python p50 {cp50 / pp50:.2f}x  p99 {cp99 / pp99:.2f}x")


if __name__ == "__main__":
    main()
