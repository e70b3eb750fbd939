"""`python -m wsgw_bench.group_c`: a 2-leg feed group against one session on the lab, the
group arbitrated in C on the engine's path and on the Python path (issue #19).

One process: the lab (veth + namespace), the simulator in the namespace (Binance, one
topic, its feed group `g` serving identical bytes to every leg), a LiveRuntime with a DPDK
engine writing the ring, and a consumer thread reading the ring. Contenders, alternated by
round: `single` (one session), `group-c` (2 DPDK legs, C arbitration on the engine's path),
`group-py` (the same on the Python path, GroupSpec.path="python"); or with `--together` a
single session and a C group at once, the same messages in the same window. Per contender and round,
after a warm-up, a window: messages/s the consumer read, lost and duplicated (by the
simulator's sim_seq), latency p50/p99 from the simulator's send stamp (sim_ts) to the
consumer's receipt, and for the groups the per-leg won/late/lag and the engine's mean
arbitration cost per frame (C identity + arbiter + staging, timed in C).

The simulator sends each leg its own copy, so a group costs it twice the work of a single
session: at rates the simulator cannot sustain for two legs, the group's figure is the
simulator's limit, which the output shows as `sim ok` (did it keep the rate).
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from typing import Any

import orjson

from dataplane.dpdk import Eal, EalConfig
from dataplane.ring import RingMessage, RingReader, RingWriter
from gateway.groups.feed import GroupSpec, group_hub_id
from gateway.hub import Hub
from gateway.hub.names import ring_topics
from gateway.lab import Lab
from gateway.runtime import PortSpec, SessionSpec, SessionState
from gateway.runtime.engines import DpdkEngines
from gateway.runtime.live import LiveRuntime
from gateway.settings import Settings
from gateway.simulator import with_group
from gateway.simulator.process import start_simulator

SIM_PORT = 9620
TOPIC = "btcusdt@trade"


class Consumer(threading.Thread):
    """Reads one hub id's records: count, sim_seq order, latency from sim_ts."""

    def __init__(self, ring: RingWriter, hub_id: int) -> None:
        super().__init__(daemon=True)
        self.reader = RingReader.attach_fd(ring.fd, topics=ring_topics(hub_id, [TOPIC]))
        self.measuring = False
        self.done = False
        self.count = self.lost = self.dups = 0
        self.latency: list[int] = []
        self._last: int | None = None

    def run(self) -> None:
        while not self.done:
            events = self.reader.read_batch(timeout=0.05)
            now = time.time_ns()
            for event in events:
                if type(event) is not RingMessage:
                    continue
                body = orjson.loads(bytes(event.payload))
                seq = int(body["sim_seq"])
                if self.measuring:
                    self.count += 1
                    self.latency.append(now - int(body["sim_ts"]))
                    if self._last is not None:
                        if seq <= self._last:
                            self.dups += 1
                        elif seq > self._last + 1:
                            self.lost += seq - self._last - 1
                if self._last is None or seq > self._last:
                    self._last = seq

    def stop(self) -> None:
        self.done = True
        self.join(5)
        self.reader.close()


def wait(predicate: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.02)


def measure(
    runtime: LiveRuntime,
    ring: RingWriter,
    lab: Lab,
    kinds: list[str],
    sid: int,
    args: argparse.Namespace,
) -> list[dict[str, Any]]:
    """The contenders `kinds` at once (each its own connections to the simulator's group:
    the same stream), measured over the same window."""
    plan: list[tuple[str, list[int], int]] = []  # kind, its sessions, its hub id
    legs_used = 0
    for k, kind in enumerate(kinds):
        base = sid + 10 * k
        legs = [base] if kind == "single" else [base, base + 1]
        hub_id = base if kind == "single" else group_hub_id(base)
        if kind != "single":
            path = "python" if kind == "group-py" else "auto"
            runtime.set_group(GroupSpec(base, kind, tuple(legs), "binance", path=path))
        plan.append((kind, legs, hub_id))
    consumers = [Consumer(ring, hub_id) for _, _, hub_id in plan]
    for consumer in consumers:
        consumer.start()
    for kind, legs, _ in plan:
        for i, leg in enumerate(legs):
            name = f"L{legs_used}"
            legs_used += 1
            url = with_group(f"ws://{lab.peer_ip}:{SIM_PORT}/binance/stream", "g", name)
            runtime.subscribe(leg, [TOPIC])
            runtime.start_session(SessionSpec(leg, f"{kind}-{i}", url, "binance", "dpdk", 1))
    try:
        for _, legs, _ in plan:
            for leg in legs:
                wait(lambda leg=leg: runtime.session_status(leg).state is SessionState.CONNECTED)
        time.sleep(args.warmup)
        for consumer in consumers:
            consumer.measuring = True
        start = time.monotonic()
        time.sleep(args.window)
        for consumer in consumers:
            consumer.measuring = False
        elapsed = time.monotonic() - start
        return [
            result(runtime, kind, legs, consumer, elapsed)
            for (kind, legs, _), consumer in zip(plan, consumers, strict=True)
        ]
    finally:
        for consumer in consumers:
            consumer.stop()
        for kind, legs, _ in plan:
            for leg in legs:
                runtime.remove_session(leg)
            if kind != "single":
                runtime.remove_group(legs[0])


def result(
    runtime: LiveRuntime, kind: str, legs: list[int], consumer: Consumer, elapsed: float
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "contender": kind,
        "msg_s": round(consumer.count / elapsed),
        "lost": consumer.lost,
        "dups": consumer.dups,
    }
    if consumer.latency:
        ordered = sorted(consumer.latency)
        out["p50_us"] = round(ordered[len(ordered) // 2] / 1e3, 1)
        out["p99_us"] = round(ordered[int(len(ordered) * 0.99)] / 1e3, 1)
        out["mean_us"] = round(statistics.fmean(ordered) / 1e3, 1)
    if kind != "single":
        figures = runtime.group_figures(legs[0]) or {}
        cost = figures.get("arbitration_ns_per_frame")
        out["arb_ns_frame"] = round(cost) if cost else None
        out["legs_won_late_lag50_lag99"] = [
            (leg["won"], leg["late"], leg["lag_p50_ns"], leg["lag_p99_ns"])
            for leg in figures.get("legs", [])
        ]
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=20_000, help="simulator msg/s")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--window", type=float, default=6.0)
    parser.add_argument(
        "--together",
        action="store_true",
        help="a single session and a C group at once, on the same stream and window "
        "(latency side by side under the same load), instead of alternated",
    )
    args = parser.parse_args(argv)
    lab = Lab(f"gcb{os.getpid() % 10000}")
    lab.down()
    lab.up()
    sim = None
    ring = None
    runtime = None
    try:
        Eal.init(EalConfig(hugepages="off", memory_mb=256))
        sim = start_simulator(lab, SIM_PORT, args.rate, stdin=True)
        ring = RingWriter.create(None, 1 << 26)
        hub = Hub(ring=ring)
        settings = Settings(engine={"mode": "loop", "feed_path": "c"})  # type: ignore[arg-type]
        runtime = LiveRuntime(hub, hub=hub, engine_factory=lambda: DpdkEngines(settings))
        runtime.port_up(PortSpec(1, "lab", lab.vdev, lab.gw_ip, lab.netmask, None, 1500))
        sid = 100
        print(f"rate {args.rate:.0f} msg/s, load {os.getloadavg()[0]:.1f}")
        for _ in range(args.rounds):
            if args.together:
                for line in measure(runtime, ring, lab, ["single", "group-c"], sid, args):
                    print(line, flush=True)
                sid += 100
                continue
            for kind in ("single", "group-c", "group-py"):
                print(measure(runtime, ring, lab, [kind], sid, args)[0], flush=True)
                sid += 100
    finally:
        if runtime is not None:
            runtime.close()
        if ring is not None:
            ring.close()
        if sim is not None:
            sim.kill()
            sim.wait()
        lab.down()


if __name__ == "__main__":
    main()
